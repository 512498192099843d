"""The C calling convention of the core, shared by every part of a compiled mechanism.

NumPy inputs become contiguous float64 rows with a stride per input (0 broadcasts one
state to a batch, without copying) and raw pointers; a core status becomes a Python
exception; a batch's per-state status becomes an exception naming the first failed state,
or is handed back to the caller (``errors="status"``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from mbgen.errors import SingularConfigurationError

Array = np.ndarray
ERROR_MODES = ("raise", "status")
KEPT_STATUSES = 1 << 16  # the most statuses a thread keeps a buffer for between calls


def status_error(lib: Any, ffi: Any, code: int, context: str, detail: str = "",
                 make: Callable[[str], Exception] = SingularConfigurationError) -> Exception:
    """The one mapping of a C core status to a Python exception: MemoryError for
    MB_NO_MEMORY, else ``make("<context>: <the core's text><detail>")`` (by default a
    SingularConfigurationError: dead point, lost rank, no convergence, not finite)."""
    if int(code) == lib.MB_NO_MEMORY:
        return MemoryError(f"mbgen C core: out of memory ({context})")
    text = ffi.string(lib.mb_status_text(int(code))).decode()
    return make(f"{context}: {text}{detail}")


def output_array(out: Array | None, shape: tuple[int, ...]) -> Array:
    """A caller-supplied output array (checked: the C writes through its buffer) or a new
    one."""
    if out is None:
        return np.empty(shape)
    if out.shape != shape or out.dtype != np.float64 or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float64 array of shape {shape}, got "
                         f"{out.dtype} {out.shape}")
    return out


def output_arrays(out: tuple[Array, ...] | None, shapes: list[tuple[int, ...]]) -> list[Array]:
    """A batched call's outputs, one per shape: the caller's ``out`` (as many arrays,
    each checked by :func:`output_array`) or new ones."""
    if out is None:
        return [np.empty(shape) for shape in shapes]
    if len(out) != len(shapes):
        raise ValueError(f"out must hold {len(shapes)} arrays")
    return [output_array(o, s) for o, s in zip(out, shapes, strict=True)]


def returned(values: tuple[Any, ...], errors: str) -> Any:
    """What a batched call returns from its (values..., status): all of it with
    ``errors="status"``, otherwise the values alone (one value bare, several as a tuple)."""
    if errors == "status":
        return values
    return values[:-1] if len(values) > 2 else values[0]


def per_state(batched: bool, values: tuple[Array | None, ...], status: Array,
              errors: str) -> Any:
    """:func:`returned` of outputs computed with a leading N: a single state's call gets
    its row (and status (1,))."""
    if not batched:
        values = tuple(None if v is None else v[0] for v in values)
        status = status[:1]
    if errors == "status":
        return (*values, status)
    return values if len(values) > 1 else values[0]


class ParameterBuffer:
    """The parameters by name and as one vector in file order with its C pointer, made
    once: new values are written in place, so the pointer held by an evaluator or a
    workspace stays valid."""

    def __init__(self, ffi: Any, named: dict[str, float]) -> None:
        self.named = {name: float(value) for name, value in named.items()}
        self.values = np.fromiter(self.named.values(), dtype=np.float64,
                                  count=len(self.named))
        self.pointer = ffi.from_buffer("double[]", self.values)

    def set(self, **values: float) -> None:
        """Change the default values of named parameters (every call's ``params``)."""
        named = dict(self.named)  # a new mapping: one handed out before keeps its values
        for name, value in values.items():
            if name not in named:
                raise KeyError(f"unknown parameter {name!r} (parameters: "
                               f"{', '.join(named)})")
            named[name] = float(value)
        self.named = named
        self.values[:] = np.fromiter(named.values(), dtype=np.float64, count=len(named))


class Core:
    """One mechanism's C module (``ffi``, ``lib``, ``model``) and its default parameters,
    with the conversions every binding needs: pointers, batches, parameters, statuses."""

    def __init__(self, ffi: Any, lib: Any, parameters: ParameterBuffer) -> None:
        self.ffi = ffi
        self.lib = lib
        self.model = lib.mb_model_get()
        self.parameters = parameters
        self.null = ffi.NULL
        self._from_buffer = ffi.from_buffer  # once: every call makes several pointers

    def doubles(self, array: Array | None) -> Any:
        """A C pointer into a contiguous float64 array, or NULL."""
        return self.null if array is None else self._from_buffer("double[]", array)

    def ints(self, array: Array) -> Any:
        """A C pointer into a contiguous int32 array."""
        return self._from_buffer("int[]", array)

    def batch(self, **inputs: tuple[Any, int]) -> tuple[dict[str, Array], dict[str, int],
                                                         int, bool]:
        """Inputs as C-contiguous (k, width) float64 arrays with k = 1 or a common N.

        Each keyword is ``name=(value, width)``. Returns the arrays, each one's stride (0 for
        a single state shared by a batch), N, and whether any input was a batch.
        """
        arrays: dict[str, Array] = {}
        batched = False
        for name, (value, width) in inputs.items():
            array = np.ascontiguousarray(value, dtype=np.float64)
            if array.ndim == 2:
                batched = True
            elif array.ndim == 1:
                array = array.reshape(1, -1)
            if array.ndim != 2 or array.shape[1] != width:
                raise ValueError(f"{name} must have shape ({width},) or (N, {width}), got "
                                 f"{np.shape(value)}")
            arrays[name] = array
        count = max(a.shape[0] for a in arrays.values())
        strides = {}
        for name, array in arrays.items():
            if array.shape[0] not in (1, count):
                raise ValueError(f"{name} has {array.shape[0]} states, expected {count}")
            strides[name] = array.shape[1] if array.shape[0] == count and count > 1 else 0
        return arrays, strides, count, batched

    def states(self, width: int, q: Any, qd: Any, Q: Any = None,
               ) -> tuple[Array, int, Array, int, Array | None, int, int, bool]:
        """:meth:`batch` of (q, q̇, Q or None), each of ``width``, on the common path
        without its dictionaries: (q, its stride, q̇, its stride, Q, its stride, N,
        batched); inputs of one shape (n,) or (N, n) take no step that batch would not."""
        a = np.ascontiguousarray(q, dtype=np.float64)
        b = np.ascontiguousarray(qd, dtype=np.float64)
        shape = a.shape
        c = None if Q is None else np.ascontiguousarray(Q, dtype=np.float64)
        if shape == b.shape and (c is None or c.shape == shape):
            if shape == (width,):
                return a, 0, b, 0, c, 0, 1, False
            if len(shape) == 2 and shape[1] == width:
                stride = width if shape[0] > 1 else 0
                return a, stride, b, stride, c, 0 if c is None else stride, shape[0], True
        inputs = {"q": (q, width), "qd": (qd, width)}
        if Q is not None:
            inputs["Q"] = (Q, width)
        arrays, strides, count, batched = self.batch(**inputs)
        return (arrays["q"], strides["q"], arrays["qd"], strides["qd"], arrays.get("Q"),
                strides.get("Q", 0), count, batched)

    def params(self, params: Any, count: int) -> tuple[Any, int]:
        """(pointer, stride): one parameter vector for all states (stride 0) or one row each;
        None is the default vector."""
        if params is None:
            return self.parameters.pointer, 0
        p = np.ascontiguousarray(params, dtype=np.float64)
        width = self.parameters.values.shape[0]
        if p.shape == (width,):
            return self.doubles(p), 0
        if p.ndim != 2 or p.shape[1] != width or p.shape[0] not in (1, count):
            raise ValueError(f"params must have shape ({width},) or ({count}, {width}), got "
                             f"{p.shape}")
        return self.doubles(p), (width if p.shape[0] == count and count > 1 else 0)

    def banded_inverse(self, factor: Array) -> Array:
        """The band (b + 1, n) of A⁻¹, row 0 its diagonal and row d its entries (i + d, i),
        from the lower Cholesky factor L (b + 1, n) of a banded A in LAPACK's storage (row
        d: L(i + d, i)), as scipy.linalg.cholesky_banded(lower=True) gives it."""
        columns = np.ascontiguousarray(np.asarray(factor, dtype=float).T)  # (n, b + 1)
        out = np.zeros(columns.shape)
        self.lib.mb_banded_inverse(columns.shape[0], columns.shape[1] - 1,
                                   self.doubles(columns), columns.shape[1], self.doubles(out))
        return out.T

    def checked(self, code: int) -> int:
        """A batch call's return value: failed states, or a whole-call failure raised."""
        if code < 0:
            raise self.status_error(code, "mbgen C core failed")
        return code

    def status_error(self, code: int, context: str, detail: str = "",
                     make: Callable[[str], Exception] = SingularConfigurationError,
                     ) -> Exception:
        """:func:`status_error` of this mechanism's core."""
        return status_error(self.lib, self.ffi, code, context, detail, make)

    def is_status(self, code: int, name: str) -> bool:
        """``code`` is the C core's status MB_<name> (e.g. "INCONSISTENT"): for callers
        that tell failures apart, without reaching into the C library."""
        return int(code) == getattr(self.lib, f"MB_{name}")

    def status_text(self, code: int) -> str:
        """The core's text for a status (0: ok)."""
        return self.ffi.string(self.lib.mb_status_text(int(code))).decode()

    def failure(self, status: Array, q: Array, what: str, describe: Callable[[Array], str],
                ) -> Exception:
        """The error of a batch whose states ``status`` (N,) did not all succeed, naming
        the first failed one and its q (a row of q, (N, n) or (1, n), or q itself (n,))."""
        bad = np.flatnonzero(status)
        k = int(bad[0])
        rows = q.reshape(-1, q.shape[-1])
        return self.status_error(int(status[k]), f"{what} failed at state {k} ({bad.size} "
                                 f"of {len(status)} failed)",
                                 f"; q = [{describe(rows[min(k, len(rows) - 1)])}]")

    def check_states(self, status: Array, q: Array, what: str, errors: str,
                     describe: Callable[[Array], str]) -> None:
        """With ``errors="raise"``, a failed state (status (N,) nonzero) raises naming the
        first one and its q (a row of q, (N, n) or (1, n)) as ``describe`` words it."""
        if errors not in ERROR_MODES:
            raise ValueError(f"errors must be one of {ERROR_MODES}, got {errors!r}")
        if errors == "raise" and status.any():
            raise self.failure(status, q, what, describe)


def check_errors(errors: str) -> None:
    """``errors`` is one of ERROR_MODES (checked before a call, as check_states does after
    one)."""
    if errors != "raise" and errors != "status":
        raise ValueError(f"errors must be one of {ERROR_MODES}, got {errors!r}")


class Workspaces(threading.local):
    """Per thread, what the batched calls of one part keep between calls: the core's
    workspace for the plan it was made for (mb_workspace_new with Jacobian memory, for
    either path; its lanes' scratch is made on first use and kept in it), so a call
    allocates nothing in C, and a status buffer for calls that raise (read only when a
    state failed). A workspace belongs to one thread, hence one per thread."""

    plan: Any = None  # the plan the workspace was made for (kept alive by holding it)
    layout = -1  # and the options' layout (SolverOptions.layout: their method's changes)
    workspace: Any = None
    status: Array = np.zeros(0, dtype=np.int32)  # replaced, never written, while empty
    status_pointer: Any = None
    native: Any = None  # the extension's Batch on this workspace (runtime/dynamics.py)
    calls = 0  # calls made without it

    def fits(self, plan: Any, options: Any) -> bool:
        """Whether the kept workspace serves ``plan`` under ``options`` (SolverOptions: the
        layout holds the sparse path's blocks only where the method chose it when it was
        made)."""
        return self.plan is plan and self.layout == options.layout

    def get(self, core: Core, plan: Any, options: Any) -> Any:
        """The workspace for ``plan`` under ``options`` (SolverOptions; a new one when the
        plan changed, reselected rows, or the options' method did)."""
        if not self.fits(plan, options):
            workspace = core.lib.mb_workspace_new(plan, options.struct, 1)
            if workspace == core.null:
                raise MemoryError("mbgen C core: out of memory for a batch's workspace")
            self.workspace = core.ffi.gc(workspace, core.lib.mb_workspace_free)
            self.plan, self.layout = plan, options.layout
            self.native = None  # it held the old workspace's address
        return self.workspace

    def status_buffer(self, core: Core, count: int, errors: str) -> tuple[Array, Any]:
        """(statuses, their int pointer) of a call of ``count`` states: kept between calls
        that raise (read only when a state failed), the call's own where it returns them
        (errors="status")."""
        if errors == "raise":
            return self.statuses(core, count)
        status = np.empty(count, dtype=np.int32)
        return status, core.ffi.from_buffer("int[]", status)

    def statuses(self, core: Core, count: int) -> tuple[Array, Any]:
        """(buffer, its int pointer) of at least ``count`` statuses, kept for the next
        call."""
        if len(self.status) < count:
            status = np.zeros(max(count, 8), dtype=np.int32)
            if count > KEPT_STATUSES:  # a large batch's: its own, not kept
                return status, core.ints(status)
            self.status, self.status_pointer = status, core.ints(status)
        return self.status, self.status_pointer

"""NumPy inputs in the C calling convention of the core: contiguous float64 rows with a
stride per input (0 broadcasts one state to a batch, without copying), raw pointers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mbgen.errors import SingularConfigurationError

Array = np.ndarray


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


class ParameterBuffer:
    """The default parameter vector and its C pointer, made once: new values are written
    in place, so the pointer held by an evaluator or a workspace stays valid."""

    def __init__(self, ffi: Any, values: Array) -> None:
        self.values = np.array(values, dtype=np.float64)
        self.pointer = ffi.from_buffer("double[]", self.values)


class CallHelpers:
    ffi: Any
    lib: Any
    parameter_buffer: ParameterBuffer

    def _int_ptr(self, array: Array) -> Any:
        return self.ffi.from_buffer("int[]", array)

    def _dbl(self, array: Array | None) -> Any:
        """A C pointer into a contiguous float64 array, or NULL."""
        return self.ffi.NULL if array is None else self.ffi.from_buffer("double[]", array)

    def _batch(self, **inputs: tuple[Any, int]) -> tuple[dict[str, Array], dict[str, int],
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

    def _params(self, params: Any, count: int) -> tuple[Any, int]:
        """(pointer, stride): one parameter vector for all states (stride 0) or one row each."""
        if params is None:
            return self.parameter_buffer.pointer, 0
        p = np.ascontiguousarray(params, dtype=np.float64)
        width = self.parameter_buffer.values.shape[0]
        if p.shape == (width,):
            return self._dbl(p), 0
        if p.ndim != 2 or p.shape[1] != width or p.shape[0] not in (1, count):
            raise ValueError(f"params must have shape ({width},) or ({count}, {width}), got "
                             f"{p.shape}")
        return self._dbl(p), (width if p.shape[0] == count and count > 1 else 0)

    def _checked(self, code: int) -> int:
        """A batch call's return value: failed states, or a whole-call failure."""
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
        return self.ffi.string(self.lib.mb_status_text(int(code))).decode()

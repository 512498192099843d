"""One state at a time, at the price a factor callback can afford.

The batched methods of a mechanism check and reshape their inputs, allocate their outputs
and build C pointers on every call: about 15-20 µs of Python around well under a
microsecond of C on a small mechanism. A GTSAM factor linearized thousands of times per
second calls one state at a time, so :class:`StateEvaluator` does that work once: its
inputs are copied into buffers whose C pointers are made at construction, the core's
workspace is kept between calls, and the results are views of its own output buffers.

The dynamics calls go through mbgen's pybind11 extension (mbgen/csrc/single_state.cpp)
where it builds: it reads float64 arrays in place, where cffi needs them copied into its
buffers first (0.5 µs per q̈ of the double pendulum instead of 0.9 µs). Same numbers,
same errors; without a C++ compiler the cffi path is used.
"""

from __future__ import annotations

import functools
import logging
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

from mbgen.runtime.calls import status_error

Array = np.ndarray
SOURCE, MODULE = "single_state.cpp", "_mbgen_single_state"


@functools.cache
def fast_module() -> ModuleType | None:
    """The one-state extension, compiled on first use; None where it cannot be. (The
    builder is imported here: a packaged mechanism that never asks loads no codegen.)"""
    from mbgen.codegen.extension import (
        ExtensionUnavailable,
        build_extension,
        extension_dir,
        extension_key,
        load_extension,
        module_file,
    )

    try:
        directory = extension_dir("single-state", extension_key(SOURCE, [], []))
        path = module_file(directory, MODULE)
        if not path.exists():
            logging.getLogger("mbgen").info(
                "compiling the one-state extension of mech.evaluator() (C++, once per "
                "installation; it may take a minute)")
            build_extension(SOURCE, MODULE, directory)
        return load_extension(path, MODULE)
    except (ExtensionUnavailable, OSError, ImportError):
        return None


def built_on_disk() -> bool:
    """Whether the one-state extension is built already (looked for on disk: loads the
    builder's path rules, so for a command's messages, not for a packaged mechanism)."""
    from mbgen.codegen.extension import (
        ExtensionUnavailable,
        extension_dir,
        extension_key,
        module_file,
    )

    try:
        return module_file(extension_dir("single-state", extension_key(SOURCE, [], [])),
                           MODULE).exists()
    except (ExtensionUnavailable, OSError, ImportError):
        return False


def built_module() -> ModuleType | None:
    """The one-state extension if this process has loaded it already; never compiled nor
    looked for on disk here, so a packaged mechanism that makes a few batched calls loads
    no codegen (runtime/dynamics.py loads or builds it once a thread has shown it loops)."""
    return fast_module() if fast_module.cache_info().currsize else None


def dynamics_failure(lib: Any, ffi: Any, status: int, q: Any) -> Exception:
    """The error of a failed dynamics call at ``q`` (both paths raise it)."""
    return status_error(lib, ffi, status, "forward dynamics failed",
                        f"; q = {np.array2string(np.asarray(q, dtype=float), precision=6)}")


class EntryPoints(NamedTuple):
    """Addresses of an evaluator's C state, for native code that calls the same kernels
    (mbgen/csrc/gtsam_factors.cpp): valid while the evaluator lives."""

    forward_dynamics_one: int
    eval_dense_set: int
    status_text: int
    workspace: int
    model: int
    parameters: int


class StateEvaluator:
    """Cheap single-state calls of one mechanism (``mech.evaluator()``).

    Inputs are 1-D sequences of length n. **Results are views of the evaluator's buffers,
    overwritten by its next call of the same method**: copy what you keep (a GTSAM
    Jacobian assignment ``H[0] = J`` copies already). Parameters are the mechanism's
    current defaults (``set_parameters`` is seen), solver options its ``options`` object.
    An evaluator is not thread-safe; make one per thread. ``fast``: the dynamics through
    the pybind11 extension where it builds (False: always cffi).
    """

    def __init__(self, ffi: Any, lib: Any, c_model: Any, plan: Any, options: Any,
                 parameters: Any, n: int, m: int, sensors: int, fast: bool = True) -> None:
        workspace = lib.mb_workspace_new(plan, options.struct, 1)
        if workspace == ffi.NULL:
            raise MemoryError("mbgen C core: out of memory for an evaluator's workspace")
        self._ffi, self._lib, self._model = ffi, lib, c_model
        self._keep = (plan, options)  # the workspace points into both
        self._workspace = ffi.gc(workspace, lib.mb_workspace_free)
        self._p = parameters
        self.n, self.m = n, m
        self._q, self._qd, self._Q = np.zeros(n), np.zeros(n), np.zeros(n)
        self._qdd = np.empty(n)
        self._lam = np.empty(max(m, 1))
        self._jacobians = (np.empty((n, n)), np.empty((n, n)), np.empty((n, n)))
        self._phi, self._phi_q = np.empty(max(m, 1)), np.empty((m, n))
        self._qdd_in = np.zeros(n)
        self._rate, self._rate_q = np.empty(m), np.empty((m, n))
        self._acc_q, self._acc_qd, self._acc_v_q = (np.empty((m, n)) for _ in range(3))
        self._h = np.empty(max(sensors, 1))
        self._h_q, self._h_qd = np.empty((sensors, n)), np.empty((sensors, n))
        ptr = self._pointer
        self._ptr_q, self._ptr_qd, self._ptr_Q = ptr(self._q), ptr(self._qd), ptr(self._Q)
        null = ffi.NULL
        qdd, lam = ptr(self._qdd), ptr(self._lam)
        jacobians = tuple(ptr(j) for j in self._jacobians)
        # the output arguments of mb_forward_dynamics_one, per method
        self._out_plain = (qdd, null, null, null, null)
        self._out_multipliers = (qdd, lam, null, null, null)
        self._out_jacobians = (qdd, null, *jacobians)
        self._sensors = sensors
        # kernels evaluated together, one C call per method: (kernel, second input, out)
        qd_in, qdd_in = self._ptr_qd, ptr(self._qdd_in)
        self._constraint_set = self._kernel_set(
            (lib.MB_K_PHI, null, self._phi[:m]), (lib.MB_K_PHI_Q, null, self._phi_q))
        self._velocity_set = self._kernel_set(
            (lib.MB_K_PHI_Q, null, self._phi_q), (lib.MB_K_PHIQ_V_Q, qd_in, self._rate_q))
        self._acceleration_set = self._kernel_set(
            (lib.MB_K_PHI_Q, null, self._phi_q), (lib.MB_K_DPHIQ_QD, qd_in, self._rate),
            (lib.MB_K_DPHIQ_QD_Q, qd_in, self._acc_q),
            (lib.MB_K_DPHIQ_QD_QD, qd_in, self._acc_qd),
            (lib.MB_K_PHIQ_V_Q, qdd_in, self._acc_v_q))
        self._sensor_set = self._kernel_set(
            (lib.MB_K_SENSORS, qd_in, self._h[:sensors]), (lib.MB_K_SENSORS_Q, qd_in, self._h_q),
            (lib.MB_K_SENSORS_QD, qd_in, self._h_qd))
        module = fast_module() if fast else None
        entry = self.entry_points()
        # the failure maker holds lib and ffi, not the evaluator (no reference cycle)
        self._fast = None if module is None else module.State(
            entry.forward_dynamics_one, entry.workspace, entry.parameters, n, m,
            functools.partial(dynamics_failure, lib, ffi))
        self.fast = self._fast is not None  # the dynamics go through the extension

    def entry_points(self) -> EntryPoints:
        """The C functions and state this evaluator calls, as addresses (uintptr_t)."""
        ffi, lib = self._ffi, self._lib

        def address(pointer: Any) -> int:
            return int(ffi.cast("uintptr_t", pointer))

        return EntryPoints(address(ffi.addressof(lib, "mb_forward_dynamics_one")),
                           address(ffi.addressof(lib, "mb_eval_dense_set")),
                           address(ffi.addressof(lib, "mb_status_text")),
                           address(self._workspace), address(self._model),
                           address(self._p.pointer))

    def _pointer(self, array: Array) -> Any:
        return self._ffi.from_buffer("double[]", array)

    def _kernel_set(self, *entries: tuple[int, Any, Array]) -> tuple[Any, ...]:
        """mb_eval_dense_set's arguments other than the model, q and p, for entries
        (kernel, x pointer or NULL, output array of shape (rows,) or (rows, cols))."""
        ffi = self._ffi
        shapes = [out.shape if out.ndim == 2 else (out.shape[0], 1) for _, _, out in entries]
        return (len(entries), ffi.new("int[]", [k for k, _, _ in entries]),
                ffi.new("double*[]", [x for _, x, _ in entries]),
                ffi.new("int[]", [rows for rows, _ in shapes]),
                ffi.new("int[]", [cols for _, cols in shapes]),
                ffi.new("double*[]", [self._pointer(out) for _, _, out in entries]))

    def _evaluate(self, kernel_set: tuple[Any, ...]) -> None:
        count, kernels, x, rows, cols, out = kernel_set
        status = self._lib.mb_eval_dense_set(self._model, count, kernels, self._ptr_q, x,
                                             self._p.pointer, rows, cols, out)
        if status:
            raise status_error(self._lib, self._ffi, status, "mbgen C core", make=RuntimeError)

    def _load(self, q: Any, qd: Any = None, Q: Any = None) -> Any:
        """Copies the inputs into the evaluator's buffers; the C pointer of Q (or NULL)."""
        self._q[:] = q
        if qd is not None:
            self._qd[:] = qd
        if Q is None:
            return self._ffi.NULL
        self._Q[:] = Q
        return self._ptr_Q

    def _dynamics(self, q: Any, qd: Any, Q: Any, out: tuple[Any, ...]) -> None:
        ptr_Q = self._load(q, qd, Q)
        status = self._lib.mb_forward_dynamics_one(
            self._workspace, self._ptr_q, self._ptr_qd, ptr_Q, self._p.pointer, *out)
        if status:
            raise dynamics_failure(self._lib, self._ffi, status, self._q)

    def forward_dynamics(self, q: Any, qd: Any, Q: Any = None) -> Array:
        """q̈ (n) at one state; ``Q``: external generalized forces (n) or None."""
        if self._fast is not None:
            return self._fast.forward_dynamics(q, qd, Q)
        self._dynamics(q, qd, Q, self._out_plain)
        return self._qdd

    def forward_dynamics_with_multipliers(self, q: Any, qd: Any, Q: Any = None,
                                          ) -> tuple[Array, Array]:
        """(q̈ (n), λ (m)) at one state."""
        if self._fast is not None:
            return self._fast.forward_dynamics_with_multipliers(q, qd, Q)
        self._dynamics(q, qd, Q, self._out_multipliers)
        return self._qdd, self._lam[:self.m]

    def forward_dynamics_jacobians(self, q: Any, qd: Any, Q: Any = None,
                                   ) -> tuple[Array, Array, Array, Array]:
        """(q̈ (n), ∂q̈/∂q, ∂q̈/∂q̇, ∂q̈/∂Q (n x n each)) at one state, exact."""
        if self._fast is not None:
            return self._fast.forward_dynamics_jacobians(q, qd, Q)
        self._dynamics(q, qd, Q, self._out_jacobians)
        return (self._qdd, *self._jacobians)

    def constraints(self, q: Any) -> tuple[Array, Array]:
        """(Φ (m), Φq (m x n)) at one configuration."""
        self._load(q)
        self._evaluate(self._constraint_set)
        return self._phi[:self.m], self._phi_q

    def velocity_constraints(self, q: Any, qd: Any) -> tuple[Array, Array, Array]:
        """(Φq q̇ (m), ∂(Φq q̇)/∂q, ∂(Φq q̇)/∂q̇ = Φq (m x n each)) at one state."""
        self._load(q, qd)
        self._evaluate(self._velocity_set)
        np.matmul(self._phi_q, self._qd, out=self._rate)
        return self._rate, self._rate_q, self._phi_q

    def acceleration_constraints(self, q: Any, qd: Any, qdd: Any,
                                 ) -> tuple[Array, Array, Array, Array]:
        """(Φ̇q q̇ + Φq q̈ (m) and its derivatives in q, q̇, q̈ (m x n each)) at one state.

        The residual is zero where q̈ satisfies the acceleration constraints."""
        self._load(q, qd)
        self._qdd_in[:] = qdd
        self._evaluate(self._acceleration_set)
        self._rate += self._phi_q @ self._qdd_in
        self._acc_q += self._acc_v_q
        return self._rate, self._acc_q, self._acc_qd, self._phi_q

    def sensors_with_jacobians(self, q: Any, qd: Any) -> tuple[Array, Array, Array]:
        """(h (k), ∂h/∂q, ∂h/∂q̇ (k x n each)) of the file's k sensors at one state."""
        self._load(q, qd)
        self._evaluate(self._sensor_set)
        k = self._sensors
        return self._h[:k], self._h_q, self._h_qd

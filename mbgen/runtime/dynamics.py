"""Forward dynamics, its exact Jacobians, independent coordinates and the kinematic
problems: the bindings of mbgen/csrc/dynamics.c.

Every method takes one state (n,) or a batch (N, n). Batched calls run one C loop. With
``errors="raise"`` (default) a failed state raises :class:`SingularConfigurationError`
naming it; with ``errors="status"`` the call returns a per-state status array as its last
value instead (0 = ok, see ``status_text``) and the failed states' outputs are NaN, so an
estimator can drop or re-draw them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mbgen.runtime.calls import (
    Core,
    Workspaces,
    check_errors,
    output_arrays,
    per_state,
    returned,
)
from mbgen.runtime.coordinates import Coordinates
from mbgen.runtime.options import SolverOptions
from mbgen.runtime.single import built_module, fast_module
from mbgen.runtime.structure import PlanPart, Structure

Array = np.ndarray
#: Calls of one thread without the extension after which it is built (once per
#: installation, ~10 s): a program that loops over states; one that calls a few times
#: never waits for the compiler
BUILD_AFTER = 2000


class Dynamics(PlanPart):
    """The calls of dynamics.c on the mechanism's plan, with its solver options."""

    def __init__(self, core: Core, options: SolverOptions, structure: Structure,
                 coordinates: Coordinates, m: int, q0: Array) -> None:
        """``q0``: the file's configuration, where ``independent_coordinates`` looks by
        default."""
        super().__init__(core, options, structure, coordinates)
        self._m = m
        self._q0 = q0
        self._describe = coordinates.describe  # words a failed state
        # forward and independent dynamics: a kept workspace per thread, and their common
        # path with no step a one-state call does not need (a fixed cost of ~15 µs before)
        self._workspaces = Workspaces()
        self._pointer = core.ffi.from_buffer
        self._z_default: Array | None = None
        # z named in a call (a list or tuple of names) -> its indices, for the plan they
        # were found on: naming z cost ~5 µs per call, more than a batch of 8 states
        self._z_named: tuple[Any, dict[tuple[str, ...], Array]] = (None, {})

    def _prepared(self) -> tuple[Workspaces, Any]:
        """This thread's workspaces and their native Batch (None: not built yet, or not
        buildable here; the cffi path then, with the same results and errors)."""
        local = self._workspaces
        plan = self._structure.plan
        if not local.fits(plan, self._options):
            local.get(self._core, plan, self._options)
        if local.native is None:  # the cffi path costs ~15 µs: a check per call is cheap
            local.calls += 1
            module = fast_module() if local.calls >= BUILD_AFTER else built_module()
            if module is not None:
                local.native = self._batch(module, local.workspace)
        return local, local.native

    def _batch(self, module: Any, workspace: Any) -> Any:
        """The extension's Batch on ``workspace`` (the addresses of the C functions it
        calls, the workspace and the parameters: valid while this thread's Workspaces
        holds the workspace, which drops the Batch when it replaces it)."""
        core = self._core
        ffi, lib = core.ffi, core.lib

        def address(pointer: Any) -> int:
            return int(ffi.cast("uintptr_t", pointer))

        return module.Batch(address(ffi.addressof(lib, "mb_forward_dynamics_in")),
                            address(ffi.addressof(lib, "mb_independent_dynamics_in")),
                            address(workspace), address(core.parameters.pointer), self._n,
                            self._m, self._structure.dof)

    def _inputs(self, q: Any, qd: Any, Q: Any) -> dict[str, tuple[Any, int]]:
        """q, q̇ and, when given, the external forces Q, each of width n, for Core.batch."""
        inputs = {"q": (q, self._n), "qd": (qd, self._n)}
        if Q is not None:
            inputs["Q"] = (Q, self._n)
        return inputs

    # -- forward dynamics ----------------------------------------------------------------------
    def _forward(self, q: Any, qd: Any, Q: Any, params: Any, jacobians: bool,
                 multipliers: bool, errors: str, out: tuple[Array, ...] | None) -> Any:
        """What the caller gets: :func:`returned` of the outputs shaped for it ((n,) per
        state, or with a leading N) and the status."""
        if errors != "raise" and errors != "status":
            check_errors(errors)
        local = self._workspaces
        native = local.native
        if native is None or local.plan is not self._structure.plan or \
                local.layout != self._options.layout:  # Workspaces.fits, inlined: per call
            local, native = self._prepared()
        if native is not None and params is None and out is None and not multipliers:
            got = native.forward_dynamics(q, qd, Q, jacobians)
            if got is not None:  # None: inputs for the general path
                if got[-1]:
                    self._core.checked(got[-1])
                    if errors == "raise":
                        raise self._core.failure(got[-2], q, "forward dynamics",
                                                 self._describe)
                if errors == "status":
                    return got[:-1]
                return got[:-2] if jacobians else got[0]
        core, n, pointer = self._core, self._n, self._pointer
        qs, q_stride, qds, qd_stride, Qs, Q_stride, count, batched = core.states(n, q, qd, Q)
        p, p_stride = (core.parameters.pointer, 0) if params is None else core.params(
            params, count)
        if batched:
            shapes = [(count, n), (count, n, n), (count, n, n), (count, n, n)]
        else:
            shapes = [(n,), (n, n), (n, n), (n, n)]
        if not jacobians:
            del shapes[1:]
        results = output_arrays(out, shapes)
        null = core.null
        ptrs = [pointer("double[]", r) for r in results] + [null] * (4 - len(results))
        lam = np.empty((*shapes[0][:-1], max(self._m, 1))) if multipliers else None
        workspace = local.workspace
        status, status_pointer = local.status_buffer(core, count, errors)
        failed = core.lib.mb_forward_dynamics_in(
            workspace, count, pointer("double[]", qs), q_stride, pointer("double[]", qds),
            qd_stride, null if Qs is None else pointer("double[]", Qs), Q_stride, p, p_stride,
            ptrs[0], null if lam is None else pointer("double[]", lam), ptrs[1], ptrs[2],
            ptrs[3], status_pointer)
        if failed:
            core.checked(failed)
            if errors == "raise":
                raise core.failure(status[:count], qs, "forward dynamics", self._describe)
        values = tuple(results) if lam is None else (lam[..., :self._m],)
        return returned((*values, status), errors)

    def forward_dynamics(self, q: Any, qd: Any, Q: Any = None, params: Any = None, *,
                         out: Array | None = None, errors: str = "raise") -> Any:
        """q̈ from [M Φqᵀ; Φq 0][q̈; λ] = [Q(q,q̇) + Q_ext; c] (c with Baumgarte terms)."""
        return self._forward(q, qd, Q, params, False, False, errors,
                             None if out is None else (out,))

    def lagrange_multipliers(self, q: Any, qd: Any, Q: Any = None, params: Any = None, *,
                             errors: str = "raise") -> Any:
        """λ of the independent constraint rows (zero on redundant rows)."""
        return self._forward(q, qd, Q, params, False, True, errors, None)

    def forward_dynamics_jacobians(self, q: Any, qd: Any, Q: Any = None, params: Any = None,
                                   *, out: tuple[Array, ...] | None = None,
                                   errors: str = "raise") -> Any:
        """(q̈, ∂q̈/∂q, ∂q̈/∂q̇, ∂q̈/∂Q), all exact (implicit differentiation in C).

        ``out``: four C-contiguous float64 arrays of shapes (n,), (n, n), (n, n), (n, n)
        (or with a leading N) to write into, so a factor callback allocates nothing.
        """
        return self._forward(q, qd, Q, params, True, False, errors, out)

    def forward_dynamics_parameter_jacobian(self, q: Any, qd: Any, Q: Any = None,
                                            params: Any = None, *,
                                            errors: str = "raise") -> Any:
        """∂q̈/∂p (n, np), or (N, n, np): exact, at fixed (q, q̇, Q), for the parameters in
        ``parameters`` order (implicit differentiation of the KKT system in C)."""
        core = self._core
        arrays, strides, count, batched = core.batch(**self._inputs(q, qd, Q))
        p, p_stride = core.params(params, count)
        jac = np.empty((count, self._n, core.parameters.values.size))
        status = np.empty(count, dtype=np.int32)
        core.checked(core.lib.mb_forward_dynamics_params(
            self._structure.plan, self._options.struct, count, core.doubles(arrays["q"]),
            strides["q"], core.doubles(arrays["qd"]), strides["qd"],
            core.doubles(arrays.get("Q")), strides.get("Q", 0), p, p_stride,
            core.doubles(jac), core.ints(status)))
        core.check_states(status, arrays["q"], "parameter sensitivities", errors, self._describe)
        return per_state(batched, (jac,), status, errors)

    # -- independent coordinates ---------------------------------------------------------------
    def partition(self, q: Any, z: Any = None, qd: Any = None, params: Any = None, *,
                  errors: str = "raise") -> Any:
        """(indices of z, R, S c): q̇ = R ż and q̈ = R z̈ + S c, with c = -Φ̇q q̇.

        Without ``z`` (and none named in the file) z is chosen by full-pivot LU of Φq.
        """
        core, n = self._core, self._n
        inputs = {"q": (q, n)} if qd is None else {"q": (q, n), "qd": (qd, n)}
        arrays, strides, count, batched = core.batch(**inputs)
        p, p_stride = core.params(params, count)
        d = self._structure.dof
        zfix = self._structure.z_indices(z)
        ind = np.zeros((count, max(d, 1)), dtype=np.int32)
        R = np.empty((count, n, max(d, 1)))
        Sc = None if qd is None else np.empty((count, n))
        status = np.empty(count, dtype=np.int32)
        core.checked(core.lib.mb_partition(
            self._structure.plan, self._options.struct, count, core.doubles(arrays["q"]),
            strides["q"], p, p_stride, core.ints(zfix), len(zfix), core.ints(ind),
            core.doubles(R), core.doubles(Sc), core.doubles(arrays.get("qd")),
            strides.get("qd", 0), core.ints(status)))
        core.check_states(status, arrays["q"], "coordinate partitioning", errors, self._describe)
        return per_state(batched, (ind[:, :d], R[:, :, :d], Sc), status, errors)

    def independent_coordinates(self, q: Any | None = None) -> list[str]:
        """Names of z: the file's ``independent_coordinates`` or the full-pivot LU choice."""
        ind, _, _ = self.partition(self._q0 if q is None else q)
        return [self._coordinates.names[i] for i in ind]

    def independent_dynamics(self, q: Any, qd: Any, Q: Any = None, z: Any = None,
                             params: Any = None, *, jacobians: bool = True,
                             errors: str = "raise", out: tuple[Array, ...] | None = None
                             ) -> Any:
        """(z̈, ∂z̈/∂z, ∂z̈/∂ż, ∂z̈/∂Q) at consistent states, along the constraint manifold.

        Moving z moves q by R δz and q̇ by -S (Φq q̇)_q R δz; each direction costs one
        kinematic and one dynamic solve in C (O(n) per direction on the sparse path).
        Without ``jacobians`` only z̈ is returned. ``out``: C-contiguous float64 arrays
        to write into, shaped as the results ((d,), (d, d), (d, d), (d, n), or with a
        leading N; z̈'s alone without ``jacobians``): a loop over batches then allocates
        nothing (fresh multi-megabyte outputs cost page faults on every call).
        """
        if errors != "raise" and errors != "status":
            check_errors(errors)
        local = self._workspaces
        native = local.native
        structure = self._structure
        if native is None or local.plan is not structure.plan or \
                local.layout != self._options.layout:  # Workspaces.fits, inlined: per call
            local, native = self._prepared()
        if z is not None:
            zfix = self._z_of(z)
        elif self._z_default is not None:
            zfix = self._z_default
        else:
            zfix = self._z_default = structure.z_indices(None)  # the file's, fixed
        if native is not None and params is None and out is None:
            got = native.independent_dynamics(q, qd, Q, zfix, jacobians)
            if got is not None:  # None: inputs for the general path
                if got[-1]:
                    self._core.checked(got[-1])
                    if errors == "raise":
                        raise self._core.failure(got[-2], q, "independent-coordinate "
                                                 "dynamics", self._describe)
                return returned(got[:-1], errors)
        core, n, pointer = self._core, self._n, self._pointer
        qs, q_stride, qds, qd_stride, Qs, Q_stride, count, batched = core.states(n, q, qd, Q)
        p, p_stride = (core.parameters.pointer, 0) if params is None else core.params(
            params, count)
        d = structure.dof
        lead = (count,) if batched else ()
        shapes = [(*lead, d)] + ([(*lead, d, d), (*lead, d, d), (*lead, d, n)]
                                 if jacobians else [])
        results = output_arrays(out, shapes)
        null = core.null
        ptrs = [pointer("double[]", r) for r in results[1:]] or [null] * 3
        workspace = local.workspace
        status, status_pointer = local.status_buffer(core, count, errors)
        failed = core.lib.mb_independent_dynamics_in(
            workspace, count, pointer("double[]", qs), q_stride, pointer("double[]", qds),
            qd_stride, null if Qs is None else pointer("double[]", Qs), Q_stride, p, p_stride,
            pointer("int[]", zfix), len(zfix), pointer("double[]", results[0]), *ptrs,
            status_pointer)
        if failed:
            core.checked(failed)
            if errors == "raise":
                raise core.failure(status[:count], qs, "independent-coordinate dynamics",
                                   self._describe)
        return returned((*results, status), errors)

    def _z_of(self, z: Any) -> Array:
        """:meth:`Structure.z_indices` of ``z``, kept for a list or tuple of names
        (read-only, shared): a key found equals a tuple of names, so it is names too."""
        structure = self._structure
        plan, named = self._z_named
        if plan is not structure.plan:
            plan, named = structure.plan, {}
            self._z_named = (plan, named)
        key = tuple(z) if type(z) in (list, tuple) else None
        if key is not None:
            try:
                zfix = named.get(key)
            except TypeError:  # unhashable entries: not names
                key = zfix = None
            if zfix is not None:
                return zfix
        zfix = structure.z_indices(z)
        if key is not None and len(named) < 64 and all(type(name) is str for name in key):
            zfix.flags.writeable = False
            named[key] = zfix
        return zfix

    # -- kinematic problems --------------------------------------------------------------------
    def solve_position(self, q_guess: Any, z: Any = None, minimum_norm: bool = False,
                       tol: float | None = None, max_iter: int = 50, params: Any = None, *,
                       errors: str = "raise") -> Any:
        """Newton to Φ(q) = 0 from a guess per state (which keeps its assembly branch).

        By default the independent coordinates z (given, named in the file, or chosen by
        full pivoting at the guess) keep their values; ``minimum_norm=True`` instead moves
        q the least (projection onto the constraint manifold). ``tol``: on max |Φ|
        (default ``options.newton_tol``, 1e-12 times the mechanism's size squared).
        """
        core = self._core
        arrays, _, count, batched = core.batch(q_guess=(q_guess, self._n))
        qs = arrays["q_guess"].copy()  # solved in place
        if qs.shape[0] != count:
            qs = np.repeat(qs, count, axis=0)
        p, p_stride = core.params(params, count)
        zfix = (np.zeros(0, dtype=np.int32) if minimum_norm
                else self._structure.z_indices(z))
        status = np.empty(count, dtype=np.int32)
        core.checked(core.lib.mb_solve_position(
            self._structure.plan, self._options.struct, count, core.doubles(qs), p, p_stride,
            core.ints(zfix), len(zfix), int(minimum_norm),
            self._options.newton_tol if tol is None else tol, max_iter, core.ints(status)))
        core.check_states(status, qs, "position problem", errors, self._describe)
        return per_state(batched, (qs,), status, errors)

    def _rates(self, q: Any, rates: Any, z: Any, minimum_norm: bool, params: Any,
               ) -> tuple[bool, Array, Array, Array]:
        """mb_solve_velocity from ``rates`` ((n,) or (N, n), copied): (batched, q, q̇,
        status), q and q̇ (N, n); z as :meth:`Structure.z_indices` takes it."""
        core = self._core
        arrays, strides, count, batched = core.batch(q=(q, self._n), v=(rates, self._n))
        v = arrays["v"].copy() if strides["v"] or count == 1 else np.repeat(arrays["v"],
                                                                             count, axis=0)
        p, p_stride = core.params(params, count)
        zfix = (np.zeros(0, dtype=np.int32) if minimum_norm
                else self._structure.z_indices(z))
        status = np.empty(count, dtype=np.int32)
        core.checked(core.lib.mb_solve_velocity(
            self._structure.plan, self._options.struct, count, core.doubles(arrays["q"]),
            strides["q"], core.doubles(v), p, p_stride, core.ints(zfix), len(zfix),
            int(minimum_norm), core.ints(status)))
        return batched, arrays["q"], v, status

    def solve_velocity(self, q: Any, z_dot: Any, z: Any = None, params: Any = None, *,
                       errors: str = "raise") -> Any:
        """q̇ with the given independent velocities ż and Φq q̇ = 0."""
        zfix = self._structure.z_indices(z)
        if len(zfix) == 0:
            zfix = np.array([self._coordinates.index(c) for c in self.independent_coordinates(
                np.asarray(q, dtype=float).reshape(-1, self._n)[0])], dtype=np.int32)
        zd = np.asarray(z_dot, dtype=float)
        guess = np.zeros((*zd.shape[:-1], self._n))
        guess[..., zfix] = zd
        batched, qs, v, status = self._rates(q, guess, zfix, False, params)
        self._core.check_states(status, qs, "velocity problem", errors, self._describe)
        return per_state(batched or guess.ndim == 2, (v,), status, errors)

    def project_velocity(self, q: Any, qd: Any, params: Any = None, *,
                         errors: str = "raise") -> Any:
        """The q̇ nearest to ``qd`` with Φq q̇ = 0."""
        batched, qs, v, status = self._rates(q, qd, None, True, params)
        self._core.check_states(status, qs, "velocity projection", errors, self._describe)
        return per_state(batched, (v,), status, errors)

    def solve_acceleration(self, q: Any, qd: Any, z_ddot: Any, z: Any = None,
                           params: Any = None, *, errors: str = "raise") -> Any:
        """q̈ with the given independent accelerations z̈ and Φq q̈ = c."""
        core, n = self._core, self._n
        d = self._structure.dof
        arrays, strides, count, batched = core.batch(q=(q, n), qd=(qd, n),
                                                     z_ddot=(z_ddot, d))
        p, p_stride = core.params(params, count)
        zfix = self._structure.z_indices(z)
        qdd = np.empty((count, n))
        status = np.empty(count, dtype=np.int32)
        core.checked(core.lib.mb_solve_acceleration(
            self._structure.plan, self._options.struct, count, core.doubles(arrays["q"]),
            strides["q"], core.doubles(arrays["qd"]), strides["qd"],
            core.doubles(arrays["z_ddot"]), strides["z_ddot"], p, p_stride, core.ints(zfix),
            len(zfix), core.doubles(qdd), core.ints(status)))
        core.check_states(status, arrays["q"], "acceleration problem", errors, self._describe)
        return per_state(batched, (qdd,), status, errors)

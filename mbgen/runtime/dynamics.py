"""Dynamics methods of a compiled mechanism: thin NumPy wrappers over the C core.

Every method takes one state (n,) or a batch (N, n). Batched calls run one C loop. With
``errors="raise"`` (default) a failed state raises :class:`SingularConfigurationError`
naming it; with ``errors="status"`` the call returns a per-state status array as its last
value instead (0 = ok, see ``status_text``) and the failed states' outputs are NaN, so an
estimator can drop or re-draw them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mbgen.runtime.calls import CallHelpers, output_array

Array = np.ndarray
ERROR_MODES = ("raise", "status")


class DynamicsMixin(CallHelpers):
    """Forward dynamics, its exact Jacobians, kinematic problems, independent coordinates."""

    n: int
    m: int
    coordinate_names: list[str]
    meta: dict[str, Any]
    options: Any
    c_model: Any
    q0: Array

    _active_rows: Array | None = None
    _plan: Any = None

    def independent_constraints(self, q: Any = None, tol: float = 1e-9,
                                ) -> tuple[list[int], list[int]]:
        raise NotImplementedError

    def coordinate_index(self, name: str) -> int:
        raise NotImplementedError

    # -- configuration -----------------------------------------------------------------------
    @property
    def active_rows(self) -> Array:
        """Constraint rows used by the dynamics: the independent rows at q0."""
        if self._active_rows is None:
            kept, _ = self.independent_constraints()
            self._active_rows = np.array(kept, dtype=np.int32)
        return self._active_rows

    @property
    def plan(self) -> Any:
        """The core's plan for the active rows (factorization structure), made once."""
        if self._plan is None:
            rows = self.active_rows
            plan = self.lib.mb_plan_new(self.c_model, self._int_ptr(rows), len(rows))
            if plan == self.ffi.NULL:
                raise MemoryError("mbgen C core: out of memory while analysing the model")
            self._plan = self.ffi.gc(plan, self.lib.mb_plan_free)
        return self._plan

    @property
    def baumgarte(self) -> tuple[float, float]:
        """(α, β): c = -Φ̇q q̇ - 2α Φq q̇ - β² Φ in every dynamics call (default 0, 0)."""
        return self.options.baumgarte

    @baumgarte.setter
    def baumgarte(self, value: tuple[float, float]) -> None:
        self.options.baumgarte = value

    @property
    def uses_sparse(self) -> bool:
        """Whether the dynamics run on the sparse KKT path (see options.method)."""
        return bool(self.lib.mb_plan_uses_sparse(self.plan, self.options.struct))

    @property
    def linear_algebra(self) -> str:
        """The dynamics' path under the current options: "dense", "sparse" or "unrolled"."""
        if self.lib.mb_plan_uses_unrolled(self.plan, self.options.struct):
            return "unrolled"
        return "sparse" if self.uses_sparse else "dense"

    @property
    def dof(self) -> int:
        return self.n - len(self.active_rows)

    @property
    def default_independent(self) -> list[int] | None:
        names = self.meta.get("independent")
        return None if not names else [self.coordinate_names.index(n) for n in names]

    def _z_indices(self, z: Any) -> Array:
        if z is None:
            z = self.default_independent
        if z is None:
            return np.zeros(0, dtype=np.int32)
        indices = [self.coordinate_index(c) if isinstance(c, str) else int(c) for c in z]
        if len(indices) != self.dof:
            raise ValueError(f"z must name {self.dof} coordinates, got {len(indices)}")
        if any(not 0 <= i < self.n for i in indices) or len(set(indices)) != len(indices):
            raise ValueError(f"z must name distinct coordinates, got {z!r}")
        return np.array(indices, dtype=np.int32)

    def _finish(self, status: Array, q: Array, what: str, errors: str) -> None:
        if errors not in ERROR_MODES:
            raise ValueError(f"errors must be one of {ERROR_MODES}, got {errors!r}")
        if errors == "raise" and status.any():
            bad = np.flatnonzero(status)
            k = int(bad[0])
            state = ", ".join(f"{n}={v:.6g}" for n, v in zip(self.coordinate_names,
                                                              q[min(k, len(q) - 1)],
                                                              strict=True))
            raise self.status_error(int(status[k]), f"{what} failed at state {k} ({bad.size} "
                                    f"of {len(status)} failed)", f"; q = [{state}]")

    def _result(self, batched: bool, values: tuple[Array, ...], status: Array,
                errors: str) -> Any:
        if not batched:
            values = tuple(v[0] for v in values)
            status = status[:1]
        if errors == "status":
            return (*values, status) if len(values) > 1 else (values[0], status)
        return values if len(values) > 1 else values[0]

    # -- forward dynamics ----------------------------------------------------------------------
    def _forward(self, q: Any, qd: Any, Q: Any, params: Any, jacobians: bool,
                 multipliers: bool, errors: str, out: tuple[Array, ...] | None,
                 ) -> tuple[Array, ...]:
        """Outputs shaped for the caller ((n,) per state, or with a leading N), then status."""
        inputs = {"q": (q, self.n), "qd": (qd, self.n)}
        if Q is not None:
            inputs["Q"] = (Q, self.n)
        arrays, strides, count, batched = self._batch(**inputs)
        p, p_stride = self._params(params, count)
        lead = (count,) if batched else ()
        n = self.n
        shapes = [(*lead, n)] + ([(*lead, n, n)] * 3 if jacobians else [])
        if out is not None and len(out) != len(shapes):
            raise ValueError(f"out must hold {len(shapes)} arrays")
        results = [output_array(o, s) for o, s in zip(out or [None] * len(shapes), shapes,
                                              strict=True)]
        lam = np.empty((*lead, max(self.m, 1))) if multipliers else None
        status = np.empty(count, dtype=np.int32)
        ptrs = [self._dbl(r) for r in results] + [self.ffi.NULL] * (4 - len(results))
        self._checked(self.lib.mb_forward_dynamics(
            self.plan, self.options.struct, count, self._dbl(arrays["q"]), strides["q"],
            self._dbl(arrays["qd"]), strides["qd"], self._dbl(arrays.get("Q")),
            strides.get("Q", 0), p, p_stride, ptrs[0], self._dbl(lam), ptrs[1], ptrs[2],
            ptrs[3], self._int_ptr(status)))
        self._finish(status, arrays["q"], "forward dynamics", errors)
        values = tuple(results) if lam is None else (lam[..., :self.m],)
        return (*values, status if batched else status[:1])

    def _returned(self, values: tuple[Array, ...], errors: str) -> Any:
        """(values..., status) with errors="status"; otherwise the values alone."""
        if errors == "status":
            return values
        return values[:-1] if len(values) > 2 else values[0]

    def forward_dynamics(self, q: Any, qd: Any, Q: Any = None, params: Any = None, *,
                         out: Array | None = None, errors: str = "raise") -> Any:
        """q̈ from [M Φqᵀ; Φq 0][q̈; λ] = [Q(q,q̇) + Q_ext; c] (c with Baumgarte terms)."""
        return self._returned(self._forward(q, qd, Q, params, False, False, errors,
                                            None if out is None else (out,)), errors)

    def lagrange_multipliers(self, q: Any, qd: Any, Q: Any = None, params: Any = None, *,
                             errors: str = "raise") -> Any:
        """λ of the independent constraint rows (zero on redundant rows)."""
        return self._returned(self._forward(q, qd, Q, params, False, True, errors, None),
                              errors)

    def forward_dynamics_jacobians(self, q: Any, qd: Any, Q: Any = None, params: Any = None,
                                   *, out: tuple[Array, ...] | None = None,
                                   errors: str = "raise") -> Any:
        """(q̈, ∂q̈/∂q, ∂q̈/∂q̇, ∂q̈/∂Q), all exact (implicit differentiation in C).

        ``out``: four C-contiguous float64 arrays of shapes (n,), (n, n), (n, n), (n, n)
        (or with a leading N) to write into, so a factor callback allocates nothing.
        """
        return self._returned(self._forward(q, qd, Q, params, True, False, errors, out),
                              errors)

    def forward_dynamics_parameter_jacobian(self, q: Any, qd: Any, Q: Any = None,
                                            params: Any = None, *,
                                            errors: str = "raise") -> Any:
        """∂q̈/∂p (n, np), or (N, n, np): exact, at fixed (q, q̇, Q), for the parameters in
        ``parameters`` order (implicit differentiation of the KKT system in C)."""
        inputs = {"q": (q, self.n), "qd": (qd, self.n)}
        if Q is not None:
            inputs["Q"] = (Q, self.n)
        arrays, strides, count, batched = self._batch(**inputs)
        p, p_stride = self._params(params, count)
        jac = np.empty((count, self.n, self.parameter_buffer.values.size))
        status = np.empty(count, dtype=np.int32)
        self._checked(self.lib.mb_forward_dynamics_params(
            self.plan, self.options.struct, count, self._dbl(arrays["q"]), strides["q"],
            self._dbl(arrays["qd"]), strides["qd"], self._dbl(arrays.get("Q")),
            strides.get("Q", 0), p, p_stride, self._dbl(jac), self._int_ptr(status)))
        self._finish(status, arrays["q"], "parameter sensitivities", errors)
        return self._returned((jac if batched else jac[0], status if batched else status[:1]),
                              errors)

    # -- independent coordinates ---------------------------------------------------------------
    def partition(self, q: Any, z: Any = None, qd: Any = None, params: Any = None, *,
                  errors: str = "raise") -> Any:
        """(indices of z, R, S c): q̇ = R ż and q̈ = R z̈ + S c, with c = -Φ̇q q̇.

        Without ``z`` (and none named in the file) z is chosen by full-pivot LU of Φq.
        """
        inputs = {"q": (q, self.n)} if qd is None else {"q": (q, self.n), "qd": (qd, self.n)}
        arrays, strides, count, batched = self._batch(**inputs)
        p, p_stride = self._params(params, count)
        zfix = self._z_indices(z)
        d = self.dof
        ind = np.zeros((count, max(d, 1)), dtype=np.int32)
        R = np.empty((count, self.n, max(d, 1)))
        Sc = None if qd is None else np.empty((count, self.n))
        status = np.empty(count, dtype=np.int32)
        self._checked(self.lib.mb_partition(
            self.plan, self.options.struct, count, self._dbl(arrays["q"]), strides["q"], p,
            p_stride, self._int_ptr(zfix), len(zfix), self._int_ptr(ind), self._dbl(R),
            self._dbl(Sc), self._dbl(arrays.get("qd")), strides.get("qd", 0),
            self._int_ptr(status)))
        self._finish(status, arrays["q"], "coordinate partitioning", errors)
        values = (ind[:, :d], R[:, :, :d], Sc)
        if not batched:
            values = (values[0][0], values[1][0], None if Sc is None else Sc[0])
            status = status[:1]
        return (*values, status) if errors == "status" else values

    def independent_coordinates(self, q: Any | None = None) -> list[str]:
        """Names of z: the file's ``independent_coordinates`` or the full-pivot LU choice."""
        ind, _, _ = self.partition(self.q0 if q is None else q)
        return [self.coordinate_names[i] for i in ind]

    def independent_dynamics(self, q: Any, qd: Any, Q: Any = None, z: Any = None,
                             params: Any = None, *, jacobians: bool = True,
                             errors: str = "raise") -> Any:
        """(z̈, ∂z̈/∂z, ∂z̈/∂ż, ∂z̈/∂Q) at consistent states, along the constraint manifold.

        Moving z moves q by R δz and q̇ by -S (Φq q̇)_q R δz; each direction costs one
        kinematic and one dynamic solve in C (O(n) per direction on the sparse path).
        Without ``jacobians`` only z̈ is returned.
        """
        inputs = {"q": (q, self.n), "qd": (qd, self.n)}
        if Q is not None:
            inputs["Q"] = (Q, self.n)
        arrays, strides, count, batched = self._batch(**inputs)
        p, p_stride = self._params(params, count)
        zfix = self._z_indices(z)
        d = self.dof
        zdd = np.empty((count, d))
        jac = [np.empty((count, d, d)), np.empty((count, d, d)),
               np.empty((count, d, self.n))] if jacobians else []
        ptrs = [self._dbl(j) for j in jac] or [self.ffi.NULL] * 3
        status = np.empty(count, dtype=np.int32)
        self._checked(self.lib.mb_independent_dynamics(
            self.plan, self.options.struct, count, self._dbl(arrays["q"]), strides["q"],
            self._dbl(arrays["qd"]), strides["qd"], self._dbl(arrays.get("Q")),
            strides.get("Q", 0), p, p_stride, self._int_ptr(zfix), len(zfix),
            self._dbl(zdd), *ptrs, self._int_ptr(status)))
        self._finish(status, arrays["q"], "independent-coordinate dynamics", errors)
        return self._result(batched, (zdd, *jac), status, errors)

    # -- kinematic problems --------------------------------------------------------------------
    def solve_position(self, q_guess: Any, z: Any = None, minimum_norm: bool = False,
                       tol: float = 1e-12, max_iter: int = 50, params: Any = None, *,
                       errors: str = "raise") -> Any:
        """Newton to Φ(q) = 0 from a guess per state (which keeps its assembly branch).

        By default the independent coordinates z (given, named in the file, or chosen by
        full pivoting at the guess) keep their values; ``minimum_norm=True`` instead moves
        q the least (projection onto the constraint manifold).
        """
        arrays, _, count, batched = self._batch(q_guess=(q_guess, self.n))
        qs = arrays["q_guess"].copy()  # solved in place
        if qs.shape[0] != count:
            qs = np.repeat(qs, count, axis=0)
        p, p_stride = self._params(params, count)
        zfix = np.zeros(0, dtype=np.int32) if minimum_norm else self._z_indices(z)
        status = np.empty(count, dtype=np.int32)
        self._checked(self.lib.mb_solve_position(
            self.plan, self.options.struct, count, self._dbl(qs), p, p_stride,
            self._int_ptr(zfix), len(zfix), int(minimum_norm), tol, max_iter,
            self._int_ptr(status)))
        self._finish(status, qs, "position problem", errors)
        return self._result(batched, (qs,), status, errors)

    def _rates(self, q: Any, rates: Any, z: Any, minimum_norm: bool, params: Any,
               ) -> tuple[bool, Array, Array, Array]:
        arrays, strides, count, batched = self._batch(q=(q, self.n), v=(rates, self.n))
        v = arrays["v"].copy() if strides["v"] or count == 1 else np.repeat(arrays["v"],
                                                                             count, axis=0)
        p, p_stride = self._params(params, count)
        zfix = np.zeros(0, dtype=np.int32) if minimum_norm else self._z_indices(z)
        status = np.empty(count, dtype=np.int32)
        self._checked(self.lib.mb_solve_velocity(
            self.plan, self.options.struct, count, self._dbl(arrays["q"]), strides["q"],
            self._dbl(v), p, p_stride, self._int_ptr(zfix), len(zfix), int(minimum_norm),
            self._int_ptr(status)))
        return batched, arrays["q"], v, status

    def solve_velocity(self, q: Any, z_dot: Any, z: Any = None, params: Any = None, *,
                       errors: str = "raise") -> Any:
        """q̇ with the given independent velocities ż and Φq q̇ = 0."""
        zfix = self._z_indices(z)
        if len(zfix) == 0:
            zfix = np.array([self.coordinate_index(c) for c in self.independent_coordinates(
                np.asarray(q, dtype=float).reshape(-1, self.n)[0])], dtype=np.int32)
        zd = np.asarray(z_dot, dtype=float)
        guess = np.zeros((*zd.shape[:-1], self.n))
        guess[..., zfix] = zd
        batched, qs, v, status = self._rates(q, guess, zfix, False, params)
        self._finish(status, qs, "velocity problem", errors)
        return self._result(batched or guess.ndim == 2, (v,), status, errors)

    def project_velocity(self, q: Any, qd: Any, params: Any = None, *,
                         errors: str = "raise") -> Any:
        """The q̇ nearest to ``qd`` with Φq q̇ = 0."""
        batched, qs, v, status = self._rates(q, qd, None, True, params)
        self._finish(status, qs, "velocity projection", errors)
        return self._result(batched, (v,), status, errors)

    def solve_acceleration(self, q: Any, qd: Any, z_ddot: Any, z: Any = None,
                           params: Any = None, *, errors: str = "raise") -> Any:
        """q̈ with the given independent accelerations z̈ and Φq q̈ = c."""
        d = self.dof
        arrays, strides, count, batched = self._batch(q=(q, self.n), qd=(qd, self.n),
                                                      z_ddot=(z_ddot, d))
        p, p_stride = self._params(params, count)
        zfix = self._z_indices(z)
        qdd = np.empty((count, self.n))
        status = np.empty(count, dtype=np.int32)
        self._checked(self.lib.mb_solve_acceleration(
            self.plan, self.options.struct, count, self._dbl(arrays["q"]), strides["q"],
            self._dbl(arrays["qd"]), strides["qd"], self._dbl(arrays["z_ddot"]),
            strides["z_ddot"], p, p_stride, self._int_ptr(zfix), len(zfix), self._dbl(qdd),
            self._int_ptr(status)))
        self._finish(status, arrays["q"], "acceleration problem", errors)
        return self._result(batched, (qdd,), status, errors)

    def solve_position_path(self, q_start: Any, z_values: Any, z: Any, tol: float = 1e-12,
                            max_iter: int = 50, params: Any = None, *,
                            errors: str = "raise") -> Any:
        """Positions (N, n) along a path of the independent coordinates ``z`` (N, d).

        Sample 0 starts from ``q_start`` (its assembly branch); every later sample from the
        extrapolation of the ones solved before it, all in one C loop.
        """
        zfix = self._z_indices(z)
        if len(zfix) == 0:
            raise ValueError("solve_position_path needs the independent coordinates z")
        values = np.ascontiguousarray(z_values, dtype=np.float64)
        if values.ndim != 2 or values.shape[1] != len(zfix):
            raise ValueError(f"z_values must have shape (N, {len(zfix)}), got {values.shape}")
        count = values.shape[0]
        qs = np.empty((count, self.n))
        qs[:] = np.asarray(q_start, dtype=np.float64).reshape(self.n)
        p, p_stride = self._params(params, 1)
        if p_stride:
            raise ValueError("solve_position_path takes one parameter vector")
        status = np.empty(count, dtype=np.int32)
        self._checked(self.lib.mb_solve_position_path(
            self.plan, self.options.struct, count, self._dbl(qs), self._dbl(values), p,
            self._int_ptr(zfix), len(zfix), tol, max_iter, self._int_ptr(status)))
        self._finish(status, qs, "position problem along the path", errors)
        return (qs, status) if errors == "status" else qs

    def inverse_dynamics(self, q: Any, qd: Any, qdd: Any, actuated: Any, params: Any = None,
                         *, jacobians: bool = False, errors: str = "raise") -> Any:
        """Forces u on the ``actuated`` coordinates (as many as the DOF) and λ such that
        (q, q̇, q̈) is a motion: B u − Φqᵀ λ = M q̈ − Q. With ``jacobians``: also ∂u/∂q,
        ∂u/∂q̇, ∂u/∂q̈ (d, n) each. u is the generalized force the actuator applies on its
        coordinate (what ``forward_dynamics(q, qd, Q)`` takes in Q)."""
        act = self._z_indices(actuated)
        if len(act) == 0:
            raise ValueError("inverse_dynamics needs the actuated coordinates")
        arrays, strides, count, batched = self._batch(q=(q, self.n), qd=(qd, self.n),
                                                      qdd=(qdd, self.n))
        p, p_stride = self._params(params, count)
        d = len(act)
        u = np.empty((count, d))
        lam = np.empty((count, max(self.m, 1)))
        jac = [np.empty((count, d, self.n)) for _ in range(3)] if jacobians else []
        ptrs = [self._dbl(j) for j in jac] or [self.ffi.NULL] * 3
        status = np.empty(count, dtype=np.int32)
        self._checked(self.lib.mb_inverse_dynamics(
            self.plan, self.options.struct, count, self._dbl(arrays["q"]), strides["q"],
            self._dbl(arrays["qd"]), strides["qd"], self._dbl(arrays["qdd"]), strides["qdd"],
            p, p_stride, self._int_ptr(act), d, self._dbl(u), self._dbl(lam), *ptrs,
            self._int_ptr(status)))
        self._finish(status, arrays["q"], "inverse dynamics", errors)
        return self._result(batched, (u, lam[:, :self.m], *jac), status, errors)

"""Dynamics methods of a compiled mechanism: thin NumPy wrappers over the generated C."""

from __future__ import annotations

from typing import Any

import numpy as np

from mbgen.errors import SingularConfigurationError
from mbgen.runtime.calls import CallHelpers

Array = np.ndarray
STATUS_TEXT = {
    1: "the constraint Jacobian Φq loses rank (dead point, bifurcation, or a chosen z that "
       "cannot parametrize the mechanism here)",
    2: "the mass matrix is singular on the motion subspace (RᵀMR not positive definite)",
    3: "Newton iterations did not converge",
    4: "constraint rows that are redundant at q0 do not hold at the solution: the model is "
       "over-constrained (its constraints contradict each other), or Newton reached an "
       "assembly mode where the redundancy is lost (start from a closer guess)",
}


class DynamicsMixin(CallHelpers):
    """Forward dynamics, its exact Jacobians, and the position/velocity problems."""

    n: int
    m: int
    lib: Any
    coordinate_names: list[str]
    meta: dict[str, Any]

    _active_rows: Array | None = None
    baumgarte: tuple[float, float] = (0.0, 0.0)

    # -- configuration -----------------------------------------------------------------------
    @property
    def active_rows(self) -> Array:
        """Constraint rows used by the dynamics: the independent rows at q0."""
        if self._active_rows is None:
            kept, _ = self.independent_constraints()  # type: ignore[attr-defined]
            self._active_rows = np.array(kept, dtype=np.int32)
        return self._active_rows

    @property
    def default_independent(self) -> list[int] | None:
        names = self.meta.get("independent")
        return None if not names else [self.coordinate_names.index(n) for n in names]

    def _z_indices(self, z: Any) -> Array:
        if z is None:
            z = self.default_independent
        if z is None:
            return np.zeros(1, dtype=np.int32)[:0]
        indices = [self.coordinate_index(c) if isinstance(c, str) else int(c)  # type: ignore[attr-defined]
                   for c in z]
        if len(indices) != self.n - len(self.active_rows):
            raise ValueError(f"z must name {self.n - len(self.active_rows)} coordinates, "
                             f"got {len(indices)}")
        return np.array(indices, dtype=np.int32)

    def _check(self, status: Array, q: Array, what: str) -> None:
        if status.any():
            bad = np.flatnonzero(status)
            k = int(bad[0])
            state = ", ".join(f"{n}={v:.6g}" for n, v in zip(self.coordinate_names, q[k],
                                                              strict=True))
            raise SingularConfigurationError(
                f"{what} failed at state {k} ({bad.size} of {len(status)} failed): "
                f"{STATUS_TEXT.get(int(status[k]), 'unknown error')}; q = [{state}]")

    # -- forward dynamics ----------------------------------------------------------------------
    def _forward(self, q: Any, qd: Any, Q: Any, params: Any, jacobians: bool,
                 ) -> tuple[bool, Array, Array, Array | None, Array | None, Array | None]:
        inputs = {"q": (q, self.n), "qd": (qd, self.n)}
        if Q is not None:
            inputs["Q"] = (Q, self.n)
        arrays, count, batched = self._batch(**inputs)
        qs, qds, Qs = arrays["q"], arrays["qd"], arrays.get("Q")
        p, p_stride = self._params(params, count)
        qdd = np.empty((count, self.n))
        lam = np.empty((count, max(self.m, 1)))
        shape = (count, self.n, self.n)
        jq, jqd, jQ = (np.empty(shape), np.empty(shape), np.empty(shape)) if jacobians \
            else (None, None, None)
        status = np.zeros(count, dtype=np.int32)
        rows = self.active_rows
        alpha, beta = self.baumgarte
        self.lib.mb_forward_dynamics(
            count, self._dbl(qs), self._dbl(qds), self._dbl(Qs), self.n, self._dbl(p),
            p_stride, self._int_ptr(rows), len(rows), alpha, beta, self._dbl(qdd),
            self._dbl(lam), self._dbl(jq), self._dbl(jqd), self._dbl(jQ),
            self._int_ptr(status))
        self._check(status, qs, "forward dynamics")
        return batched, qdd, lam, jq, jqd, jQ

    def forward_dynamics(self, q: Any, qd: Any, Q: Any = None, params: Any = None) -> Array:
        """q̈ from [M Φqᵀ; Φq 0][q̈; λ] = [Q(q,q̇) + Q_ext; -Φ̇q q̇] (null-space method)."""
        batched, qdd, *_ = self._forward(q, qd, Q, params, jacobians=False)
        return qdd if batched else qdd[0]

    def lagrange_multipliers(self, q: Any, qd: Any, Q: Any = None, params: Any = None) -> Array:
        """λ of the independent constraint rows (zero on redundant rows)."""
        batched, _, lam, *_ = self._forward(q, qd, Q, params, jacobians=False)
        lam = lam[:, :self.m]
        return lam if batched else lam[0]

    def forward_dynamics_jacobians(self, q: Any, qd: Any, Q: Any = None, params: Any = None,
                                   ) -> tuple[Array, Array, Array, Array]:
        """(q̈, ∂q̈/∂q, ∂q̈/∂q̇, ∂q̈/∂Q), all exact (implicit differentiation in C)."""
        batched, qdd, _, jq, jqd, jQ = self._forward(q, qd, Q, params, jacobians=True)
        assert jq is not None and jqd is not None and jQ is not None
        if batched:
            return qdd, jq, jqd, jQ
        return qdd[0], jq[0], jqd[0], jQ[0]

    # -- independent coordinates ---------------------------------------------------------------
    def partition(self, q: Any, z: Any = None, qd: Any = None, params: Any = None,
                  ) -> tuple[Array, Array, Array | None]:
        """(indices of z, R, S c): q̇ = R ż and q̈ = R z̈ + S c, with c = -Φ̇q q̇.

        Without ``z`` (and none named in the file) z is chosen by full-pivot LU of Φq.
        """
        inputs = {"q": (q, self.n)} if qd is None else {"q": (q, self.n), "qd": (qd, self.n)}
        arrays, count, batched = self._batch(**inputs)
        qs, qds = arrays["q"], arrays.get("qd")
        p, p_stride = self._params(params, count)
        zfix = self._z_indices(z)
        d = self.n - len(self.active_rows)
        ind = np.empty((count, max(d, 1)), dtype=np.int32)
        R = np.empty((count, self.n, max(d, 1)))
        Sc = None if qds is None else np.empty((count, self.n))
        status = np.zeros(count, dtype=np.int32)
        rows = self.active_rows
        self.lib.mb_partition(count, self._dbl(qs), self._dbl(p), p_stride, self._int_ptr(rows),
                              len(rows), self._int_ptr(zfix), len(zfix), self._int_ptr(ind),
                              self._dbl(R), self._dbl(Sc), self._dbl(qds),
                              self._int_ptr(status))
        self._check(status, qs, "coordinate partitioning")
        ind, R = ind[:, :d], R[:, :, :d]
        if batched:
            return ind, R, Sc
        return ind[0], R[0], None if Sc is None else Sc[0]

    def independent_coordinates(self, q: Any | None = None) -> list[str]:
        """Names of z: the file's ``independent_coordinates`` or the full-pivot LU choice."""
        ind, _, _ = self.partition(self.q0 if q is None else q)  # type: ignore[attr-defined]
        return [self.coordinate_names[i] for i in ind]

    def independent_dynamics(self, q: Any, qd: Any, Q: Any = None, z: Any = None,
                             params: Any = None) -> tuple[Array, Array, Array, Array]:
        """(z̈, ∂z̈/∂z, ∂z̈/∂ż, ∂z̈/∂Q) along the constraint manifold.

        z̈ = (RᵀMR)⁻¹Rᵀ(Q − M S c) equals q̈ at z. Moving z moves q by R and q̇ by
        -S (Φq q̇)_q R, so ∂z̈/∂z = [Jq R − Jqd S (Φq q̇)_q R]_z and ∂z̈/∂ż = [Jqd R]_z.
        """
        arrays, _, batched = self._batch(q=(q, self.n), qd=(qd, self.n))
        qs, qds = arrays["q"], arrays["qd"]
        qdd, jq, jqd, jQ = self.forward_dynamics_jacobians(qs, qds, Q, params)
        ind, R, _ = self.partition(qs, z=z, params=params)
        tangent = self.phiq_v_q(qs, qds, params)[:, self.active_rows, :]  # type: ignore[attr-defined]
        dqd_dz = -self._solve_dependent(qs, tangent @ R, ind, params)
        take = np.arange(len(ind))[:, None]
        zdd = qdd[take, ind]
        jz = (jq @ R + jqd @ dqd_dz)[take, ind]
        jzd = (jqd @ R)[take, ind]
        jzQ = jQ[take, ind]
        if batched:
            return zdd, jz, jzd, jzQ
        return zdd[0], jz[0], jzd[0], jzQ[0]

    def _solve_dependent(self, q: Array, B: Array, ind: Array, params: Any) -> Array:
        """S B for each state: dependent coordinates solve Φq_dep x = B, x_z = 0."""
        jac = self.phi_q(q, params)[:, self.active_rows, :]  # type: ignore[attr-defined]
        out = np.zeros((q.shape[0], self.n, B.shape[2]))
        for s in range(q.shape[0]):
            dep = np.setdiff1d(np.arange(self.n), ind[s])
            out[s, dep] = np.linalg.solve(jac[s][:, dep], B[s])
        return out

    # -- kinematic problems --------------------------------------------------------------------
    def solve_position(self, q_guess: Any, z: Any = None, minimum_norm: bool = False,
                       tol: float = 1e-12, max_iter: int = 50, params: Any = None) -> Array:
        """Newton to Φ(q) = 0 from a guess (which keeps the assembly branch).

        By default the independent coordinates z (given, named in the file, or chosen by
        full pivoting at the guess) keep their values; ``minimum_norm=True`` instead moves
        q the least (projection onto the constraint manifold).
        """
        arrays, count, batched = self._batch(q_guess=(q_guess, self.n))
        qs = arrays["q_guess"].copy()  # solved in place
        p, p_stride = self._params(params, count)
        zfix = np.zeros(0, dtype=np.int32) if minimum_norm else self._z_indices(z)
        status = np.zeros(count, dtype=np.int32)
        rows = self.active_rows
        self.lib.mb_solve_position(count, self._dbl(qs), self._dbl(p), p_stride,
                                   self._int_ptr(rows), len(rows), self._int_ptr(zfix),
                                   len(zfix), int(minimum_norm), tol, max_iter,
                                   self._int_ptr(status))
        self._check(status, qs, "position problem")
        return qs if batched else qs[0]

    def solve_velocity(self, q: Any, z_dot: Any, z: Any = None, params: Any = None) -> Array:
        """q̇ with the given independent velocities ż and Φq q̇ = 0."""
        d = self.n - len(self.active_rows)
        arrays, _, batched = self._batch(q=(q, self.n), z_dot=(z_dot, d))
        _, R, _ = self.partition(arrays["q"], z=z, params=params)
        qd = np.einsum("sij,sj->si", R, arrays["z_dot"])
        return qd if batched else qd[0]

    def project_velocity(self, q: Any, qd: Any, params: Any = None) -> Array:
        """The q̇ nearest to ``qd`` with Φq q̇ = 0."""
        arrays, count, batched = self._batch(q=(q, self.n), qd=(qd, self.n))
        qs, qds = arrays["q"], arrays["qd"].copy()  # projected in place
        p, p_stride = self._params(params, count)
        status = np.zeros(qs.shape[0], dtype=np.int32)
        rows = self.active_rows
        self.lib.mb_solve_velocity(qs.shape[0], self._dbl(qs), self._dbl(qds), self._dbl(p),
                                   p_stride, self._int_ptr(rows), len(rows), self.ffi.NULL, 0,
                                   1, self._int_ptr(status))
        self._check(status, qs, "velocity projection")
        return qds if batched else qds[0]

    def solve_acceleration(self, q: Any, qd: Any, z_ddot: Any, z: Any = None,
                           params: Any = None) -> Array:
        """q̈ = R z̈ + S c for given independent accelerations."""
        d = self.n - len(self.active_rows)
        arrays, _, batched = self._batch(q=(q, self.n), qd=(qd, self.n), z_ddot=(z_ddot, d))
        _, R, Sc = self.partition(arrays["q"], z=z, qd=arrays["qd"], params=params)
        qdd = np.einsum("sij,sj->si", R, arrays["z_ddot"]) + Sc
        return qdd if batched else qdd[0]

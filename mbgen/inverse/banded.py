"""The staged inverse-dynamics factor graph over the whole trajectory, linearized in batch.

The variables, factors, noise and stages are those of the GTSAM graph in
:mod:`mbgen.inverse.factor_graph` (the paper's Fig. 4); what differs is how the graph is
linearized and solved. GTSAM's Python binding linearizes each nonlinear factor through a
Python callback (~10 µs, and a copy of the whole ``Values``), so there the samples go in
windows of ten and the four stages cost ~45 callbacks per sample. Here every factor type
is one batched C call for all samples at once (Φ and Φq, (Φq q̇)_q, q̈ with its
Jacobians), and the graph's normal equations, block-banded because every factor touches
one sample or two consecutive ones, are solved by Levenberg–Marquardt with a banded
Cholesky factor (:mod:`mbgen.numerics.least_squares`). One graph holds the whole
trajectory, as in the paper.

Unknowns are interleaved by sample, x = [q_0, v_0, a_0, u_0, q_1, ...] (only the stage's
variables), so a factor on samples k−1 and k touches a contiguous band of x.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mbgen.errors import TrajectoryError
from mbgen.factors.noise import NoiseDefaults
from mbgen.io.trajectory import Trajectory
from mbgen.numerics.batched import matrix_vector
from mbgen.numerics.least_squares import (
    Block,
    ResidualSet,
    StridedJacobian,
    levenberg_marquardt,
)
from mbgen.runtime.compiled import CompiledMechanism

Array = np.ndarray
STAGE_VARIABLES = {1: ("q",), 2: ("q", "v", "a"), 3: ("q", "v", "a"), 4: ("q", "v", "a", "u")}
STAGE_NAMES = {1: "positions", 2: "velocities and accelerations", 3: "velocity constraints",
               4: "forces"}


@dataclass(frozen=True)
class BatchFactor:
    """One factor type's whitened residuals for all its samples: ``residual`` (K, rows) for
    samples ``first`` … ``first + K − 1``; ``jacobians[(variable, lag)]`` (K, rows, size),
    or (K, size) for a diagonal block, with lag 0 for the sample itself and −1 for the one
    before (None: not asked for)."""

    residual: Array
    jacobians: dict[tuple[str, int], Array] | None
    first: int = 0


class Layout:
    """Where each sample's variables sit in the unknown vector of one stage."""

    def __init__(self, sizes: dict[str, int], variables: tuple[str, ...], count: int) -> None:
        self.sizes, self.variables, self.count = sizes, variables, count
        self.offsets: dict[str, int] = {}
        width = 0
        for name in variables:
            self.offsets[name] = width
            width += sizes[name]
        self.width = width

    def split(self, x: Array) -> dict[str, Array]:
        """The variables as (N, size) views of x (N·width,)."""
        rows = x.reshape(self.count, self.width)
        return {name: rows[:, self.offsets[name]:self.offsets[name] + self.sizes[name]]
                for name in self.variables}

    def join(self, values: dict[str, Array]) -> Array:
        return np.concatenate([values[name] for name in self.variables], axis=1).ravel()

    def residual_set(self, factor: BatchFactor) -> ResidualSet:
        """The factor's Jacobian blocks, each at its place within the samples it spans."""
        assert factor.jacobians is not None
        lag = min(key[1] for key in factor.jacobians)
        count, rows = factor.residual.shape
        blocks = [Block((key[1] - lag) * self.width + self.offsets[key[0]], values)
                  for key, values in factor.jacobians.items()]
        return ResidualSet((np.arange(count) + factor.first + lag) * self.width, rows, blocks)


class InverseGraph:
    """The graph's factors for one trajectory, as batched functions of the variables."""

    def __init__(self, mech: CompiledMechanism, trajectory: Trajectory, imposed: list[int],
                 actuated: list[int], noise: NoiseDefaults, prescribed_sigma: float) -> None:
        self.mech, self.trajectory, self.noise = mech, trajectory, noise
        self.imposed, self.actuated = list(imposed), list(actuated)
        self.prescribed_sigma = prescribed_sigma
        _, self.rates, self.accelerations = trajectory.derivatives()
        self.dt = np.diff(trajectory.t)
        n, count = mech.n, len(trajectory.t)
        self.sizes = {"q": n, "v": n, "a": n, "u": len(actuated)}
        self.select = np.eye(n)[imposed]
        self.ones = np.ones((count, n))

    def factors(self, stage: int, x: dict[str, Array], jacobians: bool) -> list[BatchFactor]:
        """The factors of ``stage`` (those of the earlier stages included) at x."""
        noise = self.noise
        q = x["q"]
        phi_q = self.mech.phi_q(q) if jacobians or stage >= 3 else None  # shared by two
        found = [self._selected(q, self.trajectory.values, "q", self.prescribed_sigma,
                                jacobians),
                 self._positions(q, phi_q if jacobians else None),
                 self._difference(q, None, noise.equality, jacobians, "q", "")]
        if stage >= 2:
            # the spline's rates remove the trapezoidal rule's alternating mode (see
            # mbgen.inverse.factor_graph)
            found += [self._selected(x["v"], self.rates, "v", noise.integrator, jacobians),
                      self._selected(x["a"], self.accelerations, "a", noise.integrator,
                                     jacobians),
                      self._difference(q, x["v"], noise.integrator, jacobians, "q", "v"),
                      self._difference(x["v"], x["a"], noise.integrator, jacobians, "v", "a")]
        if stage >= 3:
            assert phi_q is not None
            found.append(self._velocities(q, x["v"], phi_q, jacobians))
        if stage >= 4:
            found.append(self._dynamics(x["q"], x["v"], x["a"], x["u"], jacobians))
        return found

    def fitted_forces(self, q: Array, v: Array, a: Array) -> Array:
        """The forces u (N, d) whose q̈(q, q̇, B u) comes closest to a, sample by sample:
        the forces' start, exact when the motion is (q̈ is linear in Q)."""
        acc, _, _, jQ = self.mech.forward_dynamics_jacobians(q, v, np.zeros_like(q))
        gain = jQ[:, :, self.actuated]  # (N, n, d)
        transposed = gain.transpose(0, 2, 1)
        return np.linalg.solve(transposed @ gain, transposed @ (a - acc)[:, :, None])[:, :, 0]

    def _selected(self, values: Array, samples: Array, name: str, sigma: float,
                  jacobians: bool) -> BatchFactor:
        """values[imposed] − samples: the prescribed positions, or the spline's rates."""
        residual = (values[:, self.imposed] - samples) / sigma
        return BatchFactor(residual, {(name, 0): np.broadcast_to(
            self.select / sigma, (len(values), *self.select.shape))} if jacobians else None)

    def _positions(self, q: Array, phi_q: Array | None) -> BatchFactor:
        """Φ(q); its Jacobian Φq when given."""
        sigma = self.noise.constraints
        return BatchFactor(self.mech.phi(q) / sigma,
                           None if phi_q is None else {("q", 0): phi_q / sigma})

    def _difference(self, x: Array, rate: Array | None, sigma: float, jacobians: bool,
                    name: str, rate_name: str) -> BatchFactor:
        """x_k − x_{k−1} − dt/2 (ẋ_{k−1} + ẋ_k) (the trapezoidal integrator), or without a
        rate x_k − x_{k−1} (the soft equality between consecutive positions)."""
        residual = x[1:] - x[:-1]
        if rate is not None:
            residual = residual - 0.5 * self.dt[:, None] * (rate[1:] + rate[:-1])
        if not jacobians:
            return BatchFactor(residual / sigma, None, first=1)
        unit = self.ones[1:] / sigma  # diagonal blocks: scaled identities
        blocks = {(name, 0): unit, (name, -1): -unit}
        if rate is not None:
            half = -0.5 * self.dt[:, None] * unit
            blocks[(rate_name, 0)] = blocks[(rate_name, -1)] = half
        return BatchFactor(residual / sigma, blocks, first=1)

    def _velocities(self, q: Array, v: Array, phi_q: Array, jacobians: bool) -> BatchFactor:
        """Φq(q) q̇."""
        sigma = self.noise.constraints
        residual = matrix_vector(phi_q, v) / sigma
        if not jacobians:
            return BatchFactor(residual, None)
        return BatchFactor(residual, {("q", 0): self.mech.phiq_v_q(q, v) / sigma,
                                      ("v", 0): phi_q / sigma})

    def _dynamics(self, q: Array, v: Array, a: Array, u: Array, jacobians: bool,
                  ) -> BatchFactor:
        """q̈(q, q̇, B u) − q̈; a state the dynamics cannot evaluate gives NaN (the step
        that led there is rejected)."""
        sigma = self.noise.dynamics
        forces = np.zeros_like(q)
        forces[:, self.actuated] = u
        if not jacobians:
            acc = self.mech.forward_dynamics(q, v, forces, errors="status")[0]
            return BatchFactor((acc - a) / sigma, None)
        acc, jq, jqd, jQ, status = self.mech.forward_dynamics_jacobians(q, v, forces,
                                                                         errors="status")
        if np.any(status):
            k = int(np.flatnonzero(status)[0])
            raise self.mech.status_error(
                int(status[k]), f"{self.trajectory.source}: inverse-dynamics factor graph: the "
                f"dynamics fail at t = {self.trajectory.t[k]:.6g} s", make=TrajectoryError)
        return BatchFactor((acc - a) / sigma, {
            ("q", 0): jq / sigma, ("v", 0): jqd / sigma, ("a", 0): -self.ones / sigma,
            ("u", 0): jQ[:, :, self.actuated] / sigma})


def solve_stages(graph: InverseGraph, start: dict[str, Array],
                 progress: Callable[[int, int], None] | None = None,
                 max_iterations: int = 50, covariance: bool = False,
                 ) -> dict[str, Array]:
    """The four stages in turn, each from the previous one's solution; ``start``: the
    initial q, q̇, q̈ (N, n); the forces start at :meth:`InverseGraph.fitted_forces` of the
    third stage's motion. ``covariance``: also the forces' marginal σ
    (``u_sigma``, :func:`marginal_sigma`)."""
    values = dict(start)
    count = len(graph.trajectory.t)
    for stage, variables in STAGE_VARIABLES.items():
        layout = Layout(graph.sizes, variables, count)
        if "u" in variables:
            values["u"] = graph.fitted_forces(values["q"], values["v"], values["a"])

        def residuals(x: Array, jacobians: bool, stage: int = stage,
                      layout: Layout = layout) -> tuple[Array, StridedJacobian | None]:
            found = graph.factors(stage, layout.split(x), jacobians)
            r = np.concatenate([f.residual.ravel() for f in found])
            if not jacobians:
                return r, None
            return r, StridedJacobian([layout.residual_set(f) for f in found],
                                      layout.width * count)

        result = levenberg_marquardt(residuals, layout.join(values), layout.width * count,
                                     max_iterations=max_iterations, ftol=1e-12,
                                     atol=1e-8 * count, scaling="absolute",
                                     damping=1e-5, final_normal=False,
                                     chord_stop=True)
        if not result.converged:
            t = graph.trajectory.t
            raise TrajectoryError(
                f"{graph.trajectory.source}: inverse-dynamics factor graph, stage {stage} "
                f"({STAGE_NAMES[stage]}), t = {t[0]:.6g}..{t[-1]:.6g} s: {result.message}")
        values.update(layout.split(result.x))
        if covariance and "u" in variables:
            sigma = marginal_sigma(residuals, result.x, layout, graph.mech.banded_inverse)
            if sigma is None:
                t = graph.trajectory.t
                raise TrajectoryError(
                    f"{graph.trajectory.source}: inverse-dynamics factor graph, "
                    f"t = {t[0]:.6g}..{t[-1]:.6g} s: the forces were found, but the graph's "
                    "information at the solution is not positive definite in floating "
                    "point, so they have no σ (run without the covariance)")
            values["u_sigma"] = sigma["u"]
        if progress is not None:
            progress(stage, len(STAGE_VARIABLES))
    return values


def marginal_sigma(residuals: Callable[[Array, bool], tuple[Array, StridedJacobian | None]],
                   x: Array, layout: Layout, banded_inverse: Callable[[Array], Array],
                   ) -> dict[str, Array] | None:
    """Each variable's marginal standard deviation (N, size) under the graph's noise
    models, linearized at x: the diagonal of (JᵀJ)⁻¹, from the band of the inverse of
    its banded Cholesky factor (O(N b²), GTSAM's marginals without a dense matrix); None
    where JᵀJ does not factor."""
    _, jacobian = residuals(x, True)
    assert jacobian is not None  # asked for
    try:
        factor = jacobian.normal().factor().factor
    except np.linalg.LinAlgError:  # not positive definite in floating point: no σ, not a guess
        return None
    return layout.split(np.sqrt(banded_inverse(factor)[0]))

"""Inverse dynamics by factor graph (the paper's Fig. 4 and section 7.2), solved in batch
in four stages, each starting from the previous one's solution:

1. positions q_k: the prescribed coordinates (a linear factor on q[imposed]), position
   constraints and the soft equality between consecutive samples;
2. velocities and accelerations q̇_k, q̈_k with trapezoidal integrator factors;
3. velocity constraints;
4. the actuator forces u_k and the inverse-dynamics factors q̈(q, q̇, B u) − q̈.

The forces are variables only on the actuated coordinates (Q = B u: the other components
are exactly zero rather than pinned there by priors as in the paper). Stage 1 starts
from the kinematic continuation of the C core (the position problem along the path), so
that the graph never has to find the assembly branch by itself; stage 2 from the
samples' finite differences.

The trapezoidal rule determines rates from positions only up to an alternating mode
x_k + (−1)^k c: a free direction that makes Levenberg–Marquardt crawl and leaves a zig-zag
in the forces. The prescribed coordinates' rates (the quintic spline's, weighted like the
integrator factors) are priors of stage 2 at every sample, which removes it.

Two solvers of this graph. The default (``solver="banded"``,
:mod:`mbgen.inverse.banded`) holds the whole trajectory in one graph, linearizes
each factor type for all samples in one batched C call and solves the banded normal
equations. ``solver="gtsam"`` builds it from GTSAM factors (below): the reference, and
the starting point for a user's own factors. With the rate priors every sample is
determined by its neighbours, so GTSAM solves independent windows of ``WINDOW`` samples:
one graph over all N samples would give the same answer but cost O(N²), since the PyPI
GTSAM copies the whole ``Values`` into every Python factor callback (minutes for the
four-bar's 2000 samples); a short window is cheaper still (the four-bar: 3.9 s with
windows of 50, 2.4 s with 10, the same forces to 1e-10 of the peak). Its linear systems
are solved by Cholesky (QR gave the same forces and cost 20-40 % more).
"""

from __future__ import annotations

from collections.abc import Callable

import gtsam
import numpy as np

from mbgen.errors import TrajectoryError
from mbgen.factors.linear import (
    equality_factor,
    linear_factor,
    trapezoidal_factor,
)
from mbgen.factors.mechanism import MechanismFactors
from mbgen.factors.noise import PAPER, NoiseDefaults, isotropic
from mbgen.inverse.banded import InverseGraph, solve_stages
from mbgen.inverse.motion import InverseResult, path_positions
from mbgen.io.trajectory import Trajectory
from mbgen.runtime.compiled import CompiledMechanism

Array = np.ndarray
PRESCRIBED_SIGMA = 1e-4  # the prescribed coordinates, as tight as the constraints
WINDOW = 10  # samples per graph: GTSAM copies the whole Values into every Python
#              callback, so one graph over N samples would cost O(N²)


SOLVERS = ("banded", "gtsam")


def inverse_dynamics_factor_graph(mech: CompiledMechanism, trajectory: Trajectory,
                                  imposed: list[int], actuated: list[int] | None = None,
                                  q_start: Array | None = None, noise: NoiseDefaults = PAPER,
                                  window: int = WINDOW, solver: str = "banded",
                                  progress: Callable[[int, int], None] | None = None,
                                  covariance: bool = False) -> InverseResult:
    """The paper's staged batch factor graph; same result type as the direct method.

    ``solver``: "banded" (default) linearizes every factor type for the whole trajectory in
    one batched C call and solves the banded normal equations
    (:mod:`mbgen.inverse.banded`); "gtsam" builds GTSAM graphs of ``window``
    samples with Python factors (see the module docstring), 9-26 times slower, the same
    forces. ``progress(done, total)``: stages (banded) or samples (gtsam) done. ``covariance``:
    also the forces' marginal standard deviations (banded solver; on the pick-and-place
    robot they cost 0.64 s against the solve's 0.3 s)."""
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, got {solver!r}")
    actuated = imposed if actuated is None else actuated
    t = trajectory.t
    guess = path_positions(mech, trajectory, imposed, q_start)
    if solver == "banded":
        graph = InverseGraph(mech, trajectory, imposed, actuated, noise, PRESCRIBED_SIGMA)
        qd = np.gradient(guess, t, axis=0) if len(t) > 1 else np.zeros_like(guess)
        qdd = np.gradient(qd, t, axis=0) if len(t) > 1 else np.zeros_like(guess)
        x = solve_stages(graph, {"q": guess, "v": qd, "a": qdd}, progress,
                         covariance=covariance)
        q, qd, qdd, forces = x["q"], x["v"], x["a"], x["u"]
        force_sigma = x.get("u_sigma")
    else:
        q, qd, qdd, forces = _windows(mech, trajectory, imposed, actuated, guess, noise,
                                      window, progress)
        force_sigma = None
    return InverseResult(mech, t, q, qd, qdd, forces, list(imposed), list(actuated),
                         trajectory.values, {"method": "factor-graph", "solver": solver}
                         | ({"window": window} if solver == "gtsam" else {}), force_sigma)


def _windows(mech: CompiledMechanism, trajectory: Trajectory, imposed: list[int],
             actuated: list[int], guess: Array, noise: NoiseDefaults, window: int,
             progress: Callable[[int, int], None] | None) -> tuple[Array, ...]:
    """The GTSAM graphs, one window of samples at a time: (q, q̇, q̈, u)."""
    count, n = len(trajectory.t), mech.n
    solver = _StagedGraph(mech, trajectory, imposed, actuated, noise)
    q, qd, qdd = np.empty((count, n)), np.empty((count, n)), np.empty((count, n))
    forces = np.empty((count, len(actuated)))
    for first in range(0, count, window):
        samples = range(first, min(first + window, count))
        out = solver.solve(samples, guess[samples.start:samples.stop])
        for target, value in zip((q, qd, qdd, forces), out, strict=True):
            target[samples.start:samples.stop] = value
        if progress is not None:
            progress(samples.stop, count)
    return q, qd, qdd, forces


class _StagedGraph:
    """The four stages on one window of samples."""

    def __init__(self, mech: CompiledMechanism, trajectory: Trajectory, imposed: list[int],
                 actuated: list[int], noise: NoiseDefaults) -> None:
        self.mech, self.trajectory, self.noise = mech, trajectory, noise
        self.imposed, self.actuated = imposed, actuated
        self.factors = MechanismFactors(mech, noise, z=imposed)
        self.select = np.eye(mech.n)[imposed]
        _, self.rates, self.accelerations = trajectory.derivatives()
        self.params = gtsam.LevenbergMarquardtParams()
        self.params.setLinearSolverType("MULTIFRONTAL_CHOLESKY")
        self.params.setMaxIterations(50)
        self.params.setRelativeErrorTol(1e-10)

    def _optimize(self, graph: gtsam.NonlinearFactorGraph, values: gtsam.Values, stage: int,
                  samples: range) -> gtsam.Values:
        try:
            return gtsam.LevenbergMarquardtOptimizer(graph, values, self.params).optimize()
        except RuntimeError as exc:
            t = self.trajectory.t
            raise TrajectoryError(
                f"{self.trajectory.source}: inverse-dynamics factor graph, stage {stage}, "
                f"samples at t = {t[samples.start]:.6g}..{t[samples.stop - 1]:.6g} s: "
                f"{str(exc).strip().splitlines()[0]}") from None

    def solve(self, samples: range, guess: Array) -> tuple[Array, Array, Array, Array]:
        mech, noise, f = self.mech, self.noise, self.factors
        n, d = mech.n, len(self.actuated)
        t = self.trajectory.t[samples.start:samples.stop]
        prescribed = self.trajectory.values[samples.start:samples.stop]
        rates = self.rates[samples.start:samples.stop]
        accelerations = self.accelerations[samples.start:samples.stop]
        size = len(t)
        Q = [gtsam.symbol("q", k) for k in range(size)]
        V = [gtsam.symbol("v", k) for k in range(size)]
        A = [gtsam.symbol("a", k) for k in range(size)]
        U = [gtsam.symbol("u", k) for k in range(size)]
        tight = isotropic(len(self.imposed), PRESCRIBED_SIGMA)
        graph, values = gtsam.NonlinearFactorGraph(), gtsam.Values()
        # stage 1: positions
        equality = isotropic(n, noise.equality)
        for k in range(size):
            values.insert(Q[k], guess[k])
            graph.add(linear_factor([Q[k]], [self.select], prescribed[k], tight))
            graph.add(f.position_constraints(Q[k]))
            if k:
                graph.add(equality_factor(Q[k - 1], Q[k], n, equality))
        values = self._optimize(graph, values, 1, samples)
        q = np.array([values.atVector(key) for key in Q])
        # stage 2: velocities, accelerations, integrators, and the prescribed rates
        qd = np.gradient(q, t, axis=0) if size > 1 else np.zeros((1, n))
        qdd = np.gradient(qd, t, axis=0) if size > 1 else np.zeros((1, n))
        integrator = isotropic(n, noise.integrator)
        rate_prior = isotropic(len(self.imposed), noise.integrator)
        for k in range(size):
            values.insert(V[k], qd[k])
            values.insert(A[k], qdd[k])
            graph.add(linear_factor([V[k]], [self.select], rates[k], rate_prior))
            graph.add(linear_factor([A[k]], [self.select], accelerations[k], rate_prior))
            if k:
                dt = t[k] - t[k - 1]
                graph.add(trapezoidal_factor(Q[k - 1], Q[k], V[k - 1], V[k], dt, n, integrator))
                graph.add(trapezoidal_factor(V[k - 1], V[k], A[k - 1], A[k], dt, n, integrator))
        values = self._optimize(graph, values, 2, samples)
        # stage 3: velocity constraints
        for k in range(size):
            graph.add(f.velocity_constraints(Q[k], V[k]))
        values = self._optimize(graph, values, 3, samples)
        # stage 4: forces and inverse dynamics
        for k in range(size):
            values.insert(U[k], np.zeros(d))
            graph.add(f.inverse_dynamics(Q[k], V[k], A[k], U[k], actuated=self.actuated))
        values = self._optimize(graph, values, 4, samples)

        def get(keys: list[int]) -> Array:
            return np.array([values.atVector(key) for key in keys])

        return get(Q), get(V), get(A), get(U)

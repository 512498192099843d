"""Forward dynamics by factor graph, solved step by step with GTSAM's fixed-lag smoothers
(the paper's Figs. 2 and 3, section 7.1).

Each step adds the variables of time t_{k+1} and their factors, and the smoother (batch
Levenberg–Marquardt or iSAM2) re-optimizes the last ``window`` steps; older variables are
marginalized. Dependent coordinates: q, q̇, q̈ per step with trapezoidal (or Euler)
integrators on q and q̇, position and velocity constraints and the dynamics factor.
Independent coordinates: z, ż, z̈ integrated, q and q̇ tied to them by the independent
position and velocity factors, the dynamics factor on (q, q̇, z̈), and a weak tie between
consecutive q and q̇ (see :meth:`FactorGraphSimulator._transition`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import gtsam
import numpy as np

from mbgen.errors import MbgenError
from mbgen.factors.linear import (
    euler_factor,
    prior_factor,
    trapezoidal_factor,
)
from mbgen.factors.marginals import marginal_sigmas
from mbgen.factors.mechanism import MechanismFactors
from mbgen.factors.noise import PAPER, NoiseDefaults, isotropic
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.simulation.integrators import RunStopped, SimulationResult, step_count

Array = np.ndarray
COORDS = ("dependent", "independent")
SMOOTHERS = ("batch", "incremental")
INTEGRATORS = ("trapezoidal", "euler")
Z_CONDITIONING = 1e-3  # smallest σ_min/σ_max of Φq without the z columns
Z_RESELECT = 0.2  # below it, z the simulator chose itself is chosen again at the new q
ExtraFactors = Callable[[int, "StepKeys"], Iterable[gtsam.NonlinearFactor]]


def covariance_refusal(coords: str) -> str | None:
    """Why the graph in ``coords`` cannot give honest standard deviations, or None. In
    dependent coordinates each step has more factors than unknowns: the constraint
    factors repeat what the integrated dynamics already hold, and the marginals count it
    twice (the four-bar's σ came out 3.3 times smaller than the Monte Carlo spread). The
    independent formulation is square, and its σ is the spread (tested)."""
    if coords == "independent":
        return None
    return ("standard deviations need --coords independent: in dependent coordinates the "
            "constraint factors repeat what the integrated dynamics already hold, and the "
            "graph would report σ several times too small")


class FactorGraphError(MbgenError):
    """A step of the factor-graph simulation did not converge."""


class FactorGraphStopped(FactorGraphError, RunStopped):
    """A factor-graph run that stopped at a step: ``result`` holds the rows before it."""


@dataclass(frozen=True)
class StepKeys:
    """The GTSAM keys of the variables of one time step (None: not in this formulation)."""

    q: int
    qd: int
    qdd: int | None
    z: int | None
    zd: int | None
    zdd: int | None

    def independent(self) -> tuple[int, int, int]:
        """The keys of z, ż, z̈ (independent coordinates only)."""
        assert self.z is not None and self.zd is not None and self.zdd is not None
        return self.z, self.zd, self.zdd

    def acceleration(self) -> int:
        """The key of q̈ (dependent coordinates only)."""
        assert self.qdd is not None
        return self.qdd

    @staticmethod
    def of(step: int, independent: bool) -> StepKeys:
        s = gtsam.symbol
        if independent:
            return StepKeys(s("q", step), s("v", step), None, s("z", step), s("w", step),
                            s("a", step))
        return StepKeys(s("q", step), s("v", step), s("a", step), None, None, None)


class FactorGraphSimulator:
    """Forward dynamics of a compiled mechanism as a sliding-window factor graph.

    ``window``: number of time steps the smoother keeps (Nw ≥ 1); ``extra_factors(step,
    keys)``: more factors of the user's for each new step (sensors, priors, ...).
    """

    def __init__(self, mechanism: CompiledMechanism, dt: float, window: int = 2,
                 coords: str = "dependent", smoother: str = "batch",
                 integrator: str = "trapezoidal", noise: NoiseDefaults = PAPER,
                 z: list[str] | None = None, max_iterations: int = 15,
                 max_error: float = 1.0, extra_factors: ExtraFactors | None = None) -> None:
        if not dt > 0:
            raise ValueError(f"dt must be positive, got {dt}")
        if int(window) != window or window < 1:
            raise ValueError(f"the window must be a positive number of time steps, got "
                             f"{window}")
        for name, value, choices in (("coords", coords, COORDS),
                                     ("smoother", smoother, SMOOTHERS),
                                     ("integrator", integrator, INTEGRATORS)):
            if value not in choices:
                raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
        self.mechanism = mechanism
        self.dt, self.window = float(dt), int(window)
        self.independent = coords == "independent"
        self.coords, self.smoother_kind, self.integrator = coords, smoother, integrator
        self.noise = noise
        self.factors = MechanismFactors(mechanism, noise, z)
        self.first_z = [int(i) for i in self.factors.z]
        # z named by the caller or the file stays; z chosen by pivoting is chosen again
        self.choose_z = z is None and mechanism.default_independent is None
        self.switches: list[tuple[float, list[str]]] = []  # (t, new z) of each re-choice
        self.max_iterations, self.max_error = max_iterations, max_error
        self.convergence = 1e-10  # error of a new step's own factors that ends iSAM2's steps
        self.extra_factors = extra_factors
        self.iterations: list[int] = []

    # -- graph pieces -------------------------------------------------------------------------
    def _integrate(self, x: int, x_next: int, rate: int, rate_next: int, dim: int,
                   sigma: float | None = None) -> gtsam.NonlinearFactor:
        noise = isotropic(dim, self.noise.integrator if sigma is None else sigma)
        if self.integrator == "euler":
            return euler_factor(x, x_next, rate, self.dt, dim, noise)
        return trapezoidal_factor(x, x_next, rate, rate_next, self.dt, dim, noise)

    def _step_factors(self, keys: StepKeys, forces: Array | None) -> list[Any]:
        f = self.factors
        if self.independent:
            z, zd, zdd = keys.independent()
            return [f.independent_position(keys.q, z),
                    f.independent_velocity(keys.q, keys.qd, zd),
                    f.independent_dynamics(keys.q, keys.qd, zdd, forces)]
        return [f.position_constraints(keys.q), f.velocity_constraints(keys.q, keys.qd),
                f.forward_dynamics(keys.q, keys.qd, keys.acceleration(), forces)]

    def _transition(self, old: StepKeys, new: StepKeys) -> list[Any]:
        """The factors between two steps. Independent coordinates: z and ż integrated, and
        q tied to the previous q by the same integrator rule at the weak σ of
        ``noise.equality`` (the paper's soft equality q_{k+1} = q_k is wrong by dt·q̇ on
        the true motion: a drag that does not shrink with dt, 3.2 mm of the four-bar
        with the crank angle as z over 5 s at any dt). The tie only keeps the dependent
        coordinates determined where the position factor alone is nearly singular; the
        assembly branch is kept by the initial values (one RK4 step of the core from the
        last estimate, :meth:`_predict`), which start every step on the branch."""
        n, d = self.mechanism.n, self.factors.d
        if self.independent:
            (z, zd, zdd), (z1, zd1, zdd1) = old.independent(), new.independent()
            return [self._integrate(z, z1, zd, zd1, d),
                    self._integrate(zd, zd1, zdd, zdd1, d),
                    self._integrate(old.q, new.q, old.qd, new.qd, n, self.noise.equality)]
        return [self._integrate(old.q, new.q, old.qd, new.qd, n),
                self._integrate(old.qd, new.qd, old.acceleration(), new.acceleration(), n)]

    def _initial_values(self, keys: StepKeys, q: Array, qd: Array, qdd: Array,
                        values: gtsam.Values) -> None:
        values.insert(keys.q, q)
        values.insert(keys.qd, qd)
        if self.independent:
            zi = self.factors.z
            for key, value in zip(keys.independent(), (q[zi], qd[zi], qdd[zi]), strict=True):
                values.insert(key, value)
        else:
            values.insert(keys.acceleration(), qdd)

    def _new_smoother(self) -> Any:
        lag = (self.window - 0.5) * self.dt  # keeps exactly `window` time steps
        if self.smoother_kind == "batch":
            params = gtsam.LevenbergMarquardtParams()
            params.setMaxIterations(self.max_iterations)
            # QR: Cholesky of the marginalized window breaks down (indeterminate system)
            # after ~1.5 s on the four-bar; QR does not
            params.setLinearSolverType("MULTIFRONTAL_QR")
            return gtsam.BatchFixedLagSmoother(lag, params)
        isam = gtsam.ISAM2Params()
        isam.setFactorization("QR")
        # relinearize every variable that moved, at every update: the defaults (skip 10
        # updates, threshold 0.1) keep stale Jacobians and the independent formulation
        # drifts off the constraints within half a second of the four-bar
        isam.setRelinearizeThreshold(1e-9)
        isam.relinearizeSkip = 1
        return gtsam.IncrementalFixedLagSmoother(lag, isam)

    # -- running --------------------------------------------------------------------------------
    def run(self, t_end: float, q0: Array | None = None, qd0: Array | None = None,
            forces: Callable[[float], Array] | None = None,
            progress: Callable[[int, int], None] | None = None,
            covariance: bool = False) -> SimulationResult:
        """Simulate from (q0, q̇0) (default: the file's q0, at rest) to ``t_end``.

        ``forces(t)``: external generalized forces (n) at time t, or None.
        ``covariance``: also the standard deviation of each q_k (``result.sigma``, (N, n)):
        its marginal given every factor up to step k (the window and what was
        marginalized out of it), under the graph's noise models, which the paper's
        defaults set as relative weights: a physical σ needs physical noise models.
        Independent coordinates only (:func:`covariance_refusal`).
        """
        refusal = covariance_refusal(self.coords) if covariance else None
        if refusal is not None:
            raise ValueError(refusal)
        mech = self.mechanism
        steps = step_count(t_end, self.dt)
        if self.switches:  # z as it was before an earlier run chose it again
            self.factors = MechanismFactors(mech, self.noise, self.first_z)
            self.switches = []
        q = mech.solve_position(mech.q0 if q0 is None else q0, minimum_norm=True)
        qd = mech.project_velocity(q, np.zeros(mech.n) if qd0 is None else qd0)
        force = (lambda t: None) if forces is None else forces
        qdd = mech.forward_dynamics(q, qd, force(0.0))
        out = [np.empty((steps + 1, mech.n)) for _ in range(3)]
        out[0][0], out[1][0], out[2][0] = q, qd, qdd
        sigma = np.full((steps + 1, mech.n), np.nan) if covariance else None
        self.iterations = []
        done = 1  # rows of ``out`` (and ``sigma``) that hold the motion
        try:
            for step in self._steps(steps, q, qd, qdd, force, progress, out, sigma):
                done = step + 1
        except FactorGraphError as exc:
            raise FactorGraphStopped(str(exc), SimulationResult(
                mech, np.arange(done) * self.dt, out[0][:done], out[1][:done], out[2][:done],
                self._settings(t_end), sigma=None if sigma is None else sigma[:done])) from None
        return SimulationResult(mech, np.arange(steps + 1) * self.dt, out[0], out[1], out[2],
                                self._settings(t_end), sigma=sigma)

    def _settings(self, t_end: float) -> dict[str, Any]:
        """What the run used, for its result (also the result of a run that stopped)."""
        return {"solver": "factor-graph", "coords": self.coords, "dt": self.dt,
                "t_end": t_end, "window": self.window, "smoother": self.smoother_kind,
                "integrator": self.integrator,
                "mean_iterations": float(np.mean(self.iterations)) if self.iterations
                else 0.0,
                "z_switches": [(t, ",".join(names)) for t, names in self.switches]}

    def _steps(self, steps: int, q: Array, qd: Array, qdd: Array,
               force: Callable[[float], Array | None],
               progress: Callable[[int, int], None] | None, out: list[Array],
               sigma: Array | None) -> Iterator[int]:
        """The run's steps into ``out`` (and ``sigma``), yielding each step once stored."""
        keys = StepKeys.of(0, self.independent)
        smoother, estimate = self._start(keys, q, qd, qdd, force(0.0), 0)
        if sigma is not None:
            sigma[0] = marginal_sigmas(smoother.getFactors(), estimate, [keys.q])[0]
        for step in range(1, steps + 1):
            t = step * self.dt
            old, keys = keys, StepKeys.of(step, self.independent)
            graph, values = gtsam.NonlinearFactorGraph(), gtsam.Values()
            self._initial_values(keys, *self._predict(q, qd, qdd, t - self.dt, force),
                                 values)
            for factor in self._transition(old, keys):
                graph.add(factor)
            if self.extra_factors is not None:
                for factor in self.extra_factors(step, keys):
                    graph.add(factor)
            estimate = self._update(smoother, graph, values, keys,
                                    self._step_factors(keys, force(t)), step)
            q, qd, qdd = self._state(estimate, keys)
            if self.independent:
                conditioning = self._z_conditioning(q)
                if self.choose_z and sigma is None and conditioning < Z_RESELECT:
                    restarted = self._choose_z_again(keys, q, qd, qdd, force(t), step)
                    if restarted is not None:
                        smoother, conditioning = restarted, self._z_conditioning(q)
                self._check_independent(conditioning, t)
            out[0][step], out[1][step], out[2][step] = q, qd, qdd
            if sigma is not None:
                sigma[step] = marginal_sigmas(smoother.getFactors(), estimate, [keys.q])[0]
            if progress is not None and (step % 100 == 0 or step == steps):
                progress(step, steps)
            yield step

    def _predict(self, q: Array, qd: Array, qdd: Array, t: float,
                 force: Callable[[float], Array | None]) -> tuple[Array, Array, Array]:
        """Initial values of the next step: one RK4 step of the core from the last estimate
        (a few µs), so the smoother starts next to the answer; a Taylor step if the
        explicit step fails (near a singular configuration the graph may still pass)."""
        dt = self.dt
        samples = [force(t + h) for h in (0.0, dt / 2, dt)]
        table = None if samples[0] is None else np.array(samples, dtype=float)
        try:
            path = self.mechanism.integrate(q, qd, dt, 1, "rk4", forces=table)
            return path[0][1], path[1][1], path[2][1]
        except MbgenError:
            return q + dt * qd + 0.5 * dt**2 * qdd, qd + dt * qdd, qdd

    def _initial_priors(self, keys: StepKeys, q: Array, qd: Array) -> list[Any]:
        n, noise = self.mechanism.n, self.noise
        if not self.independent:
            return [prior_factor(keys.q, q, isotropic(n, noise.prior)),
                    prior_factor(keys.qd, qd, isotropic(n, noise.prior))]
        zi = self.factors.z
        loose = np.full(n, noise.prior_loose)
        loose[zi] = noise.prior_z
        z, zd, _ = keys.independent()
        return [prior_factor(z, q[zi], isotropic(len(zi), noise.prior)),
                prior_factor(zd, qd[zi], isotropic(len(zi), noise.prior)),
                prior_factor(keys.q, q, gtsam.noiseModel.Diagonal.Sigmas(loose))]

    def _update(self, smoother: Any, graph: gtsam.NonlinearFactorGraph,
                values: gtsam.Values, keys: StepKeys, own: list[Any], step: int,
                ) -> gtsam.Values:
        """Adds the step (its ``own`` factors involve only its own variables: they are the
        convergence check) and re-optimizes the window; the new estimate."""
        stamps = gtsam.FixedLagSmootherKeyTimestampMap()
        t = step * self.dt
        for key in (keys.q, keys.qd, keys.qdd, keys.z, keys.zd, keys.zdd):
            if key is not None:
                stamps.insert((key, t))
        check = gtsam.NonlinearFactorGraph()
        for factor in own:
            graph.add(factor)
            check.add(factor)
        try:
            result = smoother.update(graph, values, stamps)
        except RuntimeError as exc:  # GTSAM's indeterminant system and the like
            raise FactorGraphError(f"factor graph step at t = {t:.6g} s failed: {exc}"
                                   ) from None
        iterations = int(result.getIterations())
        estimate = smoother.calculateEstimate()
        error = check.error(estimate)
        if self.smoother_kind == "incremental":  # iSAM2 takes one Gauss-Newton step a call
            while error > self.convergence and iterations < self.max_iterations:
                smoother.update()
                iterations += 1
                estimate = smoother.calculateEstimate()
                previous, error = error, check.error(estimate)
                if error > previous * (1.0 - 1e-5):
                    break
        self.iterations.append(iterations)
        if not np.isfinite(error) or error > self.max_error:
            raise FactorGraphError(
                f"factor graph step at t = {t:.6g} s did not converge: the error of its "
                f"constraint and dynamics factors is {error:.3g} (allowed "
                f"{self.max_error:g}) after "
                f"{result.getIterations()} iterations")
        return estimate

    def _start(self, keys: StepKeys, q: Array, qd: Array, qdd: Array, forces: Array | None,
               step: int) -> tuple[Any, gtsam.Values]:
        """A new smoother holding step ``step`` alone, started at (q, q̇, q̈) with the tight
        priors of a start; its estimate."""
        smoother = self._new_smoother()
        graph, values = gtsam.NonlinearFactorGraph(), gtsam.Values()
        self._initial_values(keys, q, qd, qdd, values)
        for factor in self._initial_priors(keys, q, qd):
            graph.add(factor)
        return smoother, self._update(smoother, graph, values, keys,
                                      self._step_factors(keys, forces), step)

    def _choose_z_again(self, keys: StepKeys, q: Array, qd: Array, qdd: Array,
                        forces: Array | None, step: int) -> Any:
        """A new smoother with z chosen by full pivoting at q, started at this step from its
        estimate (carried across with the tight priors of a start: the old z, ż, z̈
        variables cannot be tied to the new ones by the integrator factors), or None when
        the pivoting keeps z. Not with ``covariance``: the σ would restart at the
        priors'."""
        chosen = [int(i) for i in np.atleast_1d(self.mechanism.partition(q)[0])]
        if chosen == [int(i) for i in self.factors.z]:
            return None
        self.factors = MechanismFactors(self.mechanism, self.noise, chosen)
        smoother, _ = self._start(keys, q, qd, qdd, forces, step)
        self.switches.append((step * self.dt,
                              [self.mechanism.coordinate_names[i] for i in chosen]))
        return smoother

    def _z_conditioning(self, q: Array) -> float:
        """σ_min/σ_max of Φq without the z columns: how well z determines the rest."""
        jacobian = self.mechanism.phi_q(q)[self.mechanism.active_rows]
        singular = np.linalg.svd(np.delete(jacobian, self.factors.z, axis=1),
                                 compute_uv=False)
        return float(singular[-1] / singular[0])

    def _check_independent(self, conditioning: float, t: float) -> None:
        """Stops where z stops determining q (``conditioning``: :meth:`_z_conditioning`):
        near such a point (a coordinate at its extreme) the position factor loses rank and
        the graph follows the weak tie between steps alone, away from the true motion (tens
        of cm on the four-bar), without any residual showing it."""
        if conditioning < Z_CONDITIONING:
            names = [self.mechanism.coordinate_names[i] for i in self.factors.z]
            raise FactorGraphError(
                f"at t = {t:.6g} s the independent coordinates {names} stop determining "
                f"the others (σ_min/σ_max of Φq without them = {conditioning:.1e}): a "
                f"coordinate that reaches an extreme of its motion cannot stay "
                f"independent; use dependent coordinates, or z that stay valid along the "
                f"motion (z the simulator chooses itself is chosen again in time, except "
                f"with covariance)")

    def _state(self, estimate: gtsam.Values, keys: StepKeys) -> tuple[Array, Array, Array]:
        q, qd = estimate.atVector(keys.q), estimate.atVector(keys.qd)
        if self.independent:
            # q̈ from the dynamics at the estimated state (the graph carries only z̈)
            return q, qd, self.mechanism.forward_dynamics(q, qd)
        return q, qd, estimate.atVector(keys.acceleration())

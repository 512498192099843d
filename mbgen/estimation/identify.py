"""Joint state and parameter identification (Marklund, Servin and Larson): one nonlinear
least-squares problem over the whole state trajectory and the chosen parameters.

Unknowns: (q_k, v_k) at every step k = 0..K of the SPOOK grid and the parameters θ.
Residuals, each divided by its standard deviation (the weights):

- per step, the velocity and position impulses of :mod:`mbgen.estimation.impulses` that
  SPOOK would need to go from state k to k + 1 (``impulse_noise``);
- per reading, sensor model minus reading (the sensors' ``noise`` from the file);
- at k = 0, the constraint violation Φ(q0) and normal velocity Φq v0
  (``constraint_noise``): the paper's initial-state residual;
- per parameter with a prior (a weighed mass, a datasheet value): (θ − mean) / std.

The Jacobian is sparse (banded in the states, a dense border for θ) and exact; the
solver is :func:`~mbgen.numerics.least_squares.levenberg_marquardt`. Standard deviations
come from the linearized sandwich covariance of the fit restricted to θ, the impulses
entering as the fit leaves them and the readings at least at their stated noise
(:func:`parameter_uncertainty`); directions the data cannot see (an exact
null space of the parameters' information) are reported as not identifiable instead of
as huge numbers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from mbgen.estimation.centroidal import CentroidalInertias
from mbgen.estimation.identification_inputs import (
    COORDINATES,
    SCHEMES,
    IdentificationError,
    Recording,
    Settings,
)
from mbgen.estimation.impulses import MidpointImpulses, SpookImpulses
from mbgen.estimation.independent_problem import IndependentProblem
from mbgen.estimation.problem_layout import ProblemLayout
from mbgen.estimation.verdict import (
    FitTest,
    combination,
    fit_tests,
    misfit_advice,
    weakly_determined,
)
from mbgen.model.mechanism import Mechanism
from mbgen.numerics.batched import matrix_vector, transposed_vector
from mbgen.numerics.least_squares import (
    BlockJacobian,
    BorderedMatrix,
    BorderedSystem,
    LeastSquaresResult,
    RowBlocks,
    levenberg_marquardt,
)
from mbgen.runtime.compiled import CompiledMechanism

Array = np.ndarray


@dataclass
class Identification:
    names: list[str]
    values: Array  # identified θ
    std: Array  # standard deviations (inf: not identifiable): noise and step_change
    identifiable: Array  # bool per parameter
    correlation: Array  # (P, P) linearized correlations (NaN where not identifiable)
    undetermined: list[str]  # combinations the data cannot see, e.g. "0.71 I1 - 0.70 a1"
    problems: list[str]  # what makes the values impossible for a real mechanism
    initial: Array
    t: Array  # (K + 1,) the state grid
    q: Array  # (K + 1, n)
    v: Array  # (K + 1, n)
    fitted: Array  # (N, the readings' columns): the model's readings at the solution
    cost: float
    iterations: int
    converged: bool
    seconds: float
    message: str
    history: list[float] = field(default_factory=list)
    # how far each value moved when the step halved (Settings.step_check; NaN: not checked)
    step_change: Array = field(default_factory=lambda: np.full(0, np.nan))
    coordinates: str = "dependent"  # the states' coordinates the problem was solved in
    fit: list[FitTest] = field(default_factory=list)  # the residuals against their noise

    def as_dict(self) -> dict[str, float]:
        return dict(zip(self.names, self.values.tolist(), strict=True))

    @property
    def misfit(self) -> list[FitTest]:
        """The residual groups inconsistent with their stated noise."""
        return [test for test in self.fit if not test.passed]

    @property
    def misfit_advice(self) -> str:
        """Why the fit is not trusted and what to try ("" when it is)."""
        return misfit_advice(self.misfit, self.coordinates) if self.misfit else ""

    @property
    def trusted(self) -> bool:
        """Converged, every parameter determined by the data, the residuals consistent
        with their stated noise, and the values physically possible."""
        return (self.converged and bool(self.identifiable.all()) and not self.undetermined
                and not self.misfit and not self.problems)


class IdentificationProblem(ProblemLayout):
    """Residuals and sparse Jacobian of one identification problem."""

    def __init__(self, mech: CompiledMechanism, recording: Recording, names: Sequence[str],
                 settings: Settings, priors: Mapping[str, tuple[float, float]]) -> None:
        super().__init__(mech, recording, names, settings, priors)
        if settings.scheme not in SCHEMES:
            raise IdentificationError(f"unknown scheme {settings.scheme!r} (one of: "
                                      f"{', '.join(SCHEMES)})")
        if settings.friction not in ("smooth", "box"):
            raise IdentificationError(f"unknown friction model {settings.friction!r} (one "
                                      "of: smooth, box)")
        self.impulses: MidpointImpulses | SpookImpulses
        if settings.scheme == "midpoint":
            self.impulses = MidpointImpulses(mech, self.h, settings.compliance,
                                             settings.damping, settings.friction)
        else:
            self.impulses = SpookImpulses(mech, self.h, settings.compliance, settings.damping)
        self.commands = self.commands_between(recording, self.impulses.phase)
        self.inertia = float(np.trace(mech.mass_matrix(mech.q0, self.base)))
        self.state_size = 2 * mech.n * (self.steps + 1)
        self.size = self.state_size + len(names)

    # -- layout -----------------------------------------------------------------------------
    def split(self, x: Array) -> tuple[Array, Array, Array]:
        n = self.mech.n
        states = x[:self.state_size].reshape(self.steps + 1, 2 * n)
        return states[:, :n], states[:, n:], self.parameters(x)

    def pack(self, q: Array, v: Array, theta: Array) -> Array:
        return np.concatenate([np.hstack([q, v]).ravel(), theta])

    def inertia_scale(self, p: Array) -> tuple[Array, Array]:
        """The model's inertia relative to the file's, tr M(q0; θ) / tr M(q0; θ_file), and
        its gradient (selected parameters,). The impulse noise is stated at the file's
        parameters and scales with this: an impulse residual in absolute units would be
        lowered by shrinking every inertia, friction and gain together (a direction the
        data cannot see), a pull towards a smaller model that grows with the dynamics'
        weight (the least-squares stand-in for the likelihood's log-determinant)."""
        q0 = self.mech.q0
        scale = np.trace(self.mech.mass_matrix(q0, p)) / self.inertia
        gradient = np.trace(self.mech.mass_p(q0, p)) / self.inertia
        return scale, gradient[self.selected]

    # -- residuals -----------------------------------------------------------------------
    def __call__(self, x: Array, jacobian: bool) -> tuple[Array, BlockJacobian | None]:
        mech, s = self.mech, self.settings
        q, v, p = self.split(x)
        n, steps, rows = mech.n, self.steps, self.impulses.rows
        # white process noise: a substep's impulses are 1/√substeps of a sample period's
        scale, scale_p = self.inertia_scale(p)
        if not scale > 0.0:  # a trial point without inertia: refused
            return np.full(self.size, np.nan), None
        w_dyn = np.sqrt(s.substeps) / (s.impulse_noise * scale)
        w_con = 1.0 / s.constraint_noise
        out = self.impulses.evaluate(q, v, p, self.commands, jacobian)
        model, hq, hv, hp = self.readings(q, v, p, jacobian)
        w_obs = self.sensor_weight[self.obs_sensor]
        obs = (model - self.obs_value) * w_obs
        jac0 = mech.phi_q(q[0], p)[rows]
        initial = np.concatenate([mech.phi(q[0], p)[rows], jac0 @ v[0]]) * w_con
        theta = x[self.state_size:]
        prior = (theta[self.prior_index] - self.prior_mean) * self.prior_weight
        impulses = np.hstack([out.ru, out.rq])  # (steps, rows)
        residual = np.concatenate([impulses.ravel() * w_dyn, obs, initial, prior])
        if not jacobian:
            return residual, None

        sel = self.selected
        zero = np.zeros((steps, n, n))
        ru_q1 = zero if out.ru_q1 is None else out.ru_q1
        rq_v0 = zero if out.rq_v0 is None else out.rq_v0
        # per step: rows (r_u, r_q), columns (q_k, v_k, q_k+1, v_k+1)
        dynamics = np.concatenate([
            np.concatenate([out.ru_q0, out.ru_v0, ru_q1, out.ru_v1], axis=2),
            np.concatenate([out.rq_q0, rq_v0, out.rq_q1, out.rq_v1], axis=2)], axis=1)
        assert out.ru_p is not None and out.rq_p is not None  # Jacobians were asked for
        dynamics_p = (np.concatenate([out.ru_p[:, :, sel], out.rq_p[:, :, sel]], axis=1)
                      - impulses[:, :, None] * (scale_p / scale))  # w_dyn's own derivative
        assert hq is not None and hv is not None and hp is not None  # asked for
        r0 = len(rows)
        init = np.zeros((1, 2 * r0, 2 * n))
        init[0, :r0, :n] = jac0
        init[0, r0:, :n] = mech.dense("phiq_v_q", p, q=q[0], v=v[0])[rows]
        init[0, r0:, n:] = jac0
        init_p = np.concatenate([mech.phi_p(q[0], p)[rows][:, sel],
                                 mech.dense("phiq_v_p", p, q=q[0], v=v[0])[rows][:, sel]])
        count = len(self.prior_index)
        priors = np.zeros((count, 1, len(sel)))
        priors[np.arange(count), 0, self.prior_index] = self.prior_weight
        groups = [  # impulses (IMPULSES), readings, initial constraints, priors
            RowBlocks(2 * n * np.arange(steps), dynamics * w_dyn, dynamics_p * w_dyn),
            RowBlocks(2 * n * self.obs_state, (np.hstack([hq, hv]) * w_obs[:, None])[:, None],
                      (hp[:, sel] * w_obs[:, None])[:, None]),
            RowBlocks(np.zeros(1, dtype=int), init * w_con, init_p[None] * w_con),
            RowBlocks(np.zeros(count, dtype=int), np.zeros((count, 1, 0)), priors),
        ]
        return residual, BlockJacobian(groups, self.state_size)

    def correct(self, x: Array, trial: Array) -> Array:
        """Second-order correction of a trial point. A step along the linearized
        constraints leaves the curved constraint manifold at second order, which the
        compliance ε turns into a large force residual, so rotating a body (a gravity tilt,
        an encoder offset) would take many tiny steps. Each state's positions and then
        velocities are moved, least norm, until Φ and Φq v take the values the linear model
        predicted for the step."""
        mech, rows = self.mech, self.impulses.rows
        q, v, p = self.split(x)
        q1, v1, p1 = self.split(trial)
        dq, dp = q1 - q, p1 - p
        jac = mech.phi_q(q, p)[:, rows]
        phi_target = (mech.phi(q, p)[:, rows] + matrix_vector(jac, dq)
                      + mech.phi_p(q, p)[:, rows] @ dp)
        rate_target = (matrix_vector(jac, v1)
                       + matrix_vector(mech.dense("phiq_v_q", p, q=q, v=v)[:, rows], dq)
                       + mech.dense("phiq_v_p", p, q=q, v=v)[:, rows] @ dp)
        for _ in range(2):
            jac1 = mech.phi_q(q1, p1)[:, rows]
            q1 = q1 - _least_norm(jac1, mech.phi(q1, p1)[:, rows] - phi_target)
        jac1 = mech.phi_q(q1, p1)[:, rows]
        v1 = v1 - _least_norm(jac1, matrix_vector(jac1, v1) - rate_target)
        return self.pack(q1, v1, trial[self.state_size:])


Problem = IdentificationProblem | IndependentProblem


def make_problem(mech: CompiledMechanism, recording: Recording, names: Sequence[str],
                 settings: Settings, priors: Mapping[str, tuple[float, float]]) -> Problem:
    """The problem in the coordinates ``settings.coordinates`` names (its ``settings``
    say which: ``"auto"`` is resolved to independent coordinates where the file declares
    them and the problem allows them, else dependent)."""
    if settings.coordinates not in COORDINATES:
        raise IdentificationError(f"unknown coordinates {settings.coordinates!r} (one of: "
                                  f"{', '.join(COORDINATES)})")
    if settings.coordinates == "auto":
        if mech.meta.get("independent") and settings.scheme == "midpoint" \
                and settings.friction == "smooth":
            try:
                return IndependentProblem(mech, recording, names,
                                          replace(settings, coordinates="independent"),
                                          priors)
            except IdentificationError:  # a length identified, redundant constraints
                pass
        settings = replace(settings, coordinates="dependent")
    if settings.coordinates == "dependent":
        return IdentificationProblem(mech, recording, names, settings, priors)
    if settings.scheme != "midpoint" or settings.friction != "smooth":
        raise IdentificationError("identification in independent coordinates reads the "
                                  "midpoint scheme with smooth friction (got scheme "
                                  f"{settings.scheme}, friction {settings.friction})")
    return IndependentProblem(mech, recording, names, settings, priors)


def _least_norm(jac: Array, gap: Array) -> Array:
    """Per state k, the least-norm δ with J_k δ = gap_k: J (K, r, n), gap (K, r) → (K, n)."""
    gram = jac @ jac.transpose(0, 2, 1)
    return transposed_vector(jac, np.linalg.solve(gram, gap[:, :, None])[:, :, 0])


def _initial_states(problem: Problem, recording: Recording,
                    ) -> tuple[Array, Array]:
    """States to start from: the encoders' readings of the independent coordinates when
    they cover them, each with two readings at least (positions solved along the path,
    velocities by differences), else a SPOOK run of the initial guess."""
    mech = problem.mech
    encoders = {s["target"]: mech.sensor_labels.index(s["name"])
                for s in mech.meta.get("sensors", []) if s["kind"] == "encoder"}
    z_names = mech.independent_coordinates()
    grid = problem.t
    p = problem.base
    read = ~np.isnan(recording.readings)
    if all(name in encoders and read[:, encoders[name]].sum() >= 2 for name in z_names):
        columns = []
        offsets = mech.sensors(mech.q0, np.zeros(mech.n), p)
        for name in z_names:
            k = encoders[name]
            known = read[:, k]
            offset = offsets[k] - mech.q0[mech.coordinate_index(name)]
            columns.append(np.interp(grid, recording.t[known],
                                     recording.readings[known, k]) - offset)
        z = np.column_stack(columns)
        start = mech.q0.copy()
        for name, value in zip(z_names, z[0], strict=True):
            start[mech.coordinate_index(name)] = value
        q = mech.solve_position_path(mech.solve_position(start, z=z_names), z, z_names,
                                     params=p)
        v = np.gradient(q, problem.h, axis=0)
        return q, mech.project_velocity(q, v, p)
    forces = None
    if problem.commands is not None:
        forces = np.zeros((2 * problem.steps + 1, mech.n))
        forces[0:-1:2] = problem.impulses.input_forces(problem.commands, p)
    run = mech.integrate_spook(mech.q0, np.zeros(mech.n), problem.h, problem.steps,
                               compliance=problem.settings.compliance, forces=forces,
                               accelerations=False)
    return run.q, run.qd


def identify(mech: CompiledMechanism, recording: Recording, params: Sequence[str],
             initial: Mapping[str, float] | None = None,
             bounds: Mapping[str, tuple[float, float]] | None = None,
             priors: Mapping[str, tuple[float, float]] | None = None,
             settings: Settings | None = None,
             progress: Callable[[int, float], None] | None = None,
             model: Mechanism | None = None) -> Identification:
    """Identify ``params`` (names of the mechanism's parameters) from ``recording``.

    ``initial``: starting values (default: the mechanism's current ones); ``bounds``:
    (low, high) per name (default unbounded); ``priors``: (mean, standard deviation) per
    name, for what is known independently (weighed masses: encoder data alone cannot fix
    the overall scale of inertia, friction and motor gain). ``progress(iteration, cost)``.
    ``model``: the mechanism's file as read (:func:`mbgen.model.load_mechanism`), to check
    each body's mass and inertia at the identified values as the loader will, to keep
    a parameter that is a mass, an inertia, a spring's stiffness or damping or a friction
    coefficient on its own at or above 0, and an identified I0 at or above m|cog|² (the
    solver's unknown is then the inertia about the centre of mass,
    :mod:`mbgen.estimation.centroidal`), unless ``bounds`` says otherwise.
    With ``settings.step_check``, the values are those of a second solve at half the step
    and each σ is hypot(σ of the noise, how far the value moved).
    """
    settings = settings or Settings()
    names = list(params)
    guess, lower, upper = _starting_values(
        mech, names, initial, bounds, priors,
        model.nonnegative_parameters() if model is not None else [])
    readings = _checked_readings(mech, recording)
    problem = make_problem(mech, recording, names, settings, priors or {})
    problem.base[problem.selected] = guess
    start = time.perf_counter()
    history: list[float] = []

    def record(iteration: int, cost: float) -> None:
        history.append(cost)
        if progress is not None:
            progress(iteration, cost)

    centroidal = None
    if model is not None:
        centroidal = CentroidalInertias(model, names, list(mech.parameters), bounds or {})
        _check_centroidal_start(centroidal, guess, problem.base)
    result = _fit(problem, recording, guess, lower, upper, record, centroidal or None)
    step_change = np.full(len(names), np.nan)
    if settings.step_check and result.converged:
        coarse = result.x[problem.state_size:]
        problem, result = _at_half_the_step(problem, recording, names, priors or {}, result,
                                            lower, upper, record, centroidal or None)
        step_change = np.abs(result.x[problem.state_size:] - coarse)
    assert result.normal is not None  # asked for: final_normal defaults to True
    residuals, jacobian = problem(result.x, True)
    assert jacobian is not None  # asked for
    uncertainty = parameter_uncertainty(result.normal, jacobian, residuals, names)
    std = np.hypot(uncertainty.std, np.nan_to_num(step_change))
    values = result.x[problem.state_size:]
    undetermined = uncertainty.undetermined + weakly_determined(
        names, values, guess, std, uncertainty.correlation)
    groups = jacobian.split(residuals)
    fit = fit_tests([*mech.sensor_labels, *mech.accelerometer_labels], problem.obs_sensor,
                    groups[READINGS].ravel(), groups[IMPULSES])
    seconds = time.perf_counter() - start
    q, v, p = problem.split(result.x)
    return Identification(names, values, std, uncertainty.identifiable,
                          uncertainty.correlation, undetermined,
                          physical_problems(mech, p, model), guess, problem.t, q, v,
                          problem.fitted(result.x, readings.shape), result.cost, len(history),
                          result.converged, seconds, result.message, history, step_change,
                          problem.settings.coordinates, fit)


def _at_half_the_step(problem: Problem, recording: Recording, names: list[str],
                      priors: Mapping[str, tuple[float, float]], result: LeastSquaresResult,
                      lower: Array, upper: Array, record: Callable[[int, float], None],
                      centroidal: CentroidalInertias | None,
                      ) -> tuple[Problem, LeastSquaresResult]:
    """The problem again with twice the substeps, solved from ``result`` (its states at
    the new midpoints by cubic Hermite interpolation). Why: the σ of the noise do not cover
    what the method's step does to the values (the midpoint rule on data of a continuous
    model: 7 σ at one substep, tests/test_identification.py); how far they move when it
    halves measures it. Not only the step's truncation error moves them (the impulses'
    weights change with it too), so the whole change joins the σ, not a Richardson
    fraction of it."""
    finer = make_problem(problem.mech, recording, names,
                         replace(problem.settings, substeps=2 * problem.settings.substeps),
                         priors)
    finer.base = problem.base.copy()
    q, v, _ = problem.split(result.x)
    fine = _fit(finer, recording, result.x[problem.state_size:], lower, upper, record,
                centroidal, refined_states(q, v, problem.h))
    if not fine.converged:
        fine = replace(fine, message=f"at half the step: {fine.message}")
    return finer, fine


def refined_states(q: Array, v: Array, h: float) -> tuple[Array, Array]:
    """States (2K + 1, n) at every step of h and every midpoint from those (K + 1, n) at
    the steps: the cubic Hermite curve through (q, v) and its derivative."""
    middle_q = 0.5 * (q[:-1] + q[1:]) + h / 8.0 * (v[:-1] - v[1:])
    middle_v = 1.5 * (q[1:] - q[:-1]) / h - 0.25 * (v[:-1] + v[1:])
    out_q = np.empty((2 * len(q) - 1, q.shape[1]))
    out_v = np.empty_like(out_q)
    out_q[0::2], out_q[1::2] = q, middle_q
    out_v[0::2], out_v[1::2] = v, middle_v
    return out_q, out_v


def _starting_values(mech: CompiledMechanism, names: list[str],
                     initial: Mapping[str, float] | None,
                     bounds: Mapping[str, tuple[float, float]] | None,
                     priors: Mapping[str, tuple[float, float]] | None,
                     nonnegative: Sequence[str] = (),
                     ) -> tuple[Array, Array, Array]:
    """The checked request: (initial values, lower bounds, upper bounds) of ``names``;
    the ``nonnegative`` ones bounded below by 0 where no bounds are given."""
    known = list(mech.parameters)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise IdentificationError(f"unknown parameter(s) {', '.join(unknown)} (the mechanism "
                                  f"has: {', '.join(known)})")
    if not names or len(set(names)) != len(names):
        raise IdentificationError("give each parameter to identify once, at least one")
    for what, given in (("an initial value", initial), ("a prior", priors), ("bounds", bounds)):
        stray = [name for name in (given or {}) if name not in names]
        if stray:
            raise IdentificationError(f"{what} for {', '.join(map(repr, stray))}, which is not "
                                      f"identified (--params: {', '.join(names)})")
    guess = np.array([float((initial or {}).get(name, mech.parameters[name]))
                      for name in names])
    for name, value in zip(names, guess, strict=True):
        if not np.isfinite(value):
            raise IdentificationError(f"the initial value of {name} must be finite, got "
                                      f"{value:g}")
    for name, (low, high) in (bounds or {}).items():
        if np.isnan(low) or np.isnan(high):
            raise IdentificationError(f"the bounds of {name} must be numbers (±inf for "
                                      f"none), got [{low:g}, {high:g}]")
    lower = np.full(len(names), -np.inf)
    upper = np.full(len(names), np.inf)
    for i, name in enumerate(names):
        if name in nonnegative and name not in (bounds or {}):
            lower[i] = 0.0
            if guess[i] < 0:
                raise IdentificationError(f"the initial value {guess[i]:g} of {name} is "
                                          "negative: it is a mass, inertia, spring or "
                                          "friction coefficient (give --bounds to allow it)")
    for name, (low, high) in (bounds or {}).items():
        i = names.index(name)
        lower[i], upper[i] = low, high
        if not low <= guess[i] <= high:
            raise IdentificationError(f"the bounds [{low:g}, {high:g}] of {name} exclude its "
                                      f"initial value {guess[i]:g}")
    for name, (prior_mean, prior_std) in (priors or {}).items():
        if not (np.isfinite(prior_mean) and 0 < prior_std < np.inf):
            raise IdentificationError(f"the prior of {name} needs a finite mean and a "
                                      f"positive, finite standard deviation, got "
                                      f"{prior_mean:g}:{prior_std:g}")
    return guess, lower, upper


def _checked_readings(mech: CompiledMechanism, recording: Recording) -> Array:
    """The readings (N, sensor outputs [+ accelerometer outputs]), checked against the
    mechanism with the commands."""
    readings = np.asarray(recording.readings, dtype=float)
    sensors, accelerometers = mech.sensor_labels, mech.accelerometer_labels
    if readings.ndim != 2 or readings.shape[1] not in (
            len(sensors), len(sensors) + len(accelerometers)):
        also = (f", then optionally one per accelerometer output "
                f"({', '.join(accelerometers)})" if accelerometers else "")
        raise IdentificationError(f"readings must have one column per sensor output "
                                  f"({', '.join(sensors)}){also}")
    if recording.commands is not None and recording.commands.shape[1] != len(
            mech.meta.get("actuators", [])):
        raise IdentificationError("commands must have one column per actuator")
    return readings


def _fit(problem: Problem, recording: Recording, guess: Array, lower: Array,
         upper: Array, record: Callable[[int, float], None],
         centroidal: CentroidalInertias | None,
         states: tuple[Array, Array] | None = None) -> LeastSquaresResult:
    """The states first, with the parameters held (the data lie on the rigid constraint
    manifold, SPOOK's states a little off it: a stiff direction best settled alone), then
    states and parameters together (in ``centroidal``'s unknowns when given; the result
    in θ)."""
    settings = problem.settings
    free = np.full(problem.state_size, np.inf)
    q, v = states if states is not None else _initial_states(problem, recording)
    warm = levenberg_marquardt(problem, problem.pack(q, v, guess), problem.state_size,
                               np.concatenate([-free, guess]), np.concatenate([free, guess]),
                               settings.warm_iterations, final_normal=False)
    bounds = np.concatenate([-free, lower]), np.concatenate([free, upper])

    def solve(solver: Problem | _InCentroidalInertias, start: Array,
              low: Array, high: Array) -> LeastSquaresResult:
        return levenberg_marquardt(solver, start, problem.state_size, low, high,
                                   settings.max_iterations, callback=record,
                                   correct=solver.correct, scaling="levenberg", atol=1e-5,
                                   border_rtol=1e-4)

    if centroidal is None:
        return solve(problem, warm.x, *bounds)
    in_phi = _InCentroidalInertias(problem, centroidal)
    low = bounds[0].copy()
    low[problem.state_size + centroidal.rows] = 0.0
    return in_phi.in_theta(solve(in_phi, in_phi.phi_x(warm.x), low, bounds[1]))


class _InCentroidalInertias:
    """The identification problem in x = (states, φ): φ holds the inertia about the centre
    of mass in place of each I0 of :class:`CentroidalInertias`; residuals, Jacobian and
    the second-order correction are those of θ (the Jacobian's border times dθ/dφ)."""

    def __init__(self, problem: Problem, centroidal: CentroidalInertias
                 ) -> None:
        self.problem, self.centroidal = problem, centroidal
        self.border = problem.state_size

    def theta_x(self, x: Array) -> Array:
        out = x.copy()
        out[self.border:] = self.centroidal.to_theta(x[self.border:], self.problem.parameters(x))
        return out

    def phi_x(self, x: Array) -> Array:
        out = x.copy()
        out[self.border:] = self.centroidal.to_phi(x[self.border:], self.problem.parameters(x))
        return out

    def __call__(self, x: Array, jacobian: bool) -> tuple[Array, BlockJacobian | None]:
        theta_x = self.theta_x(x)
        r, jac = self.problem(theta_x, jacobian)
        if jac is None:
            return r, None
        slope = self.centroidal.jacobian(self.problem.parameters(theta_x))
        return r, BlockJacobian([RowBlocks(g.start, g.band, g.border @ slope)
                                 for g in jac.groups], jac.banded)

    def correct(self, x: Array, trial: Array) -> Array:
        return self.phi_x(self.problem.correct(self.theta_x(x), self.theta_x(trial)))

    def in_theta(self, result: LeastSquaresResult) -> LeastSquaresResult:
        """``result`` of the solve in φ, in θ: x mapped back, and JᵀJ with the border
        columns through (dθ/dφ)⁻¹ (J_φ = J_θ dθ/dφ)."""
        x = self.theta_x(result.x)
        normal = result.normal
        if normal is not None:
            inverse = np.linalg.inv(self.centroidal.jacobian(self.problem.parameters(x)))
            normal = BorderedMatrix(normal.bands, normal.border @ inverse,
                                    inverse.T @ normal.corner @ inverse)
        return replace(result, x=x, normal=normal)


def _check_centroidal_start(centroidal: CentroidalInertias, guess: Array, p: Array) -> None:
    """Refuses initial values that make a body impossible (I0 < m|cog|²): the solve keeps
    the inertia about the centre of mass where it starts, at or above 0."""
    offsets = centroidal.offsets(p)
    for row, offset in zip(centroidal.rows, offsets, strict=True):
        if guess[row] < offset * (1 - 1e-9):
            name = centroidal.names[row]
            raise IdentificationError(
                f"the initial value {guess[row]:g} of {name} is smaller than m|cog|^2 = "
                f"{offset:g} at the initial values: impossible for a rigid body ({name} is "
                "about the body's first point; give --bounds to allow it)")


@dataclass(frozen=True)
class Uncertainty:
    """The parameters' linearized standard deviations (P,) (inf where not identifiable),
    their correlations (P, P) (NaN there), and the combinations the data cannot see."""

    std: Array
    identifiable: Array
    correlation: Array
    undetermined: list[str]


#: Relative shifts tried on the states' information when rounding leaves it not
#: positive definite (a very stiff compliance): far below what changes a σ's 3 digits.
INFORMATION_SHIFTS = (0.0, 1e-12, 1e-10, 1e-8)
#: The residual groups of both problems' __call__: impulses, readings, initial
#: constraints, priors; the first is read off the fit (parameter_uncertainty)
IMPULSES, READINGS = 0, 1


def parameter_uncertainty(normal: BorderedMatrix, jacobian: BlockJacobian, residuals: Array,
                          names: Sequence[str]) -> Uncertainty:
    """Linearized standard deviations and correlations of the parameters: the sandwich
    covariance H⁻¹ M H⁻¹ of the fit (H = JᵀJ = ``normal`` over states and parameters)
    restricted to the parameters, the residual groups of :class:`IdentificationProblem`
    entering M as follows:

    - the impulses as the fit leaves them, step by step (Σ_k u_k u_kᵀ, u_k the step's
      residuals through J_k H⁻¹). The impulse noise is the method's choice, not a property
      of the data: stated at 2e-5 where synthetic data need far less, it made every σ 2-4
      times what the estimates scatter (benchmarks/identification_sigma.py);
    - the readings and the initial constraints by their stated noise, scaled up by their
      mean square when the fit is worse than it, never down;
    - the priors as stated (knowledge from outside the data).

    With every group at its stated noise, M = H and this is the inverse of the parameters'
    information after eliminating the states (the Schur complement S of H). Parameters
    that share a null direction of S are not identifiable (std = inf), and each null
    direction is named as a combination of the parameters (in units of S's diagonal)."""
    system = _information_system(normal)
    scale = np.sqrt(np.maximum(np.diag(system.schur), 1e-300))
    values, vectors = np.linalg.eigh(system.schur / np.outer(scale, scale))
    null = values < 1e-10 * max(values.max(), 1e-300)
    identifiable = np.all(np.abs(vectors[:, null]) < 1e-3, axis=1)
    inverse = (vectors[:, ~null] / values[~null]) @ vectors[:, ~null].T / np.outer(scale, scale)
    columns = system.border_columns(inverse)
    _, readings, initial, _ = jacobian.mean_squares(residuals)
    covariance = (jacobian.clustered_gram(columns, residuals, IMPULSES)
                  + jacobian.weighted_gram(columns, [0.0, max(1.0, readings),
                                                     max(1.0, initial), 1.0]))
    std = np.sqrt(np.maximum(np.diag(covariance), 0.0))
    root = np.sqrt(np.maximum(np.diag(covariance), 1e-300))
    correlation = covariance / np.outer(root, root)
    correlation[~identifiable, :] = np.nan
    correlation[:, ~identifiable] = np.nan
    undetermined = [combination(vector, names) for vector in vectors[:, null].T]
    return Uncertainty(np.where(identifiable, std, np.inf), identifiable, correlation,
                       undetermined)


def _information_system(normal: BorderedMatrix) -> BorderedSystem:
    """``normal`` factored for its Schur complement of the states; when rounding leaves
    the states' block not positive definite (a very stiff compliance), with the smallest
    shift of INFORMATION_SHIFTS that factors."""
    diagonal = normal.diagonal()[:normal.banded]
    for shift in INFORMATION_SHIFTS:
        try:
            return normal.factor(shift * np.concatenate([diagonal, np.zeros(
                len(normal.corner))]) if shift else None, factor_border=False)
        except np.linalg.LinAlgError:
            continue
    raise IdentificationError("the states' information is not positive definite even "
                              "with a shift of 1e-8 of its diagonal: the compliance is "
                              "too stiff for double precision (raise --compliance)")


def physical_problems(mech: CompiledMechanism, p: Array, model: Mechanism | None = None,
                      ) -> list[str]:
    """What makes the parameter vector p (all of the mechanism's) impossible for a real
    mechanism: a body with a negative mass or a negative inertia about its centre of mass
    (I0 < m|cog|², from ``model``'s bodies; without it, only a mass matrix that is not
    positive definite on the coordinates that carry inertia, which misses a body on a
    fixed pivot and one whose neighbours' inertia hides it),
    damping that feeds energy in (a negative damper or viscous friction: −∂Q/∂q̇ at rest
    not positive semi-definite), a negative dry friction."""
    problems = []
    q0 = mech.q0
    if model is not None:
        problems += model.body_problems(dict(zip(mech.parameters, p.tolist(), strict=True)))
    elif not _positive_definite_where_carried(mech.mass_matrix(q0, p)):
        problems.append("the mass matrix is not positive definite: a negative mass, or a "
                        "body whose inertia about its centre of mass is negative "
                        "(I0 < m|cog|^2)")
    # fast enough that every smoothed dry friction is flat (its slope c/s at rest would
    # hide a negative viscous coefficient; a negative c itself is caught below)
    friction = mech.meta.get("friction", [])
    fast = np.full(mech.n, 100.0 * max([float(f["stiction"]) for f in friction] + [1.0]))
    damping = -mech.generalized_forces_qd(q0, fast, p)
    symmetric = 0.5 * (damping + damping.T)
    if symmetric.size and np.linalg.eigvalsh(symmetric).min() < -1e-12 * max(
            float(np.abs(symmetric).max()), 1e-300):
        problems.append("the damping feeds energy in: a negative damper or viscous "
                        "friction coefficient")
    bounds = mech.coefficients(p)[:len(friction)]
    problems += [f"negative dry friction on {f['coordinate']} ({bound:.3g})"
                 for f, bound in zip(friction, bounds, strict=True) if bound < 0]
    return problems


def _positive_definite_where_carried(mass: Array) -> bool:
    """M (n, n) positive definite on the coordinates that carry inertia (a nonzero
    diagonal); coordinates without inertia (relative angles) are left out."""
    carried = np.flatnonzero(np.abs(np.diag(mass)) > 0)
    return not carried.size or bool(
        np.linalg.eigvalsh(mass[np.ix_(carried, carried)]).min() > 0)

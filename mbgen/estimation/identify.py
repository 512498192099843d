"""Joint state and parameter identification (Marklund, Servin and Larson): one nonlinear
least-squares problem over the whole state trajectory and the chosen parameters, in
dependent coordinates (:mod:`mbgen.estimation.dependent_problem`) or independent ones
(:mod:`mbgen.estimation.independent_problem`).

This module runs it: the request checked, the states to start from, the fit (states
first, then states and parameters; with inertias about the centres of mass where the
model is known), the solve again at half the step, then the verdict. The solver is
:func:`~mbgen.numerics.least_squares.levenberg_marquardt`; the standard deviations come
from :mod:`mbgen.estimation.uncertainty`, the residuals' consistency with their noise
from :mod:`mbgen.estimation.verdict` and the values' plausibility from
:mod:`mbgen.estimation.plausibility`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from mbgen.estimation.centroidal import CentroidalInertias
from mbgen.estimation.dependent_problem import DependentProblem
from mbgen.estimation.identification_inputs import (
    COORDINATES,
    IdentificationError,
    Recording,
    Settings,
)
from mbgen.estimation.independent_problem import IndependentProblem
from mbgen.estimation.plausibility import physical_problems
from mbgen.estimation.problem_layout import ResidualGroups
from mbgen.estimation.uncertainty import parameter_uncertainty
from mbgen.estimation.verdict import (
    FitTest,
    fit_tests,
    misfit_advice,
    weakly_determined,
)
from mbgen.model.mechanism import Mechanism
from mbgen.numerics.least_squares import (
    BlockJacobian,
    BorderedMatrix,
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


Problem = DependentProblem | IndependentProblem


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
        return DependentProblem(mech, recording, names, settings, priors)
    if settings.scheme != "midpoint" or settings.friction != "smooth":
        raise IdentificationError("identification in independent coordinates reads the "
                                  "midpoint scheme with smooth friction (got scheme "
                                  f"{settings.scheme}, friction {settings.friction})")
    return IndependentProblem(mech, recording, names, settings, priors)


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
    groups = ResidualGroups(*jacobian.split(residuals))
    fit = fit_tests([*mech.sensor_labels, *mech.accelerometer_labels], problem.obs_sensor,
                    groups.readings.ravel(), groups.impulses)
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
    start = problem.pack(q, v, guess)
    if not _solvable_at(problem, start):
        names = [list(problem.mech.parameters)[i] for i in problem.selected]
        values = ", ".join(f"{name}={value:g}" for name, value in zip(names, guess, strict=True))
        raise IdentificationError(f"at the initial values ({values}) the model's residuals "
                                  "are not finite or too large to square (a force or an "
                                  "inertia out of range): "
                                  "start nearer the expected values (--initial)")
    warm = levenberg_marquardt(problem, start, problem.state_size,
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


#: The largest residual or Jacobian entry the solve can square: JᵀJ of larger ones
#: overflows, and no step is found from an infinite normal matrix.
LARGEST_ENTRY = 1e150


def _solvable_at(problem: Problem, x: Array) -> bool:
    """Whether the residuals and the Jacobian at ``x`` are finite and small enough for
    their squares to be (a start with b1 = 1e300 overflowed JᵀJ)."""
    residuals, jacobian = problem(x, True)
    parts = [residuals] + ([] if jacobian is None else [
        block for group in jacobian.groups for block in (group.band, group.border)])
    return jacobian is not None and all(
        bool(np.all(np.abs(part) <= LARGEST_ENTRY)) for part in parts)


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



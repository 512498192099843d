"""Identification: SPOOK inverse-dynamics residuals, their Jacobians and the step's
derivatives, checked entry by entry against finite differences."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
from conftest import SHIPPED_DIR, entrywise_error, numerical_jacobian
from scipy.linalg import null_space

from mbgen.cli.conventions import EXIT_BAD_INPUT, EXIT_UNTRUSTED
from mbgen.errors import MbgenError
from mbgen.estimation.identify import Settings
from mbgen.estimation.impulses import (
    ImpulseModel,
    MidpointImpulses,
    SpookImpulses,
    step_sensitivity,
)
from mbgen.runtime.compiled import CompiledMechanism

PENDULUM = SHIPPED_DIR / "actuated-double-pendulum.yaml"
H = 0.01


@pytest.fixture(scope="module")
def mech(compiled) -> CompiledMechanism:
    return compiled(PENDULUM)


def states(mech: CompiledMechanism, steps: int, seed: int = 1) -> tuple[np.ndarray, ...]:
    """A SPOOK-like trajectory, perturbed: no residual is zero and every joint slips."""
    rng = np.random.default_rng(seed)
    run = mech.integrate_spook(mech.q0, np.zeros(mech.n), H, steps, compliance=1e-8)
    q = run.q + 1e-3 * rng.normal(size=run.q.shape)
    v = run.qd + 0.3 + 0.05 * rng.normal(size=run.qd.shape)
    commands = rng.normal(size=(steps, 1))
    return q, v, commands


def stacked(model: ImpulseModel, q, v, p, commands) -> np.ndarray:
    out = model.evaluate(q, v, p, commands, jacobians=False)
    return np.concatenate([out.ru.ravel(), out.rq.ravel()])


@pytest.mark.parametrize("scheme", [SpookImpulses, MidpointImpulses,
                                    functools.partial(MidpointImpulses, friction="box")],
                         ids=["spook", "midpoint", "midpoint-box"])
@pytest.mark.parametrize("steps", [1, 3])
def test_impulse_jacobians_match_finite_differences(mech: CompiledMechanism, steps: int,
                                                    scheme: type[ImpulseModel]) -> None:
    model = scheme(mech, H, compliance=1e-6)
    q, v, u = states(mech, steps)
    p = mech.parameter_vector
    out = model.evaluate(q, v, p, u)
    assert not out.sticking.any()
    n, k = mech.n, steps
    analytic_q = np.zeros((2, k, n, k + 1, n))
    analytic_v = np.zeros((2, k, n, k + 1, n))
    for i in range(k):
        analytic_q[0, i, :, i] = out.ru_q0[i]
        analytic_q[1, i, :, i] = out.rq_q0[i]
        analytic_q[1, i, :, i + 1] = out.rq_q1[i]
        analytic_v[0, i, :, i] = out.ru_v0[i]
        analytic_v[0, i, :, i + 1] = out.ru_v1[i]
        analytic_v[1, i, :, i + 1] = out.rq_v1[i]
        if out.ru_q1 is not None:
            analytic_q[0, i, :, i + 1] = out.ru_q1[i]
        if out.rq_v0 is not None:
            analytic_v[1, i, :, i] = out.rq_v0[i]
    fd_q = numerical_jacobian(lambda x: stacked(model, x.reshape(q.shape), v, p, u), q.ravel())
    fd_v = numerical_jacobian(lambda x: stacked(model, q, x.reshape(v.shape), p, u), v.ravel())
    fd_p = numerical_jacobian(lambda x: stacked(model, q, v, x, u), p)
    assert entrywise_error(analytic_q.reshape(fd_q.shape), fd_q) < 1e-5
    assert entrywise_error(analytic_v.reshape(fd_v.shape), fd_v) < 1e-5
    analytic_p = np.concatenate([out.ru_p.reshape(-1, len(p)), out.rq_p.reshape(-1, len(p))])
    assert entrywise_error(analytic_p, fd_p) < 1e-5


def test_sticking_joint_jacobian(mech: CompiledMechanism) -> None:
    # v⁺ of the second joint inside the stiction band: the friction impulse follows it.
    model = SpookImpulses(mech, H, compliance=1e-6)
    q, v, u = states(mech, 1)
    j = mech.coordinate_index("theta2")
    v[1, j] = 4e-4
    out = model.evaluate(q, v, mech.parameter_vector, u)
    assert out.sticking[0].tolist() == [False, True]
    fd = numerical_jacobian(
        lambda x: model.evaluate(q, np.vstack([v[0], x]), mech.parameter_vector, u,
                                 jacobians=False).ru[0], v[1], h=1e-8)
    assert entrywise_error(out.ru_v1[0], fd) < 1e-5


def test_impulses_vanish_on_a_spook_run_with_stick_and_slip(mech: CompiledMechanism) -> None:
    # The C stepper (box friction solved per step) and the residuals (friction read back
    # from v⁺) are independent implementations of the same step.
    model = SpookImpulses(mech, H, compliance=1e-6)
    steps = 300
    t = np.arange(steps) * H
    commands = (0.6 * np.sin(2.0 * t) * (t < 1.5))[:, None]
    forces = np.zeros((2 * steps + 1, mech.n))
    forces[0:-1:2] = model.input_forces(commands, mech.parameter_vector)
    run = mech.integrate_spook(mech.q0, np.zeros(mech.n), H, steps, compliance=1e-6,
                               forces=forces)
    out = model.evaluate(run.q, run.qd, mech.parameter_vector, commands, jacobians=False)
    assert out.sticking.any() and (~out.sticking).any()
    scale = np.abs(np.einsum("kij,kj->ki", mech.mass_matrix(run.q[:-1]),
                             np.diff(run.qd, axis=0))).max()
    assert np.abs(out.ru).max() < 1e-9 * scale
    assert np.abs(out.rq).max() < 1e-9 * scale


@pytest.mark.parametrize(("scheme", "order"), [(SpookImpulses, 1), (MidpointImpulses, 2)])
def test_order_of_the_residuals_on_the_exact_motion(mech: CompiledMechanism, scheme,
                                                    order: int) -> None:
    # On an accurate RK4 run (no dry friction: its switches are not smooth), the residual
    # impulses in the directions the constraints leave free are the schemes' local errors,
    # O(h^(order + 1)) per step: halving h divides them by 4 (SPOOK) or 8 (midpoint).
    fine, seconds = 1e-4, 0.8
    p0 = mech.parameter_vector
    mech.set_parameters(c1=0.0, c2=0.0)
    try:
        steps = int(round(seconds / fine))
        half = np.arange(2 * steps + 1) * fine / 2
        forces = np.zeros((2 * steps + 1, mech.n))
        forces[:, mech.coordinate_index("theta1")] = 0.4 * np.sin(5.0 * half)
        q, v, _ = mech.integrate(mech.q0, np.zeros(mech.n), fine, steps, "rk4", forces=forces)
        errors = []
        for every in (200, 100):
            h = every * fine
            model = scheme(mech, h, compliance=1e-6)
            pick = slice(0, None, every)
            at = np.arange(0.0, seconds - h / 2, h) + model.phase * h
            out = model.evaluate(q[pick], v[pick], mech.parameter_vector,
                                 (0.4 * np.sin(5.0 * at) / mech.parameters["K"])[:, None],
                                 jacobians=False)
            where = (1 - model.phase) * q[pick][:-1] + model.phase * q[pick][1:]
            free = [null_space(a) for a in mech.phi_q(where)[:, model.rows]]
            errors.append(max(np.abs(basis.T @ r).max() for basis, r in
                              zip(free, out.ru, strict=True)))
    finally:
        mech.set_parameters(**dict(zip(mech.parameters, p0, strict=True)))
    assert errors[0] / errors[1] == pytest.approx(2.0 ** (order + 1), rel=0.25)


def test_step_sensitivity_matches_finite_differences_of_the_stepper(
        mech: CompiledMechanism) -> None:
    model = SpookImpulses(mech, H, compliance=1e-6)
    q, v, _ = states(mech, 1)
    q0 = mech.solve_position(q[0])
    v0 = mech.project_velocity(q0, v[0])

    def step(x: np.ndarray) -> np.ndarray:
        run = mech.integrate_spook(x[:mech.n], x[mech.n:], H, 1, compliance=1e-6,
                                   accelerations=False)
        return np.concatenate([run.q[1], run.qd[1]])

    x0 = np.concatenate([q0, v0])
    x1 = step(x0)
    out = model.evaluate(np.vstack([q0, x1[:mech.n]]), np.vstack([v0, x1[mech.n:]]),
                         mech.parameter_vector)
    wrt_state, wrt_params = step_sensitivity(out)
    assert entrywise_error(wrt_state[0], numerical_jacobian(step, x0)) < 1e-5
    p0 = mech.parameter_vector

    def step_p(p: np.ndarray) -> np.ndarray:
        mech.set_parameters(**dict(zip(mech.parameters, p, strict=True)))
        try:
            return step(x0)
        finally:
            mech.set_parameters(**dict(zip(mech.parameters, p0, strict=True)))

    assert entrywise_error(wrt_params[0], numerical_jacobian(step_p, p0)) < 1e-5


MOTOR_PENDULUM = """\
name: motor-pendulum
parameters: {m: 1.0, L: 0.5, a: 0.2, b: 0.05, c: 0.08, K: 0.7, I: 0.1}
points:
  - {x: 0, y: 0, fixed: true}
  - {x: L*cos(-0.3), y: L*sin(-0.3)}
planar_bodies:
  - {points: [0, 1], length: L, mass: m, I0: I, cog: [a, 0]}
relative_coordinates:
  - {type: RelativeAngleAbsoluteDOF, points: [0, 1], name: theta}
friction:
  - {coordinate: theta, viscous: b, coulomb: c}
actuators:
  - {coordinate: theta, name: motor, gain: K}
sensors:
  - {type: encoder, coordinate: theta, name: enc, noise: 1e-4}
"""
TRUTH = {"a": 0.2, "b": 0.05, "c": 0.08, "K": 0.7}


def motor_command(t: np.ndarray) -> np.ndarray:
    return np.sin(3.0 * t) + 0.5 * np.sin(7.0 * t + 1.0)


@pytest.fixture(scope="module")
def motor_pendulum(compiled, tmp_path_factory) -> CompiledMechanism:
    path = tmp_path_factory.mktemp("identify") / "motor-pendulum.yaml"
    path.write_text(MOTOR_PENDULUM)
    return compiled(path)


def dense_jacobian(jacobian, rows: int, columns: int, state_size: int) -> np.ndarray:
    """The problem's block Jacobian as one dense (rows, columns) matrix."""
    dense = np.zeros((rows, columns))
    row = 0
    for group in jacobian.groups:
        for k, start in enumerate(group.start):
            block = slice(row, row + group.band.shape[1])
            dense[block, start:start + group.band.shape[2]] = group.band[k]
            dense[block, state_size:] = group.border[k]
            row += group.band.shape[1]
    return dense


def spook_recording(mech: CompiledMechanism, seconds: float = 4.0, noise: float = 1e-4):
    """Encoder readings of a SPOOK run at the identification step (the model's own
    discretization: the truth is the exact minimum, up to the noise)."""
    from mbgen.estimation.identify import Recording

    steps = int(round(seconds / H))
    t = np.arange(steps + 1) * H
    u = motor_command(t)
    model = SpookImpulses(mech, H, compliance=1e-5)
    forces = np.zeros((2 * steps + 1, mech.n))
    forces[0:-1:2] = model.input_forces(u[:-1, None], mech.parameter_vector)
    run = mech.integrate_spook(mech.q0, np.zeros(mech.n), H, steps, compliance=1e-5,
                               forces=forces, accelerations=False)
    clean = mech.sensors(run.q, run.qd)
    readings = clean + noise * np.random.default_rng(7).normal(size=clean.shape)
    return Recording(t, readings, u[:, None])


def rk4_recording(mech: CompiledMechanism, seconds: float = 4.0, noise: float = 1e-4):
    """Encoder readings at 1 / H of an RK4 run 10 times finer, with the continuous model's
    smooth friction: data from outside the identification's own discretization."""
    from mbgen.estimation.identify import Recording

    fine = H / 10
    steps = int(round(seconds / fine))
    half = np.arange(2 * steps + 1) * fine / 2
    forces = np.zeros((2 * steps + 1, mech.n))
    forces[:, mech.coordinate_index("theta")] = TRUTH["K"] * motor_command(half)
    q, qd, _ = mech.integrate(mech.q0, np.zeros(mech.n), fine, steps, "rk4", forces=forces)
    clean = mech.sensors(q[::10], qd[::10])
    readings = clean + noise * np.random.default_rng(7).normal(size=clean.shape)
    t = np.arange(len(clean)) * H
    return Recording(t, readings, motor_command(t)[:, None])


@pytest.mark.parametrize(("scheme", "data", "step_check"),
                         [("spook", spook_recording, False),
                          ("midpoint", rk4_recording, True)])
def test_identify_recovers_parameters_from_a_poor_guess(motor_pendulum, scheme: str,
                                                        data, step_check: bool) -> None:
    # SPOOK on its own data: the truth is the exact minimum up to the noise. The
    # midpoint residuals (the default) on data from the continuous model: the step moves
    # a and K by 7 and 5 σ of the noise, which the step check measures and adds
    from mbgen.estimation.identify import Settings, identify

    recording = data(motor_pendulum)
    guess = {name: value * (1.3 if k % 2 else 0.7) for k, (name, value) in
             enumerate(TRUTH.items())}
    result = identify(motor_pendulum, recording, list(TRUTH), initial=guess,
                      settings=Settings(impulse_noise=1e-4, scheme=scheme,
                                        step_check=step_check))
    assert result.converged
    assert result.identifiable.all()
    for name, value, std in zip(result.names, result.values, result.std, strict=True):
        assert value == pytest.approx(TRUTH[name], rel=1e-2), name
        assert abs(value - TRUTH[name]) < 4 * std, name
    assert np.abs(result.fitted - recording.readings).max() < 5e-4


def test_identify_reports_a_parameter_the_data_cannot_see(motor_pendulum) -> None:
    # Mass and inertia of a bar on a fixed pivot with a known gravity: only I0 and m·a
    # reach the motion, so m and a together are not identifiable (one null direction).
    from mbgen.estimation.identify import identify

    recording = spook_recording(motor_pendulum, seconds=2.0)
    result = identify(motor_pendulum, recording, ["m", "a", "b"],
                      initial={"m": 1.2, "a": 0.2 / 1.2 * 1.1})
    assert result.identifiable.tolist() == [False, False, True]
    assert np.isinf(result.std[:2]).all() and np.isfinite(result.std[2])
    m, a, _ = result.values
    assert m * a == pytest.approx(1.0 * 0.2, rel=1e-2)
    # the one combination named: m and a, not b; their correlations unknown
    assert len(result.undetermined) == 1
    assert set(result.undetermined[0].split()) >= {"m", "a"} and "b" not in \
        result.undetermined[0].split()
    assert np.isnan(result.correlation[:2]).all()
    assert result.correlation[2, 2] == pytest.approx(1.0, abs=1e-12)
    assert not result.trusted


def test_covariance_is_the_dense_sandwich(motor_pendulum) -> None:
    """The reported std and correlations are the parameters' block of the sandwich
    H⁻¹ M H⁻¹ of the whole problem at the solution, formed densely (H = JᵀJ inverted
    whole, not by the banded Schur complement): M takes the impulses step by step with
    their residuals, the readings and the initial constraints by their stated noise or
    their mean square if larger."""
    from mbgen.estimation.dependent_problem import DependentProblem
    from mbgen.estimation.identify import Recording, Settings, identify

    recording = spook_recording(motor_pendulum, seconds=0.6)
    names = ["b", "c", "K"]
    settings = Settings(impulse_noise=1e-4, step_check=False)  # the one solve's σ
    result = identify(motor_pendulum, recording, names, settings=settings)
    assert result.converged and result.identifiable.all()
    problem = DependentProblem(motor_pendulum, Recording(recording.t, recording.readings,
                                                              recording.commands),
                                    names, settings, {})
    x = problem.pack(result.q, result.v, result.values)
    residuals, jac = problem(x, True)
    dense = dense_jacobian(jac, len(residuals), len(x), problem.state_size)
    through = dense @ np.linalg.inv(dense.T @ dense)[:, -3:]  # J H⁻¹ P, (rows, 3)
    ends = np.cumsum([0, *(g.band.shape[0] * g.band.shape[1] for g in jac.groups)])
    steps, rows = jac.groups[0].band.shape[:2]
    u = (through[:ends[1]] * residuals[:ends[1], None]).reshape(steps, rows, 3).sum(axis=1)
    meat = u.T @ u
    for group in range(1, len(jac.groups)):
        part = slice(ends[group], ends[group + 1])
        stated = 1.0 if group == 3 else max(1.0, float(np.mean(residuals[part] ** 2)))
        meat += stated * through[part].T @ through[part]
    std = np.sqrt(np.diag(meat))
    assert np.allclose(result.std, std, rtol=1e-6)
    assert np.allclose(result.correlation, meat / np.outer(std, std), rtol=1e-6, atol=1e-9)
    # the impulses' stated noise (1e-4) is far above what the fit leaves: a σ of H⁻¹
    # alone would be several times the sandwich's
    assert (np.sqrt(np.diag(np.linalg.inv(dense.T @ dense))[-3:]) > 2 * std).all()


def test_step_check_reports_the_solve_at_half_the_step(motor_pendulum) -> None:
    """With the step check, the values are those of a solve at twice the substeps, the
    change is the distance to the solve at the asked step, and each σ is the noise's
    and that change together."""
    from mbgen.estimation.identify import Settings, identify

    recording = rk4_recording(motor_pendulum, seconds=2.0)
    names = list(TRUTH)

    def run(step_check: bool = False, **settings) -> object:
        return identify(motor_pendulum, recording, names, initial=TRUTH,
                        settings=Settings(impulse_noise=1e-4, step_check=step_check,
                                          **settings))

    coarse, fine, checked = run(), run(substeps=2), run(step_check=True)
    assert coarse.converged and fine.converged and checked.converged
    assert np.isnan(coarse.step_change).all()
    # the same minimum from two starts: equal to the solver's tolerance, 1 % of a σ
    assert (np.abs(checked.values - fine.values) < 0.01 * fine.std).all()
    assert (np.abs(checked.step_change - np.abs(fine.values - coarse.values))
            < 0.01 * fine.std).all()
    assert np.allclose(checked.std, np.hypot(fine.std, checked.step_change), rtol=1e-2)
    assert (checked.step_change > coarse.std).any()  # a and K: the step moves them most
    assert len(checked.t) == 2 * len(coarse.t) - 1


def test_refined_states_follow_a_cubic_exactly() -> None:
    """The states at the midpoints of a cubic trajectory, from its positions and
    velocities at the steps: exact (cubic Hermite)."""
    from mbgen.estimation.identify import refined_states

    h = 0.1
    t = np.arange(6) * h
    coefficients = np.array([[0.3, -1.0, 2.0, 0.5], [1.0, 0.2, -0.7, 3.0]])  # (n, 4)

    def q(at: np.ndarray) -> np.ndarray:
        return np.stack([np.polyval(c, at) for c in coefficients], axis=1)

    def v(at: np.ndarray) -> np.ndarray:
        return np.stack([np.polyval(np.polyder(c), at) for c in coefficients], axis=1)

    fine_q, fine_v = refined_states(q(t), v(t), h)
    half = np.arange(11) * h / 2
    assert np.allclose(fine_q, q(half), atol=1e-13)
    assert np.allclose(fine_v, v(half), atol=1e-12)


def test_impossible_values_are_named(motor_pendulum) -> None:
    """Values no real mechanism has: an inertia about the first point below m·a² (a
    negative inertia about the centre of mass: the loader's own check), a negative mass, a
    negative viscous or dry friction."""
    from mbgen.estimation.plausibility import physical_problems
    from mbgen.model.parser import parse_mechanism

    model = parse_mechanism(MOTOR_PENDULUM)
    p = motor_pendulum.parameter_vector
    index = {name: k for k, name in enumerate(motor_pendulum.parameters)}
    assert physical_problems(motor_pendulum, p, model) == []
    for name, value, fragment in (("I", 0.03, "I0 = 0.03 is smaller than mass*|cog|^2"),
                                  ("m", -1.0, "mass must not be negative"),
                                  ("b", -0.01, "damping"),
                                  ("c", -0.02, "negative dry friction on theta")):
        changed = p.copy()
        changed[index[name]] = value
        problems = physical_problems(motor_pendulum, changed, model)
        assert len(problems) == 1 and fragment in problems[0], (name, problems)
        text = MOTOR_PENDULUM.replace(f"{name}: {p[index[name]]:g}", f"{name}: {value:g}")
        if name in "Im":  # the loader refuses the same values, with the same words
            with pytest.raises(MbgenError, match=re.escape(fragment)):
                parse_mechanism(text)


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"params": ["mass1"]}, "unknown parameter(s) mass1"),
    ({"params": ["b"], "bounds": {"b": (0.1, 1.0)}}, "exclude its initial value 0.05"),
    ({"params": ["b"], "priors": {"c": (0.1, 0.01)}}, "a prior for 'c'"),
    ({"params": ["b"], "initial": {"bb": 0.1}}, "an initial value for 'bb'"),
    ({"params": ["b"], "priors": {"b": (0.1, 0.0)}}, "positive, finite standard deviation"),
    ({"params": ["b"], "priors": {"b": (np.nan, 0.1)}}, "needs a finite mean"),
    ({"params": ["b"], "initial": {"b": np.nan}}, "initial value of b must be finite"),
    ({"params": ["b"], "initial": {"b": np.inf}}, "initial value of b must be finite"),
    ({"params": ["b"], "bounds": {"b": (np.nan, 1.0)}}, "bounds of b must be numbers"),
    ({"params": ["b"], "settings": Settings(scheme="rk4")},
     "unknown scheme 'rk4' (one of: midpoint, spook)"),
    ({"params": ["b"], "settings": Settings(friction="coulomb")},
     "unknown friction model 'coulomb' (one of: smooth, box)"),
])
def test_identify_bad_input(motor_pendulum, kwargs: dict, fragment: str) -> None:
    from mbgen.estimation.identify import IdentificationError, identify

    recording = spook_recording(motor_pendulum, seconds=0.5)
    with pytest.raises(IdentificationError) as info:
        identify(motor_pendulum, recording, **kwargs)
    assert fragment in str(info.value)


def test_a_prior_bounds_the_reported_uncertainty(motor_pendulum) -> None:
    # m is seen only through m·a: its uncertainty is its prior's, however well the data
    # fit (a fit better than the stated noise does not shrink a prior)
    from mbgen.estimation.identify import identify

    recording = spook_recording(motor_pendulum, seconds=2.0)
    result = identify(motor_pendulum, recording, ["m", "a", "b"],
                      initial={"m": 1.1, "a": 0.2 / 1.1}, priors={"m": (1.0, 0.01)})
    assert result.identifiable.all()
    assert result.std[0] == pytest.approx(0.01, rel=0.05)
    assert result.values[0] == pytest.approx(1.0, abs=0.01)


def test_an_encoder_offset_is_found_far_from_its_start(mech: CompiledMechanism) -> None:
    """Shifting every state of a joint and its encoder's offset together leaves the readings
    unchanged and rotates a body, a direction along which the compliant constraints curve:
    without the second-order correction of the trial steps the offset stays at its start."""
    from mbgen.estimation.identify import Recording, Settings, identify

    truth = mech.parameters["offset2"]
    q, qd, _ = mech.integrate(mech.q0, np.zeros(mech.n), 1e-3, 2000, "rk4")
    clean = mech.sensors(q[::10], qd[::10])
    readings = clean + 1e-4 * np.random.default_rng(3).normal(size=clean.shape)
    result = identify(mech, Recording(np.arange(len(clean)) * 0.01, readings),
                      ["b1", "b2", "offset2"],
                      initial={"b1": 0.03, "b2": 0.006, "offset2": 0.0},
                      settings=Settings(impulse_noise=1e-4))
    assert result.converged
    offset, std = result.values[2], result.std[2]
    assert offset == pytest.approx(truth, rel=0.05) and abs(offset - truth) < 3 * std


def test_identify_refuses_a_data_gap(motor_pendulum) -> None:
    from mbgen.estimation.identify import IdentificationError, Recording, identify

    recording = spook_recording(motor_pendulum, seconds=0.5)
    keep = np.arange(len(recording.t)) != 20
    gappy = Recording(recording.t[keep], recording.readings[keep], recording.commands[keep])
    with pytest.raises(IdentificationError, match=r"a gap between t = 0\.19 and t = 0\.21 "
                                                  r"\(row 21"):
        identify(motor_pendulum, gappy, ["b"])


def write_csv(path, header: list[str], columns: list[np.ndarray]) -> None:
    np.savetxt(path, np.column_stack(columns), delimiter=",", header=",".join(header),
               comments="")


def test_cli_identify_writes_parameters_and_fit_plot(motor_pendulum, tmp_path) -> None:
    import yaml
    from click.testing import CliRunner

    from mbgen.cli.main import cli

    recording = rk4_recording(motor_pendulum)
    data, inputs = tmp_path / "data.csv", tmp_path / "inputs.csv"
    write_csv(data, ["t", "enc"], [recording.t, recording.readings[:, 0]])
    write_csv(inputs, ["t", "motor"], [recording.t, recording.commands[:, 0]])
    out = tmp_path / "identified.yaml"
    source = tmp_path / "motor-pendulum.yaml"
    source.write_text(MOTOR_PENDULUM)
    args = ["identify", str(source), "--data", str(data), "--inputs", str(inputs),
            "--params", "b,c,K", "--initial", "b=0.07", "--initial", "K=0.5",
            "--bounds", "c=0:1", "--noise-impulse", "1e-4", "--scheme", "midpoint",
            "--out", str(out), "--plot",
            "--build-dir", str(motor_pendulum.directory.parent.parent)]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    values = yaml.safe_load(out.read_text())["parameters"]
    for name in ("b", "c", "K"):
        assert values[name] == pytest.approx(TRUTH[name], rel=1e-2)
    assert (tmp_path / "identified_fit.png").stat().st_size > 10_000
    # the correlations: printed as a table, written as comments (the file stays mergeable)
    assert "correlation" in result.output and "✓ converged" in result.output
    rows = [line for line in out.read_text().splitlines() if line.startswith("#   ")]
    matrix = np.array([[float(c) for c in row[1:].split()] for row in rows])
    assert matrix.shape == (3, 3) and np.allclose(np.diag(matrix), 1.0, atol=1e-3)
    assert np.allclose(matrix, matrix.T, atol=1e-3) and np.all(np.abs(matrix) <= 1.0005)
    # --step-check: the move at half the step shown and written, and within each σ
    checked = tmp_path / "checked.yaml"
    again = [*args, "--step-check"]
    again[again.index(str(out))] = str(checked)
    result = CliRunner().invoke(cli, again, catch_exceptions=False)
    assert result.exit_code == 0 and "moved at half the step" in result.output, result.output
    text = checked.read_text()
    moves = re.search(r"# moved at half the step \(in each sigma\): (.*)", text)
    assert moves is not None, text
    moved = dict(zip(moves.group(1).split()[::2], map(float, moves.group(1).split()[1::2]),
                     strict=True))
    for name in ("b", "c", "K"):
        sigma = float(re.search(rf"  {name}: \S+  # ± (\S+)", text).group(1))
        assert 0 < moved[name] <= sigma * (1 + 1e-2)

    bad = CliRunner().invoke(cli, [*args[:8], "--params", "b,zeta", *args[10:]])
    assert bad.exit_code == EXIT_BAD_INPUT and "unknown parameter(s) zeta" in bad.output, \
        bad.output
    bad = CliRunner().invoke(cli, [*args, "--prior", "b=0.05"])
    assert bad.exit_code == 2 and "NAME=MEAN:STD" in bad.output
    bad = CliRunner().invoke(cli, [*args, "--scheme", "rk4"])
    assert bad.exit_code == 2 and "'rk4' is not one of 'midpoint', 'spook'" in bad.output, \
        bad.output
    bad = CliRunner().invoke(cli, [*args, "--coordinates", "joint"])
    assert bad.exit_code == 2 and "'joint' is not one of 'auto', 'dependent', 'independent'" in \
        bad.output, bad.output
    refused = tmp_path / "refused.yaml"
    independent = [*args, "--coordinates", "independent"]
    independent[independent.index(str(out))] = str(refused)
    for extra, message in ((["--scheme", "spook"], "midpoint scheme with smooth friction"),
                           (["--params", "L,b,c,K"], "L moves them")):
        bad = CliRunner().invoke(cli, [*independent, *extra])
        assert bad.exit_code == EXIT_BAD_INPUT and message in " ".join(bad.output.split()), \
            bad.output
        assert not refused.exists() and not (tmp_path / "refused_fit.png").exists()
    short = tmp_path / "short.csv"
    write_csv(short, ["t", "motor"], [recording.t[:50], recording.commands[:50, 0]])
    bad_args = [*args[:5], str(short), *args[6:]]
    bad_args[bad_args.index(str(out))] = str(tmp_path / "bad.yaml")
    bad = CliRunner().invoke(cli, bad_args)
    assert bad.exit_code == 2 and "covers t = 0..0.49, the data 0..4" in bad.output, bad.output
    assert not (tmp_path / "bad.yaml").exists()
    stopped = tmp_path / "stopped.yaml"  # one iteration: not converged, never under --out
    early = [*args, "--max-iterations", "1"]
    early[early.index(str(out))] = str(stopped)
    bad = CliRunner().invoke(cli, early)
    assert bad.exit_code == EXIT_UNTRUSTED and "✓" not in bad.output, bad.output
    assert not stopped.exists() and "NOT converged" in (
        tmp_path / "stopped.untrusted.yaml").read_text()


def test_identification_problem_jacobian_matches_finite_differences(motor_pendulum) -> None:
    """The assembled problem's Jacobian, entry by entry, with respect to the states and
    the parameters: impulses (their weight follows the model's inertia), readings, the
    initial state and a prior; mass and inertia included, so the weight's own
    derivative counts."""
    from mbgen.estimation.dependent_problem import DependentProblem
    from mbgen.estimation.identify import Settings

    recording = rk4_recording(motor_pendulum, seconds=0.1)
    names = ["m", "I", "b", "c", "K"]
    problem = DependentProblem(motor_pendulum, recording, names,
                                    Settings(impulse_noise=1e-3, substeps=2),
                                    {"m": (1.1, 0.05)})
    steps = len(problem.t) - 1
    q, qd, _ = motor_pendulum.integrate(motor_pendulum.q0, np.zeros(motor_pendulum.n),
                                        problem.h, steps, "rk4")
    rng = np.random.default_rng(3)
    theta = np.array([1.2, 0.12, 0.04, 0.1, 0.6])
    x = problem.pack(q + 1e-4 * rng.normal(size=q.shape), qd + 1e-3 * rng.normal(
        size=qd.shape), theta)
    residual, jacobian = problem(x, True)
    dense = dense_jacobian(jacobian, len(residual), len(x), problem.state_size)
    numeric = numerical_jacobian(lambda y: problem(y, False)[0], x, 1e-7)
    assert entrywise_error(dense, numeric) < 1e-5


def test_a_friction_coefficient_stays_possible_by_construction(compiled, tmp_path) -> None:
    """Data from a pendulum without viscous friction, noisy enough that the unbounded
    fit lands at a negative b (refused as impossible); given the file's model, b is a
    friction coefficient on its own, bounded at 0: the fit ends there, trusted. A
    negative start is refused, and explicit bounds still win."""
    from mbgen.estimation.identify import IdentificationError, Recording, identify
    from mbgen.model.parser import parse_mechanism

    # the readings' noise as the file states it, so that the fit test passes
    text = MOTOR_PENDULUM.replace("b: 0.05", "b: 0.0").replace("noise: 1e-4", "noise: 1e-3")
    path = tmp_path / "frictionless.yaml"
    path.write_text(text)
    mech, model = compiled(path), parse_mechanism(text)
    assert model.nonnegative_parameters() == ["m", "b", "c", "I"]
    clean = spook_recording(mech, seconds=1.0, noise=0.0)  # a draw that lands below 0:
    recording = Recording(clean.t, clean.readings + 1e-3 * np.random.default_rng(3).normal(
        size=clean.readings.shape), clean.commands)
    free = identify(mech, recording, ["b"], initial={"b": 0.02})
    assert free.values[0] < 0 and not free.trusted
    assert any("damping feeds energy in" in problem for problem in free.problems)
    bounded = identify(mech, recording, ["b"], initial={"b": 0.02}, model=model)
    assert bounded.values[0] == 0.0 and bounded.trusted, bounded.problems
    with pytest.raises(IdentificationError, match="initial value -0.01 of b is negative"):
        identify(mech, recording, ["b"], initial={"b": -0.01}, model=model)
    allowed = identify(mech, recording, ["b"], initial={"b": 0.02},
                       bounds={"b": (-1.0, 1.0)}, model=model)
    assert allowed.values[0] == pytest.approx(free.values[0], rel=1e-6)


def test_without_the_file_an_impossible_inertia_shows_in_the_mass_matrix(compiled) -> None:
    """Without the file's model, only what reaches M is seen: a negative I0 on the bar
    whose tip no other body holds makes M indefinite (named); I2 < m2·a2² alone does
    not (the first bar's inertia at the elbow hides it), which the file's model sees."""
    from conftest import SHIPPED_DIR

    from mbgen.estimation.plausibility import physical_problems
    from mbgen.model.parser import load_mechanism

    mech = compiled(SHIPPED_DIR / "actuated-double-pendulum.yaml")
    p = mech.parameter_vector
    assert physical_problems(mech, p) == []
    p[list(mech.parameters).index("I2")] = 0.01  # m2·a2² = 0.3·0.22² = 0.0145
    assert physical_problems(mech, p) == []
    assert physical_problems(mech, p, load_mechanism(SHIPPED_DIR / "actuated-double-"
                                                     "pendulum.yaml"))[0].startswith("bar2: I0")
    p[list(mech.parameters).index("I2")] = -0.001
    assert physical_problems(mech, p) == [
        "the mass matrix is not positive definite: a negative mass, or a body whose "
        "inertia about its centre of mass is negative (I0 < m|cog|^2)"]


def test_an_identified_inertia_stays_possible_by_construction(compiled, tmp_path) -> None:
    """A point-mass pendulum (I0 = m a² exactly) with noisy readings: fitted freely, the
    offset a and I0 land at a body with a negative inertia about its centre of mass, which
    the loader refuses. Given the file's model, the solver's unknown is that inertia,
    bounded at 0: the fit ends on the boundary, trusted, and the values load."""
    from mbgen.estimation.identify import IdentificationError, Recording, identify
    from mbgen.model.parser import load_mechanism, parse_mechanism

    # m a² = 1.0 · 0.2²; the readings' noise (two draws of 1e-3, below) as the file states it
    text = MOTOR_PENDULUM.replace("I: 0.1", "I: 0.04").replace("noise: 1e-4",
                                                                "noise: 1.4142e-3")
    path = tmp_path / "point-mass.yaml"
    path.write_text(text)
    mech, model = compiled(path), parse_mechanism(text)
    clean = spook_recording(mech, seconds=1.0, noise=1e-3)
    noisy = clean.readings + 1e-3 * np.random.default_rng(3).normal(size=clean.readings.shape)
    recording = Recording(clean.t, noisy, clean.commands)
    start = {"a": 0.15, "I": 0.05}

    free = identify(mech, recording, ["a", "I"], initial=start)
    a, inertia = free.values
    assert inertia < 1.0 * a**2 * (1 - 1e-6)
    assert model.body_problems(free.as_dict())

    kept = identify(mech, recording, ["a", "I"], initial=start, model=model)
    a, inertia = kept.values
    assert inertia >= 1.0 * a**2 * (1 - 1e-12)
    assert kept.converged and kept.trusted, kept.message
    assert np.isfinite(kept.std).all()
    values = path.with_name("identified.yaml")
    values.write_text(text.replace("a: 0.2", f"a: {float(a)!r}").replace("I: 0.04",
                                                                  f"I: {float(inertia)!r}"))
    load_mechanism(values)  # the loader's own check passes

    with pytest.raises(IdentificationError, match="initial value 0.02 of I is smaller than"):
        identify(mech, recording, ["a", "I"], initial={"a": 0.2, "I": 0.02}, model=model)

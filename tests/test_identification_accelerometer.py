"""Accelerometers in identification: the readings' model a(q, q̈(q, q̇, u; θ); θ) in both
problem formulations, its Jacobian against finite differences, and parameters recovered
from the Furuta pendulum's closed form (an independent model) with the tip's specific
force written by hand: the accelerometer sharpens what the encoders alone determine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
from conftest import entrywise_error, numerical_jacobian
from independent import furuta_acceleration
from test_accelerometer import ENCODER_NOISE, IMU_NOISE, furuta_with_imu
from test_identification import dense_jacobian
from test_identification_independent import (
    INDEPENDENT,
    TRUTH,
    closed_form_recording,
    command,
    swinging_unknowns,
)

from mbgen.estimation.identify import Recording, Settings, identify, make_problem
from mbgen.runtime.compiled import CompiledMechanism

NOISE = IMU_NOISE  # the accelerometer's, m/s²


@pytest.fixture(scope="module")
def furuta_imu(compiled: Callable[[Path], CompiledMechanism],
               tmp_path_factory: pytest.TempPathFactory) -> CompiledMechanism:
    """The Furuta pendulum with encoders of ENCODER_NOISE and an accelerometer at the
    pendulum's tip T (noise NOISE), with TRUTH."""
    path = furuta_with_imu(tmp_path_factory.mktemp("imu"))  # test_accelerometer's build
    mech = compiled(path)
    mech.set_parameters(**TRUTH)
    return mech


def tip_reading(p: dict[str, float]) -> Callable[[np.ndarray, np.ndarray, np.ndarray],
                                                 np.ndarray]:
    """The tip's specific force Rᵀ(T̈ − g) along the pendulum's axes from θ, θ̇, θ̈ (N, 2)
    each, written by hand: T(θ), R = Rz(θ1) Rx(θ2), T̈ = (∂T/∂θ) θ̈ + θ̇ᵀ(∂²T/∂θ²)θ̇."""
    t1, t2 = sp.symbols("t1 t2")
    c1, s1, c2, s2 = sp.cos(t1), sp.sin(t1), sp.cos(t2), sp.sin(t2)
    u, w, up = sp.Matrix([c1, s1, 0]), sp.Matrix([-s1, c1, 0]), sp.Matrix([0, 0, 1])
    tip = p["L1"] * u + p["L2"] * (s2 * w - c2 * up)
    angles = [t1, t2]
    rotation = (sp.Matrix([[c1, -s1, 0], [s1, c1, 0], [0, 0, 1]])
                * sp.Matrix([[1, 0, 0], [0, c2, -s2], [0, s2, c2]]))
    jac = sp.lambdify(angles, tip.jacobian(angles), "numpy")
    hess = [sp.lambdify(angles, tip.diff(a).jacobian(angles), "numpy") for a in angles]
    rot = sp.lambdify(angles, rotation, "numpy")
    gravity = np.array([p["g"] * np.sin(p["tilt"]), 0.0, -p["g"] * np.cos(p["tilt"])])

    def reading(theta: np.ndarray, rate: np.ndarray, accel: np.ndarray) -> np.ndarray:
        out = []
        for a, r, acc in zip(theta, rate, accel, strict=True):
            second = sum(np.asarray(hess[i](*a), float) @ r * r[i] for i in range(2))
            tip_acc = np.asarray(jac(*a), float) @ acc + second
            out.append(np.asarray(rot(*a), float).T @ (tip_acc - gravity))
        return np.array(out)

    return reading


def with_tip_readings(p: dict[str, float], recording: Recording, seconds: float,
                      seed: int) -> Recording:
    """``recording`` (the closed form's encoders) with the tip accelerometer's readings of
    the same run, noisy at NOISE."""
    from scipy.integrate import solve_ivp

    t = recording.t

    def rhs(time: float, x: np.ndarray) -> np.ndarray:
        return np.concatenate([x[2:], furuta_acceleration(p, x[:2], x[2:],
                                                          float(command(np.array(time))))])

    run = solve_ivp(rhs, (0.0, seconds), np.zeros(4), method="DOP853", t_eval=t, rtol=1e-11,
                    atol=1e-12)
    theta, rate = run.y[:2].T, run.y[2:].T
    accel = np.array([furuta_acceleration(p, a, r, float(command(np.array(s))))
                      for a, r, s in zip(theta, rate, t, strict=True)])
    tip = tip_reading(p)(theta, rate, accel)
    tip += np.random.default_rng(seed).normal(0.0, NOISE, tip.shape)
    return Recording(t, np.hstack([recording.readings, tip]), recording.commands)


@pytest.mark.parametrize("settings", [INDEPENDENT, Settings(substeps=2)],
                         ids=["independent", "dependent"])
def test_accelerometer_rows_of_the_jacobian_match_finite_differences(
        furuta_imu: CompiledMechanism, settings: Settings) -> None:
    """Readings of both encoders and the tip's three axes (some missing) under a command,
    against every state and parameter: inertias, friction, gain, tilt (which turns
    gravity, which the accelerometer reads) and the offset."""
    mech = furuta_imu
    rng = np.random.default_rng(5)
    t = np.arange(6) * 0.01
    readings = np.hstack([0.3 * rng.normal(size=(6, 2)), rng.normal(size=(6, 3))])
    readings[1, 3] = readings[4, 2:] = np.nan
    recording = Recording(t, readings, np.sin(3 * t)[:, None])
    names = ["m2", "l2", "J2p", "b1", "c2", "K", "tilt", "offset2"]
    problem = make_problem(mech, recording, names, settings, {"m2": (0.075, 0.01)})
    x = swinging_unknowns(mech, problem, rng)
    residual, jacobian = problem(x, True)
    assert jacobian is not None and np.all(np.isfinite(residual))
    # 12 encoder readings, 18 - 4 accelerometer readings: a row each
    assert len(problem.obs_value) == 12 + 14
    dense = dense_jacobian(jacobian, len(residual), len(x), problem.state_size)
    numeric = numerical_jacobian(lambda y: problem(y, False)[0], x, 1e-6)
    assert entrywise_error(dense, numeric) < 1e-6


def test_the_tip_accelerometer_sharpens_the_identified_parameters(
        furuta_imu: CompiledMechanism) -> None:
    """Two seconds of the closed form's motion read by cheap encoders, and by the tip's
    accelerometer (its specific force written by hand): with the accelerometer every
    parameter's σ is smaller than with the encoders alone, the values stay within 3 σ,
    and the model's fitted readings match the accelerometer's to its noise."""
    mech = furuta_imu
    truth = dict(mech.parameters)
    exact = closed_form_recording(truth, 2.0)
    noisy = exact.readings + np.random.default_rng(1).normal(0.0, ENCODER_NOISE,
                                                             exact.readings.shape)
    encoders = Recording(exact.t, noisy, exact.commands)
    both = with_tip_readings(truth, encoders, 2.0, seed=3)
    names = ["J2p", "b2", "c1", "K", "tilt"]
    initial = {name: 1.2 * truth[name] for name in names}
    expected = np.array([truth[name] for name in names])
    alone = identify(mech, encoders, names, initial=initial, settings=INDEPENDENT)
    result = identify(mech, both, names, initial=initial, settings=INDEPENDENT)
    for run in (alone, result):
        assert run.converged and run.trusted, run.message
        error = np.abs(run.values - expected)
        assert np.all(error < 3 * run.std), dict(zip(names, error / run.std, strict=True))
    assert np.all(result.std < alone.std), dict(zip(names, result.std / alone.std,
                                                    strict=True))
    assert result.fitted.shape == both.readings.shape
    misfit = result.fitted[:, 2:] - both.readings[:, 2:]
    assert 0.8 * NOISE < np.sqrt(np.mean(misfit**2)) < 1.2 * NOISE

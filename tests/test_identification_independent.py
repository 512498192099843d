"""Identification in independent coordinates (``Settings(coordinates="independent")``,
``mbgen identify --coordinates independent``) on the spatial Furuta pendulum: the
problem's Jacobian against finite differences, parameters recovered from data of the
pendulum's closed form (an independent model), and located refusals."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import SHIPPED_DIR, entrywise_error, numerical_jacobian
from independent import furuta_acceleration
from scipy.integrate import solve_ivp
from test_identification import dense_jacobian

from mbgen.estimation.identify import (
    IdentificationError,
    Problem,
    Recording,
    Settings,
    identify,
    make_problem,
)
from mbgen.runtime.compiled import CompiledMechanism

FURUTA = SHIPPED_DIR / "furuta.yaml"
TRUTH = {"c1": 4e-3, "c2": 5e-4, "K": 0.9, "tilt": 0.02, "offset2": 0.01}
INDEPENDENT = Settings(coordinates="independent", substeps=2, impulse_noise=2e-5)


def command(t: np.ndarray) -> np.ndarray:
    """Spins the arm up at a varying rate and shakes the pendulum."""
    return (0.1 * np.sin(2 * np.pi * 0.3 * t) + 0.15 * np.sin(2 * np.pi * 0.6 * t)
            + 0.1 * np.sin(2 * np.pi * 1.7 * t + 1.0))


@pytest.fixture
def furuta(compiled: Callable[[Path], CompiledMechanism]) -> Iterator[CompiledMechanism]:
    """The shipped pendulum with dry friction, a motor gain, tilt and an encoder offset
    (the session's compiled copy; its parameters are restored afterwards)."""
    mech = compiled(FURUTA)
    before = dict(mech.parameters)
    mech.set_parameters(**TRUTH)
    yield mech
    mech.set_parameters(**before)


def closed_form_recording(p: dict[str, float], seconds: float) -> Recording:
    """100 Hz encoder readings (16-bit counts) of the closed-form equations of motion."""
    t = np.arange(int(round(seconds / 0.01)) + 1) * 0.01

    def rhs(time: float, x: np.ndarray) -> np.ndarray:
        torque = float(command(np.array(time)))
        return np.concatenate([x[2:], furuta_acceleration(p, x[:2], x[2:], torque)])

    run = solve_ivp(rhs, (0.0, t[-1]), np.zeros(4), method="DOP853", t_eval=t, rtol=1e-11,
                    atol=1e-12)
    count = 2 * np.pi / 2**16
    readings = np.round((run.y[:2].T + np.array([0.0, p["offset2"]])) / count) * count
    return Recording(t, readings, command(t)[:, None])


def swinging_unknowns(mech: CompiledMechanism, problem: Problem,
                      rng: np.random.Generator) -> np.ndarray:
    """Unknowns of ``problem`` on the Furuta pendulum: states on the constraints along a
    swing, θ = (0.3 + 2t, 0.5 + sin 4t) and its rates, roughened, and the parameters 10 %
    above the mechanism's."""
    grid, z_names = problem.t, mech.independent_coordinates()
    z = np.column_stack([0.3 + 2 * grid, 0.5 + np.sin(4 * grid)])
    zd = np.column_stack([2 + 0 * grid, 4 * np.cos(4 * grid)])
    z, zd = z + 1e-3 * rng.normal(size=z.shape), zd + 1e-2 * rng.normal(size=zd.shape)
    guess = np.repeat(mech.q0[None], len(grid), axis=0)
    guess[:, mech.coordinate_indices(z_names)] = z
    q = mech.solve_position(guess, z=z_names)
    return problem.pack(q, mech.solve_velocity(q, zd, z=z_names),
                        1.1 * mech.parameter_vector[problem.selected])


def test_the_independent_problem_jacobian_matches_finite_differences(furuta) -> None:
    """Impulses (through the midpoint's position and velocity solves), readings of both
    encoders (one with an offset) and a prior, against every state and parameter: dry
    friction, gain, tilt and inertias included."""
    rng = np.random.default_rng(2)
    t = np.arange(6) * 0.01
    recording = Recording(t, 0.3 * rng.normal(size=(6, 2)), np.sin(3 * t)[:, None])
    names = ["m1", "l2", "J1p", "b1", "c1", "c2", "K", "tilt", "offset2"]
    problem = make_problem(furuta, recording, names, INDEPENDENT, {"m1": (0.3, 0.01)})
    x = swinging_unknowns(furuta, problem, rng)
    residual, jacobian = problem(x, True)
    assert jacobian is not None and np.all(np.isfinite(residual))
    dense = dense_jacobian(jacobian, len(residual), len(x), problem.state_size)
    numeric = numerical_jacobian(lambda y: problem(y, False)[0], x, 1e-6)
    assert entrywise_error(dense, numeric) < 1e-6


def test_the_furuta_parameters_come_back_from_closed_form_data(furuta) -> None:
    """Three seconds of the closed form's encoders: inertias, viscous and dry friction,
    the gain and the offset from 30 % off come back within 1 % (masses and centre-of-mass
    distances known), converged and trusted, each error within 3 of its σ."""
    truth = dict(furuta.parameters)
    recording = closed_form_recording(truth, 3.0)
    names = ["J1p", "J2p", "b2", "c1", "K", "offset2"]
    initial = {name: 1.3 * truth[name] for name in names}
    result = identify(furuta, recording, names, initial=initial, settings=INDEPENDENT)
    expected = np.array([truth[name] for name in names])
    assert result.converged and result.trusted, result.message
    error = np.abs(result.values - expected)
    assert np.all(error < 0.01 * expected), dict(zip(names, result.values / expected, strict=True))
    assert np.all(error < 3 * result.std), dict(zip(names, error / result.std, strict=True))
    assert result.q.shape == (len(result.t), furuta.n)  # the states in all coordinates
    assert np.abs(furuta.phi(result.q)[:, furuta.active_rows]).max() < 1e-10


def test_independent_coordinates_refuse_what_they_cannot_do(furuta) -> None:
    """A parameter that moves the constraints (a length), and a scheme other than the
    midpoint rule with smooth friction, are refused with a reason."""
    recording = closed_form_recording(dict(furuta.parameters), 0.1)
    with pytest.raises(IdentificationError, match="L1 moves them"):
        identify(furuta, recording, ["L1", "b1"], settings=INDEPENDENT)
    with pytest.raises(IdentificationError, match="midpoint scheme with smooth friction"):
        identify(furuta, recording, ["b1"], settings=Settings(coordinates="independent",
                                                             scheme="spook"))
    with pytest.raises(IdentificationError, match="unknown coordinates 'joint'"):
        identify(furuta, recording, ["b1"], settings=Settings(coordinates="joint"))

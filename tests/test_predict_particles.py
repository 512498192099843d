"""The particle filter's prediction in C (mb_predict_particles): every state one step of an
explicit integrator, noise on its independent accelerations, back onto the constraints;
checked against the simulator, for the noise it claims to add, and for a bad state in
the batch."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import SHIPPED_DIR, random_configurations

import mbgen.runtime.parallel as parallel
from mbgen.runtime.compiled import CompiledMechanism

Compiled = Callable[[Path], CompiledMechanism]
MECHANISMS = ["fourbar", "five-bar", "slider-crank"]  # dof 1, 2, 1


def states(mech: CompiledMechanism, count: int, seed: int = 0) -> tuple[np.ndarray,
                                                                        np.ndarray]:
    """Consistent (q, q̇) (count, n each) near q0."""
    guesses = np.array([state["q"] for state in random_configurations(mech, count, seed)])
    q = mech.solve_position(guesses, minimum_norm=True)
    rates = np.random.default_rng(seed).uniform(-1.0, 1.0, q.shape)
    return np.ascontiguousarray(q), np.ascontiguousarray(mech.project_velocity(q, rates))


def constraint_errors(mech: CompiledMechanism, q: np.ndarray, qd: np.ndarray,
                      ) -> tuple[float, float]:
    return (float(np.abs(mech.phi(q)).max()),
            float(np.abs(np.einsum("kij,kj->ki", mech.phi_q(q), qd)).max()))


@pytest.mark.parametrize("name", MECHANISMS)
@pytest.mark.parametrize("integrator", ["rk4", "euler", "semi-implicit-euler"])
def test_without_noise_it_is_the_simulator(compiled: Compiled, name: str,
                                           integrator: str) -> None:
    """Ten noiseless steps give the states of `integrate` (same integrator, projected).
    The projections differ (z kept here, the least change there) by the drift of a step
    off the constraints: O(dt⁵) for RK4, O(dt²) for Euler."""
    mech = compiled(SHIPPED_DIR / f"{name}.yaml")
    q, qd = states(mech, 4)
    start_q, start_qd = q.copy(), qd.copy()
    dt, steps = 2e-3, 10
    for _ in range(steps):
        status = mech.predict_particles(q, qd, np.zeros((len(q), mech.dof)), dt, integrator)
        assert not status.any()
    tol = 1e-8 if integrator == "rk4" else 1e-4
    for k in range(len(q)):
        ref_q, ref_qd, _ = mech.integrate(start_q[k], start_qd[k], dt, steps, integrator)
        assert np.abs(q[k] - ref_q[-1]).max() < tol
        assert np.abs(qd[k] - ref_qd[-1]).max() < 10 * tol
    phi, velocity = constraint_errors(mech, q, qd)
    assert phi < 1e-11 * mech.size**2 and velocity < 1e-11 * mech.size**2


@pytest.mark.parametrize("name", MECHANISMS)
def test_the_noise_is_on_the_independent_accelerations(compiled: Compiled, name: str) -> None:
    """Over one Euler step the noise ε changes each state's independent velocities by
    ε dt exactly (the force M R ε gives z̈ = ε), and the state stays consistent."""
    mech = compiled(SHIPPED_DIR / f"{name}.yaml")
    q, qd = states(mech, 1, seed=3)
    count, dt = 500, 1e-3
    q, qd = np.repeat(q, count, axis=0), np.repeat(qd, count, axis=0)
    z = mech.partition(q[0])[0]
    noise = np.random.default_rng(1).normal(0.0, 2.0, (count, mech.dof))
    still_q, still_qd = q[:1].copy(), qd[:1].copy()
    mech.predict_particles(still_q, still_qd, np.zeros((1, mech.dof)), dt, "euler")
    assert not mech.predict_particles(q, qd, noise, dt, "euler").any()
    change = (qd[:, z] - still_qd[0, z]) / dt
    assert np.abs(change - noise).max() < 1e-9 * np.abs(noise).max() + 1e-9
    phi, velocity = constraint_errors(mech, q, qd)
    assert phi < 1e-11 and velocity < 1e-11


def test_moves_go_along_the_manifold(compiled: Compiled) -> None:
    """A move δ of q is taken along the constraints: a move in the tangent space R s moves
    z by s (and q by R s to first order, ż kept); a move across it does nothing."""
    mech = compiled(SHIPPED_DIR / "five-bar.yaml")
    q, qd = states(mech, 2, seed=5)
    z, R = mech.partition(q[0])[:2]
    s = np.array([1e-4, -2e-4])
    along = np.zeros_like(q)
    along[0] = R @ s
    normal = np.linalg.svd(mech.phi_q(q[1]))[2][: mech.n - mech.dof].T  # rows of Φq
    along[1] = normal @ np.full(mech.n - mech.dof, 1e-4)
    moved_q, moved_qd = q.copy(), qd.copy()
    zero = np.zeros((2, mech.dof))
    assert not mech.predict_particles(moved_q, moved_qd, zero, 0.0, "euler", along,
                                      np.zeros_like(q)).any()
    assert np.allclose(moved_q[0, z], q[0, z] + s, atol=1e-12)
    assert np.abs(moved_q[0] - q[0] - R @ s).max() < 1e-6
    assert np.abs(moved_q[1] - q[1]).max() < 1e-12
    assert np.abs(moved_qd[0, z] - qd[0, z]).max() < 1e-12  # ż kept, q̇ follows q
    assert np.abs(moved_qd[1] - qd[1]).max() < 1e-12
    phi, velocity = constraint_errors(mech, moved_q, moved_qd)
    assert phi < 1e-11 and velocity < 1e-11


def test_a_bad_state_fails_alone(compiled: Compiled) -> None:
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    q, qd = states(mech, 5)
    noise = np.random.default_rng(0).normal(size=(5, mech.dof))
    clean_q, clean_qd = q.copy(), qd.copy()
    mech.predict_particles(clean_q, clean_qd, noise, 1e-3)
    q[2, 0] = np.nan
    bad = q[2].copy()
    status = mech.predict_particles(q, qd, noise, 1e-3)
    assert status.tolist() == [0, 0, mech.lib.MB_NOT_FINITE, 0, 0]
    assert np.array_equal(q[2], bad, equal_nan=True)  # kept its values
    good = [0, 1, 3, 4]
    assert np.array_equal(q[good], clean_q[good]) and np.array_equal(qd[good], clean_qd[good])


@pytest.mark.parametrize("name", MECHANISMS)
@pytest.mark.parametrize("integrator", ["rk4", "euler", "semi-implicit-euler"])
@pytest.mark.parametrize("dt", [2e-3, 0.08])
def test_lanes_give_the_states_of_one_at_a_time(compiled: Compiled, name: str,
                                                integrator: str, dt: float) -> None:
    """Two blocks of 8 states in the lane functions and a tail of 3 alone give, bit for
    bit, what each state gives in a call of its own (one state never uses the lanes).
    The long step leaves some states to the exact solvers after the chord steps."""
    mech = compiled(SHIPPED_DIR / f"{name}.yaml")
    assert mech.predict_lanes
    q, qd = states(mech, 19, seed=7)
    noise = np.random.default_rng(4).normal(0.0, 3.0, (19, mech.dof))
    alone = [(q[k:k + 1].copy(), qd[k:k + 1].copy()) for k in range(19)]
    status_alone = [mech.predict_particles(one_q, one_qd, noise[k:k + 1].copy(), dt,
                                           integrator)[0]
                    for k, (one_q, one_qd) in enumerate(alone)]
    status = mech.predict_particles(q, qd, noise, dt, integrator)
    assert status.tolist() == status_alone and (status == 0).sum() >= 15
    assert np.array_equal(q, np.vstack([a[0] for a in alone]))
    assert np.array_equal(qd, np.vstack([a[1] for a in alone]))


@pytest.mark.parametrize("name", MECHANISMS)
def test_lanes_take_a_parameter_set_per_state(compiled: Compiled, name: str) -> None:
    """Batched q̈ with one parameter set per state goes through the lanes (each lane its
    own parameters, as a sweep's runs) and gives, bit for bit, each state alone."""
    mech = compiled(SHIPPED_DIR / f"{name}.yaml")
    q, qd = states(mech, 19, seed=3)
    params = mech.parameter_vector * np.random.default_rng(5).uniform(0.9, 1.1, (19, len(
        mech.parameters)))
    batch = mech.forward_dynamics(q, qd, params=params)
    alone = np.array([mech.forward_dynamics(q[k], qd[k], params=params[k]) for k in range(19)])
    assert np.array_equal(batch, alone)
    shared = mech.forward_dynamics(q, qd)
    assert np.abs(batch - shared).max() > 1e-3  # the parameters were used


@pytest.mark.parametrize("name", ["fourbar", "double-pendulum", "slider-crank"])
def test_jacobians_in_lanes_are_those_of_one_state_at_a_time(compiled: Compiled,
                                                              name: str) -> None:
    """q̈, ∂q̈/∂q, ∂q̈/∂q̇ and ∂q̈/∂Q of 19 states, each with its parameters and a force, in
    blocks of 8 lanes and a tail alone, give bit for bit what each state gives alone."""
    mech = compiled(SHIPPED_DIR / f"{name}.yaml")
    q, qd = states(mech, 19, seed=11)
    rng = np.random.default_rng(2)
    params = mech.parameter_vector * rng.uniform(0.9, 1.1, (19, len(mech.parameters)))
    forces = rng.normal(0.0, 1.0, q.shape)
    batch = mech.forward_dynamics_jacobians(q, qd, forces, params=params)
    alone = [mech.forward_dynamics_jacobians(q[k], qd[k], forces[k], params=params[k])
             for k in range(19)]
    assert len(batch) == len(alone[0]) == 4  # q̈, ∂q̈/∂q, ∂q̈/∂q̇, ∂q̈/∂Q
    for part, values in enumerate(batch):
        assert np.array_equal(values, np.array([one[part] for one in alone])), part


def test_the_choice_of_z_in_lanes_alone_gives_the_states_of_one_at_a_time(
        compiled: Compiled) -> None:
    """The robot's dynamics are too long for lane functions, but its blocks of 8 still
    choose z in lanes (Φq and M have lane functions) and integrate one by one."""
    mech = compiled(SHIPPED_DIR / "pick-and-place-robot.yaml")
    assert not mech.predict_lanes
    q = np.repeat(mech.solve_position(np.array(mech.q0))[None], 11, axis=0)
    rng = np.random.default_rng(5)
    qd = mech.project_velocity(q, rng.uniform(-0.5, 0.5, q.shape))
    noise = rng.normal(0.0, 3.0, (11, mech.dof))
    alone = [(q[k:k + 1].copy(), qd[k:k + 1].copy()) for k in range(11)]
    for k, (one_q, one_qd) in enumerate(alone):
        assert not mech.predict_particles(one_q, one_qd, noise[k:k + 1].copy(), 2e-3).any()
    assert not mech.predict_particles(q, qd, noise, 2e-3).any()
    assert np.array_equal(q, np.vstack([a[0] for a in alone]))
    assert np.array_equal(qd, np.vstack([a[1] for a in alone]))


def test_a_state_the_lanes_cannot_move_fails_alone(compiled: Compiled) -> None:
    """A NaN noise passes the start of a state but breaks its lane: that state is moved
    again alone, which reports it, and its lane neighbours are untouched."""
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    q, qd = states(mech, 16)
    noise = np.random.default_rng(0).normal(size=(16, mech.dof))
    clean_q, clean_qd = q.copy(), qd.copy()
    mech.predict_particles(clean_q, clean_qd, noise, 1e-3)
    noise[5] = np.nan
    before = q[5].copy()
    status = mech.predict_particles(q, qd, noise, 1e-3)
    assert status.tolist() == [0] * 5 + [mech.lib.MB_NOT_FINITE] + [0] * 10
    assert np.array_equal(q[5], before)
    good = [k for k in range(16) if k != 5]
    assert np.array_equal(q[good], clean_q[good]) and np.array_equal(qd[good], clean_qd[good])


def test_a_singular_state_in_a_lane_gets_the_status_it_gets_alone(
        compiled: Compiled) -> None:
    """The lanes' choice of z gives up on a singular Φq (q = 0 puts the crank's point on
    its fixed pivot: that row of Φq vanishes); the state's status is the one it gets in a
    call of its own and its lane neighbours move as without it."""
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    q, qd = states(mech, 16)
    noise = np.random.default_rng(0).normal(size=(16, mech.dof))
    clean_q, clean_qd = q.copy(), qd.copy()
    mech.predict_particles(clean_q, clean_qd, noise, 1e-3)
    q[2], qd[2] = 0.0, 0.0
    alone = mech.predict_particles(q[2:3].copy(), qd[2:3].copy(), noise[2:3].copy(), 1e-3)
    assert alone.tolist() == [mech.lib.MB_SINGULAR_PHIQ]
    status = mech.predict_particles(q, qd, noise, 1e-3)
    assert status.tolist() == [0, 0, mech.lib.MB_SINGULAR_PHIQ] + [0] * 13
    assert not q[2].any()
    good = [k for k in range(16) if k != 2]
    assert np.array_equal(q[good], clean_q[good]) and np.array_equal(qd[good], clean_qd[good])


def test_a_batch_split_across_threads_gives_the_same_states(
        compiled: Compiled, monkeypatch: pytest.MonkeyPatch) -> None:
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    q, qd = states(mech, 64)
    noise = np.random.default_rng(2).normal(size=(64, mech.dof))
    one_q, one_qd = q.copy(), qd.copy()
    mech.predict_particles(one_q, one_qd, noise, 1e-3)
    monkeypatch.setattr(parallel, "MIN_CHUNK", 8)
    monkeypatch.setattr(parallel, "usable_cores", lambda: 3)
    assert not mech.predict_particles(q, qd, noise, 1e-3).any()
    assert np.array_equal(q, one_q) and np.array_equal(qd, one_qd)


@pytest.mark.parametrize("count", [1, 1023, 1024, 10_000, 10_007])
def test_run_split_covers_a_batch_once_in_pieces_of_whole_lanes(
        count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "usable_cores", lambda: 2)
    pieces: list[tuple[int, int]] = []

    def call(start: int, stop: int) -> int:
        pieces.append((start, stop))
        return stop - start  # the sum comes back as the failed count

    assert parallel.run_split(call, count) == count
    pieces.sort()
    assert [start for start, _ in pieces] == [0] + [stop for _, stop in pieces[:-1]]
    assert pieces[-1][1] == count and all(start < stop for start, stop in pieces)
    assert all(start % parallel.ALIGN == 0 for start, _ in pieces)
    assert len(pieces) == (1 if count < 2 * parallel.MIN_CHUNK else
                           min(2 * parallel.PIECES_PER_CORE, count // parallel.MIN_CHUNK))


def test_mbgen_threads_sets_how_many_threads_a_batch_uses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    threads: set[str] = set()

    def call(start: int, stop: int) -> int:
        threads.add(threading.current_thread().name)
        return 0

    monkeypatch.setenv("MBGEN_THREADS", "1")
    parallel.run_split(call, 100_000)
    assert threads == {threading.current_thread().name}
    monkeypatch.setenv("MBGEN_THREADS", "3")
    assert parallel.usable_cores() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("MBGEN_THREADS", bad)
        with pytest.raises(ValueError, match="MBGEN_THREADS must be a positive whole"):
            parallel.run_split(call, 100_000)


def test_bad_arguments(compiled: Compiled) -> None:
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    q, qd = states(mech, 3)
    with pytest.raises(ValueError, match="noise must be"):
        mech.predict_particles(q, qd, np.zeros((3, 2)), 1e-3)
    with pytest.raises(ValueError, match="q must be"):
        mech.predict_particles(q.T.copy(), qd, np.zeros((3, 1)), 1e-3)
    with pytest.raises(ValueError, match="unknown integrator"):
        mech.predict_particles(q, qd, np.zeros((3, 1)), 1e-3, "trapezoidal")

"""The particle-filter observer: it tracks the paper's simulated four-bar from a gyroscope
and finds its branch; bad particles and hopeless readings never break it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import SHIPPED_DIR, reference

from mbgen.dynamics import simulate
from mbgen.estimation.particle_filter import ParticleFilter, find_branches
from mbgen.runtime.compiled import CompiledMechanism

Compiled = Callable[[Path], CompiledMechanism]


@pytest.fixture(scope="module")
def gyro_fourbar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fourbars1.yaml (the paper's geometry) with a gyroscope on its longest bar."""
    path = tmp_path_factory.mktemp("pf") / "fourbar_gyro.yaml"
    path.write_text(reference("fourbars1").read_text()
                    + "sensors:\n  - {type: gyroscope, body: 2, name: rocker_gyro}\n")
    return path


def crank_angle(q: np.ndarray) -> np.ndarray:
    return np.arctan2(q[..., 1], q[..., 0])


def test_tracks_the_simulated_four_bar_and_finds_its_branch(compiled: Compiled,
                                                             gyro_fourbar: Path) -> None:
    """The paper's experiment: readings with σr = 0.3 deg/s, filter σs = 1 deg/s, σa = 1,
    a uniform initial belief over the independent coordinate, its rate and the branch."""
    mech = compiled(gyro_fourbar)
    dt = 1e-3
    truth = simulate(mech, 3.0, dt)
    rng = np.random.default_rng(3)
    readings = mech.sensors(truth.q, truth.qd)[:, 0] + np.radians(0.3) * rng.standard_normal(
        len(truth.t))
    observer = ParticleFilter(mech, particles=300, sigma_a=1.0, sigma_s=np.radians(1.0),
                              seed=1)
    true_branch = int(np.argmin([np.abs(b - mech.q0).max() for b in observer.branches]))
    errors, estimates = [], []
    for k in range(1, len(truth.t)):
        estimate = observer.step(dt, [readings[k]])
        difference = crank_angle(estimate.mean) - crank_angle(truth.q[k])
        errors.append(np.degrees(np.angle(np.exp(1j * difference))))
        estimates.append(estimate)
    errors = np.abs(np.array(errors))
    settled = truth.t[1:] >= 0.5
    assert errors[settled].max() < 2.0  # converged within 0.5 s
    assert np.sqrt(np.mean(errors[settled] ** 2)) <= 0.3
    assert estimates[-1].branch_probability[true_branch] >= 0.99
    inside = [(e.low <= q).all() and (q <= e.high).all() for e, q in zip(
        estimates[1000:], truth.q[1001:], strict=True)]
    assert np.mean(inside) > 0.8  # the 95 % intervals hold the truth most of the time


def test_branches_are_the_distinct_assemblies(compiled: Compiled,
                                              gyro_fourbar: Path) -> None:
    mech = compiled(gyro_fourbar)
    z = [mech.coordinate_index("y2")]
    branches = find_branches(mech, z, np.array([2.0]))
    assert len(branches) == 2
    assert np.abs(mech.phi(branches)).max() < 1e-10
    np.testing.assert_allclose(branches[:, z[0]], 2.0)
    assert np.abs(branches[0] - branches[1]).max() > 0.5


def test_bad_particles_and_hopeless_readings(compiled: Compiled, gyro_fourbar: Path) -> None:
    mech = compiled(gyro_fourbar)
    observer = ParticleFilter(mech, particles=50, seed=2)
    observer.q[7] = np.nan  # one broken particle
    estimate = observer.step(1e-3, [0.0])
    assert np.isfinite(estimate.mean).all() and not estimate.reinitialized
    assert observer.ess() > 40  # only the broken particle lost its weight
    hopeless = observer.step(1e-3, {"rocker_gyro": 1e9})  # no particle can explain it
    assert hopeless.reinitialized and np.isfinite(hopeless.mean).all()
    skipped = observer.step(1e-3, {"rocker_gyro": float("nan")})  # no reading this step
    assert np.isfinite(skipped.mean).all()
    with pytest.raises(KeyError, match="unknown sensor"):
        observer.step(1e-3, {"nope": 1.0})


def test_a_mechanism_without_sensors_is_refused(compiled: Compiled) -> None:
    with pytest.raises(ValueError, match="declare them under `sensors:`"):
        ParticleFilter(compiled(SHIPPED_DIR / "double-pendulum.yaml"))

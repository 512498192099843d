"""The particle-filter observer: it tracks the paper's simulated four-bar from a gyroscope
and finds its branch; bad particles and hopeless readings never break it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import SHIPPED_DIR, reference
from scipy.integrate import trapezoid

from mbgen.errors import MbgenError
from mbgen.estimation.branches import find_branches
from mbgen.estimation.particle_filter import (
    RECOVERY_READINGS,
    ParticleFilter,
    linear_gaussian_update,
    stratified_normals,
)
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.simulation import simulate

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


@pytest.mark.parametrize("branch", [0, 1])
def test_tracks_the_simulated_four_bar_from_a_uniform_belief(compiled: Compiled,
                                                              gyro_fourbar: Path,
                                                              branch: int) -> None:
    """The paper's simulated experiment: readings with σr = 0.3 deg/s, filter σs = 1 deg/s,
    σa = 1, the default particles (1000), a belief uniform over every configuration of
    both branches. The truth starts at rest in either branch: the filter converges within
    0.5 s, the crank-angle RMSE after that is ≤ 0.3°, and the true branch ends at
    p ≥ 0.99."""
    mech = compiled(gyro_fourbar)
    dt = 1e-3
    observer = ParticleFilter(mech, sigma_a=1.0, sigma_s=np.radians(1.0), seed=branch)
    assert observer.branches.count == 2
    start = observer.branches.representatives(mech.q0)[branch]
    truth = simulate(mech, 1.0, dt, q0=start)
    assert observer.branches.of(truth.q[[0, -1]]).tolist() == [branch, branch]
    rng = np.random.default_rng(branch + 10)
    readings = mech.sensors(truth.q, truth.qd)[:, 0] + np.radians(0.3) * rng.standard_normal(
        len(truth.t))
    errors, estimates = [], []
    for k in range(1, len(truth.t)):
        estimate = observer.step(dt, [readings[k]])
        difference = crank_angle(estimate.mean) - crank_angle(truth.q[k])
        errors.append(np.degrees(np.angle(np.exp(1j * difference))))
        estimates.append(estimate)
    errors = np.abs(np.array(errors))
    settled = truth.t[1:] >= 0.5
    assert errors[settled].max() < 2.0
    assert np.sqrt(np.mean(errors[settled] ** 2)) <= 0.3
    assert estimates[-1].branch_probability[branch] >= 0.99
    assert len(observer.q) == 1000  # the initial pool has come down to the particles asked


def test_an_accelerometer_is_weighed_with_the_sensors_and_alone(
        compiled: Compiled, tmp_path: Path) -> None:
    """The four-bar of the test above with an accelerometer on the coupler (σ 1 m/s²):
    with the gyroscope, the crank-angle RMSE after 0.5 s stays as small as the gyroscope's
    alone and the truth stays inside the 95 % interval; the accelerometer alone tracks the
    crank too (its interval is too narrow then: docs/estimation.md)."""
    path = tmp_path / "fourbar_imu.yaml"
    path.write_text(reference("fourbars1").read_text() + (
        "sensors:\n  - {type: gyroscope, body: 2, name: rocker_gyro, noise: 0.0175}\n"
        "  - {type: accelerometer, body: 1, point: 2, name: imu, noise: 1.0}\n"))
    mech, dt = compiled(path), 1e-3
    truth = simulate(mech, 1.0, dt)
    rng = np.random.default_rng(10)
    readings = np.column_stack([
        mech.sensors(truth.q, truth.qd)[:, 0] + np.radians(0.3) * rng.standard_normal(
            len(truth.t)),
        mech.accelerometers(truth.q, truth.qdd) + rng.standard_normal((len(truth.t), 2))])
    settled = truth.t[1:] >= 0.5

    def run(columns: list[int]) -> tuple[float, float]:
        """Crank-angle RMSE [deg] after 0.5 s, and how often the crank's x is inside."""
        observer = ParticleFilter(mech, seed=0)
        assert observer.labels == ["rocker_gyro", "imu.x", "imu.y"]
        used = np.full_like(readings, np.nan)
        used[:, columns] = readings[:, columns]
        estimates = [observer.step(dt, used[k]) for k in range(1, len(truth.t))]
        angle = np.array([crank_angle(e.mean) for e in estimates]) - crank_angle(truth.q[1:])
        inside = np.array([e.low[0] <= q[0] <= e.high[0]
                           for e, q in zip(estimates, truth.q[1:], strict=True)])
        errors = np.degrees(np.angle(np.exp(1j * angle)))[settled]
        return float(np.sqrt(np.mean(errors**2))), float(inside[settled].mean())

    both, covered = run([0, 1, 2])
    assert both <= 0.1 and covered >= 0.9
    alone, _ = run([1, 2])
    assert alone <= 2.0


def test_branches_are_the_separate_assemblies(compiled: Compiled,
                                              gyro_fourbar: Path) -> None:
    """fourbars1: the crank turns fully, so its configurations form two closed curves, the
    file's assembly and its mirror image about the ground line (point 2 at (1, ∓2))."""
    mech = compiled(gyro_fourbar)
    branches = find_branches(mech)
    assert branches.count == 2
    assert np.abs(mech.phi(branches.samples)).max() < 1e-9
    assert branches.of(np.array([[1.0, 0.0, 1.0, 2.0], [1.0, 0.0, 1.0, -2.0]])).tolist() == [
        0, 1]
    # every sample's mirror image is on the other branch
    crank, rocker = branches.samples[:, :2], branches.samples[:, 2:]
    along = np.array([4.0, 0.0]) - crank  # the line from point 1 to B
    along /= np.linalg.norm(along, axis=1, keepdims=True)
    relative = rocker - crank
    mirror = crank + 2 * (relative * along).sum(axis=1, keepdims=True) * along - relative
    mirrored = np.hstack([crank, mirror])
    assert np.abs(mech.phi(mirrored)).max() < 1e-9
    assert (branches.of(mirrored) == 1 - branches.label).all()


def test_a_local_belief_stays_near_q0(compiled: Compiled, gyro_fourbar: Path) -> None:
    """spread: the initial particles lie within about ±spread of q0, on its branch."""
    mech = compiled(gyro_fourbar)
    observer = ParticleFilter(mech, particles=50, sigma_s=1e-3, spread=0.05, speed=0.0,
                              pool=1)
    assert np.abs(observer.q - mech.q0).max() < 0.2
    assert np.abs(observer.qd).max() < 1e-12
    assert observer.estimate().branch_probability.tolist() == [1.0, 0.0]


def test_an_open_chain_has_one_branch(compiled: Compiled) -> None:
    assert find_branches(compiled(SHIPPED_DIR / "double-pendulum.yaml")).count == 1


def test_bad_particles_and_hopeless_readings(compiled: Compiled, gyro_fourbar: Path) -> None:
    mech = compiled(gyro_fourbar)
    observer = ParticleFilter(mech, particles=50, sigma_s=1e-3, seed=2, pool=1)
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


def test_a_sensor_noise_is_never_made_up(compiled: Compiled, gyro_fourbar: Path) -> None:
    """A sensor without a declared `noise` needs one given: the filter used to invent
    1e-3 and report intervals that meant nothing; the declared one is used as is."""
    mech = compiled(gyro_fourbar)
    with pytest.raises(MbgenError, match="rocker_gyro of fourbar_gyro declare.s. no `noise`"):
        ParticleFilter(mech, particles=10)
    assert ParticleFilter(mech, particles=10, sigma_s=0.02).sigma_s.tolist() == [0.02]
    declared = compiled(SHIPPED_DIR / "actuated-double-pendulum.yaml")
    assert ParticleFilter(declared, particles=4).sigma_s.tolist() == [1e-4, 1e-4]


def test_a_mechanism_without_sensors_is_refused(compiled: Compiled) -> None:
    with pytest.raises(ValueError, match="declare them under `sensors:`"):
        ParticleFilter(compiled(SHIPPED_DIR / "double-pendulum.yaml"))


def test_angles_are_averaged_on_the_circle(compiled) -> None:
    """Particles on both sides of ±π average to π (the linear mean says 0), with an
    interval around it; a coordinate in metres keeps its linear mean, and an angle a
    turn away stays in the particles' turn."""
    mech = compiled(SHIPPED_DIR / "actuated-double-pendulum.yaml")
    observer = ParticleFilter(mech, particles=4, seed=0)
    theta2 = mech.coordinate_index("theta2")
    q = np.tile(mech.q0, (4, 1))
    q[:, theta2] = [np.pi - 0.1, -np.pi + 0.1, np.pi - 0.05, -np.pi + 0.05]
    q[:, 0] = [0.1, 0.2, 0.3, 0.4]
    observer.q, observer.branch = q, np.zeros(4, dtype=int)
    observer.log_w = np.log(np.array([0.4, 0.3, 0.2, 0.1]))
    observer.log_p = np.where(np.arange(observer.branches.count) == 0, 0.0, -np.inf)
    estimate = observer.estimate()
    deviation = np.array([-0.1, 0.1, -0.05, 0.05])
    expected = np.pi + np.angle(np.exp(1j * deviation) @ np.array([0.4, 0.3, 0.2, 0.1]))
    assert estimate.mean[theta2] == pytest.approx(expected, abs=1e-12)
    assert estimate.low[theta2] == pytest.approx(np.pi - 0.1)
    assert estimate.high[theta2] == pytest.approx(np.pi + 0.1)
    assert estimate.mean[0] == pytest.approx(0.2)
    observer.q[:, theta2] += 2 * np.pi  # one turn on
    assert observer.estimate().mean[theta2] == pytest.approx(expected + 2 * np.pi, abs=1e-12)


def test_a_readings_file_in_one_call(compiled: Compiled, gyro_fourbar: Path) -> None:
    """run() steps at dt over the readings' times, takes a reading only where one lies
    within half a step (NaN: none) and gives the estimates of the same filter stepped by
    hand; its table has the CSV's columns."""
    mech = compiled(gyro_fourbar)
    truth = simulate(mech, 0.06, 2e-3)
    readings = mech.sensors(truth.q, truth.qd)
    readings[1::3] = np.nan  # no reading then
    kept = np.ones(len(truth.t), dtype=bool)
    kept[5] = False  # a gap in the file: the filter steps across it without a reading
    options = {"particles": 30, "pool": 2, "sigma_s": np.radians(1.0), "seed": 4}
    track = ParticleFilter(mech, **options).run(truth.t[kept], readings[kept])
    step = float(np.median(np.diff(truth.t[kept])))
    by_hand = ParticleFilter(mech, **options)
    expected = [by_hand.estimate(by_hand.update(readings[0]))]
    for k in range(1, len(truth.t)):
        reading = readings[k] if kept[k] and np.isfinite(readings[k]).all() else None
        expected.append(by_hand.step(step, reading))
    assert np.allclose(track.t, truth.t, atol=1e-12)
    assert np.array_equal(track.mean, np.array([e.mean for e in expected]))
    assert np.array_equal(track.branch_probability,
                          np.array([e.branch_probability for e in expected]))
    header, rows = track.table(mech.coordinate_names)
    assert header[:4] == ["t", "x1", "x1_lo", "x1_hi"] and header[-4:] == [
        "ess", "restart", "p_branch0", "p_branch1"]
    assert rows.shape == (len(truth.t), len(header))
    assert np.array_equal(rows[:, 1], track.mean[:, 0])
    assert np.array_equal(track.weighed, kept & np.isfinite(readings[:, 0]))
    header, rows = track.table(mech.coordinate_names, sigma=True)
    assert header[:5] == ["t", "x1", "x1_lo", "x1_hi", "x1_sigma"]
    assert np.array_equal(rows[:, 4], track.sigma[:, 0])


def test_the_spread_is_the_particles_weighted_standard_deviation(
        compiled: Compiled, gyro_fourbar: Path) -> None:
    """σ of each coordinate is the weighted standard deviation of the particles (NumPy's
    weighted covariance as the independent reference)."""
    mech = compiled(gyro_fourbar)
    observer = ParticleFilter(mech, particles=400, sigma_s=0.02, seed=3, pool=1)
    for reading in (0.0, 0.1, 0.2):
        estimate = observer.step(1e-3, [reading])
    w = observer.weights() / observer.weights().sum()
    reference_sigma = [np.sqrt(np.cov(observer.q[:, k], aweights=w, bias=True))
                       for k in range(mech.n)]
    assert np.allclose(estimate.sigma, reference_sigma, rtol=1e-9, atol=1e-15)
    assert np.all(estimate.sigma > 0)


@pytest.mark.parametrize("hopeless_at", [-1, -(RECOVERY_READINGS + 2)])
def test_a_filter_that_started_over_is_trusted_after_enough_readings(
        compiled: Compiled, gyro_fourbar: Path, hopeless_at: int) -> None:
    """One reading no particle can explain makes the filter start over; its track is
    trusted again only after RECOVERY_READINGS more readings."""
    mech = compiled(gyro_fourbar)
    truth = simulate(mech, 0.05, 1e-3)
    readings = mech.sensors(truth.q, truth.qd).reshape(len(truth.t), -1)
    readings[hopeless_at] = 1e6
    track = ParticleFilter(mech, particles=40, pool=2, sigma_s=0.02, seed=1).run(
        truth.t, readings)
    assert track.restarts >= 1 and track.reinitialized[hopeless_at]
    assert track.recovered == (hopeless_at < -RECOVERY_READINGS)
    assert track.table(mech.coordinate_names)[1][hopeless_at, -3] == 1.0  # restart column


def test_a_prior_around_the_start(compiled: Compiled, gyro_fourbar: Path) -> None:
    """A prior cloud around the truth's start in branch 1 (q within ±0.01, moved onto the
    constraints by the filter): the belief starts there, all on branch 1, and tracks
    from the first step; a prior of the wrong shape is refused."""
    mech = compiled(gyro_fourbar)
    branches = find_branches(mech)
    start = branches.representatives(mech.q0)[1]
    truth = simulate(mech, 0.2, 1e-3, q0=start)
    rng = np.random.default_rng(3)
    prior_q = start + 0.01 * rng.uniform(-1.0, 1.0, (500, mech.n))
    observer = ParticleFilter(mech, particles=100, sigma_s=np.radians(1.0), seed=3,
                              branches=branches, prior=(prior_q, np.zeros_like(prior_q)))
    first = observer.estimate()
    assert first.branch_probability.tolist() == [0.0, 1.0]
    assert abs(crank_angle(first.mean) - crank_angle(start)) < np.radians(0.2)
    assert np.abs(mech.phi(observer.q)).max() < 1e-10
    readings = mech.sensors(truth.q, truth.qd)[:, 0] + np.radians(0.3) * rng.standard_normal(
        len(truth.t))
    errors = [crank_angle(observer.step(1e-3, [readings[k]]).mean) - crank_angle(truth.q[k])
              for k in range(1, len(truth.t))]
    assert np.degrees(np.abs(errors)).max() < 0.2
    with pytest.raises(ValueError, match="prior must be"):
        ParticleFilter(mech, sigma_s=1e-3, branches=branches,
                       prior=(prior_q[:, :2], prior_q[:, :2]))


def test_a_uniform_belief_takes_its_velocities_from_the_first_reading(
        compiled: Compiled, gyro_fourbar: Path) -> None:
    """The rocker read turning at 30 deg/s (σs = 1 deg/s): a uniform belief's particles
    all get velocities that agree with it, on the constraints, so the pool of 1 000 keeps
    its spread; the same particles given as a prior (velocities as drawn) leave so few
    that agree that the pool comes down to the 50 asked at once."""
    mech = compiled(gyro_fourbar)
    reading, sigma = np.radians(30.0), np.radians(1.0)
    observer = ParticleFilter(mech, particles=50, sigma_s=sigma, seed=3, pool=20)
    drawn = (observer.q.copy(), observer.qd.copy())
    observer.update([reading])
    assert len(observer.q) == 1000 and observer.ess() > 100
    h = mech.sensors(observer.q, observer.qd)[:, 0]
    assert np.quantile(np.abs(h - reading), 0.99) < 4 * sigma
    assert np.abs(np.einsum("kij,kj->ki", mech.phi_q(observer.q), observer.qd)).max() < 1e-10
    as_prior = ParticleFilter(mech, particles=50, sigma_s=sigma, seed=3, pool=20,
                              branches=observer.branches, prior=drawn)
    as_prior.update([reading])
    assert len(as_prior.q) == 50


def test_linear_gaussian_update_against_quadrature_and_the_covariance_form() -> None:
    """log p(r) of r = A s + e agrees (up to its one constant) with the integral over s by
    quadrature; the draws of s have the posterior's mean and covariance written in the
    covariance form (prior Aᵀ C⁻¹ r, prior I − prior² Aᵀ C⁻¹ A), not the information
    form the function uses."""
    rng = np.random.default_rng(0)
    A = np.array([[[0.7]], [[-2.0]], [[0.0]], [[5.0]]])
    r = np.array([[0.3], [1.1], [0.2], [-4.0]])
    noise, prior = np.array([0.04]), 1.5
    log_p, _ = linear_gaussian_update(A, r, noise, prior, rng.standard_normal((4, 1, 1)))
    s = np.linspace(-12.0, 12.0, 240_001)
    density = [np.exp(-0.5 * (r[i, 0] - A[i, 0, 0] * s) ** 2 / noise[0] - 0.5 * s**2 / prior)
               for i in range(len(r))]
    quadrature = np.log([trapezoid(f, s) for f in density])
    assert np.allclose(log_p - log_p[0], quadrature - quadrature[0], atol=1e-9)

    A2 = np.array([[[1.0, -0.5], [0.3, 2.0], [0.0, 1.0]]])  # 3 readings, 2 velocities
    r2 = np.array([[4.0, -10.0, 2.0]])
    noise2 = np.array([0.1, 0.2, 0.05])
    count = 200_000
    # stratified within groups of 8 (as the filter's copies of one configuration): each
    # draw is still standard normal
    normals = stratified_normals(np.repeat(np.arange(count // 8), 8), 2, rng)
    _, draws = linear_gaussian_update(np.repeat(A2, count, 0), np.repeat(r2, count, 0),
                                      noise2, prior, normals)
    C = prior * A2[0] @ A2[0].T + np.diag(noise2)
    gain = prior * A2[0].T @ np.linalg.inv(C)
    mean, cov = gain @ r2[0], prior * np.eye(2) - gain @ A2[0] * prior
    assert np.allclose(draws.mean(axis=0), mean, atol=5 * np.sqrt(cov.max() / count))
    assert np.allclose(np.cov(draws.T), cov, atol=0.01 * cov.max())


def test_stratified_normals_take_one_quantile_stratum_per_copy() -> None:
    """Within each group of k copies, every direction's k draws fall in the k different
    strata [j/k, (j+1)/k) of the normal's quantiles (a Latin hypercube), whatever the
    groups' sizes and order; across many groups each stratum is equally likely."""
    from scipy.special import ndtr

    rng = np.random.default_rng(4)
    group = rng.permutation(np.repeat(np.arange(300), rng.integers(1, 12, 300)))
    u = ndtr(stratified_normals(group, 3, rng)[:, :, 0])
    for g in range(300):
        mine = u[group == g]
        k = len(mine)
        for i in range(3):
            assert sorted(np.floor(mine[:, i] * k).astype(int)) == list(range(k))
    assert abs(u.mean() - 0.5) < 0.01


def furuta_swinging(mech: CompiledMechanism, seconds: float, seed: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The shipped Furuta pendulum simulated from θ1 = 0.7, θ2 = 0.4 rad (not the file's
    q0, which the branch samples hold) at θ̇ = (1, 2) rad/s: t (N,), q (N, n) and the two
    encoders' readings (N, 2) with their file noise, 1e-4 rad."""
    z = [mech.coordinate_index(c) for c in ("theta1", "theta2")]
    guess = mech.q0.copy()
    guess[z] = (0.7, 0.4)
    start = mech.solve_position(guess[None])[0]
    assert np.allclose(start[z], (0.7, 0.4))
    rates = mech.solve_velocity(start, np.array([1.0, 2.0]), z=z)
    truth = simulate(mech, seconds, 1e-3, q0=start, qd0=rates)
    noise = mech.sensor_noise()
    assert np.allclose(noise, 1e-4)
    rng = np.random.default_rng(seed)
    readings = mech.sensors(truth.q, truth.qd).reshape(len(truth.t), -1) + noise * \
        rng.standard_normal((len(truth.t), 2))
    return truth.t, truth.q, readings


def test_the_furuta_pendulum_with_two_precise_encoders(compiled: Compiled) -> None:
    """Two encoders read to 1e-4 rad, the truth a simulation from a configuration the
    uniform belief's samples do not hold: the filter tracks the whole 0.6 s without
    starting over, the truth's angles lie inside the 95 % interval about as often as it
    claims (0.85-0.995 of the steps, each angle; errors far below the encoders' quantum
    would not show an interval that is merely wide), finds the branch (p ≥ 0.99) and calls
    its track trusted. Before the tempered first reading and the ensemble moves it started
    over at every reading and gave up."""
    mech = compiled(SHIPPED_DIR / "furuta.yaml")
    t, q, readings = furuta_swinging(mech, 0.6, seed=4)
    observer = ParticleFilter(mech, particles=500, seed=4)
    track = observer.run(t, readings)
    assert not track.gave_up and track.restarts == 0 and len(track.t) == len(t)
    angles = [mech.coordinate_index(c) for c in ("theta1", "theta2")]
    inside = (q[:, angles] >= track.low[:, angles]) & (q[:, angles] <= track.high[:, angles])
    settled = t >= 0.1
    assert (inside[settled].mean(axis=0) >= 0.85).all(), inside[settled].mean(axis=0)
    assert (inside[settled].mean(axis=0) <= 0.995).all(), inside[settled].mean(axis=0)
    error = np.abs(track.mean[:, angles] - q[:, angles])[settled]
    assert np.sqrt(np.mean(error**2)) < 1e-4  # within the encoders' noise
    half_width = 0.5 * (track.high - track.low)[:, angles][settled]
    assert np.median(half_width) < 3e-4  # the interval is as narrow as the readings allow
    branch = observer.branches.of(q[[0]])[0]
    assert track.branch_probability[-1, branch] >= 0.99
    assert track.distrust() is None


def test_a_cloud_narrower_than_its_error_is_untrusted(compiled: Compiled,
                                                      gyro_fourbar: Path) -> None:
    """A gyroscope read with noise 0.3 deg/s weighed as if it were 0.1 deg/s: the
    readings' normalized innovations under the predicted cloud are far from standard
    normal, and the track says it is not to be trusted; weighed at a σ above the true
    noise, it is trusted."""
    mech = compiled(gyro_fourbar)
    truth = simulate(mech, 0.6, 1e-3)
    rng = np.random.default_rng(5)
    readings = (mech.sensors(truth.q, truth.qd).reshape(len(truth.t), -1)
                + np.radians(0.3) * rng.standard_normal((len(truth.t), 1)))
    prior = (np.repeat(truth.q[:1], 200, 0), np.repeat(truth.qd[:1], 200, 0))
    runs = {sigma: ParticleFilter(mech, particles=200, pool=1, sigma_s=np.radians(sigma),
                                  seed=5, prior=prior).run(truth.t, readings)
            for sigma in (0.1, 0.5)}
    assert runs[0.1].restarts == 0
    why = runs[0.1].distrust()
    assert why is not None and "inconsistent" in why
    assert runs[0.5].distrust() is None
    assert np.nanmean(runs[0.1].innovation**2) > 5 * np.nanmean(runs[0.5].innovation**2)

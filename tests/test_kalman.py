"""The errorEKF and the UKF in independent coordinates (estimation/kalman.py,
estimation/ukf.py, csrc/kalman.c): on a mechanism whose dynamics are linear each is the
linear Kalman filter written here in a few lines of NumPy (the unscented transform is exact
for linear maps); the EKF's transition Jacobians against finite differences, entry by
entry, on the four-bar and the Furuta pendulum; each filter in C against its NumPy
reference; both from the command line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, SHIPPED_DIR, finite_difference_error

from mbgen.cli.conventions import EXIT_BAD_INPUT, EXIT_UNTRUSTED, EXIT_USAGE, untrusted_path
from mbgen.estimation.kalman import ErrorEKF
from mbgen.estimation.ukf import UnscentedKF
from mbgen.runtime.compiled import CompiledMechanism

Compiled = Callable[[Path], CompiledMechanism]
SLIDER = REPO / "tests" / "data" / "slider-spring-damper.yaml"
FOURBAR = SHIPPED_DIR / "fourbar.yaml"
FURUTA = SHIPPED_DIR / "furuta.yaml"


def linear_kalman(x0: np.ndarray, P0: np.ndarray, A: np.ndarray, dt: float, sigma_a: float,
                  sigma_f: float, H: np.ndarray, noise: np.ndarray, y: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The textbook Kalman filter of ẋ = A x + e ε (x = (position, velocity, force), ε
    on the acceleration held over each step, the force a random walk) discretized as RK4
    does a linear system: the transition is the fourth-order Taylor polynomial of
    exp(A dt) over (x, ε). Rows of y with NaN: no update. Returns the means (N, 3) and
    variances (N, 3)."""
    augmented = np.zeros((4, 4))
    augmented[:3, :3] = A
    augmented[1, 3] = 1.0
    step = sum((np.linalg.matrix_power(augmented * dt, j) / np.prod(np.arange(1, j + 1))
                for j in range(5)), np.zeros((4, 4)))
    F, G = step[:3, :3], step[:3, 3:]
    Q = sigma_a**2 * G @ G.T + np.diag([0.0, 0.0, sigma_f**2 * dt])
    x, P, means, variances = x0, P0, [], []
    for k, reading in enumerate(y):
        if k:
            x, P = F @ x, F @ P @ F.T + Q
        if np.isfinite(reading).all():
            K = P @ H.T @ np.linalg.inv(H @ P @ H.T + np.diag(noise**2))
            x, P = x + K @ (reading - H @ x), (np.eye(3) - K @ H) @ P
        means.append(x)
        variances.append(np.diag(P))
    return np.array(means), np.array(variances)


@pytest.mark.parametrize("kind", [ErrorEKF, UnscentedKF], ids=["ekf", "ukf"])
def test_on_a_linear_mechanism_the_filter_is_the_linear_kalman_filter(
        compiled: Compiled, kind: type[ErrorEKF]) -> None:
    mech = compiled(SLIDER)
    p = dict(mech.parameters)
    m, k, c = p["m"], p["k"], p["c"]
    dt, steps, sigma_a, sigma_f = 1e-2, 300, 0.5, 2.0
    rng = np.random.default_rng(3)
    # readings of the gauge's x and y (y reads 0: the guide), any numbers will do
    t = dt * np.arange(steps)
    y = np.column_stack([0.25 * np.cos(3 * t) + 0.01 * rng.standard_normal(steps),
                         0.01 * rng.standard_normal(steps)])
    y[::7] = np.nan  # steps without a reading
    noise = mech.sensor_noise()
    ekf = kind(mech, sigma_a=sigma_a, unknown_forces=["x0"], sigma_f=sigma_f, spread=0.2,
               speed=0.5, force_spread=3.0)
    track = ekf.run(t, y, dt)
    # ẍ = (-k (x + 1 - L0) - c ẋ + f) / m, L0 = 1: linear in (x, ẋ, f)
    assert p["L0"] == 1.0
    A = np.array([[0.0, 1.0, 0.0], [-k / m, -c / m, 1.0 / m], [0.0, 0.0, 0.0]])
    H = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    x0, P0 = np.array([mech.q0[0], 0.0, 0.0]), np.diag([0.2**2, 0.5**2, 3.0**2])
    means, variances = linear_kalman(x0, P0, A, dt, sigma_a, sigma_f, H, noise, y)
    assert not track.failed and len(track.t) == steps
    np.testing.assert_allclose(track.q[:, 0], means[:, 0], rtol=0, atol=1e-9)
    np.testing.assert_allclose(track.qd[:, 0], means[:, 1], rtol=0, atol=1e-9)
    np.testing.assert_allclose(track.force[:, 0], means[:, 2], rtol=0, atol=1e-9)
    np.testing.assert_allclose(track.sigma_q[:, 0], np.sqrt(variances[:, 0]), rtol=1e-9,
                               atol=1e-12)
    np.testing.assert_allclose(track.sigma_force[:, 0], np.sqrt(variances[:, 2]),
                               rtol=1e-9)
    # the block's other end follows x0 rigidly, as does its σ
    np.testing.assert_allclose(track.q[:, 2] - track.q[:, 0], p["l"], atol=1e-12)
    np.testing.assert_allclose(track.sigma_q[:, 2], track.sigma_q[:, 0], rtol=1e-12)


@pytest.mark.parametrize("path, forces", [(FOURBAR, ["x1"]), (FURUTA, ["theta1"])],
                         ids=["fourbar", "furuta"])
def test_transition_jacobians_match_finite_differences(compiled: Compiled, path: Path,
                                                       forces: list[str]) -> None:
    mech = compiled(path)
    rng = np.random.default_rng(1)
    d = mech.dof
    ekf = ErrorEKF(mech, unknown_forces=forces)
    # a moving state away from q0, with a force
    z = ekf.q[ekf.zi] + 0.1 * rng.standard_normal(d)
    start_q, start_qd = ekf.assemble(z, rng.normal(0.0, 1.5, d), ekf.q)
    start_f = rng.normal(0.0, 0.5, len(forces))
    dt = 5e-3

    def advance(x: np.ndarray) -> np.ndarray:
        """(z, ż) after one step from the state x = (z, ż, f, ε)."""
        ekf.q, ekf.qd = ekf.assemble(x[:d], x[d:2 * d], start_q)
        ekf.f = x[2 * d:2 * d + len(forces)]
        q, qd, _, _ = ekf.transition(dt, x[2 * d + len(forces):])
        return np.concatenate([q[ekf.zi], qd[ekf.zi]])

    x0 = np.concatenate([start_q[ekf.zi], start_qd[ekf.zi], start_f, np.zeros(d)])
    ekf.q, ekf.qd, ekf.f = start_q, start_qd, start_f
    _, _, F, G = ekf.transition(dt)
    analytic = np.hstack([F[:2 * d], G[:2 * d]])
    assert np.allclose(F[2 * d:], np.eye(len(x0) - d)[2 * d:])  # the forces: a random walk

    def numeric(h: float) -> np.ndarray:
        columns = []
        for k in range(len(x0)):
            up, down = x0.copy(), x0.copy()
            up[k] += h
            down[k] -= h
            columns.append((advance(up) - advance(down)) / (2 * h))
        return np.array(columns).T

    assert finite_difference_error(analytic, numeric, 1e-6) < 1e-5


@pytest.fixture(scope="module")
def fourbar_imu(compiled: Compiled, tmp_path_factory: pytest.TempPathFactory
                ) -> CompiledMechanism:
    """The shipped four-bar with an accelerometer on its coupler, beside the gyroscope."""
    gyro = "  - {type: gyroscope, body: 1, name: coupler_gyro, noise: 0.0175}\n"
    text = FOURBAR.read_text()
    assert gyro in text
    path = tmp_path_factory.mktemp("imu") / "fourbar-imu.yaml"
    path.write_text(text.replace(gyro, gyro + "  - {type: accelerometer, body: 1, "
                                 "name: imu, noise: 0.5}\n"))
    return compiled(path)


def swinging(mech: CompiledMechanism, steps: int, dt: float, seed: int = 0
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Times (N,), the truth's q (N, n) and noisy readings (N, sensors + accelerometers)
    of the mechanism released from q0 at rest."""
    q, qd, qdd = mech.integrate(mech.q0, np.zeros(mech.n), dt, steps - 1)
    rng = np.random.default_rng(seed)
    parts = [mech.sensors(q, qd).reshape(steps, -1)
             + mech.sensor_noise() * rng.standard_normal((steps, len(mech.sensor_labels)))]
    if mech.accelerometer_labels:
        parts.append(mech.accelerometers(q, qdd).reshape(steps, -1) + mech.accelerometer_noise()
                     * rng.standard_normal((steps, len(mech.accelerometer_labels))))
    return dt * np.arange(steps), q, np.hstack(parts)


def test_the_measurement_jacobian_matches_finite_differences(
        fourbar_imu: CompiledMechanism) -> None:
    mech = fourbar_imu
    ekf = ErrorEKF(mech, unknown_forces=["x1"])
    d = mech.dof
    start_q, start_qd = ekf.assemble(ekf.q[ekf.zi] + 0.2, np.array([1.3]), ekf.q)
    x0 = np.array([start_q[ekf.zi][0], 1.3, 0.7])
    seen = np.ones(len(mech.sensor_labels) + len(mech.accelerometer_labels), dtype=bool)

    def model(x: np.ndarray) -> np.ndarray:
        ekf.q, ekf.qd = ekf.assemble(x[:d], x[d:2 * d], start_q)
        ekf.f = x[2 * d:]
        return ekf.measurement(seen)[0]

    model(x0)
    _, H, _ = ekf.measurement(seen)

    def numeric(h: float) -> np.ndarray:
        columns = []
        for k in range(len(x0)):
            up, down = x0.copy(), x0.copy()
            up[k] += h
            down[k] -= h
            columns.append((model(up) - model(down)) / (2 * h))
        return np.array(columns).T

    assert H.shape == (3, 3) and np.abs(H[1:, 2]).max() > 0  # the force moves the IMU
    assert finite_difference_error(H, numeric, 1e-6) < 1e-5


@pytest.mark.parametrize("kind, steps", [(ErrorEKF, 1500), (UnscentedKF, 400)],
                         ids=["ekf", "ukf"])
def test_the_filter_in_c_is_the_reference(fourbar_imu: CompiledMechanism,
                                          kind: type[ErrorEKF], steps: int) -> None:
    """The whole run in one C call against the step-by-step NumPy filter: gyroscope and
    accelerometer, an unknown force, steps without readings, z chosen again (the UKF's
    reference is slower: fewer steps, still two switches)."""
    mech = fourbar_imu
    t, _, y = swinging(mech, steps, 2e-3)
    y[5::9, 0] = np.nan
    y[3::11] = np.nan
    tracks, switches = [], []
    for native in (False, True):
        ekf = kind(mech, sigma_a=2.0, unknown_forces=["x1"], sigma_f=3.0, spread=0.05)
        tracks.append(ekf.run(t, y, native=native))
        switches.append(ekf.switches)
    reference, native_track = tracks
    assert switches[0] == switches[1] >= 1
    assert not reference.failed and not native_track.failed
    for name in ("q", "qd", "qdd", "sigma_q", "sigma_qd", "force", "sigma_force", "nis",
                 "residuals"):
        np.testing.assert_allclose(getattr(native_track, name), getattr(reference, name),
                                   rtol=1e-9, atol=1e-11, err_msg=name)
    np.testing.assert_array_equal(native_track.lost, reference.lost)


def read_table(path: Path) -> tuple[list[str], np.ndarray]:
    header = path.read_text().split("\n", 1)[0].split(",")
    return header, np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)


@pytest.mark.parametrize("method", ["ekf", "ukf"])
@pytest.mark.parametrize("name", ["fourbar", "furuta", "slider-crank", "bricard",
                                  "actuated-double-pendulum"])
def test_estimate_ekf_tracks_every_shipped_mechanism_with_sensors(
        run, tmp_path: Path, out_dir: Path, name: str, method: str) -> None:
    """From the command line, on the readings of a simulation from q0: the estimate
    holds the truth inside its 95 % interval about as often as it says, in the columns of
    the particle filter's table (without the branch's) and ✓."""
    path = SHIPPED_DIR / f"{name}.yaml"
    truth, readings, estimate = (tmp_path / f"{n}.csv" for n in ("truth", "readings", "e"))
    code, output = run("simulate", str(path), "--t-end", "1", "--dt", "1e-3", "--out",
                       str(truth), "--sensors-out", str(readings), "--noise-sensor", "1e-3",
                       "--build-dir", str(out_dir))
    assert code == 0, output
    code, output = run("estimate", str(path), "--data", str(readings), "--method", method,
                       "--noise-sensor", "1e-3", "--covariance", "--out", str(estimate),
                       "--build-dir", str(out_dir))
    label = {"ekf": "errorEKF", "ukf": "UKF"}[method]
    assert code == 0 and "✓" in output and f"{label} on the branch" in output, output
    header, est = read_table(estimate)
    true_header, true_q = read_table(truth)
    assert header[:5] == ["t", header[1], f"{header[1]}_lo", f"{header[1]}_hi",
                          f"{header[1]}_sigma"] and header[-2:] == ["nis", "lost"]
    np.testing.assert_allclose(est[:, 0], true_q[:, 0], atol=1e-12)
    inside = []
    for column in true_header[1:]:
        if f"{column}_sigma" not in header:
            continue
        value, sigma = est[:, header.index(column)], est[:, header.index(f"{column}_sigma")]
        moving = sigma > 1e-9 * (1 + np.abs(value))  # not held fixed by the constraints
        low, high = est[:, header.index(f"{column}_lo")], est[:, header.index(f"{column}_hi")]
        truth_q = true_q[:, true_header.index(column)]
        inside.append(((truth_q >= low) & (truth_q <= high))[moving])
    coverage = np.concatenate(inside).mean()
    assert 0.85 <= coverage <= 1.0, coverage


def refusal(run, tmp_path: Path, out_dir: Path, path: Path, text: str, *extra: str
            ) -> tuple[int, str]:
    """estimate --method ekf on readings ``text``: (exit code, output), checking that
    nothing was written."""
    readings = tmp_path / "readings.csv"
    readings.write_text(text)
    out = tmp_path / "e.csv"
    code, output = run("estimate", str(path), "--data", str(readings), "--out", str(out),
                       "--build-dir", str(out_dir), *extra)
    assert not out.exists() and not untrusted_path(out).exists()
    assert not list(tmp_path.glob("e_*.png"))
    return code, " ".join(output.split())


@pytest.mark.parametrize(("mechanism", "text", "extra", "code", "message"), [
    ("double-pendulum", "t,x\n0,1\n", ["--method", "ekf"], EXIT_USAGE, "has no sensors"),
    ("fourbar", "t,coupler_gyro\n0,1\n0.002,1\n0.001,1\n", ["--method", "ekf"],
     EXIT_BAD_INPUT, "readings.csv:4: time 0.001 is before line 3"),
    ("fourbar", "t,coupler_gyro\n0,1\n0.001,1\n", ["--method", "ekf", "--unknown-forces",
                                                     "x1,theta"], EXIT_USAGE,
     "'theta' is not a coordinate of fourbar"),
    ("fourbar", "t,coupler_gyro\n0,1\n0.001,1\n", ["--method", "ekf", "--unknown-forces",
                                                     "x1,x1"], EXIT_USAGE,
     "names a coordinate twice"),
    ("fourbar", "t,coupler_gyro\n0,1\n0.001,1\n", ["--unknown-forces", "x1"], EXIT_USAGE,
     "options of --method ekf, ukf, smoother only"),
    ("double-pendulum", "t,x\n0,1\n", ["--method", "ukf"], EXIT_USAGE, "has no sensors"),
    ("fourbar", "t,coupler_gyro\n0,1\n0.002,1\n0.001,1\n", ["--method", "ukf"],
     EXIT_BAD_INPUT, "readings.csv:4: time 0.001 is before line 3"),
    ("fourbar", "t,coupler_gyro\n0,1\n0.001,1\n", ["--method", "ukf", "--unknown-forces",
                                                     "x1,theta"], EXIT_USAGE,
     "'theta' is not a coordinate of fourbar"),
    ("fourbar", "t,coupler_gyro\n0,1\n0.001,1\n", ["--method", "ukf", "--seed", "3"],
     EXIT_USAGE, "--seed is an option of --method particle only"),
    ("fourbar", "t,coupler_gyro\n0,1\n0.001,1\n", ["--method", "ekf", "--particles", "9"],
     EXIT_USAGE, "--particles is an option of --method particle only"),
    ("fourbar", "t,coupler_gyro\n0,1\n0.001,1\n", ["--method", "kalman"], EXIT_USAGE,
     "Invalid value for '--method'"),
])
def test_estimate_ekf_refuses_broken_input_and_writes_nothing(
        run, tmp_path: Path, out_dir: Path, mechanism: str, text: str, extra: list[str],
        code: int, message: str) -> None:
    got, output = refusal(run, tmp_path, out_dir, SHIPPED_DIR / f"{mechanism}.yaml", text,
                          *extra)
    assert got == code and message in output, output


@pytest.mark.parametrize("method", ["ekf", "ukf"])
def test_an_ekf_that_loses_the_state_is_not_trusted(run, tmp_path: Path, out_dir: Path,
                                                    method: str) -> None:
    """Readings the model cannot explain (a gyroscope reading a rate far beyond what the
    state's covariance allows, at σ 1e-3): exit 4, the table kept as .untrusted.csv."""
    readings = tmp_path / "readings.csv"
    rows = [f"{k * 1e-3:.3f},{0.0 if k < 100 else 5.0}" for k in range(200)]
    readings.write_text("t,coupler_gyro\n" + "\n".join(rows) + "\n")
    out = tmp_path / "e.csv"
    code, output = run("estimate", str(SHIPPED_DIR / "fourbar.yaml"), "--data", str(readings),
                       "--method", method, "--noise-sensor", "1e-3", "--out", str(out),
                       "--build-dir", str(out_dir))
    text = " ".join(output.split())
    assert code == EXIT_UNTRUSTED and "lost the state" in text and "✓" not in text, text
    assert not out.exists() and untrusted_path(out).exists()


def test_a_step_without_a_reading_writes_a_table_animate_reads(run, tmp_path: Path) -> None:
    """Filter steps of 0.5 ms over readings every 1 ms: the steps between readings have
    no innovation (nis 0, the sum over none), and the estimate is a table `animate` takes
    (a NaN cell there was refused as not finite)."""
    out = tmp_path / "estimate.csv"
    code, output = run("estimate", str(SHIPPED_DIR / "fourbar.yaml"), "--data",
                       str(REPO / "examples" / "fourbar-readings.csv"), "--method", "ekf",
                       "--noise-sensor", "0.0175", "--dt", "0.0005", "--out", str(out))
    assert code == 0, output
    names, rows = read_table(out)
    nis = rows[:, names.index("nis")]
    assert np.isfinite(rows).all() and (nis[1::2] == 0).all() and (nis[2::2] > 0).any()
    code, output = run("animate", str(out), "--mechanism", str(SHIPPED_DIR / "fourbar.yaml"),
                       "--out", str(tmp_path / "estimate.gif"), "--fps", "5")
    assert code == 0, output

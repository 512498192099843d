"""Accelerometers (``type: accelerometer``): the specific force Rᵀ(a − g) at a point of a
body along the body's axes, checked against the kinematics written by hand (SymPy
differentiating a prescribed motion in the joint angles) on the spatial Furuta pendulum
and the planar double pendulum; their Jacobian kernels against finite differences; the
columns `simulate --with sensors` writes, the commands, the drawing; located errors."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
from conftest import SHIPPED_DIR, entrywise_error, numerical_jacobian

from mbgen.errors import MechanismError
from mbgen.model import parse_mechanism
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.simulation import simulate

Compiled = Callable[[Path], CompiledMechanism]
FURUTA_SENSORS = "  - {type: encoder, coordinate: theta1, name: enc1, noise: 1e-4}\n"
TIME = sp.Symbol("t", real=True)


def with_accelerometer(source: Path, anchor: str, line: str, target: Path) -> Path:
    text = source.read_text()
    assert anchor in text
    target.write_text(text.replace(anchor, anchor + line))
    return target


def along(q: sp.Matrix, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """q(t) and q̈(t) (len(times), n) of the prescribed motion."""
    position = sp.lambdify(TIME, q, "numpy")
    acceleration = sp.lambdify(TIME, q.diff(TIME, 2), "numpy")
    return (np.array([np.ravel(position(t)) for t in times]),
            np.array([np.ravel(acceleration(t)) for t in times]))


ENCODER_NOISE = 3e-3  # rad: cheap encoders, where an accelerometer's readings count
IMU_NOISE = 0.05  # m/s², the tip accelerometer's


def furuta_with_imu(folder: Path) -> Path:
    """The shipped Furuta pendulum with encoders of ENCODER_NOISE and an accelerometer at
    the pendulum's tip T (noise IMU_NOISE), written into ``folder``. Every test that needs
    such a pendulum writes this file byte for byte: a build is keyed by the file's bytes,
    so the (spatial, costly) compile is done once for all of them."""
    coarse = folder / "furuta-coarse.yaml"
    coarse.write_text((SHIPPED_DIR / "furuta.yaml").read_text().replace(
        "noise: 1e-4", f"noise: {ENCODER_NOISE}"))
    return with_accelerometer(coarse, FURUTA_SENSORS.replace("1e-4", str(ENCODER_NOISE)),
                              "  - {type: accelerometer, body: 1, point: T, name: imu, "
                              f"noise: {IMU_NOISE}}}\n", folder / "furuta-imu.yaml")


@pytest.fixture(scope="module")
def furuta_imu(compiled: Compiled, tmp_path_factory: pytest.TempPathFactory
               ) -> CompiledMechanism:
    """The shipped Furuta pendulum with an accelerometer at the pendulum's tip T."""
    return compiled(furuta_with_imu(tmp_path_factory.mktemp("imu")))


def test_a_spatial_accelerometer_reads_the_specific_force_along_its_body(furuta_imu) -> None:
    """On a prescribed motion θ(t), the reading at the tip T equals Rᵀ(T̈ − g), with T(θ)
    and the pendulum's rotation R = Rz(θ1) Rx(θ2) written by hand, gravity tilted."""
    mech = furuta_imu
    mech.set_parameters(tilt=0.1)
    try:
        p = dict(mech.parameters)
        t1, t2 = 0.7 * TIME + 0.4 * sp.sin(3 * TIME), 1.2 * sp.sin(2 * TIME) + 0.3
        c1, s1, c2, s2 = sp.cos(t1), sp.sin(t1), sp.cos(t2), sp.sin(t2)
        u, w, up = sp.Matrix([c1, s1, 0]), sp.Matrix([-s1, c1, 0]), sp.Matrix([0, 0, 1])
        joint = p["L1"] * u
        tip = joint + p["L2"] * (s2 * w - c2 * up)
        q = sp.Matrix.vstack(joint, tip, u, w, c2 * w + s2 * up, sp.Matrix([t1, t2]))
        rotation = (sp.Matrix([[c1, -s1, 0], [s1, c1, 0], [0, 0, 1]])
                    * sp.Matrix([[1, 0, 0], [0, c2, -s2], [0, s2, c2]]))
        gravity = sp.Matrix([p["g"] * np.sin(p["tilt"]), 0, -p["g"] * np.cos(p["tilt"])])
        expected = sp.lambdify(TIME, rotation.T * (tip.diff(TIME, 2) - gravity), "numpy")
        times = np.linspace(0.0, 2.0, 7)
        qs, qdds = along(q, times)
        assert np.abs(mech.phi(qs)).max() < 1e-12  # the hand-written q is the mechanism's
        readings = mech.accelerometers(qs, qdds)
        wanted = np.array([np.ravel(expected(t)) for t in times])
        assert mech.accelerometer_labels == ["imu.x", "imu.y", "imu.z"]
        assert np.abs(readings - wanted).max() < 1e-12 * np.abs(wanted).max()
    finally:
        mech.set_parameters(tilt=0.0)


def test_a_planar_accelerometer_reads_along_its_bar(compiled: Compiled, tmp_path: Path,
                                                     ) -> None:
    """The double pendulum's second bar with an accelerometer at the tip (x from the elbow
    to the tip): against the tip's acceleration differentiated by hand, and 9.81 along the
    bar (upward specific force) hanging at rest."""
    path = tmp_path / "double-pendulum-imu.yaml"
    path.write_text((SHIPPED_DIR / "double-pendulum.yaml").read_text() + "sensors:\n"
                    "  - {type: accelerometer, body: 1, point: 2, name: tip}\n")
    mech = compiled(path)
    a1, a2 = sp.sin(TIME) - 1.2, 0.5 * TIME**2 - 2.0
    elbow = sp.Matrix([sp.cos(a1), sp.sin(a1)])
    tip = elbow + sp.Matrix([sp.cos(a2), sp.sin(a2)])
    times = np.linspace(0.1, 1.5, 5)
    qs, qdds = along(sp.Matrix.vstack(elbow, tip), times)
    assert np.abs(mech.phi(qs)).max() < 1e-12
    axis = sp.Matrix([sp.cos(a2), sp.sin(a2)])
    across = sp.Matrix([-sp.sin(a2), sp.cos(a2)])
    specific = tip.diff(TIME, 2) - sp.Matrix([0, -9.81])
    expected = sp.lambdify(TIME, sp.Matrix([axis.dot(specific), across.dot(specific)]))
    wanted = np.array([np.ravel(expected(t)) for t in times])
    assert np.abs(mech.accelerometers(qs, qdds) - wanted).max() < 1e-12 * np.abs(wanted).max()
    hanging = np.array([0.0, -1.0, 0.0, -2.0])  # x from the elbow down to the tip
    assert mech.accelerometer_labels == ["tip.x", "tip.y"]
    assert mech.accelerometers(hanging, np.zeros(mech.n)) == pytest.approx([-9.81, 0.0])


def test_the_accelerometer_jacobians_match_finite_differences(furuta_imu) -> None:
    """∂/∂q and ∂/∂q̈ of the readings, entry by entry, at a random point."""
    rng = np.random.default_rng(4)
    q, qdd = furuta_imu.q0 + 0.1 * rng.normal(size=furuta_imu.n), rng.normal(size=furuta_imu.n)
    assert entrywise_error(furuta_imu.accelerometers_q(q, qdd), numerical_jacobian(
        lambda x: furuta_imu.accelerometers(x, qdd), q, 1e-6)) < 1e-7
    assert entrywise_error(furuta_imu.accelerometers_qdd(q, qdd), numerical_jacobian(
        lambda x: furuta_imu.accelerometers(q, x), qdd, 1e-6)) < 1e-7


def test_simulate_writes_the_accelerometer_from_the_runs_accelerations(furuta_imu) -> None:
    """`--with sensors` columns: the encoders, then the accelerometer read at each row's
    q and q̈; at rest hanging, the tip reads +g along the pendulum's z."""
    run = simulate(furuta_imu, 0.2, 1e-3, "rk4")
    header, table = run.columns(("sensors",))
    imu = [header.index(f"imu.{axis}") for axis in "xyz"]
    assert header.index("enc1") < imu[0]
    np.testing.assert_allclose(table[:, imu], furuta_imu.accelerometers(run.q, run.qdd),
                               rtol=0, atol=1e-12)
    assert table[0, imu] == pytest.approx([0.0, 0.0, 9.81], abs=1e-9)


@pytest.mark.parametrize(("line", "message"), [
    ("  - {type: accelerometer, body: 1, point: O}\n", "one of its body's points (P, T)"),
    ("  - {type: accelerometer, point: T}\n", "needs the key 'body'"),
    ("  - {type: accelerometer, body: 7}\n", "body 7 does not exist"),
])
def test_a_misplaced_accelerometer_gets_a_located_error(line: str, message: str) -> None:
    text = (SHIPPED_DIR / "furuta.yaml").read_text().replace(FURUTA_SENSORS,
                                                             FURUTA_SENSORS + line)
    with pytest.raises(MechanismError, match=re.escape(message)) as caught:
        parse_mechanism(text)
    assert f":{text.splitlines().index(line.rstrip()) + 1} [sensors[1]" in str(caught.value)


def test_the_commands_show_and_write_the_accelerometer(tmp_path: Path, out_dir: Path) -> None:
    """`info` lists it apart from the sensors, `simulate --with sensors` and
    `--sensors-out` write its columns, and `identify`, which takes them only alongside
    sensors of the state, says why a mechanism with only an accelerometer is refused."""
    from click.testing import CliRunner

    from mbgen.cli.conventions import EXIT_USAGE
    from mbgen.cli.main import cli

    path = tmp_path / "pendulum-imu.yaml"
    path.write_text((SHIPPED_DIR / "double-pendulum.yaml").read_text() + "sensors:\n"
                    "  - {type: accelerometer, body: 1, name: tip}\n")
    build = ["--build-dir", str(out_dir)]
    shown = CliRunner().invoke(cli, ["info", str(path), *build])
    assert shown.exit_code == 0 and "tip.x (accelerometer)" in shown.output, shown.output
    out = tmp_path / "run.csv"
    ran = CliRunner().invoke(cli, ["simulate", str(path), "--t-end", "0.01", "--dt", "1e-3",
                                   "--out", str(out), "--with", "sensors", *build])
    assert ran.exit_code == 0, ran.output
    assert out.read_text().splitlines()[0].split(",")[-2:] == ["tip.x", "tip.y"]
    readings = tmp_path / "s.csv"
    wrote = CliRunner().invoke(cli, ["simulate", str(path), "--t-end", "0.01", "--dt", "1e-3",
                                     "--out", str(tmp_path / "r.csv"), "--sensors-out",
                                     str(readings), *build])
    assert wrote.exit_code == 0, wrote.output
    assert readings.read_text().splitlines()[0].split(",") == ["t", "tip.x", "tip.y"]
    refused = CliRunner().invoke(cli, ["identify", str(path), "--data", str(readings),
                                       "--params", "m1", "--out", str(tmp_path / "i.csv"),
                                       *build])
    assert refused.exit_code == EXIT_USAGE, refused.output
    assert ("accelerometers (tip.x, tip.y) read q̈, which identification takes alongside "
            "sensors of the state only") in " ".join(refused.output.split())
    assert not (tmp_path / "i.csv").exists()
    alone = CliRunner().invoke(cli, ["estimate", str(path), "--data", str(readings),
                                     "--out", str(tmp_path / "e.csv"), *build])
    assert alone.exit_code == EXIT_USAGE, alone.output
    assert "alongside sensors of the state only" in " ".join(alone.output.split())
    assert not (tmp_path / "e.csv").exists()


def test_estimate_reads_the_accelerometers_columns(tmp_path: Path, out_dir: Path) -> None:
    """`simulate --sensors-out` writes the sensors' and the accelerometers' columns and
    `estimate` and `identify` take them all; `identify` also takes a file without the
    accelerometers' columns (no readings), with another result."""
    import yaml
    from click.testing import CliRunner

    from mbgen.cli.conventions import EXIT_UNTRUSTED, untrusted_path
    from mbgen.cli.main import cli

    path = tmp_path / "pendulum-imu.yaml"
    path.write_text((SHIPPED_DIR / "double-pendulum.yaml").read_text() + "sensors:\n"
                    "  - {type: encoder, coordinate: x1, name: enc, noise: 0.001}\n"
                    "  - {type: accelerometer, body: 1, name: tip, noise: 0.1}\n")
    build = ["--build-dir", str(out_dir)]
    readings = tmp_path / "s.csv"
    wrote = CliRunner().invoke(cli, ["simulate", str(path), "--t-end", "0.05", "--dt", "1e-3",
                                     "--out", str(tmp_path / "r.csv"), "--sensors-out",
                                     str(readings), "--noise-sensor", "0.001", *build])
    assert wrote.exit_code == 0, wrote.output
    assert readings.read_text().splitlines()[0].split(",") == ["t", "enc", "tip.x", "tip.y"]
    out = tmp_path / "e.csv"
    ran = CliRunner().invoke(cli, ["estimate", str(path), "--data", str(readings), "--out",
                                   str(out), "--particles", "200", *build])
    assert ran.exit_code == 0, ran.output
    assert out.read_text().splitlines()[0].startswith("t,x1")
    encoder_only = tmp_path / "enc.csv"
    encoder_only.write_text("\n".join(",".join(line.split(",")[:2])
                                      for line in readings.read_text().splitlines()) + "\n")
    found = {}
    for data in (readings, encoder_only):
        out = tmp_path / f"i-{data.stem}.yaml"
        used = CliRunner().invoke(cli, ["identify", str(path), "--data", str(data),
                                        "--params", "m", "--out", str(out), *build])
        assert used.exit_code in (0, EXIT_UNTRUSTED), used.output
        written = out if used.exit_code == 0 else untrusted_path(out)
        found[data.stem] = yaml.safe_load(written.read_text())
    assert found["s"] != found["enc"]  # the accelerometer's readings count


def test_a_drawing_marks_the_accelerometer_where_it_sits(furuta_imu, tmp_path: Path) -> None:
    """The spatial drawing puts a sensor mark on the pendulum's tip T, where the
    accelerometer sits (meta.json keeps accelerometers apart from the sensors)."""
    from mbgen.io.drawing import draw_png

    tip = furuta_imu.meta["points"][[p["name"] for p in furuta_imu.meta["points"]].index("T")]
    drawing = draw_png(furuta_imu, furuta_imu.q0, tmp_path / "imu.png")
    marks = [mark for mark, sensor in drawing.sensors if sensor["kind"] == "accelerometer"]
    assert len(marks) == 1
    x, y, z = (np.ravel(values)[0] for values in marks[0].get_data_3d())
    assert (x, y, z) == pytest.approx((tip["x"], tip["y"], tip["z"]))


def test_the_filter_weighs_the_accelerometer_with_the_noise_the_prediction_applies(
        furuta_imu: CompiledMechanism) -> None:
    """The likelihood takes the prediction's acceleration noise as R ε on z̈, z by full
    pivoting: one Euler step of the prediction moves q̇ by dt (q̈ + R ε) with the R that
    `partition(q, z=())` gives."""
    mech, dt, count = furuta_imu, 1e-4, 6
    rng = np.random.default_rng(8)
    guess = np.repeat(mech.q0[None], count, axis=0)
    guess[:, mech.coordinate_indices(["theta1", "theta2"])] = rng.uniform(-3, 3, (count, 2))
    q = mech.solve_position(guess, z=["theta1", "theta2"])
    qd = np.zeros_like(q)
    noise = rng.standard_normal((count, mech.dof))
    qdd = mech.forward_dynamics(q, qd)
    _, basis, _ = mech.partition(q, z=())
    moved_q, moved_qd = q.copy(), qd.copy()
    status = mech.predict_particles(moved_q, moved_qd, noise, dt, "euler")
    assert not status.any()
    np.testing.assert_allclose((moved_qd - qd) / dt - qdd, np.einsum("ijk,ik->ij", basis,
                                                                     noise), atol=1e-6)


@pytest.mark.parametrize("command", ["estimate", "identify"])
def test_an_accelerometer_without_noise_is_refused(tmp_path: Path, out_dir: Path,
                                                   command: str) -> None:
    """The accelerometers' noise comes from the file only (`--noise-sensor` is the state
    sensors'): with their readings in the data, one that declares none is bad input for
    `estimate` and `identify`, named, and nothing is written."""
    from click.testing import CliRunner

    from mbgen.cli.conventions import EXIT_BAD_INPUT, untrusted_path
    from mbgen.cli.main import cli

    path = tmp_path / "pendulum-imu.yaml"
    path.write_text((SHIPPED_DIR / "double-pendulum.yaml").read_text() + "sensors:\n"
                    "  - {type: encoder, coordinate: x1, name: enc, noise: 0.001}\n"
                    "  - {type: accelerometer, body: 1, name: tip}\n")
    readings = tmp_path / "s.csv"
    readings.write_text("t,enc,tip.x,tip.y\n" + "".join(
        f"{0.01 * k:g},0.5,0,9.81\n" for k in range(5)))
    out = tmp_path / ("e.csv" if command == "estimate" else "i.yaml")
    options = (["--noise-sensor", "0.01"] if command == "estimate" else ["--params", "m"])
    refused = CliRunner().invoke(cli, [command, str(path), "--data", str(readings),
                                       "--out", str(out), *options,
                                       "--build-dir", str(out_dir)])
    assert refused.exit_code == EXIT_BAD_INPUT, refused.output
    assert "tip.x, tip.y of" in refused.output and "declare(s) no `noise`" in refused.output
    assert not out.exists() and not untrusted_path(out).exists()

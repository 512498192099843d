"""Hostile input, round 2 (issue 57): values at the edges of what an option or a file can
say get a clear refusal or a sound run, never an internal error (exit code 3)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from conftest import SHIPPED_DIR

from mbgen.cli.conventions import EXIT_BAD_INPUT, EXIT_OK, EXIT_USAGE
from mbgen.errors import MechanismError

FOURBAR = SHIPPED_DIR / "fourbar.yaml"
READINGS = SHIPPED_DIR.parent / "examples" / "fourbar-readings.csv"


def estimate(run, tmp_path: Path, *options: str) -> tuple[int, str]:
    return run("estimate", str(FOURBAR), "--data", str(READINGS), "--noise-sensor", "0.0175",
               "--out", str(tmp_path / "e.csv"), *options)


def test_estimate_refuses_a_speed_whose_variance_overflows(run, tmp_path: Path) -> None:
    """--speed 1e300 overflowed squaring it (OverflowError, exit 3)."""
    code, output = estimate(run, tmp_path, "--speed", "1e300")
    assert code == EXIT_USAGE and "--speed" in output and "1e+100" in output, output
    assert not (tmp_path / "e.csv").exists()


def test_estimate_refuses_more_particles_than_memory_with_the_estimate(run,
                                                                       tmp_path: Path) -> None:
    """--particles 1e12 allocated the belief at once (MemoryError, exit 3)."""
    code, output = estimate(run, tmp_path, "--particles", "1000000000000")
    assert code == EXIT_USAGE, output
    assert "1e+14 particles" in output and "GiB" in output and "--pool 100" in output


def test_simulate_every_beyond_the_run_writes_its_first_and_last_rows(run,
                                                                      tmp_path: Path) -> None:
    """--every 1e20 reached NumPy's indices as floats (IndexError, exit 3)."""
    out = tmp_path / "run.csv"
    code, output = run("simulate", str(FOURBAR), "--t-end", "0.05", "--dt", "1e-3", "--out",
                       str(out), "--every", "100000000000000000000")
    assert code == EXIT_OK, output
    with out.open() as handle:
        rows = list(csv.reader(handle))
    assert [float(row[0]) for row in rows[1:]] == pytest.approx([0.0, 0.05])


def test_identify_refuses_accelerometer_readings_without_a_state_sensor(
        run, tmp_path: Path) -> None:
    """The encoders' columns empty, the accelerometer's full: the initial states were
    interpolated from no reading (ValueError, exit 3)."""
    source = (SHIPPED_DIR / "actuated-double-pendulum.yaml").read_text()
    anchor = "  - {type: encoder, coordinate: theta2, name: enc2, noise: 1e-4, offset: offset2}\n"
    assert anchor in source
    path = tmp_path / "imu.yaml"
    path.write_text(source.replace(
        anchor, anchor + "  - {type: accelerometer, body: 1, name: imu, noise: 0.05}\n"))
    readings = tmp_path / "readings.csv"
    code, output = run("simulate", str(path), "--t-end", "0.2", "--dt", "0.01", "--out",
                       str(tmp_path / "run.csv"), "--sensors-out", str(readings))
    assert code == EXIT_OK, output
    with readings.open() as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["t", "enc1", "enc2", "imu.x", "imu.y"]
    accelerometer_only = tmp_path / "imu-only.csv"
    with accelerometer_only.open("w", newline="") as handle:
        csv.writer(handle).writerows([rows[0], *([r[0], "", "", *r[3:]] for r in rows[1:])])
    code, output = run("identify", str(path), "--data", str(accelerometer_only), "--params",
                       "b1", "--out", str(tmp_path / "id.yaml"))
    assert code == EXIT_BAD_INPUT, output
    assert "no reading of a state sensor" in output and "enc1, enc2" in output
    assert not (tmp_path / "id.yaml").exists()


def test_a_sensor_names_its_body_as_points_are_named(tmp_path: Path) -> None:
    """`body: coupler` is `body: 1` (the index still works: the reference files use it),
    in the plane and in space (Bricard's CD), and an
    unknown name is a located error listing the bodies."""
    from mbgen.model.parser import parse_mechanism

    text = FOURBAR.read_text()
    by_index = "{type: gyroscope, body: 1, name: coupler_gyro, noise: 0.0175}"
    assert by_index in text
    by_name = parse_mechanism(text.replace("body: 1,", "body: coupler,"), "fourbar.yaml")
    assert [(s.kind, s.target) for s in by_name.sensors] == [
        (s.kind, s.target) for s in parse_mechanism(text, "fourbar.yaml").sensors] == [
        ("gyroscope", 1)]
    imu = text.replace(by_index, by_index + "\n  - {type: accelerometer, body: rocker}")
    assert parse_mechanism(imu, "fourbar.yaml").accelerometers[0].target == 2
    line = next(k for k, row in enumerate(text.splitlines(), 1) if by_index in row)
    with pytest.raises(MechanismError) as error:
        parse_mechanism(text.replace("body: 1,", "body: lever,"), "fourbar.yaml")
    assert f"fourbar.yaml:{line}" in str(error.value)
    assert "no body is named 'lever' (bodies: crank, coupler, rocker" in str(error.value)
    with pytest.raises(MechanismError, match="body 3 does not exist .there are 3 bodies"):
        parse_mechanism(text.replace("body: 1,", "body: 3,"), "fourbar.yaml")
    spatial = (SHIPPED_DIR / "bricard.yaml").read_text()
    assert "body: 2, name: gyroCD" in spatial
    gyroscope = parse_mechanism(spatial.replace("body: 2, name: gyroCD",
                                                "body: CD, name: gyroCD"), "bricard.yaml")
    assert [s.target for s in gyroscope.sensors if s.kind == "gyroscope"] == [2]


SPRING = SHIPPED_DIR / "spring-pendulum.yaml"


def test_param_runs_with_a_parameter_changed_and_derived_ones_follow(
        run, tmp_path: Path, compiled) -> None:
    """--param L=1.2 on simulate: the run is the Python API's with L set (half_L = L/2,
    the centre of mass, follows); unknown and derived names are bad input listing the
    parameters, a non-finite value and a name given twice bad usage."""
    from mbgen.simulation import simulate

    out = tmp_path / "run.csv"
    code, output = run("simulate", str(SPRING), "--t-end", "0.2", "--dt", "1e-3", "--out",
                       str(out), "--param", "L=1.2", "--param", "m=3")
    assert code == EXIT_OK, output
    assert "with --param: L = 1.2 (the file's 1), m = 3 (the file's 2)" in output
    with out.open() as handle:
        rows = list(csv.reader(handle))
    header, last = rows[0], [float(v) for v in rows[-1]]
    mech = compiled(SPRING)
    mech.set_parameters(L=1.2, m=3.0)
    first = [float(v) for v in rows[1]]
    q0 = [first[header.index(name)] for name in mech.coordinate_names]
    expected = simulate(mech, t_end=0.2, dt=1e-3, integrator="rk4", q0=q0)
    assert [last[header.index(name)] for name in mech.coordinate_names] == pytest.approx(
        expected.q[-1].tolist(), abs=1e-9)  # the CSV keeps 12 digits
    mech.set_parameters(L=1.0, m=2.0)
    default = simulate(mech, t_end=0.2, dt=1e-3, integrator="rk4")
    assert abs(default.q[-1] - expected.q[-1]).max() > 1e-3
    for value, expected_code, words in (
            ("half_L=0.5", EXIT_BAD_INPUT, "no parameter 'half_L' (its parameters: L, m, k"),
            ("nope=1", EXIT_BAD_INPUT, "derived ones follow from them"),
            ("L=inf", EXIT_USAGE, "not a finite number"), ("L", EXIT_USAGE, "NAME=VALUE")):
        code, output = run("simulate", str(SPRING), "--t-end", "0.01", "--dt", "1e-3",
                           "--out", str(tmp_path / "no.csv"), "--param", value)
        assert code == expected_code and words in output, output
    code, output = run("simulate", str(SPRING), "--t-end", "0.01", "--dt", "1e-3", "--out",
                       str(tmp_path / "no.csv"), "--param", "m=1", "--param", "m=2")
    assert code == EXIT_USAGE and "m given twice" in output, output
    assert not (tmp_path / "no.csv").exists()


def test_param_reaches_inverse_estimate_and_identify(run, tmp_path: Path) -> None:
    """The torque of a prescribed motion scales with the mass; estimate and identify take
    the option and refuse a name the file does not have (identify also one it
    identifies: that is --initial)."""
    forces = []
    for extra in ((), ("--param", "m=4")):
        out = tmp_path / f"torque{len(extra)}.csv"
        code, output = run("inverse", str(SHIPPED_DIR / "double-pendulum.yaml"), "--motion",
                           "y1=-0.1-0.3*sin(t)", "--motion", "y2=-0.3-0.5*sin(t)", "--t-end", "0.5",
                           "--dt", "0.05", "--out", str(out), *extra)
        assert code == EXIT_OK, output
        with out.open() as handle:
            rows = list(csv.reader(handle))
        force = [k for k, name in enumerate(rows[0]) if name.startswith("force_")]
        forces.append([[float(row[k]) for k in force] for row in rows[1:]])
    np.testing.assert_allclose(forces[1], 4 * np.array(forces[0]), rtol=1e-9)
    code, output = estimate(run, tmp_path, "--param", "xb=nope")
    assert code == EXIT_USAGE and "--param" in output
    code, output = estimate(run, tmp_path, "--param", "mass=1")
    assert code == EXIT_BAD_INPUT and "its parameters: L, xb" in output, output
    code, output = run("identify", str(SHIPPED_DIR / "actuated-double-pendulum.yaml"),
                       "--data", str(SHIPPED_DIR.parent / "examples" /
                                     "double-pendulum-encoders.csv"),
                       "--params", "b1,b2", "--param", "b1=0.1", "--out",
                       str(tmp_path / "id.yaml"))
    assert code == EXIT_USAGE and "b1 is identified" in output, output


def test_the_estimate_plot_leaves_out_unit_vector_components(tmp_path: Path,
                                                              monkeypatch) -> None:
    """A spatial file's unit-vector components (unit 1) are left out of the estimate's
    figure as of simulate's (io.figures.coordinate_panels): one panel per position or
    angle."""
    import mbgen.io.figures as figures
    from mbgen.cli.estimate import _plot

    names = ["x1", "ux1", "uy1", "uz1", "thetaA"]
    units = ["m", "1", "1", "1", "rad"]
    header = ["t", *[f"{n}{s}" for n in names for s in ("", "_lo", "_hi")], "p_branch0"]
    data = np.linspace(0, 1, 4 * len(header)).reshape(4, len(header))
    drawn: list[list[str]] = []

    def keep(fig, path, **_):
        drawn.append([ax.get_ylabel() for ax in fig.axes])
        return path

    monkeypatch.setattr(figures, "save_figure", keep)
    _plot(header, data, names, [f"{n} [{u}]" for n, u in zip(names, units, strict=True)],
          units, tmp_path / "e.csv", "bricard")
    assert drawn[0] == ["x1 [m]", "thetaA [rad]"]


def test_a_factor_graph_says_what_it_builds_once_before_it_runs(run, tmp_path: Path,
                                                                monkeypatch) -> None:
    """The first factor graph compiled the native GTSAM factors and ran their self-check
    (57 s on a loaded machine) without a word: each pending step is said first."""
    import functools

    import click

    import mbgen.cli.inverse
    import mbgen.cli.simulate
    from mbgen.cli.conventions import announce_one_time_builds
    from mbgen.factors import native

    directory = tmp_path / "native"
    directory.mkdir()
    monkeypatch.setattr(native, "build_dir", lambda: directory)
    monkeypatch.setattr(native, "native_module", functools.cache(lambda: None))
    monkeypatch.delenv(native.ENVIRONMENT, raising=False)
    assert native.pending() is not None and "compiling" in str(native.pending())
    native.module_file(directory).write_bytes(b"")
    assert "checking" in str(native.pending())
    native.verdict_file(directory).write_text("{}")
    assert native.pending() is None

    said: list[str] = []
    monkeypatch.setattr(native, "pending", lambda: "compiling the factors")
    monkeypatch.setattr("mbgen.cli.status_console.print",
                        lambda text, **_: said.append(str(text)))
    announce_one_time_builds()
    assert said == ["compiling the factors: this may take a minute"]

    def announced() -> None:
        raise click.UsageError("announced")

    for module in (mbgen.cli.simulate, mbgen.cli.inverse):
        monkeypatch.setattr(module, "announce_one_time_builds", announced)
    code, output = run("simulate", str(FOURBAR), "--t-end", "0.01", "--dt", "1e-3",
                       "--solver", "factor-graph", "--out", str(tmp_path / "fg.csv"))
    assert code == EXIT_USAGE and "announced" in output, output
    code, output = run("inverse", str(SHIPPED_DIR / "slider-crank.yaml"), "--motion",
                       "phi=2*t", "--t-end", "0.1", "--dt", "0.05", "--method", "factor-graph",
                       "--out", str(tmp_path / "torque.csv"))
    assert code == EXIT_USAGE and "announced" in output, output


@pytest.mark.parametrize("value", ["sqrt(-1)", "sqrt(-L)", "sqrt(L - 2)", "2*sqrt(-a)"])
def test_a_spatial_centre_of_mass_is_a_real_finite_number(value: str) -> None:
    """Bricard's cog [L/2, sqrt(-1), 0] passed `mbgen check` (found by
    benchmarks/fuzz_spatial.py): the planar parser checks a cog's value, the spatial one
    did not; now the same located error as for a mass or an inertia."""
    from mbgen.model.parser import parse_mechanism

    text = (SHIPPED_DIR / "bricard.yaml").read_text()
    anchor = "cog: [L/2, 0, 0]"
    assert anchor in text
    line = next(k for k, row in enumerate(text.splitlines(), 1) if anchor in row)
    with pytest.raises(MechanismError) as error:
        parse_mechanism(text.replace(anchor, f"cog: [L/2, {value}, 0]", 1), "bricard.yaml")
    assert f"bricard.yaml:{line}" in str(error.value)
    assert "does not evaluate to a" in str(error.value)


@pytest.mark.parametrize("value", ["5e-324", "1e-160", "1e200"])
def test_identify_refuses_an_impulse_noise_whose_square_is_not_a_normal_number(
        run, tmp_path: Path, value: str) -> None:
    """--noise-impulse 5e-324 squared to 0, an infinite weight (LinAlgError, exit 3; found
    by benchmarks/fuzz_spatial.py): a standard deviation is within [1e-150, 1e150]."""
    code, output = run("identify", str(SHIPPED_DIR / "actuated-double-pendulum.yaml"),
                       "--data", str(SHIPPED_DIR.parent / "examples" /
                                     "double-pendulum-encoders.csv"), "--params", "b1",
                       "--noise-impulse", value, "--out", str(tmp_path / "id.yaml"))
    assert code == EXIT_USAGE and "--noise-impulse" in output, output
    assert "1e-150" in output or "1e+150" in output, output
    assert not (tmp_path / "id.yaml").exists()


@pytest.mark.parametrize(("file", "anchor", "bad"), [
    ("bricard.yaml", "gravity: [0, -g, 0]", "gravity: [0, -g, sqrt(-g)]"),
    ("spring-pendulum.yaml", "gravity: [0, -g]", "gravity: [sqrt(-1), -g]"),
    ("spring-pendulum.yaml", "k: k, c: c", "k: sqrt(-k), c: c"),
    ("spring-pendulum.yaml", "k: k, c: c", "k: k, c: sqrt(-c)"),
    ("spring-pendulum.yaml", "length: L0", "length: sqrt(-L0)"),
    ("spring-pendulum.yaml", "value: tau}", "value: sqrt(-1)}")])
def test_gravity_springs_and_forces_are_real_numbers(file: str, anchor: str,
                                                     bad: str) -> None:
    """Bricard's gravity [0, -g, sqrt(-1)] passed `mbgen check` (found by
    benchmarks/fuzz_spatial.py), as did a spring's k, c or length and a constant force of
    sqrt(-1): each is a real, finite number, located."""
    from mbgen.model.parser import parse_mechanism

    text = (SHIPPED_DIR / file).read_text()
    assert anchor in text
    line = next(k for k, row in enumerate(text.splitlines(), 1) if anchor in row)
    with pytest.raises(MechanismError) as error:
        parse_mechanism(text.replace(anchor, bad, 1), file)
    assert f"{file}:{line}" in str(error.value)
    assert "does not evaluate to a real number" in str(error.value)


def test_identify_from_a_start_too_large_to_square_is_bad_input(run, tmp_path: Path) -> None:
    """b1 = 1e300 makes the damping's impulses overflow JᵀJ: a located refusal naming the
    value (exit 1, nothing written), not a ValueError of the factorization (exit 3)."""
    out = tmp_path / "id.yaml"
    code, output = run("identify", str(SHIPPED_DIR / "actuated-double-pendulum.yaml"),
                       "--data", str(SHIPPED_DIR.parent / "examples" /
                                     "double-pendulum-encoders.csv"),
                       "--params", "b1", "--initial", "b1=1e300", "--out", str(out))
    assert code == EXIT_BAD_INPUT and "b1=1e+300" in output and "--initial" in output, output
    assert "Warning" not in output and not out.exists()


@pytest.mark.parametrize("option, value", [("--noise-sensor", "1e-308"),
                                           ("--noise-sensor", "5e-324"),
                                           ("--noise-accel", "1e300"),
                                           ("--noise-force", "5e-324")])
def test_estimate_noise_levels_are_deviations_it_can_square(run, tmp_path: Path, option: str,
                                                            value: str) -> None:
    """A standard deviation whose square underflows or overflows (LinAlgError,
    OverflowError, or NaN under ✓ in the particle filter and the errorEKF) is refused
    by the option, before any work."""
    extra = ("--method", "ekf", "--unknown-forces", "x1") if option == "--noise-force" else ()
    code, output = estimate(run, tmp_path, *extra, option, value)
    assert code == EXIT_USAGE and option in output, output
    assert not (tmp_path / "e.csv").exists()

"""The `mbgen` command: compile, info, generate chain and simulate, as a user runs them."""

from __future__ import annotations

import csv
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import REFERENCE_DATA, SHIPPED_DIR, bounded_time, reference

from mbgen.cli.conventions import EXIT_BAD_INPUT, EXIT_UNTRUSTED, EXIT_USAGE, untrusted_path
from mbgen.cli.main import cli
from mbgen.estimation.particle_filter import GIVE_UP_READINGS, RECOVERY_READINGS
from mbgen.model.parser import load_mechanism


def read_csv(path: Path) -> tuple[list[str], np.ndarray]:
    with path.open() as handle:
        rows = list(csv.reader(handle))
    return rows[0], np.array(rows[1:], dtype=float)


def test_info_reports_the_redundant_constraint(run, out_dir: Path) -> None:
    code, output = run("info", str(reference("pick-and-place-robot")), "--build-dir", str(out_dir))
    assert code == 0
    assert "redundant" in output and "18" in output
    assert "DOF" in output and "theta1" in output


def test_info_lists_the_assembly_branches(run, out_dir: Path) -> None:
    """The four-bar's crank turns fully: two branches, the file's and its mirror image."""
    code, output = run("info", str(SHIPPED_DIR / "fourbar.yaml"), "--build-dir", str(out_dir))
    assert code == 0
    table = output[output.index("Assembly branches"):]
    rows = [line.split("│")[1].strip() for line in table.splitlines() if line.startswith("│")]
    assert rows == ["0 (q0)", "1"]


def test_compile_then_cached(run, tmp_path: Path) -> None:
    target = tmp_path / "gen"
    code, first = run("compile", str(SHIPPED_DIR / "fourbar.yaml"), "--build-dir", str(target))
    assert code == 0 and (target / "fourbar").is_dir()
    code, second = run("compile", str(SHIPPED_DIR / "fourbar.yaml"), "--build-dir", str(target))
    assert code == 0 and "cached" in second


def test_generate_chain_writes_a_loadable_file(run, tmp_path: Path) -> None:
    path = tmp_path / "chain7.yaml"
    code, _ = run("generate", "chain", "--bodies", "7", "--out", str(path))
    assert code == 0
    mechanism = load_mechanism(path)
    assert len(mechanism.bodies) == 7 and len(mechanism.coordinate_names) == 14


def test_simulate_writes_csv_and_plots(run, tmp_path: Path, out_dir: Path) -> None:
    csv_path = tmp_path / "runs" / "fourbar.csv"
    code, output = run("simulate", str(SHIPPED_DIR / "fourbar.yaml"), "--t-end", "0.5",
                       "--dt", "0.001", "--out", str(csv_path), "--plot",
                       "--build-dir", str(out_dir))
    assert code == 0, output
    header, data = read_csv(csv_path)
    names = ["x1", "y1", "x2", "y2"]
    assert header == (["t", *names, *(f"{c}_dot" for c in names),
                       *(f"{c}_ddot" for c in names), "energy", "phi_norm"])
    assert data.shape == (501, len(header))
    np.testing.assert_allclose(data[:, 0], np.arange(501) * 1e-3, atol=1e-12)
    np.testing.assert_allclose(data[0, 9:13], [0, -9.690366, -6.460244, -9.690366], atol=1e-5)
    assert np.abs(data[:, -1]).max() < 1e-10
    energy = data[:, -2]
    assert np.abs(energy - energy[0]).max() < 1e-6 * abs(energy[0])
    for suffix in ("coordinates", "energy", "constraints"):
        picture = csv_path.parent / f"fourbar_{suffix}.png"
        assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(csv_path.parent.glob(".*"))  # no temporary files left behind
    umask = os.umask(0)
    os.umask(umask)
    for written in csv_path.parent.iterdir():  # not mkstemp's 0600: the user's mode
        assert stat.S_IMODE(written.stat().st_mode) == 0o666 & ~umask, written


@pytest.mark.parametrize("integrator", ["trapezoidal", "variational"])
def test_simulate_with_force_and_initial_state(run, tmp_path: Path, out_dir: Path,
                                               integrator: str) -> None:
    """A constant force on the crank angle adds its work to the energy (the variational
    integrator's input enters through the relative angle, a massless coordinate)."""
    csv_path = tmp_path / "forced.csv"
    code, output = run("simulate", str(reference("fourbars1-with-rel-angle")),
                       "--t-end", "0.2", "--dt", "1e-4", "--force", "theta0=10",
                       "--force", "theta0=2*5", "--qd0", "theta0=1.0",
                       "--integrator", integrator, "--out", str(csv_path),
                       "--build-dir", str(out_dir))
    assert code == 0, output
    header, data = read_csv(csv_path)
    theta_dot = data[:, header.index("theta0_dot")]
    assert theta_dot[0] == pytest.approx(1.0)
    work = np.trapezoid(20.0 * theta_dot, data[:, 0])
    energy = data[:, header.index("energy")]
    assert energy[-1] - energy[0] == pytest.approx(work, rel=1e-4)


def test_simulate_drives_an_actuator_by_its_name(run, tmp_path: Path,
                                                 out_dir: Path) -> None:
    """``motor=u`` applies gain·u on the motor's coordinate: the same run as the force
    K·u on theta1 (K = 0.5 in the file); an unknown name lists coordinates and actuators."""
    mechanism = str(SHIPPED_DIR / "actuated-double-pendulum.yaml")
    runs = {}
    for label, force in (("actuator", "motor=0.8*sin(5*t)"), ("force", "theta1=0.4*sin(5*t)"),
                         ("free", "theta1=0")):
        path = tmp_path / f"{label}.csv"
        code, output = run("simulate", mechanism, "--t-end", "0.3", "--dt", "1e-3",
                           "--force", force, "--with", "forces", "--out", str(path),
                           "--build-dir", str(out_dir))
        assert code == 0, output
        header, runs[label] = read_csv(path)
        assert header[-1] == "force_theta1"  # the applied force, gain included
    np.testing.assert_allclose(runs["actuator"], runs["force"], rtol=0, atol=1e-12)
    t = runs["actuator"][:, 0]
    np.testing.assert_allclose(runs["actuator"][:, -1], 0.4 * np.sin(5 * t), atol=1e-12)
    assert np.abs(runs["actuator"] - runs["free"]).max() > 1e-3
    code, output = run("simulate", mechanism, "--t-end", "0.1", "--dt", "0.01", "--force",
                       "motr=1", "--out", str(tmp_path / "x.csv"), "--build-dir", str(out_dir))
    assert code == 2 and "unknown coordinate or actuator 'motr'" in output
    assert "actuators: motor" in " ".join(output.split())


def test_force_columns_are_never_empty(run, tmp_path: Path, out_dir: Path) -> None:
    """--with forces: a column per actuated coordinate even when nothing drives it (zero);
    refused, before anything is written, on a mechanism nothing can drive."""
    path = tmp_path / "free.csv"
    code, output = run("simulate", str(SHIPPED_DIR / "actuated-double-pendulum.yaml"),
                       "--t-end", "0.01", "--dt", "1e-3", "--with", "forces", "--out",
                       str(path), "--build-dir", str(out_dir))
    assert code == 0, output
    header, data = read_csv(path)
    assert header[-1] == "force_theta1" and not data[:, -1].any()
    code, output = run("simulate", str(SHIPPED_DIR / "fourbar.yaml"), "--t-end", "0.01",
                       "--dt", "1e-3", "--with", "forces", "--out", str(tmp_path / "no.csv"),
                       "--build-dir", str(out_dir))
    assert code == EXIT_USAGE and "no force is applied" in output
    assert not (tmp_path / "no.csv").exists()


def test_simulate_by_factor_graph_matches_the_integrator(run, tmp_path: Path,
                                                        out_dir: Path) -> None:
    """The same CSV from --solver factor-graph, forces included, next to an RK4 run."""
    paths = {solver: tmp_path / f"{solver}.csv" for solver in ("integrator", "factor-graph")}
    for solver, path in paths.items():
        code, output = run("simulate", str(reference("fourbars1-with-rel-angle")),
                           "--t-end", "0.2", "--dt", "1e-3", "--force", "theta0=10",
                           "--qd0", "theta0=1.0", "--solver", solver, "--out", str(path),
                           "--build-dir", str(out_dir))
        assert code == 0, output
    assert "window 2, batch smoother" in " ".join(output.split())
    header, graph = read_csv(paths["factor-graph"])
    assert header == read_csv(paths["integrator"])[0]
    q = slice(1, 1 + 5)
    assert np.abs(graph[:, q] - read_csv(paths["integrator"])[1][:, q]).max() < 1e-5
    assert np.abs(graph[:, header.index("phi_norm")]).max() < 1e-9


def test_simulate_by_factor_graph_writes_sigma(run, tmp_path: Path, out_dir: Path) -> None:
    """--covariance adds <name>_sigma per coordinate (the marginals' σ, finite, growing
    from the start's) and leaves every other column as it was."""
    paths = {flag: tmp_path / f"{flag or 'plain'}.csv" for flag in ("", "--covariance")}
    for flag, path in paths.items():
        code, output = run("simulate", str(SHIPPED_DIR / "fourbar.yaml"), "--t-end", "0.05",
                           "--dt", "1e-3", "--solver", "factor-graph", "--coords",
                           "independent", "--out", str(path), "--build-dir", str(out_dir),
                           *([flag] if flag else []))
        assert code == 0, output
    plain_header, plain = read_csv(paths[""])
    header, data = read_csv(paths["--covariance"])
    names = load_mechanism(SHIPPED_DIR / "fourbar.yaml").coordinate_names
    assert header == plain_header + [f"{name}_sigma" for name in names]
    np.testing.assert_array_equal(data[:, :len(plain_header)], plain)
    sigma = data[:, len(plain_header):]
    assert np.isfinite(sigma).all() and (sigma > 0).all()
    assert (sigma[-1] > sigma[0]).any()


@pytest.mark.parametrize(("args", "message"), [
    (["--solver", "factor-graph", "--window", "0"], "'--window': 0 is not in the range x>=1"),
    (["--solver", "factor-graph", "--integrator", "rk4"], "trapezoidal or euler"),
    (["--covariance"], "add --solver factor-graph --coords independent"),
    (["--solver", "factor-graph", "--covariance"], "need --coords independent"),
    (["--force", "theta0=__import__('os')"], "unexpected character"),
    (["--force", "nope=1"], "unknown coordinate"),
    (["--q0", "1,2"], "expected 5 values"),
    (["--force", "theta0=1/0"], "'1/0' is not finite (a division by zero?)"),
    (["--force", "theta0=1e300"], "'1e300' is larger than 1e+15 in magnitude"),
    (["--force", "theta0=1/t"], "the force on theta0, 1/t, is not finite at t = 0 s"),
    (["--force", "theta0=sqrt(t - 0.05)"], "is not finite at t = 0 s"),
    (["--q0", "theta0=inf"], "values must be finite"),
    (["--q0", "x1=nan"], "values must be finite"),
    (["--q0", "x1=100"], "x1 = 100 cannot be reached from the starting positions"),
])
def test_simulate_rejects_bad_options(run, tmp_path: Path, out_dir: Path, args: list[str],
                                      message: str) -> None:
    """Each names what is wrong (non-finite forces and far-off or NaN starts were all
    reported as "Φq loses rank")."""
    code, output = run("simulate", str(reference("fourbars1-with-rel-angle")),
                       "--t-end", "0.1", "--dt", "0.01", "--out", str(tmp_path / "x.csv"),
                       "--build-dir", str(out_dir), *args)
    text = " ".join(output.split())
    assert code == 2 and message in text, output
    assert "loses rank" not in text.split("failed:")[0] and "Traceback" not in text
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.parametrize("force", ["theta0=9^9^9", "theta0=2^1000000000",
                                   "theta0=1e999999999", "theta0=" + "(" * 300 + "1" + ")" * 300])
def test_simulate_refuses_runaway_forces_quickly(run, compiled, tmp_path: Path,
                                                 out_dir: Path, force: str) -> None:
    compiled(reference("fourbars1-with-rel-angle"))  # the build exists: only parsing is timed
    with bounded_time(300):
        code, output = run("simulate", str(reference("fourbars1-with-rel-angle")), "--t-end",
                           "0.1", "--dt", "0.01", "--force", force, "--out",
                           str(tmp_path / "x.csv"), "--build-dir", str(out_dir))
    text = " ".join(output.split())
    assert code == 2 and "Invalid value for --force" in text and "Traceback" not in text
    assert any(f in text for f in ("exponent", "not a finite number", "nested deeper"))


def test_bad_mechanism_file_is_one_located_error_line(run, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("points:\n  - {x: 0, y: 0, fixed: true}\n  - {x: 1, y: oops}\n")
    code, output = run("compile", str(path), "--build-dir", str(tmp_path / "gen"))
    assert code == EXIT_BAD_INPUT
    assert f"{path}:3" in output and "unknown name" in output and "Traceback" not in output


def test_inverse_writes_forces_and_plots(run, tmp_path: Path, out_dir: Path,
                                        compiled) -> None:
    trajectory = REFERENCE_DATA / "config" / "trajectories" / \
        "fourbars1-with-rel-angle-trajectory.txt"
    csv_path = tmp_path / "torque.csv"
    code, output = run("inverse", str(reference("fourbars1-with-rel-angle")), "--trajectory",
                       str(trajectory), "--imposed", "theta0", "--out", str(csv_path),
                       "--plot", "--build-dir", str(out_dir))
    assert code == 0, output
    header, data = read_csv(csv_path)
    names = compiled(reference("fourbars1-with-rel-angle")).coordinate_names
    assert header == ["t", *names, *(f"{c}_dot" for c in names),
                      *(f"{c}_ddot" for c in names), "force_theta0"]
    assert data.shape == (2000, 2 + 3 * len(names))
    theta = data[:, 1 + names.index("theta0")]  # the imposed θ = 1.2 (1 − cos 2t), followed
    np.testing.assert_allclose(theta, 1.2 * (1 - np.cos(2 * data[:, 0])), atol=1e-9)
    # at t = 0 the crank holds its weight and accelerates
    assert data[0, -1] == pytest.approx(66.0, abs=0.05)
    for suffix in ("forces", "following_error"):
        assert (tmp_path / f"torque_{suffix}.png").read_bytes()[:4] == b"\x89PNG"
    motion_csv = tmp_path / "motion.csv"
    code, output = run("inverse", str(reference("fourbars1-with-rel-angle")), "--motion",
                       "theta0=1.2*(1-cos(2*t))", "--t-end", "0.5", "--dt", "0.005",
                       "--method", "factor-graph", "--covariance", "--out", str(motion_csv),
                       "--build-dir", str(out_dir))
    assert code == 0, output
    graph_header, graph_data = read_csv(motion_csv)
    assert graph_header[-2:] == ["force_theta0", "force_theta0_sigma"]  # the graph's σ too
    np.testing.assert_allclose(graph_data[:, -2], data[:101, -1], rtol=2e-3, atol=0.05)
    assert (graph_data[:, -1] > 0).all()
    movie = tmp_path / "motion.gif"  # an inverse result animates like a simulation
    code, output = run("animate", str(motion_csv), "--mechanism",
                       str(reference("fourbars1-with-rel-angle")), "--out", str(movie),
                       "--fps", "10", "--build-dir", str(out_dir))
    assert code == 0, output
    assert movie.read_bytes()[:3] == b"GIF" and "6 frames" in output


@pytest.mark.parametrize(("args", "message", "exit_code"), [
    (["--imposed", "nope"], "unknown coordinate 'nope'", EXIT_BAD_INPUT),
    (["--imposed", "x1,y1"], "name 1 coordinate", EXIT_BAD_INPUT),
    (["--imposed", "theta0", "--method", "magic"], "Invalid value for '--method'", EXIT_USAGE),
    (["--imposed", "theta0", "--covariance"], "--covariance needs --method factor-graph",
     EXIT_USAGE),
    ([], "needs --imposed", EXIT_USAGE),
])
def test_inverse_rejects_bad_input(run, tmp_path: Path, out_dir: Path, args: list[str],
                                   message: str, exit_code: int) -> None:
    trajectory = REFERENCE_DATA / "config" / "trajectories" / \
        "fourbars1-with-rel-angle-trajectory.txt"
    code, output = run("inverse", str(reference("fourbars1-with-rel-angle")), "--trajectory",
                       str(trajectory), "--out", str(tmp_path / "x.csv"), "--build-dir",
                       str(out_dir), *args)
    assert code == exit_code and message in " ".join(output.split())
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.parametrize("path", [*sorted(SHIPPED_DIR.glob("*.yaml")),
                                  reference("fourbars1-with-rel-angle"),
                                  reference("pick-and-place-robot")], ids=lambda p: p.stem)
def test_check_accepts_the_shipped_and_reference_files(path: Path) -> None:
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # the console wraps long paths
    assert "DOF" in text and "max |Φ(q0)|" in text


def test_check_reports_what_compile_would_reject(tmp_path: Path) -> None:
    text = (SHIPPED_DIR / "fourbar.yaml").read_text()
    runner = CliRunner()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("mass: 1.0", "mass: 1.0 +* 2", 1))
    compiled = runner.invoke(cli, ["compile", str(bad), "--build-dir", str(tmp_path / "gen")])
    checked = runner.invoke(cli, ["check", str(bad)])
    assert checked.exit_code == compiled.exit_code == EXIT_BAD_INPUT
    assert checked.output.strip() == compiled.output.strip()
    two = tmp_path / "two.yaml"
    two.write_text(text + "independent_coordinates: [x1, y1]\n")
    checked = runner.invoke(cli, ["check", str(two)])
    assert checked.exit_code == EXIT_BAD_INPUT
    assert "independent_coordinates names 2 coordinate(s) but the mechanism has 1" in \
        " ".join(checked.output.split())
    off = tmp_path / "off.yaml"
    off.write_text(text.replace("- { x: L, y: 0 }", "- { x: 1.3, y: 0.2 }", 1))
    checked = runner.invoke(cli, ["check", str(off)])
    assert checked.exit_code == 0 and "q0 is off the constraints" in " ".join(
        checked.output.split())


def test_cache_list_and_clean(tmp_path: Path) -> None:
    """clean removes a killed compile's staging directory but not a running one's (its
    lock), nor a user's directory that merely looks like a build; --all every build."""
    import socket

    runner = CliRunner()
    build = tmp_path / "gen"
    assert runner.invoke(cli, ["compile", str(SHIPPED_DIR / "fourbar.yaml"), "--build-dir",
                               str(build)]).exit_code == 0
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)
    host = socket.gethostname()
    killed = build / "fourbar" / f".tmp-0123-p{finished.stdout.strip()}@{host}-x1"
    running = build / "fourbar" / f".tmp-0123-p{os.getpid()}@{host}-x2"
    mine = build / "fourbar" / "0123456789abcdef"  # a user's directory with a meta.json
    for directory in (killed, running, mine):
        directory.mkdir()
    (mine / "meta.json").write_text('{"hash": "0123456789abcdef", "module": "mine"}')
    listed = runner.invoke(cli, ["cache", "list", "--build-dir", str(build)])
    assert listed.exit_code == 0 and "fourbar" in listed.output and "1 builds" in listed.output
    kept = runner.invoke(cli, ["cache", "clean", "--build-dir", str(build)])
    assert "removed 1 build(s)" in kept.output  # only the killed compile's
    assert not killed.exists() and running.exists() and mine.exists()
    assert list(build.glob("fourbar/*/meta.json"))
    gone = runner.invoke(cli, ["cache", "clean", "--all", "--build-dir", str(build)])
    assert gone.exit_code == 0 and running.exists() and (mine / "meta.json").exists()
    assert [p.parent for p in build.glob("*/*/meta.json")] == [mine]
    assert not list(build.glob("_core/*.a"))


def test_cache_clean_refuses_a_directory_that_is_not_a_cache(tmp_path: Path) -> None:
    """A user's directory (here one holding a meta.json two levels down, which clean used
    to delete) is refused as a whole and left as it was."""
    user = tmp_path / "thesis"
    (user / "chapter" / "figures").mkdir(parents=True)
    (user / "chapter" / "figures" / "meta.json").write_text("{}")
    (user / "notes.txt").write_text("keep me")
    result = CliRunner().invoke(cli, ["cache", "clean", "--all", "--build-dir", str(user)])
    assert result.exit_code == EXIT_BAD_INPUT and "not an mbgen build cache" in result.output
    assert sorted(p.name for p in user.rglob("*")) == ["chapter", "figures", "meta.json",
                                                        "notes.txt"]


def test_simulate_adds_sensors_and_multipliers_and_decimates(run, tmp_path: Path,
                                                             out_dir: Path) -> None:
    import mbgen

    path = SHIPPED_DIR / "fourbar.yaml"
    csv_path = tmp_path / "w.csv"
    code, output = run("simulate", str(path), "--t-end", "1", "--dt", "1e-3", "--with",
                       "sensors", "--with", "lambda", "--every", "100", "--out",
                       str(csv_path), "--build-dir", str(out_dir))
    assert code == 0, output
    header, data = read_csv(csv_path)
    assert header[-4:] == ["coupler_gyro", "lambda_0", "lambda_1", "lambda_2"]
    np.testing.assert_allclose(data[:, 0], np.arange(11) * 0.1, atol=1e-12)
    mech = mbgen.load(str(path), out_dir=str(out_dir))
    q, qd = data[:, 1:5], data[:, 5:9]
    np.testing.assert_allclose(data[:, -4], mech.sensors(q, qd)[:, 0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(data[:, -3:], mech.lagrange_multipliers(q, qd), rtol=1e-8,
                               atol=1e-8)


@pytest.mark.parametrize(("args", "message"), [
    (["--t-end", "inf", "--dt", "1e-3"], "'--t-end': 'inf' is not a finite number"),
    (["--t-end", "0.001", "--dt", "1"], "not a whole number of steps"),
    (["--t-end", "1", "--dt", "0.4"], "(2.5 steps)"),
    (["--t-end", "1", "--dt", "0.1", "--q0", "x1=nan"], "values must be finite"),
    (["--t-end", "1", "--dt", "0.1", "--q0", "inf,0,1,2"], "values must be finite"),
    (["--t-end", "1", "--dt", "0"], "'--dt': 0 is not > 0"),
    (["--t-end", "-1", "--dt", "0.1"], "'--t-end': -1 is not > 0"),
    (["--t-end", "1", "--dt", "-0.1"], "'--dt': -0.1 is not > 0"),
    (["--t-end", "nan", "--dt", "0.1"], "'--t-end': 'nan' is not a finite number"),
    (["--t-end", "1", "--dt", "nan"], "'--dt': 'nan' is not a finite number"),
    (["--t-end", "1", "--dt", "0.1", "--solver", "factor-graph", "--dt", "0.3"],
     "not a whole number of steps"),
])
def test_simulate_refuses_times_it_cannot_honour(run, tmp_path: Path, out_dir: Path,
                                                 args: list[str], message: str) -> None:
    code, output = run("simulate", str(SHIPPED_DIR / "fourbar.yaml"), *args, "--out",
                       str(tmp_path / "x.csv"), "--build-dir", str(out_dir))
    assert code in (1, 2) and message in " ".join(output.split())
    assert "Traceback" not in output and "✓" not in output
    assert not (tmp_path / "x.csv").exists()


def test_simulate_says_when_the_constraints_are_not_kept(run, tmp_path: Path,
                                                         out_dir: Path) -> None:
    """Explicit Euler without projection drifts off the constraints (max ‖Φ‖ 0.55): no ✓,
    exit code 4 (a result not to be trusted) and the time it happened; the CSV is kept for
    inspection, under a name that says so, never the one asked for. Its energy drifts
    too: trusted only with both tolerances raised."""
    args = ("simulate", str(SHIPPED_DIR / "fourbar.yaml"), "--t-end", "1", "--dt", "0.01",
            "--integrator", "euler", "--projection", "none", "--out", str(tmp_path / "x.csv"),
            "--build-dir", str(out_dir))
    code, output = run(*args)
    text = " ".join(output.split())
    assert code == EXIT_UNTRUSTED and "✓" not in text and "✗ fourbar" in text, text
    assert "the constraint error ‖Φ‖ reaches 0.553 (tolerance 0.016 = --phi-tol 0.001 × " \
        "size²), first exceeded at t = 0.26 s" in text
    assert read_csv(tmp_path / "x.untrusted.csv")[1].shape[0] == 101
    assert not (tmp_path / "x.csv").exists() and "wrote " in text and "x.untrusted.csv" in text
    code, output = run(*args, "--phi-tol", "1")  # its energy drifts too (2.9e-02)
    text = " ".join(output.split())
    assert code == EXIT_UNTRUSTED and "constraint error" not in text
    assert "changes by 0.0288 of the energy in play (tolerance --energy-tol 0.01)" in text
    code, output = run(*args, "--phi-tol", "1", "--energy-tol", "0.05")
    assert code == 0 and "✓ fourbar" in output and (tmp_path / "x.csv").exists()


def test_simulate_names_a_singular_start(run, tmp_path: Path, out_dir: Path) -> None:
    """A parallelogram started with all points on a line (a change point): the rocker
    only looks redundant there. It stretched to 5 m with --projection none (and ✓), and
    stopped as "over-constrained" with the default projection."""
    path = tmp_path / "parallelogram.yaml"
    path.write_text("points:\n  - {x: 0, y: 0, fixed: true}\n  - {x: 1, y: 0}\n"
                    "  - {x: 3, y: 0}\n  - {x: 2, y: 0, fixed: true}\nplanar_bodies:\n"
                    "  - {points: [0, 1], mass: 1.0}\n  - {points: [1, 2], mass: 1.0}\n"
                    "  - {name: rocker, points: [3, 2], mass: 1.0}\n")
    for projection in ("none", "manifold"):
        code, output = run("simulate", str(path), "--t-end", "1", "--dt", "0.01",
                           "--projection", projection, "--out", str(tmp_path / "x.csv"),
                           "--build-dir", str(out_dir))
        text = " ".join(output.split())
        assert code == EXIT_BAD_INPUT and "Traceback" not in text and "✓" not in text
        assert "constraint row 2 (rocker: |p3-p2| = const) is redundant at the file's " \
            "initial positions but not next to them: they are a singular configuration" in text
        assert "not an over-constrained model" in text
        assert not (tmp_path / "x.csv").exists()


def test_simulate_summary_is_sane_for_zero_energy_and_odd_names(run, tmp_path: Path,
                                                                out_dir: Path) -> None:
    """The double pendulum starts with E(0) = 0: the relative energy change was divided by
    1e-12 (≈1e+04); a 100 000-character name with markup hung rich's highlighter or raised
    MarkupError."""
    code, output = run("simulate", str(SHIPPED_DIR / "double-pendulum.yaml"), "--t-end",
                       "0.5", "--dt", "1e-3", "--out", str(tmp_path / "x.csv"),
                       "--build-dir", str(out_dir))
    drift = float(" ".join(output.split()).split("relative energy change = ")[1].split()[0])
    assert code == 0 and drift < 1e-8, output
    path = tmp_path / "named.yaml"
    name = "[/bold] [red" + "a" * 100_000
    path.write_text(f"name: '{name}'\npoints:\n  - {{x: 0, y: 0, fixed: true}}\n"
                    "  - {x: 1, y: 0}\nplanar_bodies:\n  - {points: [0, 1], mass: 1.0}\n")
    code, output = run("compile", str(path), "--build-dir", str(out_dir))
    assert code == 0, output[:300]
    with bounded_time(300):
        code, output = run("simulate", str(path), "--t-end", "0.1", "--dt", "0.01", "--out",
                           str(tmp_path / "y.csv"), "--build-dir", str(out_dir))
    assert code == 0 and "✓ [/bold] [redaaa" in output and "Traceback" not in output


def test_sigterm_while_writing_the_csv_leaves_no_temporary(tmp_path: Path, compiled,
                                                           out_dir: Path) -> None:
    """SIGTERM ends the command through its cleanup: the hidden temporary CSV (1 GB in
    the report) is removed, also when the signal comes the moment the file appears.
    (1 000 s of steps: the CSV takes seconds to write, so a busy machine that stalls this
    test for a while still signals the command while it writes.)"""
    import signal

    compiled(SHIPPED_DIR / "fourbar.yaml")
    script = "import sys; from mbgen.cli.main import cli; cli.main(sys.argv[1:])"
    child = subprocess.Popen(
        [sys.executable, "-c", script, "simulate", str(SHIPPED_DIR / "fourbar.yaml"),
         "--t-end", "1000", "--dt", "1e-3", "--out", str(tmp_path / "x.csv"),
         "--build-dir", str(out_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".x.csv.*")):
        assert time.monotonic() < deadline and child.poll() is None, "no CSV being written"
        time.sleep(0.002)
    child.send_signal(signal.SIGTERM)
    _, errors = child.communicate(timeout=60)
    assert child.returncode == 128 + signal.SIGTERM and b"Traceback" not in errors, (
        errors.decode()[-3000:])
    assert list(tmp_path.iterdir()) == []


def test_a_binary_file_is_a_located_error(tmp_path: Path) -> None:
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"parameters:\n  L: 1.0 # caf\xe9\n")
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == EXIT_BAD_INPUT
    assert "latin.yaml:2: not a UTF-8 text file (byte 0xe9 at offset 26)" in \
        " ".join(result.output.split())
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    for command in (["compile"], ["info"], ["simulate", "--t-end", "1", "--dt", "0.1",
                                            "--out", str(tmp_path / "x.csv")]):
        result = CliRunner().invoke(cli, [command[0], str(binary), *command[1:],
                                          "--build-dir", str(tmp_path / "gen")])
        assert result.exit_code == EXIT_BAD_INPUT and "Traceback" not in result.output
        assert "binary.yaml:1: not a UTF-8 text file (byte 0x89 at offset 0)" in \
            " ".join(result.output.split()), result.output


def test_compile_checks_the_named_independent_coordinates(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text((SHIPPED_DIR / "fourbar.yaml").read_text()
                    + "independent_coordinates: [x1, y1]\n")
    result = CliRunner().invoke(cli, ["compile", str(path), "--build-dir",
                                      str(tmp_path / "gen")])
    assert result.exit_code == EXIT_BAD_INPUT
    assert "two.yaml [independent_coordinates]: independent_coordinates names 2" in \
        " ".join(result.output.split())


def test_compile_removes_staging_left_by_killed_compiles(tmp_path: Path) -> None:
    import os

    build = tmp_path / "gen"
    stale = build / "fourbar" / ".tmp-0123456789abcdef-killed"
    fresh = build / "fourbar" / ".tmp-0123456789abcdef-running"
    for directory in (stale, fresh):
        directory.mkdir(parents=True)
        (directory / "mechanism.c").write_text("/* half */")
    os.utime(stale, (1e9, 1e9))  # 2001: long dead
    result = CliRunner().invoke(cli, ["compile", str(SHIPPED_DIR / "fourbar.yaml"),
                                      "--build-dir", str(build)])
    assert result.exit_code == 0, result.output
    assert not stale.exists() and fresh.exists()


def test_estimate_from_simulated_readings(run, tmp_path: Path, out_dir: Path) -> None:
    """simulate --sensors-out writes readings that estimate takes; the estimate converges
    to the truth's crank angle and branch."""
    path = tmp_path / "gyro.yaml"
    path.write_text(reference("fourbars1").read_text()
                    + "sensors:\n  - {type: gyroscope, body: 2, name: rocker_gyro}\n")
    truth, readings, estimate = (tmp_path / f"{n}.csv" for n in ("truth", "readings", "est"))
    code, output = run("simulate", str(path), "--t-end", "1", "--dt", "1e-3", "--out",
                       str(truth), "--sensors-out", str(readings), "--noise-sensor", "0.005",
                       "--build-dir", str(out_dir))
    assert code == 0, output
    header, data = read_csv(readings)
    assert header == ["t", "rocker_gyro"] and data.shape == (1001, 2)
    code, output = run("estimate", str(path), "--data", str(readings), "--noise-sensor",
                       "0.0175", "--out", str(estimate), "--plot", "--build-dir", str(out_dir))
    assert code == 0, output
    # Euler's error over a 1 ms step is more than the filter's process noise covers: its
    # intervals held the crank 53 % of the time, and its gyroscope residuals are
    # correlated from one reading to the next, so it is untrusted (it was ✓ before)
    code, output = run("estimate", str(path), "--data", str(readings), "--noise-sensor",
                       "0.0175", "--integrator", "euler", "--out", str(tmp_path / "e.csv"),
                       "--build-dir", str(out_dir))
    assert code == 4 and "correlated" in output, output
    assert not (tmp_path / "e.csv").exists()
    euler = read_csv(tmp_path / "e.untrusted.csv")[1]
    assert euler.shape == read_csv(estimate)[1].shape
    header, est = read_csv(estimate)
    assert header[:4] == ["t", "x1", "x1_lo", "x1_hi"] and header[-4:] == [
        "ess", "restart", "p_branch0", "p_branch1"]
    assert not est[:, header.index("restart")].any()
    true_q = read_csv(truth)[1]
    crank = np.arctan2(est[:, header.index("y1")], est[:, header.index("x1")])
    true_crank = np.arctan2(true_q[:, 2], true_q[:, 1])
    error = np.degrees(np.abs(np.angle(np.exp(1j * (crank - true_crank)))))
    assert error[est[:, 0] >= 0.5].max() < 2.0
    assert max(est[-1, -2:]) >= 0.99
    for suffix in ("estimate", "branches"):
        assert (tmp_path / f"est_{suffix}.png").read_bytes()[:4] == b"\x89PNG"
    # the estimate beside the truth, with the branch probabilities as bars
    from PIL import Image

    movies = {name: tmp_path / f"{name}.gif" for name in ("alone", "beside")}
    for name, extra in (("alone", []), ("beside", ["--truth", str(truth)])):
        code, output = run("animate", str(estimate), "--mechanism", str(path), "--out",
                           str(movies[name]), "--fps", "5", "--build-dir", str(out_dir),
                           *extra)
        assert code == 0, output
    alone, beside = (Image.open(movies[name]) for name in ("alone", "beside"))
    assert alone.n_frames == beside.n_frames == 6
    assert beside.width > 1.5 * alone.width and alone.width > 1.4 * alone.height  # bars


@pytest.mark.parametrize(("text", "message"), [
    ("t,rocker_gyro,crank_gyro,nope\n0,1,,1\n", "unknown sensor column(s) nope"),
    ("t,rocker_gyro,crank_gyro\n0,1,\n0,2,\n", "time 0 repeats the time of line 2"),
    ("t,rocker_gyro,crank_gyro\n0,1,\n0.1,abc,\n",
     "readings.csv:3: column rocker_gyro: 'abc' is not"),
    ("x,rocker_gyro,crank_gyro\n0,1,\n", "no column 't'"),
    ("t,crank_gyro\n0,1\n", "missing sensor column(s) rocker_gyro"),
])
def test_estimate_rejects_bad_readings(run, tmp_path: Path, out_dir: Path, text: str,
                                       message: str) -> None:
    path = tmp_path / "gyro.yaml"
    path.write_text(reference("fourbars1").read_text()
                    + "sensors:\n  - {type: gyroscope, body: 2, name: rocker_gyro}\n"
                    + "  - {type: gyroscope, body: 0, name: crank_gyro}\n")
    (tmp_path / "readings.csv").write_text(text)
    code, output = run("estimate", str(path), "--data", str(tmp_path / "readings.csv"),
                       "--out", str(tmp_path / "e.csv"), "--build-dir", str(out_dir))
    assert code == EXIT_BAD_INPUT and message in " ".join(output.split())
    assert not (tmp_path / "e.csv").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["export", "MECH", "--c", "OUT", "--name", "1bad"], "--name '1bad': use letters"),
    (["compile", "MECH", "--package", "OUT", "--name", "mb_core"], "--name 'mb_core'"),
    (["simulate", "DOUBLE", "--t-end", "0.01", "--dt", "1e-3", "--out", "OUT/r.csv",
      "--sensors-out", "OUT/s.csv"], "has no sensors"),
    (["simulate", "MECH", "--t-end", "0.01", "--dt", "1e-3", "--out", "OUT/r.csv",
      "--sensors-out", "OUT/s.csv", "--sensor-period", "0.0015"], "not a multiple of --dt"),
    (["draw", "MECH", "--out", "OUT/d.png", "--q", "y2=abc"], "could not convert"),
    (["draw", "MECH", "--out", "OUT/d.png", "--q", "nope=1"], "unknown coordinate 'nope'"),
    (["estimate", "DOUBLE", "--data", "READINGS", "--out", "OUT/e.csv"],
     "has no sensors"),
    (["estimate", "MECH", "--data", "READINGS", "--out", "OUT/e.csv", "--spread", "0"],
     "Invalid value for '--spread': 0 is not > 0"),
    (["estimate", "MECH", "--data", "READINGS", "--out", "OUT/e.csv", "--pool", "0"],
     "Invalid value for '--pool': 0 is not in the range x>=1."),
    (["estimate", "MECH", "--data", "READINGS", "--out", "OUT/e.csv", "--speed", "-1"],
     "Invalid value for '--speed': -1 is not ≥ 0"),
])
def test_new_commands_reject_bad_options(tmp_path: Path, out_dir: Path, args: list[str],
                                         message: str) -> None:
    readings = tmp_path / "readings.csv"
    readings.write_text("t,x\n0,1\n")
    run = tmp_path / "run.csv"
    run.write_text("t,x1,y1,x2,y2\n0,1,0,1,2\n")
    target = tmp_path / "result"
    names = {"MECH": str(SHIPPED_DIR / "fourbar.yaml"), "OUT": str(target),
             "DOUBLE": str(SHIPPED_DIR / "double-pendulum.yaml"), "READINGS": str(readings),
             "RUN": str(run)}
    argv = [names.get(a, a.replace("OUT", str(target))) for a in args]
    message = message.replace("READINGS", str(readings))
    result = CliRunner().invoke(cli, [*argv, "--build-dir", str(out_dir)])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not target.exists() or not any(target.iterdir())  # nothing half-written


def test_quiet_verbose_and_debug(tmp_path: Path, out_dir: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """--quiet: nothing but errors; --verbose: build steps and resolved settings; a bug in
    mbgen is one line with exit code 3, its traceback only with --debug."""
    runner = CliRunner()
    mechanism = str(SHIPPED_DIR / "fourbar.yaml")
    args = ["simulate", mechanism, "--t-end", "0.05", "--dt", "1e-3", "--out",
            str(tmp_path / "a.csv"), "--build-dir", str(out_dir)]
    normal = runner.invoke(cli, args)
    quiet = runner.invoke(cli, ["-q", *args])
    assert normal.exit_code == quiet.exit_code == 0
    assert "wrote" in normal.output and quiet.output == ""
    assert (tmp_path / "a.csv").is_file()
    failed = runner.invoke(cli, ["--quiet", "check", str(tmp_path / "a.csv")])
    assert failed.exit_code == EXIT_BAD_INPUT and "error:" in failed.output

    verbose = runner.invoke(cli, ["-v", *args])
    assert verbose.exit_code == 0
    assert "cached build" in verbose.output
    assert "rk4, dependent coordinates, projection manifold, t_end 0.05 s" in verbose.output
    built = runner.invoke(cli, ["--verbose", "compile", mechanism, "--force",
                                "--build-dir", str(tmp_path / "gen")])
    assert built.exit_code == 0
    assert "deriving equations" in built.output and "compiling C" in built.output

    def broken(path: Path) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr("mbgen.model.parser.load_mechanism", broken)
    bug = runner.invoke(cli, ["check", mechanism])
    assert bug.exit_code == 3 and "Traceback" not in bug.output
    assert "internal error (ZeroDivisionError: a bug)" in " ".join(bug.output.split())
    debug = runner.invoke(cli, ["--debug", "check", mechanism])
    assert debug.exit_code == 3 and "Traceback" in debug.output


def test_estimate_refuses_to_make_up_a_sensor_noise(run, tmp_path: Path,
                                                    out_dir: Path) -> None:
    """A gyroscope that declares no noise: without --noise-sensor the run used an
    invented 1e-3 rad/s (the readings have 0.0175) and printed ✓; now it is a usage error
    that says where to give it, and nothing is written. The shipped four-bar declares
    its gyroscope's noise and runs as it is."""
    silent = tmp_path / "fourbar.yaml"
    shipped = (SHIPPED_DIR / "fourbar.yaml").read_text()
    silent.write_text(shipped.replace(", noise: 0.0175}", "}"))
    readings = SHIPPED_DIR.parent / "examples" / "fourbar-readings.csv"
    target = tmp_path / "estimate.csv"
    code, output = run("estimate", str(silent), "--data", str(readings), "--out",
                       str(target), "--build-dir", str(out_dir))
    text = " ".join(output.split())
    assert code == EXIT_USAGE and "coupler_gyro of fourbar declare(s) no `noise`" in text
    assert "Invalid value for --noise-sensor" in text and not target.exists()
    code, output = run("estimate", str(SHIPPED_DIR / "fourbar.yaml"), "--data",
                       str(readings), "--out", str(target), "--build-dir", str(out_dir))
    assert code == 0 and "✓" in output and target.exists(), output


def gyroscope_readings(run, tmp_path: Path, out_dir: Path, t_end: str,
                       dt: str) -> tuple[Path, Path]:
    """The reference four-bar with a gyroscope on its rocker, and the readings of a free
    run of ``t_end`` seconds (``simulate --sensors-out``): (mechanism, readings) paths."""
    path, readings = tmp_path / "gyro.yaml", tmp_path / "readings.csv"
    path.write_text(reference("fourbars1").read_text()
                    + "sensors:\n  - {type: gyroscope, body: 2, name: rocker_gyro}\n")
    code, output = run("simulate", str(path), "--t-end", t_end, "--dt", dt, "--out",
                       str(tmp_path / "truth.csv"), "--sensors-out", str(readings),
                       "--build-dir", str(out_dir))
    assert code == 0, output
    return path, readings


@pytest.mark.parametrize("hopeless_at", [-1, -(RECOVERY_READINGS + 2)])
def test_estimate_that_started_over_is_not_trusted_until_it_recovers(
        run, tmp_path: Path, out_dir: Path, hopeless_at: int) -> None:
    """A reading no particle can explain makes the filter start over: the CSV marks the
    step (restart = 1); without RECOVERY_READINGS readings after it the run exits 4 and
    writes only <out>.untrusted.csv; after them it exits 0 with a warning, never ✓."""
    path, readings = gyroscope_readings(run, tmp_path, out_dir, "0.1", "2e-3")
    estimate = tmp_path / "est.csv"
    header, data = read_csv(readings)
    data[hopeless_at, 1] = 1e6
    readings.write_text(",".join(header) + "\n"
                        + "\n".join(",".join(f"{v:.12g}" for v in row) for row in data) + "\n")
    code, output = run("estimate", str(path), "--data", str(readings), "--noise-sensor",
                       "0.02", "--particles", "40", "--pool", "2", "--covariance", "--out",
                       str(estimate), "--build-dir", str(out_dir))
    recovered = hopeless_at < -RECOVERY_READINGS
    assert code == (0 if recovered else EXIT_UNTRUSTED), output
    assert "started over 1 time(s)" in output and "✓" not in output
    written = estimate if recovered else untrusted_path(estimate)
    assert written.exists() and estimate.exists() == recovered
    names, rows = read_csv(written)
    assert rows[hopeless_at, names.index("restart")] == 1.0
    assert rows[:, names.index("restart")].sum() == 1.0
    assert names[1:5] == ["x1", "x1_lo", "x1_hi", "x1_sigma"]
    assert np.all(rows[:, names.index("x1_sigma")] >= 0)


def test_estimate_gives_up_when_no_fresh_belief_meets_the_readings(
        run, tmp_path: Path, out_dir: Path) -> None:
    """Readings far too precise for the particles (every one makes the filter start over):
    it stops after GIVE_UP_READINGS of them in a row, exit 4, instead of spending the
    whole file (7 minutes on the Furuta pendulum's 1 s at 1e-4 rad before)."""
    path, readings = gyroscope_readings(run, tmp_path, out_dir, "0.5", "1e-3")
    estimate = tmp_path / "est.csv"
    code, output = run("estimate", str(path), "--data", str(readings), "--noise-sensor",
                       "1e-9", "--particles", "40", "--pool", "2", "--out", str(estimate),
                       "--build-dir", str(out_dir))
    text = " ".join(output.split())
    assert code == EXIT_UNTRUSTED and "✓" not in text, text
    assert f"started over at each of {GIVE_UP_READINGS} readings in a row" in text, text
    names, rows = read_csv(untrusted_path(estimate))
    assert len(rows) < 50  # of 501 steps
    assert rows[-GIVE_UP_READINGS:, names.index("restart")].all()

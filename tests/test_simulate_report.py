"""`mbgen simulate` reports its run honestly: a run that stops is exit code 4 with its rows
up to the stop kept as <out>.untrusted.csv, the energy figure shows growth that an
end-minus-start change or a large scale hid (checked against T = ½ q̇ᵀ M q̇ from the mass
matrix), a conservative run that does not keep its energy is not trusted, options a run
would ignore are refused, and readings carry each sensor's own noise."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SHIPPED_DIR

from mbgen.cli.conventions import EXIT_UNTRUSTED, EXIT_USAGE, untrusted_path
from mbgen.cli.main import cli
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.simulation import RunStopped, simulate

Compiled = Callable[[Path], CompiledMechanism]
FOURBAR = SHIPPED_DIR / "fourbar.yaml"


def run(out_dir: Path, *args: object) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["simulate", *map(str, args), "--build-dir",
                                      str(out_dir)], catch_exceptions=False)
    return result.exit_code, " ".join(result.output.split())


def read_csv(path: Path) -> tuple[list[str], np.ndarray]:
    with path.open() as handle:
        rows = list(csv.reader(handle))
    return rows[0], np.array(rows[1:], dtype=float)


def figure(output: str) -> float:
    return float(output.split("relative energy change = ")[1].split()[0])


def test_a_run_that_stops_keeps_its_rows_as_untrusted(tmp_path: Path, out_dir: Path,
                                                      compiled: Compiled) -> None:
    """Explicit Euler at 20 ms blows the four-bar up and stops at t = 2.16 s, where the
    projection cannot bring it back onto its constraints: exit code 4
    (it was 1, nothing written), the rows up to the stop in x.untrusted.csv and the
    readings beside them, never under the names asked for; the rows are the run's own
    (those of the same run asked to end before the stop)."""
    target, readings = tmp_path / "x.csv", tmp_path / "r.csv"
    code, output = run(out_dir, FOURBAR, "--t-end", "3", "--dt", "0.02", "--integrator",
                       "euler", "--out", target, "--sensors-out", readings)
    assert code == EXIT_UNTRUSTED and "✓" not in output and "✗ fourbar" in output, output
    assert "simulation stopped at t = 2.16 s (step 108): Newton iterations did not " \
        "converge" in output
    assert "before it stopped" in output and "Traceback" not in output
    assert not target.exists() and not readings.exists()
    header, rows = read_csv(untrusted_path(target))
    assert rows[-1, 0] == pytest.approx(2.14) and len(rows) == 108
    assert len(read_csv(untrusted_path(readings))[1]) == 108
    with pytest.raises(RunStopped) as stopped:
        simulate(compiled(FOURBAR), 3.0, 0.02, integrator="euler")
    assert len(stopped.value.result.t) == 108
    before = simulate(compiled(FOURBAR), 2.0, 0.02, integrator="euler")
    names = before.coordinate_names
    np.testing.assert_allclose(rows[:101, 1:1 + len(names)], before.q, rtol=1e-9)


def test_a_factor_graph_run_that_stops_keeps_its_rows(tmp_path: Path, out_dir: Path) -> None:
    """A 0.2 s step is too long for the trapezoidal factors: the graph stops at its
    second step, the first is kept."""
    target = tmp_path / "fg.csv"
    code, output = run(out_dir, FOURBAR, "--t-end", "1", "--dt", "0.2", "--solver",
                       "factor-graph", "--out", target)
    assert code == EXIT_UNTRUSTED and "✓" not in output, output
    assert "factor graph step at t = 0.4 s did not converge" in output
    assert not target.exists()
    assert read_csv(untrusted_path(target))[1][:, 0].tolist() == [0.0, 0.2]


def energy_figure_by_hand(mech: CompiledMechanism, header: list[str],
                          rows: np.ndarray) -> float:
    """max |E - E(0)| over max(max T, max V - min V), T = ½ q̇ᵀ M q̇ from the mass matrix
    and V = E - T from the CSV's energy column: not the energy kernel's T and V."""
    n = mech.n
    q, qd = rows[:, 1:1 + n], rows[:, 1 + n:1 + 2 * n]
    kinetic = 0.5 * np.einsum("ki,kij,kj->k", qd, mech.mass_matrix(q), qd)
    energy = rows[:, header.index("energy")]
    potential = energy - kinetic
    scale = max(kinetic.max(), potential.max() - potential.min())
    return float(np.abs(energy - energy[0]).max() / scale)


def test_the_energy_figure_shows_growth_and_swings(tmp_path: Path, out_dir: Path,
                                                   compiled: Compiled) -> None:
    """Euler at 10 ms cut at 3 s, before it stops: the four-bar's energy grows to 2.7
    times E(0), and the figure (as computed by hand) is far above the tolerance, not
    trusted. The trapezoidal rule's energy swings and comes back: the figure is the
    swing, not the end's change, 17 times smaller."""
    mech = compiled(FOURBAR)
    target = tmp_path / "grow.csv"
    code, output = run(out_dir, FOURBAR, "--t-end", "3", "--dt", "0.01", "--integrator",
                       "euler", "--out", target)
    header, rows = read_csv(untrusted_path(target))
    energy = rows[:, header.index("energy")]
    assert code == EXIT_UNTRUSTED and energy.max() > 2.5 * energy[0], output
    assert figure(output) == pytest.approx(energy_figure_by_hand(mech, header, rows),
                                           rel=1e-3)
    assert figure(output) > 0.5 and "the energy of a run without applied forces" in output
    target = tmp_path / "swing.csv"
    code, output = run(out_dir, FOURBAR, "--t-end", "2", "--dt", "0.01", "--integrator",
                       "trapezoidal", "--out", target)
    header, rows = read_csv(target)
    assert code == 0 and "✓ fourbar" in output, output
    energy = rows[:, header.index("energy")]
    by_hand = energy_figure_by_hand(mech, header, rows)
    assert figure(output) == pytest.approx(by_hand, rel=1e-3)
    change = np.abs(energy - energy[0])
    assert change[-1] < change.max() / 10  # the end's change (0.06 of it) was the figure


@pytest.mark.parametrize(("integrator", "trusted"), [("euler", False), ("rk4", True)])
def test_a_conservative_run_must_keep_its_energy(tmp_path: Path, out_dir: Path,
                                                 integrator: str, trusted: bool) -> None:
    """The double pendulum, free: Euler's energy drifts by 0.12 of the energy in play in
    5 s at 1 ms (not trusted, though its constraints hold), RK4's by 1e-9. A damped
    pendulum's drift is reported, not held against it (its energy should change)."""
    target = tmp_path / "dp.csv"
    code, output = run(out_dir, SHIPPED_DIR / "double-pendulum.yaml", "--t-end", "5",
                       "--dt", "1e-3", "--integrator", integrator, "--out", target)
    if trusted:
        assert code == 0 and "✓" in output and figure(output) < 1e-8, output
        assert target.exists()
    else:
        assert code == EXIT_UNTRUSTED and "✓" not in output and figure(output) > 0.1
        assert "constraint error" not in output and "--energy-tol 0.01" in output
        assert not target.exists() and untrusted_path(target).exists()
    code, output = run(out_dir, SHIPPED_DIR / "spring-pendulum.yaml", "--t-end", "5",
                       "--dt", "1e-3", "--integrator", integrator, "--out", target)
    assert code == 0 and "✓" in output, output


@pytest.mark.parametrize(("args", "option", "message"), [
    (["--integrator", "spook", "--projection", "manifold"], "--projection",
     "spook keeps the constraints itself"),
    (["--integrator", "variational", "--projection", "none"], "--projection",
     "variational keeps the constraints itself"),
    (["--solver", "factor-graph", "--projection", "manifold"], "--projection",
     "the factor graph holds the constraints"),
    (["--coords", "independent", "--projection", "energy"], "--projection",
     "in independent coordinates q follows z"),
    (["--window", "3"], "--window", "add --solver factor-graph"),
    (["--smoother", "incremental"], "--smoother", "add --solver factor-graph"),
    (["--seed", "1"], "--seed", "add it"),
    (["--noise-sensor", "0.1"], "--noise-sensor", "sets the readings of --sensors-out"),
    (["--sensor-period", "0.01"], "--sensor-period", "sets the readings of --sensors-out"),
])
def test_an_option_the_run_would_ignore_is_refused(tmp_path: Path, out_dir: Path,
                                                   args: list[str], option: str,
                                                   message: str) -> None:
    code, output = run(out_dir, FOURBAR, "--t-end", "0.02", "--dt", "0.01", "--out",
                       tmp_path / "x.csv", *args)
    assert code == EXIT_USAGE and f"Invalid value for {option}: " in output, output
    assert message in output and not (tmp_path / "x.csv").exists()


def test_spook_left_off_its_constraints_is_told_what_works(tmp_path: Path,
                                                           out_dir: Path) -> None:
    """spook runs without --projection; off its constraints (a tolerance it cannot meet)
    it was told to use --projection manifold, which it refuses."""
    code, output = run(out_dir, FOURBAR, "--t-end", "0.1", "--dt", "1e-3", "--integrator",
                       "spook", "--phi-tol", "1e-12", "--out", tmp_path / "x.csv")
    assert code == EXIT_UNTRUSTED and "the constraint error" in output, output
    assert "--projection" not in output and "a smaller --dt or --damping" in output


SENSORS = """sensors:
  - {type: encoder, coordinate: x1, name: enc, noise: 0.01}
  - {type: gyroscope, body: 1, name: gyro, noise: 0.05}
  - {type: gyroscope, body: 0, name: exact}
  - {type: accelerometer, body: 1, name: tip, noise: 0.2}
"""


@pytest.mark.parametrize(("options", "expected"), [
    ([], {"enc": 0.01, "gyro": 0.05, "exact": 0.0, "tip.x": 0.2, "tip.y": 0.2}),
    (["--noise-sensor", "0.03"], {"enc": 0.03, "gyro": 0.03, "exact": 0.03, "tip.x": 0.2,
                                  "tip.y": 0.2}),
    (["--noise-sensor", "gyro=0.004", "--noise-sensor", "0.03", "--noise-sensor",
      "tip.y=0.5"], {"enc": 0.03, "gyro": 0.004, "exact": 0.03, "tip.x": 0.2,
                     "tip.y": 0.5}),
    (["--noise-sensor", "tip=0"], {"enc": 0.01, "gyro": 0.05, "exact": 0.0, "tip.x": 0.0,
                                   "tip.y": 0.0}),
])
def test_readings_carry_each_sensors_noise(tmp_path: Path, out_dir: Path,
                                           options: list[str],
                                           expected: dict[str, float]) -> None:
    """Readings minus the noiseless outputs (the run's own --with sensors columns) have
    the σ each sensor declares, or the one --noise-sensor gives all sensors (SIGMA) or one
    (NAME=SIGMA, by name or output label); 1 001 samples, so the 15 % allowed is 7 times
    the sampling spread of a standard deviation (2.2 %). It was one σ for all, default 0."""
    path = tmp_path / "pendulum.yaml"
    path.write_text((SHIPPED_DIR / "double-pendulum.yaml").read_text() + SENSORS)
    truth, readings = tmp_path / "truth.csv", tmp_path / "readings.csv"
    code, output = run(out_dir, path, "--t-end", "1", "--dt", "1e-3", "--out", truth,
                       "--with", "sensors", "--sensors-out", readings, *options)
    assert code == 0, output
    assert "exact 0 (none declared: exact)" in output or "exact 0.03 (--noise-sensor)" \
        in output
    header, clean = read_csv(truth)
    labels, noisy = read_csv(readings)
    assert labels == ["t", *expected] and len(noisy) == 1001
    for k, label in enumerate(labels[1:], start=1):
        residual = noisy[:, k] - clean[:, header.index(label)]
        sigma = expected[label]
        if sigma == 0:
            assert np.abs(residual).max() < 1e-9, label
        else:
            assert np.std(residual) == pytest.approx(sigma, rel=0.15), label


@pytest.mark.parametrize(("value", "message"), [
    ("nope=0.1", "'nope' is no sensor or accelerometer of double-pendulum (names and "
                 "labels: enc, gyro, exact, tip, tip.x, tip.y)"),
    ("=0.1", "a name before '='"), ("gyro=nan", "is not a finite number"),
    ("gyro=-1", "is not ≥ 0"),
])
def test_a_noise_for_no_sensor_is_refused(tmp_path: Path, out_dir: Path, value: str,
                                          message: str) -> None:
    path = tmp_path / "pendulum.yaml"
    path.write_text((SHIPPED_DIR / "double-pendulum.yaml").read_text() + SENSORS)
    code, output = run(out_dir, path, "--t-end", "0.01", "--dt", "1e-3", "--out",
                       tmp_path / "x.csv", "--sensors-out", tmp_path / "r.csv",
                       "--noise-sensor", value)
    assert code == EXIT_USAGE and message in output, output
    assert not (tmp_path / "x.csv").exists() and not (tmp_path / "r.csv").exists()

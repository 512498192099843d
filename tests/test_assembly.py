"""Initial states: named values met exactly on the file's branch, every other change said
in one line, `--strict` refusing it, `--guess` choosing where the assembly starts."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SHIPPED_DIR

from mbgen.cli.conventions import EXIT_BAD_INPUT, EXIT_OK, EXIT_USAGE
from mbgen.cli.main import cli

FOURBAR = SHIPPED_DIR / "fourbar.yaml"


def simulate(tmp_path: Path, out_dir: Path, mechanism: Path, *options: str,
             ) -> tuple[int, str, dict[str, float]]:
    """Exit code, output and the first CSV row by column (empty when nothing was
    written) of a 10-step run."""
    csv_path = tmp_path / "run.csv"
    csv_path.unlink(missing_ok=True)
    result = CliRunner().invoke(cli, ["simulate", str(mechanism), "--t-end", "0.01", "--dt",
                                      "1e-3", "--out", str(csv_path), "--build-dir",
                                      str(out_dir), *options], catch_exceptions=False)
    first = {}
    if csv_path.exists():
        with csv_path.open() as handle:
            rows = list(csv.reader(handle))
        first = dict(zip(rows[0], map(float, rows[1]), strict=True))
    return result.exit_code, " ".join(result.output.split()), first


@pytest.fixture(scope="module")
def crank_near_zero(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped slider-crank with its crank at 2° instead of 60°."""
    path = tmp_path_factory.mktemp("crank") / "slider-crank.yaml"
    text = (SHIPPED_DIR / "slider-crank.yaml").read_text()
    path.write_text(text.replace("deg2rad(60)", "deg2rad(2)"))
    return path


@pytest.mark.parametrize("phi", [1.7, 3.0, -2.5, 8.0])
def test_a_named_angle_is_met_on_the_files_branch(crank_near_zero: Path, tmp_path: Path,
                                                  out_dir: Path, phi: float) -> None:
    """The crank pin at r(cos φ, sin φ), the slider right of it: a direct Newton solve
    from φ = 2° put the crank at φ − π (the angle's constraint holds there too) while the
    phi column read φ."""
    code, output, row = simulate(tmp_path, out_dir, crank_near_zero, "--q0", f"phi={phi}")
    assert code == EXIT_OK, output
    r, length = 0.1, 0.35
    assert row["phi"] == phi
    assert (row["x1"], row["y1"]) == pytest.approx((r * np.cos(phi), r * np.sin(phi)),
                                                   abs=1e-12)
    assert row["x2"] == pytest.approx(row["x1"] + np.sqrt(length**2 - row["y1"] ** 2),
                                      abs=1e-12)
    assert "!" not in output  # met exactly: nothing to say


def test_an_unreachable_value_is_refused_with_where_it_stops(tmp_path: Path,
                                                             out_dir: Path) -> None:
    """The rocker's tip cannot rise to y = 3.5 m: the refusal says how far it got."""
    code, output, row = simulate(tmp_path, out_dir, FOURBAR, "--q0", "y2=3.5")
    assert code == EXIT_USAGE and not row
    assert "y2 = 3.5 cannot be reached" in output and "stops after y2 = 2.5" in output


@pytest.mark.parametrize("y1", [0.4, -0.4])
def test_a_guess_chooses_the_branch(tmp_path: Path, out_dir: Path, y1: float) -> None:
    """At the crank's dead centre (x1 = 1, y1 = 0) x1 = 0.9 has two solutions, and x1
    cannot be independent there: refused without a guess, met on the guess's side with
    one."""
    code, output, _ = simulate(tmp_path, out_dir, FOURBAR, "--q0", "x1=0.9")
    assert code == EXIT_USAGE and "give --guess" in output
    code, output, row = simulate(tmp_path, out_dir, FOURBAR, "--q0", "x1=0.9", "--guess",
                                 f"y1={y1}")
    assert code == EXIT_OK, output
    assert (row["x1"], row["y1"]) == pytest.approx((0.9, np.sign(y1) * np.sqrt(1 - 0.81)),
                                                   abs=1e-12)
    assert "!" not in output  # a guess is not a value to meet


def test_a_change_is_said_once_and_strict_refuses_it(tmp_path: Path, out_dir: Path) -> None:
    """The coupler given 2.01 m long instead of 2 is off its constraint by
    2.01² − 2² = 0.0401 (m²): one line says so and the run goes on; --strict refuses it and
    writes nothing."""
    positions = ("--q0", "1,0,1,2.01")
    code, output, row = simulate(tmp_path, out_dir, FOURBAR, *positions)
    assert code == EXIT_OK, output
    assert output.count("!") == 1 and "off the constraints by up to 0.0401" in output
    assert np.hypot(row["x2"] - row["x1"], row["y2"] - row["y1"]) == pytest.approx(2.0)
    code, output, row = simulate(tmp_path, out_dir, FOURBAR, *positions, "--strict")
    assert code == EXIT_BAD_INPUT and "--strict" in output and not row


def test_velocities_are_projected_aloud(tmp_path: Path, out_dir: Path) -> None:
    """With the crank along x, its pin can only move along y: ẋ1 = 1 is taken out, and
    said; named as many as the DOF, a velocity is met exactly."""
    code, output, row = simulate(tmp_path, out_dir, FOURBAR, "--qd0", "1,0,0,0")
    assert code == EXIT_OK and "do not satisfy Φq q̇ = 0" in output and "x1 by -1" in output
    assert row["x1_dot"] == pytest.approx(0.0, abs=1e-12)
    code, output, row = simulate(tmp_path, out_dir, FOURBAR, "--qd0", "y1=0.5", "--strict")
    assert code == EXIT_OK, output
    assert row["y1_dot"] == 0.5 and row["x1_dot"] == pytest.approx(0.0, abs=1e-12)


def test_a_mechanism_without_freedom_assembles(tmp_path: Path, out_dir: Path) -> None:
    """A point held by two bars to two fixed points (0 DOF): nothing named is not "as many
    names as the DOF" (the continuation had no coordinates to carry and failed)."""
    path = tmp_path / "truss.yaml"
    path.write_text("points:\n  - {x: 0, y: 0, fixed: true}\n  - {x: 2, y: 0, fixed: true}\n"
                    "  - {x: 1, y: 1}\nplanar_bodies:\n  - {name: a, points: [0, 2], mass: 1}\n"
                    "  - {name: b, points: [1, 2], mass: 1}\n")
    code, output, row = simulate(tmp_path, out_dir, path)
    assert code == EXIT_OK, output
    assert (row["x2"], row["y2"]) == pytest.approx((1.0, 1.0), abs=1e-12)

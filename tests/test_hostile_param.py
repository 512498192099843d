"""--param NAME=VALUE meets the rules the file's own values meet (found by
benchmarks/fuzz_spatial.py's --param cases): `--param m1=-1` ran under ✓ although the
same value in the file is refused by file:line, since the loader's body rules were not
applied to a value set for the run."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SHIPPED_DIR

from mbgen.cli.conventions import EXIT_BAD_INPUT, EXIT_OK

PENDULUM = SHIPPED_DIR / "actuated-double-pendulum.yaml"


@pytest.mark.parametrize(("value", "words"), [
    ("m1=-1", "bar1: mass must not be negative, got -1.0"),  # bar1 on a fixed pivot
    ("I1=-1", "bar1: I0 = -1 is smaller than mass*|cog|^2"),
    ("b1=-1", "the damping feeds energy in"),
    ("c1=-1", "negative dry friction on theta1"),
])
def test_param_refuses_a_value_no_real_mechanism_has(run, tmp_path: Path, value: str,
                                                     words: str) -> None:
    out = tmp_path / "run.csv"
    code, output = run("simulate", str(PENDULUM), "--t-end", "0.02", "--dt", "0.01",
                       "--out", str(out), "--param", value)
    assert code == EXIT_BAD_INPUT, output
    assert f"--param {value}: impossible for a real mechanism" in output and words in output
    assert not out.exists()


def test_param_with_a_possible_value_runs(run, tmp_path: Path) -> None:
    """The rule does not refuse the file's own kind of values: a heavier bar, a damper
    too large for the run to stay finite is the run's verdict, not the rule's."""
    out = tmp_path / "run.csv"
    code, output = run("simulate", str(PENDULUM), "--t-end", "0.02", "--dt", "0.01",
                       "--out", str(out), "--param", "m1=0.7", "--param", "b1=0")
    assert code == EXIT_OK, output
    assert out.is_file()
    code, output = run("simulate", str(PENDULUM), "--t-end", "0.02", "--dt", "0.01",
                       "--out", str(tmp_path / "huge.csv"), "--param", "b1=1e15")
    assert code not in (EXIT_OK, 3) and "impossible" not in output, output


def test_an_inertia_tensor_too_large_for_a_double_is_impossible_not_an_error() -> None:
    """`--param a=1e308` on Bricard's linkage (Jl = m·2a²/12 overflows) reached
    eigvalsh with an infinity: LinAlgError, exit 3 (benchmarks/fuzz_spatial.py, ekf and
    ukf cases). The rule names it as the loader and --param report other impossibilities."""
    import numpy as np

    from mbgen.model.spatial import spatial_inertia_problem

    tensor = np.diag([np.inf, 1.0, 1.0])
    assert spatial_inertia_problem(1.0, tensor) == (
        "the inertia tensor is not a finite number (a value too large for a double)")
    assert spatial_inertia_problem(1.0, np.diag([1.0, 1.0, 1.5])) is None
    assert "triangle" in str(spatial_inertia_problem(1.0, np.diag([1.0, 1.0, 3.0])))


def test_param_values_are_bounded_as_the_file_s_numbers_are(run, tmp_path: Path) -> None:
    """A file's `b1: 1e308` is refused (larger than 1e15 in magnitude); `--param b1=1e308`
    ran into a non-finite step (exit 4) and `a=1e308` on Bricard into an inertia that
    overflows: the same bound for both."""
    from mbgen.cli.conventions import EXIT_USAGE

    for value in ("b1=1e308", "m1=-1e16"):
        code, output = run("simulate", str(PENDULUM), "--t-end", "0.02", "--dt", "0.01",
                           "--out", str(tmp_path / "run.csv"), "--param", value)
        assert code == EXIT_USAGE and "--param" in output and "1e+15" in output, output
    assert not (tmp_path / "run.csv").exists()

"""One rank rule and one "off its constraints" threshold (mbgen/redundancy.py) for `check`
(before compiling), `info`, the loader and the rows the compiled dynamics keep."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SHIPPED_DIR, reference

from mbgen.cli.main import cli
from mbgen.redundancy import OFF_CONSTRAINTS_TOL, independent_rows, off_constraints
from mbgen.runtime.compiled import CompiledMechanism

Compiled = Callable[[Path], CompiledMechanism]


def test_the_rank_is_that_of_the_singular_values_and_the_later_row_is_redundant() -> None:
    """On random matrices with known dependent rows: as many rows kept as SVD's rank, the
    kept ones independent, each dropped one a combination of the kept rows before it."""
    rng = np.random.default_rng(0)
    for trial in range(40):
        m, n = rng.integers(2, 9), rng.integers(2, 12)
        rows = rng.normal(0.0, 10.0 ** rng.uniform(-2, 2), (m, n))
        for i in rng.choice(np.arange(1, m), size=rng.integers(0, m), replace=False):
            rows[i] = rng.normal(size=i) @ rows[:i]  # a combination of earlier rows
        kept, dropped = independent_rows(rows)
        assert len(kept) == np.linalg.matrix_rank(rows), trial
        assert np.linalg.matrix_rank(rows[kept]) == len(kept)
        for i in dropped:
            before = [k for k in kept if k < i]
            coeffs, *_ = np.linalg.lstsq(rows[before].T, rows[i], rcond=None)
            assert np.allclose(rows[before].T @ coeffs, rows[i], atol=1e-8 * np.abs(rows).max())


def test_off_the_constraints_scales_with_the_size_squared() -> None:
    """Φ holds squared lengths: the same mechanism 100 times larger has 10⁴ times its Φ
    and the same verdict; NaN is off; no rows, never off."""
    for size in (0.01, 1.0, 100.0):
        limit = OFF_CONSTRAINTS_TOL * size**2
        assert off_constraints(np.array([0.0, 0.5 * limit, -0.9 * limit]), size) is None
        assert off_constraints(np.array([0.0, 0.5 * limit, -1.1 * limit]), size) == 2
    assert off_constraints(np.array([0.0, np.nan]), 1.0) == 1
    assert off_constraints(np.zeros(0), 1.0) is None


@pytest.mark.parametrize("path", [SHIPPED_DIR / "fourbar.yaml", SHIPPED_DIR / "bricard.yaml",
                                  reference("pick-and-place-robot")], ids=lambda p: p.stem)
def test_check_info_and_the_loader_count_the_same_rank(path: Path, compiled: Compiled,
                                                       out_dir: Path) -> None:
    """Bricard's linkage is one rank short, the robot has a redundant row: `check` (from
    the model, before compiling), `info` and the compiled mechanism say the same rank
    and DOF, and it is SVD's rank of Φq(q0)."""
    mech = compiled(path)
    runner = CliRunner()
    checked = " ".join(runner.invoke(cli, ["check", str(path)]).output.split())
    shown = runner.invoke(cli, ["info", str(path), "--build-dir", str(out_dir)]).output
    rank = np.linalg.matrix_rank(mech.phi_q(mech.q0))
    assert f"rank {rank}, {mech.n - rank} DOF" in checked
    assert re.search(rf"rank Φq\(q0\)\s+{rank}\b", shown)
    assert re.search(rf"DOF\s+{mech.n - rank}\b", shown)
    assert (mech.rank, mech.dof) == (rank, mech.n - rank)


def test_check_warns_where_q0_is_off_by_more_than_round_off(tmp_path: Path) -> None:
    """A point moved by 1e-7 of the four-bar's size leaves Φ(q0) ~ 1e-7 size², far above
    round-off: check says q0 is off (it once let up to 1e-6 size² pass unsaid, where info
    showed it in red); the file as shipped is not."""
    text = (SHIPPED_DIR / "fourbar.yaml").read_text()
    assert "- { x: L, y: 0 }" in text
    moved = tmp_path / "moved.yaml"
    moved.write_text(text.replace("- { x: L, y: 0 }", "- { x: L, y: 1.0e-7 }", 1))
    runner = CliRunner()
    off = runner.invoke(cli, ["check", str(moved)])
    assert off.exit_code == 0 and "q0 is off the constraints" in " ".join(off.output.split())
    shipped = runner.invoke(cli, ["check", str(SHIPPED_DIR / "fourbar.yaml")])
    assert shipped.exit_code == 0 and "off the constraints" not in shipped.output

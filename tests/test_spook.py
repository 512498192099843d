"""SPOOK, the regularized stepper: constraints held within their compliance, convergence to
the rigid dynamics, both linear-algebra paths, and the command line."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SHIPPED_DIR

from mbgen.cli.main import cli
from mbgen.runtime.compiled import CompiledMechanism

Compiled = Callable[[Path], CompiledMechanism]


@pytest.fixture(scope="module")
def fourbar(compiled: Compiled) -> CompiledMechanism:
    return compiled(SHIPPED_DIR / "fourbar.yaml")


def start(mech: CompiledMechanism) -> tuple[np.ndarray, np.ndarray]:
    return mech.solve_position(mech.q0, minimum_norm=True), np.zeros(mech.n)


def test_constraints_hold_within_their_compliance(fourbar: CompiledMechanism) -> None:
    """A compliant constraint is a spring: Φ = ε λ, up to the stepper's O(dt²) error."""
    q0, qd0 = start(fourbar)
    eps = 1e-5
    deviation = []
    for dt in (1e-3, 5e-4):
        run = fourbar.integrate_spook(q0, qd0, dt, round(1.0 / dt), compliance=eps,
                                      accelerations=False)
        phi = fourbar.phi(run.q)[:-1, fourbar.active_rows]
        stretch = eps * run.lam[:-1]
        assert np.abs(stretch).max() > 1e-3  # the compliance is doing something
        deviation.append(np.abs(phi - stretch).max() / np.abs(stretch).max())
    assert deviation[1] < 0.1
    assert deviation[0] / deviation[1] > 3  # second order with τ = 2 dt


def test_stiff_spook_converges_to_the_rigid_dynamics(fourbar: CompiledMechanism) -> None:
    q0, qd0 = start(fourbar)
    reference = fourbar.integrate(q0, qd0, 1e-4, 5000, "rk4")[0][-1]
    errors = [np.abs(fourbar.integrate_spook(q0, qd0, dt, round(0.5 / dt)).q[-1]
                     - reference).max() for dt in (2e-3, 1e-3)]
    assert errors[1] < 1e-2 and errors[0] / errors[1] > 1.8  # first order, like Euler


def test_sparse_and_dense_paths_agree_with_compliance(fourbar: CompiledMechanism) -> None:
    q0, qd0 = start(fourbar)
    runs = []
    try:
        for method in ("sparse", "dense"):
            fourbar.options.method = method
            runs.append(fourbar.integrate_spook(q0, qd0, 1e-3, 500, compliance=1e-6,
                                                damping=0.004))
    finally:
        fourbar.options.method = "auto"
    assert np.abs(runs[0].q - runs[1].q).max() < 1e-10
    assert np.abs(runs[0].lam - runs[1].lam).max() < 1e-6 * np.abs(runs[1].lam).max()


def test_bad_regularization_is_refused(fourbar: CompiledMechanism) -> None:
    q0, qd0 = start(fourbar)
    with pytest.raises(ValueError, match="compliance must be finite and non-negative"):
        fourbar.integrate_spook(q0, qd0, 1e-3, 10, compliance=-1.0)
    with pytest.raises(ValueError, match="damping"):
        fourbar.integrate_spook(q0, qd0, 1e-3, 10, damping=np.inf)


def test_command_line(tmp_path: Path, out_dir: Path) -> None:
    runner = CliRunner()
    target = tmp_path / "spook.csv"
    base = ["simulate", str(SHIPPED_DIR / "fourbar.yaml"), "--t-end", "0.5", "--dt", "1e-3",
            "--out", str(target), "--build-dir", str(out_dir)]
    result = runner.invoke(cli, [*base, "--integrator", "spook", "--compliance", "1e-6",
                                 "--damping", "0.004"])
    assert result.exit_code == 0, result.output
    with target.open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 501 and max(float(r["phi_norm"]) for r in rows) < 1e-2
    refused = runner.invoke(cli, [*base, "--compliance", "1e-6"])
    assert refused.exit_code == 2 and "--integrator spook" in refused.output
    negative = runner.invoke(cli, [*base, "--integrator", "spook", "--damping", "-0.1"])
    assert negative.exit_code == 2 and "--damping" in negative.output
    assert "isnot≥0" in negative.output.replace(" ", "")
    reduced = runner.invoke(cli, [*base, "--integrator", "spook", "--coords", "independent"])
    assert reduced.exit_code == 1 and "works in dependent coordinates" in reduced.output
    assert "Traceback" not in reduced.output

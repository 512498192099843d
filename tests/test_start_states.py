"""Start states assembled by one rule (mbgen/simulation/assembly.py), called directly:
named values met exactly on the file's branch, checked against the mechanism's geometry,
and a sweep's runs starting where `simulate` starts the same named values."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import SHIPPED_DIR

from mbgen.runtime.compiled import CompiledMechanism
from mbgen.simulation.assembly import AssemblyError, assemble, assemble_runs
from mbgen.sweep.design import Design
from mbgen.sweep.runner import start_states
from mbgen.sweep.study import Spec

#: Crank angles whose direct Newton solve from the file's 2° lands on the other branch
#: (the crank's angle constraint u·sinφ − v·cosφ = 0 holds with the crank turned by π).
ANGLES = [1.7, 3.0, -2.5, 8.0]
RADIUS, ROD = 0.1, 0.35


@pytest.fixture(scope="module")
def crank(tmp_path_factory: pytest.TempPathFactory,
          compiled: Callable[[Path], CompiledMechanism]) -> CompiledMechanism:
    """The shipped slider-crank with its crank at 2° instead of 60°."""
    path = tmp_path_factory.mktemp("crank") / "slider-crank.yaml"
    path.write_text((SHIPPED_DIR / "slider-crank.yaml").read_text().replace(
        "deg2rad(60)", "deg2rad(2)"))
    return compiled(path)


def on_the_files_branch(mech: CompiledMechanism, q: np.ndarray, phi: float) -> None:
    """The crank pin at r(cos φ, sin φ) and the slider to the right of it: the geometry
    of the file's branch, not a solver's answer."""
    x1, y1, x2 = (q[mech.coordinate_index(name)] for name in ("x1", "y1", "x2"))
    assert q[mech.coordinate_index("phi")] == pytest.approx(phi, abs=1e-12)
    assert (x1, y1) == pytest.approx((RADIUS * np.cos(phi), RADIUS * np.sin(phi)), abs=1e-10)
    assert x2 == pytest.approx(x1 + np.sqrt(ROD**2 - y1**2), abs=1e-10)


@pytest.mark.parametrize("phi", ANGLES)
def test_assemble_meets_a_named_angle_on_the_files_branch(crank: CompiledMechanism,
                                                          phi: float) -> None:
    index = crank.coordinate_index("phi")
    q, changes = assemble(crank, crank.q0, {index: phi})
    on_the_files_branch(crank, q, phi)
    assert changes == []
    assert np.abs(crank.phi(q)).max() < 1e-10


def test_a_direct_newton_solve_would_change_branch(crank: CompiledMechanism) -> None:
    """Why the rule exists: the same named value solved directly from the start puts the
    crank pin at −r(cos φ, sin φ), the crank turned by π, for at least one of the angles."""
    guesses = np.tile(crank.q0, (len(ANGLES), 1))
    guesses[:, crank.coordinate_index("phi")] = ANGLES
    q, status = crank.solve_position(guesses, z=["phi"], errors="status")
    x1, y1 = q[:, crank.coordinate_index("x1")], q[:, crank.coordinate_index("y1")]
    along = x1 * np.cos(ANGLES) + y1 * np.sin(ANGLES)
    assert ((status != 0) | (along < 0)).any()


def test_many_runs_assemble_as_one_does(crank: CompiledMechanism) -> None:
    index = crank.coordinate_index("phi")
    q, status = assemble_runs(crank, np.tile(crank.q0, (len(ANGLES), 1)),
                              {index: np.array(ANGLES)})
    assert (status == 0).all()
    for row, phi in zip(q, ANGLES, strict=True):
        on_the_files_branch(crank, row, phi)
        single, _ = assemble(crank, crank.q0, {index: phi})
        np.testing.assert_allclose(row, single, atol=1e-12)


def test_a_sweeps_runs_start_where_simulate_starts(crank: CompiledMechanism) -> None:
    """start_states of a study whose initial crank angle takes the four values: each run
    on the file's branch, as `simulate --q0 phi=...` assembles it."""
    design = Design((Spec("initial", "phi", 1, grid=tuple(ANGLES)),), (np.array(ANGLES),))
    rows = np.arange(len(ANGLES))
    params = np.tile(crank.parameter_vector, (len(rows), 1))
    q, qd, status = start_states(crank, design, rows, crank.q0, params)
    assert status == ["ok"] * len(ANGLES)
    for row, phi in zip(q, ANGLES, strict=True):
        on_the_files_branch(crank, row, phi)
    np.testing.assert_allclose(crank.phi_q(q) @ qd[0], 0.0, atol=1e-12)


def test_a_run_that_cannot_be_assembled_has_a_status(crank: CompiledMechanism) -> None:
    """x1 beyond the crank's radius: no assembly for that run, the others unharmed; the
    one-state rule raises where the many-run one reports."""
    index = crank.coordinate_index("x1")
    q, status = assemble_runs(crank, np.tile(crank.q0, (2, 1)), {index: np.array([0.05, 0.5])})
    assert status[0] == 0 and status[1] != 0
    assert q[0, index] == pytest.approx(0.05, abs=1e-12)
    assert np.abs(crank.phi(q[0])).max() < 1e-10
    with pytest.raises(AssemblyError):
        assemble(crank, crank.q0, {index: 0.5})

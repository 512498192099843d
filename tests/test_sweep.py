"""mbgen sweep: many runs of one mechanism in C (mb_sweep), the study file, its results.

The runs of a sweep are checked against ``simulate`` run one by one with the same
parameters (an independent path through the core: one run at a time, its own
projection), and against each other: a run's numbers may not depend on which runs share
its block or its chunk."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from conftest import SHIPPED_DIR

from mbgen.runtime.compiled import CompiledMechanism
from mbgen.runtime.integration import Runs
from mbgen.simulation.integrators import simulate

FOURBAR = SHIPPED_DIR / "fourbar.yaml"


def varied_starts(mech: CompiledMechanism, count: int, seed: int = 1,
                  spread: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """Parameter sets around the file's (count, np) and their assembled starts (count, n)."""
    rng = np.random.default_rng(seed)
    params = mech.parameter_vector * (1 + spread * rng.standard_normal((count, len(
        mech.parameters))))
    q0 = mech.solve_position(np.tile(mech.q0, (count, 1)), minimum_norm=True, params=params)
    return params, q0


def one_by_one(mech: CompiledMechanism, params: np.ndarray, q0: np.ndarray, steps: int,
               dt: float, **settings: str) -> list[np.ndarray]:
    """Each run through ``simulate`` with its parameters set: (steps + 1, n) each."""
    nominal = dict(mech.parameters)
    try:
        paths = []
        for p, q in zip(params, q0, strict=True):
            mech.set_parameters(**dict(zip(nominal, p, strict=True)))
            paths.append(simulate(mech, steps * dt, dt, q0=q, **settings).q)
        return paths
    finally:
        mech.set_parameters(**nominal)


@pytest.mark.parametrize("settings", [
    {"integrator": "rk4"},  # blocks of 8 runs in SIMD lanes
    {"integrator": "semi-implicit-euler", "project": "none"},
    {"integrator": "trapezoidal"},  # each run alone through mb_simulate
    {"integrator": "rk4", "coords": "independent"},
], ids=["rk4-lanes", "euler-lanes", "trapezoidal-alone", "independent-alone"])
def test_runs_side_by_side_follow_simulate_run_by_run(
        compiled: Callable[..., CompiledMechanism], settings: dict[str, str]) -> None:
    mech = compiled(FOURBAR)
    params, q0 = varied_starts(mech, 11)  # a full block of 8 and a padded one of 3
    runs = Runs.start(q0, np.zeros_like(q0), params)
    segments = [mech.advance_runs(runs, 1e-3, 150, **settings) for _ in range(2)]
    assert (runs.status == 0).all()
    swept = np.concatenate([s[0] for s in segments if s is not None], axis=1)
    expected = one_by_one(mech, params, q0, 300, 1e-3, **settings)
    lanes = settings.get("coords") != "independent" and settings["integrator"] != "trapezoidal"
    assert mech.sweep_uses_lanes(**settings) == lanes
    for path, run in zip(expected, swept, strict=True):
        assert np.abs(run - path[1:]).max() < 1e-11  # the projections differ in round-off
    assert np.array_equal(runs.q, swept[:, -1])
    assert np.ptp(swept[:, -1, 0]) > 1e-3  # the parameters made the runs differ


def test_a_run_does_not_depend_on_its_block_or_chunk(
        compiled: Callable[..., CompiledMechanism]) -> None:
    mech = compiled(FOURBAR)
    params, q0 = varied_starts(mech, 13, seed=2)
    whole = Runs.start(q0, np.zeros_like(q0), params)
    mech.advance_runs(whole, 1e-3, 200, record=False)
    order = np.random.default_rng(0).permutation(13)
    for part in (order[:5], order[5:]):  # other blocks, other neighbours, other order
        runs = Runs.start(q0[part], np.zeros_like(q0[part]), params[part])
        mech.advance_runs(runs, 1e-3, 120, record=False)
        mech.advance_runs(runs, 1e-3, 80, record=False)
        assert np.array_equal(runs.q, whole.q[part]) and np.array_equal(runs.qd,
                                                                         whole.qd[part])


def test_a_failed_run_is_marked_and_the_others_go_on(
        compiled: Callable[..., CompiledMechanism]) -> None:
    mech = compiled(FOURBAR)
    params, q0 = varied_starts(mech, 9, seed=3)
    bad = params.copy()
    bad[4, 0] = np.nan  # a crank of no length: every step of run 4 fails
    clean, broken = (Runs.start(q0, np.zeros_like(q0), p) for p in (params, bad))
    for runs in (clean, broken):
        mech.advance_runs(runs, 1e-3, 50, record=False)
        out = mech.advance_runs(runs, 1e-3, 50)
    assert out is not None
    assert broken.status[4] != 0 and broken.failed_step[4] == 0  # its very first step
    assert np.isnan(out[0][4]).all()  # skipped from then on, nothing recorded
    assert np.array_equal(broken.q[4], q0[4])  # its last good state
    others = np.arange(9) != 4
    assert (broken.status[others] == 0).all() and (broken.failed_step[others] == -1).all()
    assert np.array_equal(broken.q[others], clean.q[others])


def test_forces_act_per_run(compiled: Callable[..., CompiledMechanism]) -> None:
    mech = compiled(FOURBAR)
    params, q0 = varied_starts(mech, 8, spread=0.0)
    forces = np.zeros_like(q0)
    forces[:, 1] = np.linspace(-5, 5, 8)  # a vertical force on point 1, one per run
    runs = Runs.start(q0, np.zeros_like(q0), params, forces)
    mech.advance_runs(runs, 1e-3, 100, record=False)
    expected = [simulate(mech, 0.1, 1e-3, q0=q0[k], forces={"y1": lambda t, f=f: f + 0 * t}).q[-1]
                for k, f in enumerate(forces[:, 1])]
    assert np.abs(runs.q - np.array(expected)).max() < 1e-11

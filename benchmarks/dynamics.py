"""Runtime benchmarks: forward-dynamics Jacobians per state and a 5 s RK4 simulation.

Why these figures: ``forward_dynamics_jacobians`` is the inner loop of optimal control /
estimation users (one call per collocation point or filter step), so both the
single-call latency (dominated by Python/cffi overhead) and the batched per-state cost
(the C itself) matter; the simulation figure is what a CLI user waits for, measured warm
so that it reflects the integrator and not the one-off compile.

Run: ``.venv/bin/python benchmarks/dynamics.py`` (any cwd). Writes
``benchmarks/results/dynamics.json``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    MECHANISMS,
    Figure,
    best_time,
    fresh_dir,
    mbgen_executable,
    print_table,
    remove_dir,
    write_results,
)

import mbgen
from mbgen.dynamics import simulate

# (file stem, batched per-state target in µs)
MODELS = (("fourbar", 1.0), ("pick-and-place-robot", 15.0))
BATCH = 10_000
BATCH_REPEAT = 5
SINGLE_REPEAT = 7
SINGLE_NUMBER = 500
POSITION_NOISE = 0.02  # rad / m; small enough that Newton stays on the assembly branch
SIM_T_END, SIM_DT = 5.0, 1e-3
SIM_REPEAT = 5
SIM_TARGET = 0.3


def manifold_states(mech: Any, count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``count`` consistent states (Φ = 0, Φq q̇ = 0) near q0, generated batched.

    Benchmarking off-manifold states would time a physically meaningless problem (and
    could hit singular configurations), so perturb q0, project back, then project a
    random velocity onto the constraint tangent space.
    """
    rng = np.random.default_rng(seed)
    q = mech.solve_position(mech.q0 + POSITION_NOISE * rng.standard_normal((count, mech.n)),
                            minimum_norm=True)
    qd = mech.project_velocity(q, rng.standard_normal((count, mech.n)))
    return q, qd


def jacobian_figures(build_root: Path) -> tuple[list[Figure], dict[str, Any]]:
    """Single-call latency and batched per-state cost of forward_dynamics_jacobians."""
    figures: list[Figure] = []
    raw: dict[str, Any] = {}
    for stem, target in MODELS:
        mech = mbgen.load(str(MECHANISMS / f"{stem}.yaml"), out_dir=str(build_root))
        q, qd = manifold_states(mech, BATCH)
        residual = float(np.abs(mech.phi(q)).max())
        mech.forward_dynamics_jacobians(q, qd)  # warm up: first touch of the output pages
        batched = best_time(lambda m=mech, q=q, qd=qd: m.forward_dynamics_jacobians(q, qd),
                            BATCH_REPEAT) / BATCH
        q1, qd1 = q[0].copy(), qd[0].copy()
        single = best_time(lambda m=mech, q1=q1, qd1=qd1: m.forward_dynamics_jacobians(q1, qd1),
                           SINGLE_REPEAT, SINGLE_NUMBER)
        # Context: the same batch without Jacobians shows what the Jacobian phase costs.
        plain = best_time(lambda m=mech, q=q, qd=qd: m.forward_dynamics(q, qd),
                          BATCH_REPEAT) / BATCH
        figures += [
            Figure(f"{stem} (n={mech.n}, m={mech.m}): FD Jacobians, batched", batched * 1e6,
                   "µs/state", target, f"N = {BATCH}, best of {BATCH_REPEAT}"),
            Figure(f"{stem}: FD Jacobians, single call", single * 1e6, "µs/call",
                   note=f"best of {SINGLE_REPEAT}×{SINGLE_NUMBER}; incl. Python wrapper + cffi "
                        "overhead"),
            Figure(f"{stem}: forward_dynamics only, batched", plain * 1e6, "µs/state",
                   note="context: q̈ without Jacobians"),
        ]
        raw[stem] = {"n": mech.n, "m": mech.m, "max_abs_phi_of_states": residual,
                     "position_noise": POSITION_NOISE}
    return figures, raw


def simulation_figures(scratch: Path) -> tuple[list[Figure], dict[str, Any]]:
    """Warm CLI ``mbgen simulate`` wall time and the in-process simulate() time."""
    fourbar = MECHANISMS / "fourbar.yaml"
    build = scratch / "gen"
    command = [str(mbgen_executable()), "simulate", str(fourbar), "--t-end", str(SIM_T_END),
               "--dt", str(SIM_DT), "--integrator", "rk4", "--out", str(scratch / "run.csv"),
               "--build-dir", str(build)]

    def run_cli() -> float:
        start = time.perf_counter()
        result = subprocess.run(command, cwd=scratch, capture_output=True, text=True,
                                timeout=300)
        wall = time.perf_counter() - start
        if result.returncode != 0:
            raise RuntimeError(f"mbgen simulate failed:\n{result.stderr[-4000:]}")
        return wall

    first = run_cli()  # compiles into the fresh build dir; not counted
    cli = min(run_cli() for _ in range(SIM_REPEAT))
    # The floor under any CLI command: interpreter start-up + importing the CLI (NumPy,
    # rich, click), so the simulate figure can be split into "startup" and "work".
    help_command = [str(mbgen_executable()), "--help"]
    floor = best_time(lambda: subprocess.run(help_command, cwd=scratch, capture_output=True,
                                             check=True), SIM_REPEAT)
    rows = sum(1 for _ in (scratch / "run.csv").open()) - 1

    mech = mbgen.load(str(fourbar), out_dir=str(build))
    simulate(mech, 0.01, SIM_DT, "rk4")  # warm up
    in_process = best_time(lambda: simulate(mech, SIM_T_END, SIM_DT, "rk4"), SIM_REPEAT)
    steps = round(SIM_T_END / SIM_DT)
    figures = [
        Figure("CLI `mbgen simulate` fourbar 5 s rk4 (warm)", cli, "s", SIM_TARGET,
               f"best of {SIM_REPEAT}; whole process incl. CSV ({rows} rows)"),
        Figure("in-process simulate(fourbar, 5 s, 1e-3, rk4)", in_process, "s", SIM_TARGET,
               f"best of {SIM_REPEAT}; {in_process / steps * 1e6:.2f} µs/step"),
        Figure("CLI floor: `mbgen --help`", floor, "s",
               note="start-up + CLI imports; the part of the CLI figure that is not simulation"),
        Figure("CLI first run (cold compile + simulate)", first, "s",
               note="context only, not a target"),
    ]
    return figures, {"cli_command": command[1:], "csv_rows": rows}


def main() -> int:
    scratch = fresh_dir("dynamics")
    try:
        start = time.perf_counter()
        jac_figs, raw_jac = jacobian_figures(scratch / "models")
        sim_figs, raw_sim = simulation_figures(scratch)
        elapsed = time.perf_counter() - start
    finally:
        remove_dir(scratch)
    print_table("forward_dynamics_jacobians", jac_figs)
    print_table("simulation (four-bar, 5 s, dt = 1 ms, RK4)", sim_figs)
    figures = jac_figs + sim_figs
    path = write_results("dynamics", figures,
                         {"raw": {**raw_jac, **raw_sim}, "benchmark_seconds": elapsed})
    missed = [f.name for f in figures if f.met is False]
    print(f"wrote {path} ({elapsed:.1f} s); "
          + (f"targets missed: {', '.join(missed)}" if missed else "all targets met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

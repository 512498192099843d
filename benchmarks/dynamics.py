"""Runtime benchmarks: forward-dynamics Jacobians per state, single-state calls from
Python, and a 5 s RK4 simulation.

Why these figures: ``forward_dynamics_jacobians`` is the inner loop of optimal control /
estimation users (one call per collocation point or filter step), so both the
single-call latency (dominated by Python/cffi overhead) and the batched per-state cost
(the C itself) matter; a factor-graph user calls the four-bar's dynamics and constraints
(Φ with Φq) once per factor from Python, so those single calls have their own targets,
with and without ``out=`` arrays (what the wrapper's allocations cost); the simulation
figure is what a CLI user waits for, measured warm so that it reflects the integrator and
not the one-off compile.

Run: ``.venv/bin/python benchmarks/dynamics.py [--quick]`` (any cwd). Writes
``benchmarks/results/dynamics.json`` (not with ``--quick``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    MECHANISMS,
    POSITION_NOISE,
    Figure,
    best_time,
    fresh_dir,
    manifold_states,
    mbgen_executable,
    print_table,
    remove_dir,
    write_results,
)

import mbgen
from mbgen.simulation import simulate

# (file stem, batched per-state target in µs): the figures of the dense core this replaced
MODELS = (("fourbar", 0.6), ("pick-and-place-robot", 11.0))
SINGLE_TARGET = 3.0  # four-bar q̈ with Jacobians for one state from Python, µs per call
SIM_T_END, SIM_DT = 5.0, 1e-3
SIM_TARGET = 0.3
# single-state calls on the four-bar, µs per call
CONSTRAINTS_TARGET = 2.0
INDEPENDENT_TARGET = 1.5  # batched z̈ with Jacobians, µs per state


@dataclass(frozen=True)
class Sizes:
    """Batch size, repeats and calls per trial; ``--quick`` uses the small ones."""

    batch: int
    batch_repeat: int
    single_number: int
    single_repeat: int
    sim_repeat: int


FULL = Sizes(batch=10_000, batch_repeat=5, single_number=2000, single_repeat=7, sim_repeat=5)
QUICK = Sizes(batch=1_000, batch_repeat=2, single_number=200, single_repeat=3, sim_repeat=2)


def jacobian_figures(build_root: Path, sizes: Sizes) -> tuple[list[Figure], dict[str, Any]]:
    """Single-call latency and batched per-state cost of forward_dynamics_jacobians."""
    figures: list[Figure] = []
    raw: dict[str, Any] = {}
    batch = sizes.batch
    for stem, target in MODELS:
        mech = mbgen.load(str(MECHANISMS / f"{stem}.yaml"), out_dir=str(build_root))
        q, qd = manifold_states(mech, batch)
        residual = float(np.abs(mech.phi(q)).max())
        mech.forward_dynamics_jacobians(q, qd)  # warm up: first touch of the output pages
        batched = best_time(lambda m=mech, q=q, qd=qd: m.forward_dynamics_jacobians(q, qd),
                            sizes.batch_repeat) / batch
        out = (np.empty((batch, mech.n)), *(np.empty((batch, mech.n, mech.n)) for _ in range(3)))
        into = best_time(lambda m=mech, q=q, qd=qd, o=out: m.forward_dynamics_jacobians(
            q, qd, out=o), sizes.batch_repeat) / batch
        q1, qd1 = q[0].copy(), qd[0].copy()
        single = best_time(lambda m=mech, q1=q1, qd1=qd1: m.forward_dynamics_jacobians(q1, qd1),
                           sizes.single_repeat, sizes.single_number)
        # Context: the same batch without Jacobians shows what the Jacobian phase costs.
        plain = best_time(lambda m=mech, q=q, qd=qd: m.forward_dynamics(q, qd),
                          sizes.batch_repeat) / batch
        figures += [
            Figure(f"{stem} (n={mech.n}, m={mech.m}): FD Jacobians, batched, out=", into * 1e6,
                   "µs/state", target, f"N = {batch}, best of {sizes.batch_repeat}; into "
                   "preallocated outputs: the computation (as peers.py)"),
            Figure(f"{stem}: FD Jacobians, batched, fresh outputs", batched * 1e6, "µs/state",
                   note=f"context, N = {batch}; the allocating call adds the page faults of "
                   "its new (N, n, n) arrays"),
            Figure(f"{stem}: FD Jacobians, single call (batched API)", single * 1e6,
                   "µs/call", note=f"context, best of {sizes.single_repeat}×"
                   f"{sizes.single_number}; the general wrapper (checks, allocation); "
                   "mech.evaluator() is the one-state path"),
            Figure(f"{stem}: forward_dynamics only, batched", plain * 1e6, "µs/state",
                   note="context: q̈ without Jacobians"),
        ]
        raw[stem] = {"n": mech.n, "m": mech.m, "max_abs_phi_of_states": residual,
                     "position_noise": POSITION_NOISE}
    return figures, raw


def single_state_figures(build_root: Path, sizes: Sizes,
                         ) -> tuple[list[Figure], dict[str, Any]]:
    """Four-bar calls for one state from Python (a factor's linearization), and the
    batched independent-coordinate dynamics per state."""
    mech = mbgen.load(str(MECHANISMS / "fourbar.yaml"), out_dir=str(build_root))
    q, qd = manifold_states(mech, sizes.batch, seed=1)
    q1, qd1 = q[0].copy(), qd[0].copy()
    n = mech.n
    out = (np.empty(n), np.empty((n, n)), np.empty((n, n)), np.empty((n, n)))
    ind = mech.partition(mech.q0)[0]  # z of q0 for every state, as benchmarks/scaling.py
    repeat, number = sizes.single_repeat, sizes.single_number
    how = f"best of {repeat}×{number}"

    def single(call: Any) -> float:
        call()  # warm up
        return best_time(call, repeat, number) * 1e6

    evaluator = mech.evaluator()
    jac_one = single(lambda: evaluator.forward_dynamics_jacobians(q1, qd1))
    plain_one = single(lambda: evaluator.forward_dynamics(q1, qd1))
    constraints_one = single(lambda: evaluator.constraints(q1))
    jac_out = single(lambda: mech.forward_dynamics_jacobians(q1, qd1, out=out))
    constraints = single(lambda: mech.constraints(q1))
    raw_phi_q = single(lambda: mech.evaluate("phi_q", q=q1))
    mech.independent_dynamics(q, qd, z=ind)  # warm up
    independent = best_time(lambda: mech.independent_dynamics(q, qd, z=ind),
                            sizes.batch_repeat) / sizes.batch * 1e6
    figures = [
        Figure("fourbar: FD Jacobians, single call (evaluator)", jac_one, "µs/call",
               SINGLE_TARGET, f"{how}; mech.evaluator().forward_dynamics_jacobians"),
        Figure("fourbar: forward_dynamics, single call (evaluator)", plain_one, "µs/call",
               note=f"context, {how}; q̈ only"),
        Figure("fourbar: Φ with Φq, single call (evaluator)", constraints_one, "µs/call",
               CONSTRAINTS_TARGET, f"{how}; evaluator.constraints: dense Φ (m,), Φq (m, n)"),
        Figure("fourbar: FD Jacobians, single call, batched API with out=", jac_out,
               "µs/call", note=f"context, {how}; the general wrapper writing into four "
               "arrays made once"),
        Figure("fourbar: Φ with Φq, single call (batched API, mech.constraints)",
               constraints, "µs/call", note=f"context, {how}"),
        Figure("fourbar: Φq raw sparse values, single call (evaluate)", raw_phi_q, "µs/call",
               note=f"context, {how}; no dense scatter, Φq only"),
        Figure("fourbar: z̈ with Jacobians (independent_dynamics), batched", independent,
               "µs/state", INDEPENDENT_TARGET,
               f"N = {sizes.batch}, best of {sizes.batch_repeat}; z = "
               f"{[mech.coordinate_names[i] for i in ind]}"),
    ]
    return figures, {"fourbar_independent_coordinates":
                     [mech.coordinate_names[i] for i in ind]}


# the fixed cost of a batched call (issue 58): targets as ratios within one run
CALL_SIZES = (1, 8, 64, 20_000)
ONE_VS_EVALUATOR = 2.0  # a one-state call of the batched API / the evaluator's
EIGHT_VS_ONE = 2.0  # a call on 8 states / a call on one
INDEPENDENT_VS_JACOBIANS = 4.0  # batched z̈ with Jacobians / q̈ with Jacobians, per state


def call_cost_figures(build_root: Path, sizes: Sizes) -> tuple[list[Figure], dict[str, Any]]:
    """Four-bar: what one call of the batched API costs at batch sizes 1 to 20 000 (q̈ with
    Jacobians, q̈ alone, z̈ with Jacobians), against the evaluator's one-state call."""
    mech = mbgen.load(str(MECHANISMS / "fourbar.yaml"), out_dir=str(build_root))
    largest = CALL_SIZES[-1] if sizes is FULL else 1000
    q, qd = manifold_states(mech, largest, seed=2)
    z = mech.independent_coordinates()
    evaluator = mech.evaluator()
    q1, qd1 = q[0].copy(), qd[0].copy()
    repeat = sizes.single_repeat

    def per_call(call: Any, count: int) -> float:
        for _ in range(3):
            call()  # warm up: the thread's workspace, the lanes' scratch, the output pages
        # trials of ~0.3 ms, many of them: on a shared machine a short trial is more often
        # left alone by the scheduler, and the best of many is what the code costs
        once = best_time(call, 3)
        number = max(1, min(sizes.single_number, round(3e-4 / once)))
        trials = 6 * repeat if count < 1000 else 3 * sizes.batch_repeat
        return best_time(call, trials, number) * 1e6

    evaluator_us = per_call(lambda: evaluator.forward_dynamics_jacobians(q1, qd1), 1)
    calls: dict[str, dict[int, float]] = {"jacobians": {}, "plain": {}, "independent": {},
                                          "independent_chosen": {}}
    for count in (*CALL_SIZES[:-1], largest):
        qs, qds = (q1, qd1) if count == 1 else (q[:count].copy(), qd[:count].copy())
        calls["jacobians"][count] = per_call(
            lambda a=qs, b=qds: mech.forward_dynamics_jacobians(a, b), count)
        calls["plain"][count] = per_call(lambda a=qs, b=qds: mech.forward_dynamics(a, b),
                                         count)
        calls["independent"][count] = per_call(
            lambda a=qs, b=qds: mech.independent_dynamics(a, b, z=z), count)
        calls["independent_chosen"][count] = per_call(  # z by full pivoting per state
            lambda a=qs, b=qds: mech.independent_dynamics(a, b), count)
    jac, plain, ind = calls["jacobians"], calls["plain"], calls["independent"]
    how = f"best of {repeat}, four-bar, z = {z}"
    figures = [Figure("call cost: evaluator, FD Jacobians, one state", evaluator_us,
                      "µs/call", note=f"the yardstick; {how}")]
    chosen = calls["independent_chosen"]
    for name, table in (("FD Jacobians", jac), ("forward_dynamics", plain),
                        ("independent_dynamics", ind),
                        ("independent_dynamics, z chosen per state", chosen)):
        for count, value in table.items():
            figures.append(Figure(f"call cost: {name}, batch of {count}", value, "µs/call",
                                  note=f"{value / count:.3f} µs/state; {how}"))
    figures += [
        Figure("call cost: FD Jacobians one state, batched API / evaluator",
               jac[1] / evaluator_us, "×", ONE_VS_EVALUATOR, "ratio within this run"),
        Figure("call cost: forward_dynamics one state, batched API / evaluator's q̈",
               plain[1] / per_call(lambda: evaluator.forward_dynamics(q1, qd1), 1), "×",
               ONE_VS_EVALUATOR, "ratio within this run"),
        Figure("call cost: FD Jacobians, 8 states / 1 state", jac[8] / jac[1], "×",
               EIGHT_VS_ONE, "ratio within this run"),
        Figure("call cost: forward_dynamics, 8 states / 1 state", plain[8] / plain[1], "×",
               EIGHT_VS_ONE, "ratio within this run"),
    ]
    figures += [Figure(f"call cost: independent_dynamics / FD Jacobians, batch of {count}",
                       ind[count] / jac[count], "×", INDEPENDENT_VS_JACOBIANS,
                       "ratio within this run, both with Jacobians, fresh outputs (at "
                       "large N, q̈'s three n × n Jacobians' page faults weigh more than "
                       "z̈'s d × d, d × n)") for count in jac]
    figures += [Figure("call cost: independent_dynamics, z chosen per state / FD Jacobians, "
                       f"batch of {count}", chosen[count] / jac[count], "×",
                       note="context, ratio within this run: z by full pivoting at each "
                       "state (the four-bar's states choose x2 or y2), grouped into lanes "
                       "by their choice") for count in jac]
    # the same at the largest batch into outputs made once: the computations alone
    n, d = mech.n, len(z)
    qs, qds = q[:largest].copy(), qd[:largest].copy()
    jac_out = (np.empty((largest, n)), *(np.empty((largest, n, n)) for _ in range(3)))
    ind_out = (np.empty((largest, d)), np.empty((largest, d, d)), np.empty((largest, d, d)),
               np.empty((largest, d, n)))
    jac_into = per_call(lambda: mech.forward_dynamics_jacobians(qs, qds, out=jac_out),
                        largest)
    ind_into = per_call(lambda: mech.independent_dynamics(qs, qds, z=z, out=ind_out),
                        largest)
    figures += [
        Figure(f"call cost: FD Jacobians, batch of {largest}, out=", jac_into, "µs/call",
               note=f"{jac_into / largest:.3f} µs/state; {how}"),
        Figure(f"call cost: independent_dynamics, batch of {largest}, out=", ind_into,
               "µs/call", note=f"{ind_into / largest:.3f} µs/state; {how}"),
        Figure(f"call cost: independent_dynamics / FD Jacobians, batch of {largest}, out=",
               ind_into / jac_into, "×", INDEPENDENT_VS_JACOBIANS,
               "ratio within this run, both with Jacobians, into outputs made once"),
    ]
    calls["jacobians_out"] = {largest: jac_into}
    calls["independent_out"] = {largest: ind_into}
    return figures, {"call_cost_us": {k: {str(c): v for c, v in t.items()}
                                      for k, t in calls.items()},
                     "call_cost_evaluator_us": evaluator_us}


def simulation_figures(scratch: Path, sizes: Sizes) -> tuple[list[Figure], dict[str, Any]]:
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
    cli = min(run_cli() for _ in range(sizes.sim_repeat))
    # The floor under any CLI command: interpreter start-up + importing the CLI (NumPy,
    # rich, click), so the simulate figure can be split into "startup" and "work".
    help_command = [str(mbgen_executable()), "--help"]
    floor = best_time(lambda: subprocess.run(help_command, cwd=scratch, capture_output=True,
                                             check=True), sizes.sim_repeat)
    rows = sum(1 for _ in (scratch / "run.csv").open()) - 1

    mech = mbgen.load(str(fourbar), out_dir=str(build))
    simulate(mech, 0.01, SIM_DT, "rk4")  # warm up
    in_process = best_time(lambda: simulate(mech, SIM_T_END, SIM_DT, "rk4"), sizes.sim_repeat)
    steps = round(SIM_T_END / SIM_DT)
    figures = [
        Figure("CLI `mbgen simulate` fourbar 5 s rk4 (warm)", cli, "s", SIM_TARGET,
               f"best of {sizes.sim_repeat}; whole process incl. CSV ({rows} rows)"),
        Figure("in-process simulate(fourbar, 5 s, 1e-3, rk4)", in_process, "s", SIM_TARGET,
               f"best of {sizes.sim_repeat}; {in_process / steps * 1e6:.2f} µs/step"),
        Figure("CLI floor: `mbgen --help`", floor, "s",
               note="start-up + CLI imports; the part of the CLI figure that is not simulation"),
        Figure("CLI first run (cold compile + simulate)", first, "s",
               note="context only, not a target"),
    ]
    return figures, {"cli_command": command[1:], "csv_rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="small batches and few repeats: a fast check, not a measurement "
                             "(results are not written)")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    scratch = fresh_dir("dynamics")
    try:
        start = time.perf_counter()
        jac_figs, raw_jac = jacobian_figures(scratch / "models", sizes)
        single_figs, raw_single = single_state_figures(scratch / "models", sizes)
        call_figs, raw_call = call_cost_figures(scratch / "models", sizes)
        sim_figs, raw_sim = simulation_figures(scratch, sizes)
        elapsed = time.perf_counter() - start
    finally:
        remove_dir(scratch)
    print_table("forward_dynamics_jacobians", jac_figs)
    print_table("four-bar, one state per call from Python (+ batched z̈ with Jacobians)",
                single_figs)
    print_table("the batched API's cost per call (four-bar, batch sizes 1 to 20 000)",
                call_figs)
    print_table("simulation (four-bar, 5 s, dt = 1 ms, RK4)", sim_figs)
    figures = jac_figs + single_figs + call_figs + sim_figs
    missed = [f.name for f in figures if f.met is False]
    verdict = f"targets missed: {', '.join(missed)}" if missed else "all targets met"
    if args.quick:  # a quick check never replaces the measured figures
        print(f"--quick: results not written ({elapsed:.1f} s); {verdict}")
        return 0
    path = write_results("dynamics", figures,
                         {"raw": {**raw_jac, **raw_single, **raw_call, **raw_sim},
                          "sizes": sizes.__dict__,
                          "benchmark_seconds": elapsed})
    print(f"wrote {path} ({elapsed:.1f} s); {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Factor-graph forward dynamics: the paper's Table 1 for the four-bar, and the cost of
one factor linearization, native and Python.

Why these figures: Blanco-Claraco et al. (``../shared/papers/factor-graphs-for-multibody-
dynamics.txt``, section 7.1, Table 1) simulate the four-bar under gravity for 5 s at
dt = 1 ms (crank angle 0, at rest) with a fixed-lag smoother and report, for windows of
Nw = 2..10 steps, the RMSE of q (mm), the time per step and the Levenberg–Marquardt
iterations per step (3 to 5): 3.118 mm at 1.4 ms (dependent coordinates) and 3.147 mm at
2.8 ms (independent) for Nw = 2, on one core of a 3.2 GHz desktop. This script runs the
same experiment for both formulations and both GTSAM smoothers (batch LM and iSAM2),
against RK4 at dt = 0.1 ms as the reference (the paper used MSC Adams), and times
``linearize`` of every factor type once per call, since the factor graph's cost is made
of those (a ``CustomFactor`` with an empty Python callback costs ~4 µs by itself): with
mbgen's native error functions (mbgen/factors/native.py) and with the Python callbacks,
against GTSAM's own ``PriorFactorVector`` in the same process. The Nw = 2 runs are
repeated on the Python path, for the native path's speed-up on whole steps.
``factor_graph.png``: time per step against Nw beside the paper's, and the linearize
costs.

Run: ``.venv/bin/python benchmarks/factor_graph.py [--quick]`` (any cwd). Writes
``benchmarks/results/factor_graph.json`` and ``benchmarks/results/factor_graph.md``
(not with ``--quick``).
"""

from __future__ import annotations

import argparse
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gtsam
import numpy as np
from _common import (
    MECHANISMS,
    RESULTS,
    Figure,
    best_time,
    print_table,
    save_png,
    write_results,
)
from rich.console import Console
from rich.progress import Progress

import mbgen
from mbgen.factors import MechanismFactors, native, trapezoidal_factor
from mbgen.factors.noise import isotropic
from mbgen.simulation import simulate
from mbgen.simulation.factor_graph import FactorGraphError, FactorGraphSimulator

PAPER_TABLE = {  # Nw: (DC RMSE mm, DC ms/step, IC RMSE mm, IC ms/step)
    2: (3.11773, 1.4, 3.14719, 2.8), 3: (3.11807, 1.6, 3.14719, 3.3),
    4: (3.11818, 1.8, 3.14719, 3.7), 5: (3.11822, 2.1, 3.14719, 4.2),
    6: (3.11823, 2.3, 3.14719, 4.7), 7: (3.11824, 2.5, 3.14719, 5.5),
    8: (3.11824, 2.8, 3.14719, 6.1), 9: (3.11824, 3.0, 3.14719, 6.4),
    10: (3.11824, 3.2, 3.14719, 7.2),
}
RMSE_TARGET_MM = 0.5
STEP_TARGET_MS = {"dependent": 0.3, "independent": 0.5}  # batch, at Nw = 2 (issue 36)
LINEARIZE_TARGET_RATIO = 1.5  # native dynamics factor / PriorFactorVector
DYNAMICS = "forward dynamics (q, q̇, q̈)"
PRIOR = "GTSAM PriorFactorVector (reference)"
PAPER_ITERATIONS = 3.0  # "3 to 5 iterations until convergence"


@dataclass(frozen=True)
class Sizes:
    t_end: float
    windows: tuple[int, ...]
    linearize_number: int


FULL = Sizes(t_end=5.0, windows=tuple(range(2, 11)), linearize_number=20_000)
QUICK = Sizes(t_end=0.3, windows=(2, 3), linearize_number=2_000)
DT = 1e-3


def use_native(on: bool) -> None:
    """Native factors (where they build) or the Python callbacks, for what is made next."""
    os.environ[native.ENVIRONMENT] = "1" if on else "0"
    native.native_module.cache_clear()


def table_runs(mech: Any, sizes: Sizes, console: Console) -> list[dict[str, Any]]:
    """Every (coords, smoother, Nw), native, and Nw = 2 again with Python factors: RMSE of
    q against RK4 at dt/10, ms/step, iterations."""
    reference = simulate(mech, sizes.t_end, DT / 10, "rk4").q[::10]
    rows = []
    cases = [(c, s, w, True) for c in ("dependent", "independent")
             for s in ("batch", "incremental") for w in sizes.windows]
    cases += [(c, s, 2, False) for c in ("dependent", "independent")
              for s in ("batch", "incremental")]
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("factor-graph runs", total=len(cases))
        for coords, smoother, window, on in cases:
            use_native(on)
            simulator = FactorGraphSimulator(mech, DT, window=window, coords=coords,
                                             smoother=smoother)
            start = time.perf_counter()
            try:
                run = simulator.run(sizes.t_end)
            except FactorGraphError as exc:  # a finding, not a crash of the benchmark
                rows.append({"coords": coords, "smoother": smoother, "window": window,
                             "native": on, "failed": str(exc)})
                bar.advance(task)
                continue
            seconds = time.perf_counter() - start
            error = run.q - reference
            rows.append({
                "coords": coords, "smoother": smoother, "window": window, "native": on,
                "native_factors": simulator.factors.native,
                "rmse_mm": float(np.sqrt(np.mean(error**2)) * 1e3),
                "max_error_mm": float(np.abs(error).max() * 1e3),
                "ms_per_step": seconds / (len(run.t) - 1) * 1e3,
                "iterations_per_step": float(np.mean(simulator.iterations)),
                "max_phi": float(run.constraint_error.max()),
            })
            bar.advance(task)
    use_native(True)
    return rows


def trivial_callback(n: int, variables: int, keys: tuple[int, ...] = ()) -> Any:
    """A zero residual and identity Jacobians: what GTSAM's Python callback costs by itself
    (the floor under every CustomFactor with that many variables); with ``keys`` it also
    reads those variables (``values.atVector``, ~1 µs each), as any real factor must."""
    zero, eye = np.zeros(n), np.eye(n)

    def error(_: Any, values: gtsam.Values, H: Any) -> np.ndarray:
        for key in keys:
            values.atVector(key)
        if H is not None:
            for k in range(variables):
                H[k] = eye
        return zero

    return error


def linearize_costs(mech: Any, number: int, path: bool) -> dict[str, float]:
    """µs per ``linearize`` of each factor type at a consistent four-bar state, with the
    native error functions (``path`` True) or the Python callbacks."""
    factors = MechanismFactors(mech, native=None if path else False)
    if path and not factors.native:
        raise SystemExit("the native factors are not available here")
    q = mech.solve_position(mech.q0 + 0.01, minimum_norm=True)
    qd = mech.project_velocity(q, np.ones(mech.n))
    qdd = mech.forward_dynamics(q, qd)
    X = gtsam.symbol
    values = gtsam.Values()
    for key, value in ((X("q", 0), q), (X("v", 0), qd), (X("a", 0), qdd), (X("q", 1), q),
                       (X("v", 1), qd), (X("f", 0), np.zeros(mech.n)),
                       (X("z", 0), q[factors.z]), (X("w", 0), qd[factors.z]),
                       (X("b", 0), qdd[factors.z])):
        values.insert(key, value)
    n = mech.n
    made = {
        "forward dynamics (q, q̇, q̈)": factors.forward_dynamics(X("q", 0), X("v", 0), X("a", 0)),
        "inverse dynamics (q, q̇, q̈, Q)": factors.inverse_dynamics(X("q", 0), X("v", 0),
                                                                  X("a", 0), X("f", 0)),
        "position constraints Φ(q)": factors.position_constraints(X("q", 0)),
        "velocity constraints Φq q̇": factors.velocity_constraints(X("q", 0), X("v", 0)),
        "independent dynamics (q, q̇, z̈)": factors.independent_dynamics(X("q", 0), X("v", 0),
                                                                       X("b", 0)),
        "independent position [Φ; q[z] − z]": factors.independent_position(X("q", 0),
                                                                          X("z", 0)),
        "observation (one gyroscope output)": factors.observation(X("q", 0), X("v", 0), 0,
                                                                   0.1),
    }
    if not path:
        return {name: cost(factor, values, number) for name, factor in made.items()}
    made |= {
        "trapezoidal integrator (linear, no Python)": trapezoidal_factor(
            X("q", 0), X("q", 1), X("v", 0), X("v", 1), DT, n, isotropic(n, 0.03)),
        PRIOR: gtsam.PriorFactorVector(X("q", 0), q, isotropic(n, 0.03)),
        "CustomFactor on 1 variable, trivial callback (floor)": gtsam.CustomFactor(
            isotropic(n, 0.03), [X("q", 0)], trivial_callback(n, 1)),
        "CustomFactor on 3 variables, trivial callback (floor)": gtsam.CustomFactor(
            isotropic(n, 0.03), [X("q", 0), X("v", 0), X("a", 0)], trivial_callback(n, 3)),
        "CustomFactor on 3 variables, trivial callback reading them (floor)":
            gtsam.CustomFactor(isotropic(n, 0.03), [X("q", 0), X("v", 0), X("a", 0)],
                               trivial_callback(n, 3, (X("q", 0), X("v", 0), X("a", 0)))),
    }
    return {name: cost(factor, values, number) for name, factor in made.items()}


def cost(factor: Any, values: gtsam.Values, number: int) -> float:
    """µs per ``linearize``, best of 5 × ``number``."""
    factor.linearize(values)
    return best_time(lambda: factor.linearize(values), 5, number) * 1e6


def _cells(row: dict[str, Any], iterations: bool) -> str:
    """RMSE | ms/step (| iterations) of one run, or where it failed."""
    if "failed" in row:
        at = re.search(r"t = ([^ ]+ s)", row["failed"])
        cell = f"failed at {at.group(1)}" if at else "failed"
        return " | ".join([cell, "—"] + (["—"] if iterations else []))
    cells = [f"{row['rmse_mm']:.4f}", f"{row['ms_per_step']:.2f}"]
    if iterations:
        cells.append(f"{row['iterations_per_step']:.2f}")
    return " | ".join(cells)


def markdown(rows: list[dict[str, Any]], t_end: float) -> str:
    lines = [f"# Factor-graph forward dynamics, four-bar, {t_end:g} s at dt = 1 ms",
             "", "RMSE of q against RK4 at dt = 0.1 ms, native factors; the paper's Table 1 "
             "(C++, against MSC Adams, one core of an i7-8700 at 3.2 GHz) beside it.", ""]
    for coords in ("dependent", "independent"):
        lines += [f"## {coords} coordinates", "",
                  "| Nw | batch RMSE (mm) | batch ms/step | batch iter/step | iSAM2 RMSE (mm) "
                  "| iSAM2 ms/step | paper RMSE (mm) | paper ms/step |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        by_key = {(r["smoother"], r["window"]): r for r in rows
                  if r["coords"] == coords and r["native"]}
        for window in sorted({r["window"] for r in rows}):
            b, i = by_key[("batch", window)], by_key[("incremental", window)]
            paper = PAPER_TABLE[window]
            p_rmse, p_ms = (paper[0], paper[1]) if coords == "dependent" else (paper[2],
                                                                               paper[3])
            lines.append(f"| {window} | {_cells(b, True)} | {_cells(i, False)} | {p_rmse} | "
                         f"{p_ms} |")
        lines.append("")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], native_costs: dict[str, float],
         python_costs: dict[str, float]) -> Path:
    """factor_graph.png: ms/step against Nw (native, both smoothers, and the paper's C++),
    and µs per linearize of each mechanism factor, native and Python."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (steps, costs) = plt.subplots(1, 2, figsize=(12, 4.5))
    for coords, colour in (("dependent", "tab:blue"), ("independent", "tab:orange")):
        column = 1 if coords == "dependent" else 3
        windows = sorted(PAPER_TABLE)
        steps.plot(windows, [PAPER_TABLE[w][column] for w in windows], "--", color=colour,
                   label=f"paper (C++), {coords}")
        for smoother, marker in (("batch", "o-"), ("incremental", "s:")):
            found = sorted((r["window"], r["ms_per_step"]) for r in rows
                           if r["coords"] == coords and r["smoother"] == smoother
                           and r["native"] and "failed" not in r)
            if found:
                steps.plot(*zip(*found, strict=True), marker, color=colour,
                           label=f"mbgen {smoother}, {coords}")
    steps.set(xlabel="window Nw (steps)", ylabel="ms per step", yscale="log",
              title="four-bar, dt = 1 ms")
    steps.legend(fontsize=7)
    names = list(python_costs)
    y = np.arange(len(names))
    costs.barh(y - 0.2, [python_costs[k] for k in names], 0.4, label="Python callback")
    costs.barh(y + 0.2, [native_costs[k] for k in names], 0.4, label="native")
    costs.axvline(native_costs[PRIOR], color="k", lw=1, label="GTSAM PriorFactorVector")
    costs.set_yticks(y, names, fontsize=7)
    costs.set(xlabel="µs per linearize", title="one factor, four-bar")
    costs.legend(fontsize=7)
    return save_png(figure, "factor_graph")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="0.3 s and two windows: a fast check (results not written)")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    console = Console()
    mech = mbgen.load(str(MECHANISMS / "fourbar.yaml"))
    start = time.perf_counter()
    native_costs = linearize_costs(mech, sizes.linearize_number, True)
    python_costs = linearize_costs(mech, sizes.linearize_number, False)
    rows = table_runs(mech, sizes, console)
    figures = [Figure(f"linearize, native: {name}", value, "µs/call", None,
                      f"best of 5×{sizes.linearize_number}")
               for name, value in native_costs.items()]
    figures += [Figure(f"linearize, Python callback: {name}", value, "µs/call", None,
                       f"best of 5×{sizes.linearize_number}")
                for name, value in python_costs.items()]
    figures.append(Figure("native dynamics factor / PriorFactorVector",
                          native_costs[DYNAMICS] / native_costs[PRIOR], "×",
                          LINEARIZE_TARGET_RATIO, "linearize, same process"))
    figures.append(Figure("Python / native dynamics factor",
                          python_costs[DYNAMICS] / native_costs[DYNAMICS], "×", None))
    for row in rows:
        if row["window"] != 2 or "failed" in row:
            continue
        path = "native" if row["native"] else "Python"
        label = f"{row['coords']}, {row['smoother']}, Nw = 2, {path} factors"
        paper = PAPER_TABLE[2][0 if row["coords"] == "dependent" else 2]
        step_target = (STEP_TARGET_MS[row["coords"]]
                       if row["smoother"] == "batch" and row["native"] else None)
        figures.append(Figure(f"{label}: time per step", row["ms_per_step"], "ms",
                              step_target, "paper (C++): 1.4 ms (dependent), 2.8 ms "
                              "(independent), batch LM"))
        if not row["native"]:
            continue
        figures += [
            Figure(f"{label}: RMSE of q", row["rmse_mm"], "mm", RMSE_TARGET_MM,
                   f"paper: {paper} mm (against Adams)"),
            Figure(f"{label}: iterations per step", row["iterations_per_step"], "",
                   PAPER_ITERATIONS if row["smoother"] == "batch" else None,
                   "paper: 3 to 5 (LM)"),
            Figure(f"{label}: max ‖Φ‖", row["max_phi"], "", 1e-6),
        ]
    print_table("factor-graph forward dynamics (four-bar) and factor linearization", figures,
                console)
    table = markdown(rows, sizes.t_end)
    console.print(table)
    if args.quick:
        console.print("--quick: results not written")
        return 0
    path = write_results("factor_graph", figures, {"table": rows, "t_end": sizes.t_end,
                                                   "dt": DT, "gtsam": native.gtsam_version()})
    (RESULTS / "factor_graph.md").write_text(table + "\n")
    png = plot(rows, native_costs, python_costs)
    missed = [f.name for f in figures if f.met is False]
    console.print(f"wrote {path}, factor_graph.md and {png.name} "
                  f"({time.perf_counter() - start:.1f} s)"
                  + (f"; targets missed: {', '.join(missed)}" if missed else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

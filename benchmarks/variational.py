"""Variational integrator: energy over long runs, and cost per step vs chain length.

Why these figures: the variational integrator exists to keep energy and momentum over
long runs at a cost per step that grows linearly with the mechanism, as in Lee, Liu, Park
and Srinivasa, "A Linear-Time Variational Integrator for Multibody Systems".

Part 1 (the paper's Fig. 2b): the 10-body chain of ``mbgen generate chain`` (released
horizontally, gravity only), 10 000 steps of 1 ms with the variational integrator (order 2
and its fourth-order composition), semi-implicit Euler (manifold projection, mbgen's
default) and RK4 for context: the largest energy error over the run relative to the run's
energy scale max(|T|, |V|), and the error at the end; ``variational_energy.png``.

Part 2 (the paper's Fig. 3): wall time per step for chains of 2 … 100 bodies with
(a) sparse Newton (L D U of the exact Jacobian), (b) sparse quasi-Newton (the step's
KKT matrix), (c) dense Newton (LU of the full Jacobian, the O(n³) baseline), from the state 0.5 s
after the release (the chain in full swing), 200 steps (fewer for dense on long chains),
best of 3; mean iterations per step; the
exponent p of time ∝ N^p fitted on log–log over N ≥ 10 (shorter chains are per-call
overhead); ``variational_scaling.png``.

Run: ``.venv/bin/python benchmarks/variational.py [--quick]``. Writes
``benchmarks/results/variational.json`` and the two PNGs beside it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    REPO,
    RESULTS,
    Figure,
    best_time,
    chain_file,
    loglog_slope,
    print_table,
    write_results,
)
from rich.console import Console

import mbgen
from mbgen.runtime.integration import IntegrationError

FULL_CHAINS = (2, 5, 10, 20, 50, 100)
QUICK_CHAINS = (2, 5, 10, 20)
FIT_FROM = 10
METHODS = {  # label: (options.method, exact Newton)
    "sparse Newton": ("sparse", True),
    "sparse quasi-Newton": ("sparse", False),
    "dense Newton": ("dense", True),
}
ENERGY_RUNS = ("variational", "variational-4", "semi-implicit-euler", "rk4")


def chain(bodies: int, out_dir: Path) -> Any:
    """The compiled ``mbgen generate chain --bodies N`` (cached between runs)."""
    return mbgen.load(str(chain_file(bodies, out_dir, "variational")), out_dir=str(out_dir))


def energy_errors(mech: Any, steps: int) -> dict[str, np.ndarray]:
    """(E(t) - E(0)) / max(|T|, |V|) of each integrator over ``steps`` steps of 1 ms (up
    to the step where a run diverged)."""
    q0, qd0 = mech.q0, np.zeros(mech.n)
    runs = {}
    for name in ENERGY_RUNS:
        try:
            runs[name] = mech.integrate(q0, qd0, 1e-3, steps, name)[:2]
        except IntegrationError as error:
            runs[name] = (error.states[0], error.states[1])
    scale = max(float(np.abs(mech.energy_parts(q, qd)).max())
                for name, (q, qd) in runs.items() if name != "semi-implicit-euler")
    return {name: (mech.energy(q, qd) - mech.energy(q[:1], qd[:1])[0]) / scale
            for name, (q, qd) in runs.items()}


def plot_energy(errors: dict[str, np.ndarray], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    for name, error in errors.items():
        top.plot(error, label=name, lw=1)
        bottom.semilogy(np.maximum(np.abs(error), 1e-16), label=name, lw=0.8)
    top.set_ylim(-0.01, 0.01)  # a diverging run leaves the frame instead of flattening it
    top.set_ylabel("(E − E₀) / max(|T|, |V|)")
    top.set_title("10-body chain, gravity only, dt = 1 ms: total energy over frames")
    top.legend()
    bottom.set_ylabel("|E − E₀| / max(|T|, |V|)")
    bottom.set_xlabel("frame")
    bottom.set_ylim(1e-12, 10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def step_times(mech: Any, quick: bool) -> dict[str, tuple[float, float]]:
    """Seconds per step and mean iterations of each method, in full swing: from the state
    0.5 s after the horizontal release."""
    out = {}
    swing = mech.integrate_variational(mech.q0, np.zeros(mech.n), 1e-3, 500,
                                       accelerations=False)
    q0, qd0 = swing.q[-1], swing.qd[-1]
    try:
        for label, (method, newton) in METHODS.items():
            mech.options.method = method
            steps = 200 if method == "sparse" or mech.n <= 40 else 20
            steps = max(10, steps // 4) if quick else steps
            runs: list[Any] = []

            def run(steps: int = steps, newton: bool = newton, runs: list[Any] = runs) -> None:
                runs.append(mech.integrate_variational(q0, qd0, 1e-3, steps, newton=newton,
                                                       accelerations=False))

            seconds = best_time(run, repeat=3) / steps
            out[label] = (seconds, float(runs[-1].iterations.mean()))
    finally:
        mech.options.method = "auto"
    return out


def plot_scaling(times: dict[int, dict[str, tuple[float, float]]], slopes: dict[str, float],
                 path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bodies = sorted(times)
    fig, ax = plt.subplots(figsize=(7, 5))
    for label, marker in zip(METHODS, "os^", strict=True):
        ax.loglog(bodies, [times[b][label][0] * 1e6 for b in bodies], marker + "-",
                  label=f"{label} (slope {slopes[label]:.2f})")
    ax.set_xlabel("chain length N [bodies]  (n = 2N coordinates)")
    ax.set_ylabel("wall time per step [µs]")
    ax.set_title("mbgen variational integrator: cost per step")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="short runs, short chains: a check, not a measurement "
                             "(results are not written)")
    args = parser.parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 160)
    out_dir = Path(os.environ.get("MBGEN_OUT", REPO / "generated"))
    folder = RESULTS if not args.quick else Path(tempfile.gettempdir())
    start = time.perf_counter()

    console.print("energy: 10-body chain …")
    steps = 1000 if args.quick else 10_000
    errors = energy_errors(chain(10, out_dir), steps)
    plot_energy(errors, folder / "variational_energy.png")
    figures = []
    for name, error in errors.items():
        bounded = name.startswith("variational")
        reached = len(error) - 1
        end = "" if reached == steps else f"diverged: stopped at step {reached}"
        figures += [
            Figure(f"energy, {name}: largest error over {steps} steps", float(np.abs(error).max()),
                   "relative", 1e-4 if bounded and not args.quick else None,
                   end or ("order 2" if name == "variational" else "")),
            Figure(f"energy, {name}: error at the end", float(abs(error[-1])), "relative",
                   note=end),
        ]

    times: dict[int, dict[str, tuple[float, float]]] = {}
    for bodies in QUICK_CHAINS if args.quick else FULL_CHAINS:
        console.print(f"chain{bodies}: timing …")
        times[bodies] = step_times(chain(bodies, out_dir), args.quick)
    bodies = sorted(times)
    slopes = {label: loglog_slope(bodies, [times[b][label][0] for b in bodies], FIT_FROM)
              for label in METHODS}
    plot_scaling(times, slopes, folder / "variational_scaling.png")
    for b in bodies:
        for label in METHODS:
            seconds, iterations = times[b][label]
            figures.append(Figure(f"chain{b}: {label}", seconds * 1e6, "µs/step",
                                  note=f"{iterations:.2f} iterations per step"))
    for label in METHODS:
        sparse = label.startswith("sparse")
        figures.append(Figure(f"growth exponent, {label} (N ≥ {FIT_FROM})", slopes[label], "",
                              1.2 if sparse and not args.quick else None))
    last = bodies[-1]
    longest = chain(last, out_dir)
    swing = longest.integrate_variational(longest.q0, np.zeros(longest.n), 1e-3, 500,
                                          accelerations=False)
    fourth = best_time(lambda: longest.integrate_variational(
        swing.q[-1], swing.qd[-1], 1e-3, 100, order=4, accelerations=False), repeat=3) / 100
    quasi, newton, dense = (times[last][label][0]
                            for label in ("sparse quasi-Newton", "sparse Newton", "dense Newton"))
    full = last == 100
    figures += [
        Figure(f"chain{last}: sparse quasi-Newton per step", quasi * 1e6, "µs",
               200 if full else None),
        Figure(f"chain{last}: sparse quasi-Newton / dense Newton time", quasi / dense, "×",
               1 / 30 if full else None, f"{dense / quasi:.0f}× faster (target ≥ 30×)"),
        Figure(f"chain{last}: sparse Newton / dense Newton time", newton / dense, "×",
               note=f"{dense / newton:.0f}× faster"),
        Figure(f"chain{last}: variational-4 (sparse quasi-Newton) per step", fourth * 1e6,
               "µs", note="three stages; its energy error is the ≤ 1e-4 one above"),
        Figure(f"chain{last}: quasi-Newton / Newton time (sparse)", quasi / newton, "×",
               note="the paper: quasi-Newton 3.8× (10 DOF) to 53× (100 DOF) faster"),
    ]
    print_table("variational integrator", figures, console)
    elapsed = time.perf_counter() - start
    missed = [f.name for f in figures if f.met is False]
    verdict = f"targets missed: {', '.join(missed)}" if missed else "all targets met"
    if args.quick:
        console.print(f"--quick: results not written, plots in {folder} ({elapsed:.0f} s); "
                      f"{verdict}")
        return 0
    path = write_results("variational", figures, {"elapsed_s": round(elapsed, 1)})
    console.print(f"wrote {path} and the PNGs beside it ({elapsed:.0f} s); {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

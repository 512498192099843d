"""Runtime scaling: per-state cost of the dynamics calls vs the length of an N-bar chain.

Why these figures: the sparse KKT path exists so that the cost per state grows like the
size of the mechanism and not like its cube. For chains of N = 10 … 200 bars
(``mbgen generate chain``, n = 2N natural coordinates, N constraints, N DOF) this times,
per state of one batched call on the default (auto → sparse) path:

  (a) q̈ (``forward_dynamics``),
  (b) q̈ with ∂q̈/∂q, ∂q̈/∂q̇, ∂q̈/∂Q (``forward_dynamics_jacobians``),
  (c) the position problem (``solve_position`` with z held, from a perturbed guess),
  (d) z̈ (``independent_dynamics(..., jacobians=False)``),
  (e) z̈ with ∂z̈/∂z, ∂z̈/∂ż, ∂z̈/∂Q (``independent_dynamics``),

and (a), (b) on the dense null-space path (``options.method = "dense"``, O(n³)) for
N ≤ 50 as the baseline; (b) once more with ``out=`` arrays, for context (what allocating
the n×n outputs costs). The exponent p of time ∝ N^p is fitted by least squares on
log–log over N ≥ 20 (N = 10 is still partly per-call overhead). (b) and (e) write dense
n×n (d×d) Jacobians, so they cannot be better than O(N²).

A second part times (a) on both paths for short chains, N = 2 … 8 (n = 4 … 16), to show
where the sparse path starts to win: the auto threshold (``MB_SPARSE_FROM_N`` in
mbgen/csrc/model.c, dense below n = 4 coordinates) should sit there.

Batch sizes are chosen per call by a short calibration so that one timed trial lasts
about ``Sizes.seconds`` (long chains: a few states per batch, the call repeated); states
are consistent (Φ = 0, Φq q̇ = 0) and distinct. Compiled chains are cached in $MBGEN_OUT
(default ./generated in the repository); the first run compiles chain200 (~30 s).

Run: ``.venv/bin/python benchmarks/scaling.py [--quick]`` (any cwd). Writes
``benchmarks/results/scaling.json`` and ``benchmarks/results/scaling.png``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
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
    manifold_states,
    print_table,
    write_results,
)
from rich.console import Console
from rich.table import Table

import mbgen

GUESS_NOISE = 1e-3  # m; consistent state + this noise = the position problem's guess
FIT_FROM = 20  # bodies; smallest N in the exponent fit
DENSE_UP_TO = 50  # bodies; the O(n³) dense baseline is skipped above
OUTPUT_BYTES = 24 << 20  # output of one batched call; below glibc's largest mmap threshold
# so repeated calls reuse freed memory instead of page-faulting fresh pages every time
SPARSE_FROM_N = 4  # coordinates; MB_SPARSE_FROM_N in mbgen/csrc/model.c (reported only)


@dataclass(frozen=True)
class Quantity:
    key: str
    title: str
    exponent_target: float | None
    target_100: float | None = None  # µs per state on the 100-body chain
    # the timing that target reads: for the Jacobians the one into preallocated outputs,
    # the computation (as peers.py); fresh (N, n, n) arrays add their page faults, ~300 µs
    # per state at n = 200, which the per-N table shows apart
    timed_as: str = ""


QUANTITIES = (
    Quantity("qdd", "(a) q̈", 1.2, 20.0),
    Quantity("qdd_jac", "(b) q̈ + Jacobians", 2.2, 500.0, "qdd_jac_out"),
    Quantity("position", "(c) position problem", 1.2),
    Quantity("zdd", "(d) z̈", 1.2),
    Quantity("zdd_jac", "(e) z̈ + Jacobians", 2.2),
)
DENSE = ("qdd", "qdd_jac")  # timed on the dense path too (N ≤ DENSE_UP_TO)


@dataclass(frozen=True)
class Sizes:
    """Chains, target length of one timed trial and repeats; ``--quick`` is small."""

    chains: tuple[int, ...]
    small: tuple[int, ...]
    seconds: float  # aimed wall time of one trial (batch × number calls)
    pool_values: int  # states per chain: min(max_pool, pool_values // n)
    max_pool: int
    repeat: int


FULL = Sizes(chains=(10, 20, 50, 100, 200), small=(2, 3, 4, 5, 6, 7, 8), seconds=0.25,
             pool_values=1_000_000, max_pool=50_000, repeat=5)
QUICK = Sizes(chains=(10, 20, 50), small=(2, 4, 6, 8), seconds=0.02, pool_values=50_000,
              max_pool=5_000, repeat=2)


@dataclass
class Timing:
    seconds: float  # per state
    batch: int
    number: int

    @property
    def us(self) -> float:
        return self.seconds * 1e6


def measure(make: Callable[[int], Callable[[], Any]], pool: int, bytes_per_state: int,
            sizes: Sizes) -> Timing:
    """Per-state time of ``make(batch)()``, with the batch (and the number of calls per
    trial) calibrated so that one trial lasts about ``sizes.seconds``."""
    cap = max(1, min(pool, OUTPUT_BYTES // max(bytes_per_state, 1)))
    batch = min(cap, 8)
    for _ in range(2):  # second round: the first estimate is mostly per-call overhead
        call = make(batch)
        call()  # warm up (first touch of the output memory)
        start = time.perf_counter()
        call()
        per_state = (time.perf_counter() - start) / batch
        batch = max(1, min(cap, round(sizes.seconds / per_state)))
    number = max(1, round(sizes.seconds / (per_state * batch)))
    call = make(batch)
    call()
    return Timing(best_time(call, sizes.repeat, number) / batch, batch, number)


def newton_iterations(mech: Any, guess: np.ndarray, ind: np.ndarray) -> int | None:
    """Newton steps the position problem needs on these guesses (None: > 20)."""
    for steps in range(1, 21):
        _, status = mech.solve_position(guess, z=ind, max_iter=steps, errors="status")
        if not status.any():
            return steps
    return None


def chain_timings(mech: Any, sizes: Sizes, say: Callable[[str], None],
                  ) -> tuple[dict[str, Timing], dict[str, Any]]:
    """(a)–(e) on the auto path, (a), (b) on the dense path for short chains."""
    n, bodies = mech.n, mech.n // 2
    pool = max(1, min(sizes.max_pool, sizes.pool_values // n))
    q, qd = manifold_states(mech, pool)
    ind = mech.partition(mech.q0)[0]  # z of q0 for every state (well away from singular)
    d = len(ind)
    guess = q + GUESS_NOISE * np.random.default_rng(1).standard_normal(q.shape)
    iterations = newton_iterations(mech, guess[:256], ind)

    def batched(function: Callable[..., Any], *arrays: np.ndarray, **kwargs: Any,
                ) -> Callable[[int], Callable[[], Any]]:
        def make(batch: int) -> Callable[[], Any]:
            args = [a[:batch] for a in arrays]
            return lambda: function(*args, **kwargs)
        return make

    def preallocated(batch: int) -> Callable[[], Any]:
        out = (np.empty((batch, n)), *(np.empty((batch, n, n)) for _ in range(3)))
        qb, qdb = q[:batch], qd[:batch]
        return lambda: mech.forward_dynamics_jacobians(qb, qdb, out=out)

    calls = {
        "qdd": (batched(mech.forward_dynamics, q, qd), 8 * n),
        "qdd_jac": (batched(mech.forward_dynamics_jacobians, q, qd), 8 * (n + 3 * n * n)),
        "position": (batched(mech.solve_position, guess, z=ind), 8 * n),
        "zdd": (batched(mech.independent_dynamics, q, qd, z=ind, jacobians=False), 8 * d),
        "zdd_jac": (batched(mech.independent_dynamics, q, qd, z=ind),
                    8 * (d + 2 * d * d + d * n)),
        "qdd_jac_out": (preallocated, 8 * (n + 3 * n * n)),
    }
    mech.options.method = "auto"
    times = {key: measure(make, pool, size, sizes) for key, (make, size) in calls.items()}
    info = {"n": n, "m": mech.m, "dof": mech.dof, "auto_uses_sparse": mech.uses_sparse,
            "states": pool, "newton_iterations": iterations,
            "max_abs_phi_of_states": float(np.abs(mech.phi(q[:1000])).max())}
    if bodies <= DENSE_UP_TO:
        mech.options.method = "dense"
        for key in DENSE:
            make, size = calls[key]
            times[f"{key}_dense"] = measure(make, pool, size, sizes)
        mech.options.method = "auto"
    say(f"  chain{bodies}: " + ", ".join(f"{k} {t.us:.3g}" for k, t in times.items())
        + " µs/state")
    return times, info


def small_timings(mech: Any, sizes: Sizes) -> tuple[dict[str, Timing], bool]:
    """(a) and, for context, (b) on both paths for a short chain; whether auto is sparse."""
    pool = max(1, min(sizes.max_pool, sizes.pool_values // mech.n))
    q, qd = manifold_states(mech, pool)
    n = mech.n
    times = {}
    for method in ("dense", "sparse"):
        mech.options.method = method
        for key, function, size in (("qdd", mech.forward_dynamics, 8 * n),
                                    ("qdd_jac", mech.forward_dynamics_jacobians,
                                     8 * (n + 3 * n * n))):
            def make(batch: int, f: Callable[..., Any] = function) -> Callable[[], Any]:
                qb, qdb = q[:batch], qd[:batch]
                return lambda: f(qb, qdb)
            times[f"{key}_{method}"] = measure(make, pool, size, sizes)
    mech.options.method = "auto"
    return times, mech.uses_sparse


def exponent(bodies: list[int], seconds: list[float]) -> float:
    """Least-squares slope of log(time) vs log(N) over N ≥ FIT_FROM."""
    return loglog_slope(bodies, seconds, FIT_FROM)


def crossover(small: dict[int, dict[str, Timing]], key: str) -> int | None:
    """Smallest N from which the sparse path is faster for every larger N measured."""
    found = None
    for bodies in sorted(small, reverse=True):
        if small[bodies][f"{key}_sparse"].seconds < small[bodies][f"{key}_dense"].seconds:
            found = bodies
        else:
            break
    return found


def plot(chains: dict[int, dict[str, Timing]], exponents: dict[str, float], path: Path,
         ) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(7.5, 5.5), dpi=120)
    bodies = sorted(chains)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for color, quantity in zip(colors, QUANTITIES, strict=False):
        y = [chains[b][quantity.key].us for b in bodies]
        ax.loglog(bodies, y, "o-", color=color,
                  label=f"{quantity.title}  (∝ N^{exponents[quantity.key]:.2f})")
        dense = [b for b in bodies if f"{quantity.key}_dense" in chains[b]]
        if dense:
            ax.loglog(dense, [chains[b][f"{quantity.key}_dense"].us for b in dense], "s--",
                      color=color, alpha=0.8, mfc="none",
                      label=f"{quantity.title}, dense path  (∝ N^"
                            f"{exponents[quantity.key + '_dense']:.2f})")
    ax.set_xticks(bodies, [str(b) for b in bodies])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("chain length N [bodies]  (n = 2N coordinates)")
    ax.set_ylabel("time per state [µs]  (batched call)")
    ax.set_title("mbgen: per-state cost vs chain length (auto → sparse KKT path)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)  # atomic, like write_results
    finally:
        Path(tmp).unlink(missing_ok=True)
        plt.close(fig)


def print_matrix(chains: dict[int, dict[str, Timing]], console: Console) -> None:
    """N × quantity: the per-state times at a glance (the same numbers as the figures)."""
    table = Table(title="per-state time [µs], batched call (auto path; dense for comparison)",
                  title_justify="left")
    columns = [(q.key, q.title) for q in QUANTITIES] + [
        ("qdd_jac_out", "(b) with out="), ("qdd_dense", "(a) dense"),
        ("qdd_jac_dense", "(b) dense")]
    table.add_column("N (n)", justify="right")
    for _, title in columns:
        table.add_column(title, justify="right")
    for bodies in sorted(chains):
        row = chains[bodies]
        table.add_row(f"{bodies} ({2 * bodies})",
                      *(f"{row[k].us:.4g}" if k in row else "—" for k, _ in columns))
    console.print(table)


def print_small(small: dict[int, dict[str, Timing]], auto: dict[int, bool],
                console: Console) -> None:
    table = Table(title="short chains: dense vs sparse path, per-state time [µs]",
                  title_justify="left")
    for column in ("N (n)", "auto picks", "(a) dense", "(a) sparse", "sparse/dense",
                   "(b) dense", "(b) sparse", "sparse/dense"):
        table.add_column(column, justify="right")
    for bodies in sorted(small):
        t = small[bodies]
        table.add_row(
            f"{bodies} ({2 * bodies})", "sparse" if auto[bodies] else "dense",
            f"{t['qdd_dense'].us:.3g}", f"{t['qdd_sparse'].us:.3g}",
            f"{t['qdd_sparse'].seconds / t['qdd_dense'].seconds:.2f}",
            f"{t['qdd_jac_dense'].us:.3g}", f"{t['qdd_jac_sparse'].us:.3g}",
            f"{t['qdd_jac_sparse'].seconds / t['qdd_jac_dense'].seconds:.2f}")
    console.print(table)


def build_figures(chains: dict[int, dict[str, Timing]], small: dict[int, dict[str, Timing]],
                  exponents: dict[str, float], fit_over: list[int],
                  ) -> tuple[list[Figure], list[Figure], list[Figure]]:
    """(per-N figures, targets: exponents + 100-body, short-chain figures)."""
    per_n: list[Figure] = []
    for bodies in sorted(chains):
        for key, t in chains[bodies].items():
            title = {q.key: q.title for q in QUANTITIES}.get(key, key)
            if key.endswith("_dense"):
                title = {q.key: q.title for q in QUANTITIES}[key[:-6]] + ", dense path"
            elif key == "qdd_jac_out":
                title = "(b) q̈ + Jacobians, out= preallocated"
            per_n.append(Figure(f"chain{bodies} (n={2 * bodies}): {title}", t.us, "µs/state",
                                note=f"batch {t.batch} × {t.number} calls"))
    fit = f"least squares on log–log over N = {', '.join(map(str, fit_over))}"
    targets: list[Figure] = []
    for q in QUANTITIES:
        targets.append(Figure(f"exponent p (time ∝ N^p): {q.title}", exponents[q.key], "",
                              q.exponent_target, fit))
        if f"{q.key}_dense" in exponents and not math.isnan(exponents[f"{q.key}_dense"]):
            targets.append(Figure(f"exponent p: {q.title}, dense path",
                                  exponents[f"{q.key}_dense"], "",
                                  note=f"context; N ≤ {DENSE_UP_TO} only"))
    if 100 in chains:
        for q in QUANTITIES:
            if q.target_100 is not None:
                key = q.timed_as or q.key
                t = chains[100][key]
                title = q.title + (", out= preallocated" if key == "qdd_jac_out" else "")
                targets.append(Figure(f"chain100 (n=200): {title}", t.us, "µs/state",
                                      q.target_100, f"batch {t.batch} × {t.number} calls"))
    short: list[Figure] = []
    for bodies in sorted(small):
        for key, t in small[bodies].items():
            what, method = key.rsplit("_", 1)
            title = {q.key: q.title for q in QUANTITIES}[what]
            short.append(Figure(f"chain{bodies} (n={2 * bodies}): {title}, {method} path",
                                t.us, "µs/state", note=f"batch {t.batch} × {t.number} calls"))
    for key in DENSE:
        found = crossover(small, key)
        title = {q.key: q.title for q in QUANTITIES}[key]
        if found is not None:
            short.append(Figure(f"sparse faster than dense from N = (bodies): {title}",
                                found, "bodies",
                                note=f"n = {2 * found} coordinates; auto threshold today "
                                     f"n ≥ {SPARSE_FROM_N} (N ≥ {SPARSE_FROM_N // 2})"))
    return per_n, targets, short


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="short chains, short trials: a fast check, not a measurement "
                             "(results are not written)")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    console = Console(width=None if sys.stdout.isatty() else 160)
    say = console.print
    out_dir = Path(os.environ.get("MBGEN_OUT", REPO / "generated"))
    start = time.perf_counter()

    chains: dict[int, dict[str, Timing]] = {}
    info: dict[int, dict[str, Any]] = {}
    for bodies in sizes.chains:
        say(f"chain{bodies}: load (compiles on the first run) …")
        mech = mbgen.load(chain_file(bodies, out_dir, "scaling"), out_dir=out_dir)
        chains[bodies], info[bodies] = chain_timings(mech, sizes, say)
    small: dict[int, dict[str, Timing]] = {}
    auto: dict[int, bool] = {}
    for bodies in sizes.small:
        say(f"chain{bodies}: dense vs sparse …")
        mech = mbgen.load(chain_file(bodies, out_dir, "scaling"), out_dir=out_dir)
        small[bodies], auto[bodies] = small_timings(mech, sizes)
    elapsed = time.perf_counter() - start

    bodies = sorted(chains)
    exponents = {}
    for key in [q.key for q in QUANTITIES] + [f"{k}_dense" for k in DENSE] + ["qdd_jac_out"]:
        have = [b for b in bodies if key in chains[b]]
        exponents[key] = exponent(have, [chains[b][key].seconds for b in have])
    fit_over = [b for b in bodies if b >= FIT_FROM]
    per_n, targets, short = build_figures(chains, small, exponents, fit_over)

    print_matrix(chains, console)
    print_table("scaling: per-state time per chain (batched call)", per_n, console)
    print_table("scaling: fitted exponents and 100-body targets", targets, console)
    print_small(small, auto, console)
    print_table("short chains: dense vs sparse path (informs MB_SPARSE_FROM_N)", short, console)
    for key in DENSE:
        found = crossover(small, key)
        title = {q.key: q.title for q in QUANTITIES}[key]
        say(f"{title}: sparse path faster than dense "
            + (f"from N = {found} bodies (n = {2 * found})" if found is not None else
               f"for no N ≤ {max(small)} measured")
            + f"; auto switches at n ≥ {SPARSE_FROM_N} (N ≥ {SPARSE_FROM_N // 2})")

    png = (RESULTS / "scaling.png" if not args.quick
           else Path(tempfile.gettempdir()) / "mbgen-bench-scaling-quick.png")
    plot(chains, exponents, png)
    figures = per_n + targets + short
    missed = [f.name for f in figures if f.met is False]
    verdict = f"targets missed: {', '.join(missed)}" if missed else "all targets met"
    if args.quick:  # a quick check never replaces the measured figures
        say(f"--quick: results not written, plot in {png} ({elapsed:.1f} s); {verdict}")
        return 0
    extra = {
        "quick": args.quick,
        "sizes": sizes.__dict__,
        "exponents": exponents,
        "exponent_fit": {"from_bodies": FIT_FROM, "over": fit_over},
        "crossover_bodies": {key: crossover(small, key) for key in DENSE},
        "auto_threshold_coordinates": SPARSE_FROM_N,
        "chains": {str(b): {**info[b], "timings": {k: t.__dict__ for k, t in
                                                    chains[b].items()}} for b in bodies},
        "short_chains": {str(b): {"n": 2 * b, "auto_uses_sparse": auto[b],
                                  "timings": {k: t.__dict__ for k, t in small[b].items()}}
                         for b in sorted(small)},
        "position_problem": f"solve_position(q + {GUESS_NOISE}·noise, z = partition(q0)), "
                            "Newton to |Φ| ≤ 1e-12",
        "plot": str(png.relative_to(REPO)),
        "benchmark_seconds": elapsed,
    }
    path = write_results("scaling", figures, extra)
    say(f"wrote {path} and {png} ({elapsed:.1f} s); {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

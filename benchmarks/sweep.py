"""mbgen sweep: throughput against running the same simulations one by one, and scaling
over Dask workers.

Why these figures: a study of thousands of runs is only worth a command of its own if it
runs them much faster than the loop a user would write around ``simulate``, and if a
cluster multiplies that. Issue: ≥ 5× the one-by-one throughput on the four-bar (RK4, 5 s
at dt 1 ms, 10 000 runs), and 2 Dask workers ≥ 1.7× one.

1. One by one: what a user writes with the Python API: for each run set the parameters,
   assemble the start, ``simulate`` 5 s, take the same figures (x2's min and max, the
   final state) from the result; timed over the first ``--baseline`` runs of the study
   and counted per run.
2. The sweep, all 10 000 runs (``mbgen.sweep``'s engine as ``mbgen sweep`` calls it,
   Parquet chunks included), on one thread and on every core of this machine; the
   figures of the runs the baseline made are checked against it (to 1e-9).
3. The same study on a ``dask.distributed.LocalCluster`` of one worker and of two
   (one thread each, processes), the scheduler's overhead included.

Run: ``.venv/bin/python benchmarks/sweep.py [--quick]`` (needs ``distributed``, the
``mbgen[cluster]`` extra). Writes ``benchmarks/results/sweep.json``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import MECHANISMS, Figure, print_table, write_results
from rich.console import Console

import mbgen
from mbgen.runtime.parallel import usable_cores
from mbgen.simulation.integrators import simulate
from mbgen.sweep.execute import finish, prepare, run_study
from mbgen.sweep.study import read_study

STUDY = """\
mechanism: {mechanism}
samples: {runs}
seed: 1
parameters:
  L: {{distribution: uniform, tolerance: 0.0005}}
  xb: {{distribution: uniform, tolerance: 0.0005}}
run: {{integrator: rk4, dt: 0.001, t_end: 5}}
record:
  final: true
  figures:
    - {{of: x2, stats: [min, max]}}
"""


def one_by_one(mech: mbgen.runtime.compiled.CompiledMechanism, values: dict[str, np.ndarray],
               count: int) -> tuple[float, np.ndarray]:
    """Seconds per run of the loop a user writes, and its (count, 2) x2 min and max."""
    nominal = dict(mech.parameters)
    figures = np.empty((count, 2))
    begin = time.perf_counter()
    for k in range(count):
        mech.set_parameters(L=values["L"][k], xb=values["xb"][k])
        q0 = mech.solve_position(mech.q0, minimum_norm=True)
        run = simulate(mech, 5.0, 1e-3, q0=q0)
        figures[k] = run.q[:, 2].min(), run.q[:, 2].max()
    seconds = (time.perf_counter() - begin) / count
    mech.set_parameters(**nominal)
    return seconds, figures


def sweep_seconds(study_file: Path, mech: mbgen.runtime.compiled.CompiledMechanism,
                  folder: Path, tag: str, workers: int = 0,
                  scheduler: str | None = None) -> tuple[float, Path]:
    """Wall time of the whole study (results merged) and the results file."""
    prepared = prepare(read_study(study_file), mech, 1e-3)
    out = folder / f"{tag}.parquet"
    begin = time.perf_counter()
    store, outcome = run_study(prepared, mech, out, workers, scheduler)
    finish(store, out, None)
    assert outcome.failed == 0, outcome.failures
    return time.perf_counter() - begin, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 000 runs, no results file")
    parser.add_argument("--baseline", type=int, default=300,
                        help="runs timed one by one [default: 300]")
    args = parser.parse_args()
    console = Console(width=160)
    runs = 1000 if args.quick else 10_000
    folder = Path(tempfile.mkdtemp(prefix="mbgen-sweep-bench-"))
    study_file = folder / "study.yaml"
    study_file.write_text(STUDY.format(mechanism=MECHANISMS / "fourbar.yaml", runs=runs))
    mech = mbgen.load(str(MECHANISMS / "fourbar.yaml"), out_dir=str(folder / "build"))
    assert mech.sweep_uses_lanes()
    import pyarrow.parquet as pq

    cores = usable_cores()
    single, single_out = sweep_seconds(study_file, mech, folder, "one-thread", workers=1)
    table = pq.read_table(single_out)
    values = {name: table[name].to_numpy() for name in ("L", "xb", "x2_min", "x2_max")}
    baseline, figures = one_by_one(mech, values, args.baseline)
    agreement = float(np.abs(figures - np.column_stack(
        [values["x2_min"][:args.baseline], values["x2_max"][:args.baseline]])).max())
    threads, _ = sweep_seconds(study_file, mech, folder, "threads", workers=cores)
    from distributed import LocalCluster

    cluster_times = {}
    for workers in (1, 2):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster:
            sweep_seconds(study_file, mech, folder, f"warm{workers}",  # workers compile
                          scheduler=cluster.scheduler_address)
            cluster_times[workers], _ = sweep_seconds(study_file, mech, folder,
                                                      f"dask{workers}",
                                                      scheduler=cluster.scheduler_address)
    per_run = {"one thread": single / runs, f"{cores} threads": threads / runs}
    speedup = {name: baseline / seconds for name, seconds in per_run.items()}
    scaling = cluster_times[1] / cluster_times[2]
    results = [
        Figure("one by one (Python API, simulate), per run", baseline * 1e3, "ms",
               note=f"{args.baseline} runs"),
        Figure("sweep, one thread, per run", per_run["one thread"] * 1e3, "ms",
               note=f"{runs} runs in {single:.1f} s; {speedup['one thread']:.1f}× one by one"),
        Figure(f"sweep, {cores} threads (the default), per run",
               per_run[f"{cores} threads"] * 1e3, "ms",
               note=f"{runs} runs in {threads:.1f} s"),
        Figure(f"one by one / sweep ({cores} threads), time per run, inverted",
               1 / speedup[f"{cores} threads"], "×", 1 / 5,
               f"{speedup[f'{cores} threads']:.1f}× the throughput (target ≥ 5×)"),
        Figure("one by one / sweep (one thread), time per run, inverted",
               1 / speedup["one thread"], "×",
               note=f"{speedup['one thread']:.1f}× on one core alone"),
        Figure("sweep vs one by one: largest difference of x2 min/max", agreement, "m", 1e-9),
        Figure("Dask, 1 worker: the study", cluster_times[1], "s"),
        Figure("Dask, 2 workers: the study", cluster_times[2], "s"),
        Figure("Dask: 1 worker / 2 workers, time, inverted", 1 / scaling, "×", 1 / 1.7,
               f"{scaling:.2f}× faster with 2 workers (target ≥ 1.7×)"),
    ]
    print_table(f"mbgen sweep: four-bar, RK4, 5 s at 1 ms, {runs} runs", results, console)
    if args.quick:
        console.print(f"--quick: results not written ({folder})")
        return 0
    path = write_results("sweep", results, {"runs": runs, "cores": cores})
    console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`mbgen sweep`: a study of many runs (Monte Carlo, grids), batched in C, on local threads
or a Dask cluster, into Parquet."""

from __future__ import annotations

import time
from pathlib import Path

import click
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from mbgen.cli import BUILD_DIR, status_console
from mbgen.cli.conventions import (
    PHI_TOL,
    POSITIVE,
    Command,
    OutputFile,
    check_paths,
    check_work,
    max_steps_option,
    untrusted_path,
)
from mbgen.errors import UntrustedResultError
from mbgen.runtime.parallel import usable_cores
from mbgen.sweep.execute import finish, prepare, run_study, trajectories_path
from mbgen.sweep.plots import picture_paths
from mbgen.sweep.study import Study, read_study

#: Time steps of a study, summed over its runs, that it starts without being asked
MAX_RUN_STEPS = 2_000_000_000


@click.command(cls=Command, example=(
    "mbgen sweep examples/fourbar-tolerances.yaml --out results.parquet --plot"))
@click.argument("study_file", metavar="STUDY", type=click.Path(exists=True, dir_okay=False,
                                                                path_type=Path))
@click.option("--out", type=OutputFile((".parquet",)), required=True,
              help="Parquet file of one row per run: the values it was given, its figures, "
              "its final state and its status. Recorded trajectories go beside it "
              "(<out stem>.trajectories.parquet).")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Run the chunks on the Dask cluster whose scheduler is at ADDRESS "
              "(e.g. tcp://10.0.0.5:8786; needs mbgen[cluster]) [default: the study's "
              "dask: scheduler, else threads on this machine].")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Threads on this machine [default: the cores this process may use].")
@click.option("--plot", is_flag=True, help="Also write PNGs beside the results: histograms "
              "of the figures, the envelope of the trajectories, the rank correlation of "
              "each figure with each varied quantity.")
@click.option("--phi-tol", type=POSITIVE, default=PHI_TOL, show_default=True,
              help="Largest accepted constraint error ‖Φ‖ of a run, times the mechanism's "
              "size squared [dimensionless]; a run above it is marked as drifted.")
@click.option("--max-failed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Runs that may fail (not assembled, a singular step, drift) with the "
              "study still trusted; beyond it the study ends with exit code 4 and its "
              "results are written as <out>.untrusted.parquet.")
@max_steps_option("time steps, summed over the runs,", MAX_RUN_STEPS)
@BUILD_DIR
def sweep(study_file: Path, out: Path, scheduler: str | None, workers: int | None, plot: bool,
          phi_tol: float, max_failed: int, max_steps: int, build_dir: Path | None) -> None:
    """Run the study STUDY (a YAML file: the mechanism, what to vary, how to run, what to
    record; docs/sweep.md) and write one row per run to a Parquet file. An interrupted
    study resumes: the same command takes up the chunks it finished."""
    from mbgen.cli import load_with_status

    study = read_study(study_file)
    trajectories = trajectories_path(out) if study.trajectories else None
    varied = any(spec.varied for spec in study.specs)
    pictures = picture_paths(out, trajectories is not None, varied) if plot else None
    check_paths({"STUDY": study_file, "mechanism": study.mechanism},
                {"--out": out, "trajectories": trajectories, "--plot": pictures})
    check_work(study.runs * study.steps, max_steps,
               f"time steps ({study.runs:,} runs of {study.steps:,} steps)", "--max-steps")
    if trajectories is not None:
        kept = study.steps // study.trajectory_every + 2
        check_work(study.runs * kept, MAX_RUN_STEPS, "trajectory rows", "record.trajectories",
                   3 * 8.0 * (2 + len(study.trajectories)))
    mech, _ = load_with_status(study.mechanism, build_dir)
    prepared = prepare(study, mech, phi_tol)
    address = scheduler or study.scheduler
    begin = time.perf_counter()
    try:
        with Progress(TextColumn("[bold]runs"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), TimeRemainingColumn(), console=status_console,
                      transient=True) as bar:
            task = bar.add_task("runs", total=study.runs)
            store, outcome = run_study(prepared, mech, out, workers or 0, address, build_dir,
                                       lambda done, _: bar.update(task, completed=done))
    except KeyboardInterrupt:
        status_console.print(f"interrupted: the finished chunks are kept in "
                             f"{escape(str(out))}.partial; the same command resumes")
        raise
    elapsed = time.perf_counter() - begin
    trusted = outcome.failed <= max_failed
    if not trusted:  # kept for a look, never under the names asked for
        out = untrusted_path(out)
        trajectories = trajectories_path(out) if trajectories else None
        check_paths({"STUDY": study_file}, {"--out": out, "trajectories": trajectories})
    finish(store, out, trajectories)
    where = f"on the Dask cluster at {address}" if address else \
        f"on {workers or usable_cores()} threads"
    resumed = (f", {outcome.resumed} of {outcome.chunks} chunks taken up from an earlier run"
               if outcome.resumed else "")
    mark = "[green]✓[/]" if not outcome.failed else "[yellow]![/]" if trusted else "[red]✗[/]"
    status_console.print(f"{mark} {escape(mech.name)}: {study.runs:,} runs of "
                         f"{study.steps:,} steps ({study.integrator}, dt {study.dt:g} s) in "
                         f"{elapsed:.1f} s {escape(where)}{resumed}")
    if outcome.failed:
        reasons = "; ".join(f"{count} {escape(reason)}" for reason, count in
                            outcome.failures.most_common(3))
        status_console.print(f"  {outcome.failed:,} of {study.runs:,} runs failed, marked in "
                             f"the status column ({reasons})")
    written = [out] + ([trajectories] if trajectories else [])
    if plot:
        written += _pictures(study, mech.name, out, trajectories)
    status_console.print(escape("\n".join(f"  wrote {path}" for path in written)))
    if not trusted:
        raise UntrustedResultError(f"{outcome.failed:,} runs failed, more than --max-failed "
                                   f"{max_failed}")


def _pictures(study: Study, title: str, out: Path, trajectories: Path | None) -> list[Path]:
    """The --plot pictures from the written results."""
    from mbgen.io.chunks import read_parquet_columns
    from mbgen.sweep.design import column_name
    from mbgen.sweep.plots import write_pictures

    figures = [f"{f.of}_{stat}" for f in study.figures for stat in f.stats]
    varied = [column_name(spec) for spec in study.specs if spec.varied]
    traces = None if trajectories is None else read_parquet_columns(trajectories)
    return write_pictures(read_parquet_columns(out), figures, varied, traces, out, title)

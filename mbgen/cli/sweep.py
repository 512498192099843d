"""`mbgen sweep`: a study of many runs (Monte Carlo, grids), batched in C, on local threads
or a Dask cluster, into Parquet."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

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
    POSITIVE,
    Command,
    OutputFile,
    check_paths,
    check_work,
    max_steps_option,
    untrusted_path,
)
from mbgen.errors import MechanismError, UntrustedResultError
from mbgen.io.chunks import lock_path, locked, work_directory
from mbgen.runtime.parallel import usable_cores
from mbgen.simulation.trust import PHI_TOL
from mbgen.sweep.cluster import check_address
from mbgen.sweep.execute import finish, prepare, run_study, trajectories_path
from mbgen.sweep.plots import picture_paths
from mbgen.sweep.study import Study, read_study

#: Time steps of a study, summed over its runs, that it starts without being asked
MAX_RUN_STEPS = 2_000_000_000
SCHEDULER_VARIABLE = "MBGEN_SCHEDULER"  # the environment's --scheduler


class SchedulerAddress(click.ParamType):
    """A Dask scheduler's address, checked before anything connects: tcp:// or tls://
    HOST:PORT, tls:// only with Dask's TLS certificates configured."""

    name = "address"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        try:
            return scheduler_address(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def scheduler_address(value: str) -> str:
    """``value`` checked as a scheduler's address (a ValueError saying why not)."""
    address = check_address(value)
    if address.startswith("tls://"):
        try:
            from mbgen.sweep.cluster import security
        except ImportError:  # without distributed: said when it would connect
            return address
        security(address)
    return address


@click.command(cls=Command, example=(
    "mbgen sweep examples/fourbar-tolerances.yaml --out results.parquet --plot"))
@click.argument("study_file", metavar="STUDY", type=click.Path(exists=True, dir_okay=False,
                                                                path_type=Path))
@click.option("--out", type=OutputFile((".parquet",)), required=True,
              help="Parquet file of one row per run: the values it was given, its figures, "
              "its final state and its status. Recorded trajectories go beside it "
              "(<out stem>.trajectories.parquet).")
@click.option("--scheduler", default=None, metavar="ADDRESS", type=SchedulerAddress(),
              envvar=SCHEDULER_VARIABLE, show_envvar=True,
              help="Run the chunks on the Dask cluster whose scheduler is at ADDRESS "
              "(tcp:// or tls://, e.g. tcp://10.0.0.5:8786; needs mbgen[cluster]). Only "
              "on a cluster you trust: Dask runs what its scheduler sends [default: "
              "threads on this machine].")
@click.option("--scheduler-from-study", is_flag=True,
              help="Run on the scheduler the study's own `dask: scheduler:` names; "
              "without it that address is never connected to (a study file someone sent "
              "must not pick the machine that runs code in mbgen).")
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
def sweep(study_file: Path, out: Path, scheduler: str | None, scheduler_from_study: bool,
          workers: int | None, plot: bool, phi_tol: float, max_failed: int, max_steps: int,
          build_dir: Path | None) -> None:
    """Run the study STUDY (a YAML file: the mechanism, what to vary, how to run, what to
    record; docs/sweep.md) and write one row per run to a Parquet file. An interrupted
    study resumes: the same command takes up the chunks it finished."""
    from mbgen.cli import load_with_status

    study = read_study(study_file)
    address = _address(study, scheduler, scheduler_from_study)
    outputs = _outputs(study, out, plot)
    check_paths({"STUDY": study_file, "mechanism": study.mechanism}, outputs, untrusted=True,
                work={"work directory": work_directory(out), "lock": lock_path(out)})
    check_work(study.runs * study.steps, max_steps,
               f"time steps ({study.runs:,} runs of {study.steps:,} steps)", "--max-steps")
    if study.trajectories:
        kept = study.steps // study.trajectory_every + 2
        check_work(study.runs * kept, MAX_RUN_STEPS, "trajectory rows", "record.trajectories",
                   3 * 8.0 * (2 + len(study.trajectories)))
    mech, _ = load_with_status(study.mechanism, build_dir)
    prepared = prepare(study, mech, phi_tol)
    with locked(out):  # a second sweep on the same --out is refused while this one runs
        _run(study, prepared, mech, out, outputs, address, workers, build_dir, plot,
             max_failed)


def _address(study: Study, scheduler: str | None, from_study: bool) -> str | None:
    """Where the study runs: --scheduler (or $MBGEN_SCHEDULER), else the study's own
    scheduler when --scheduler-from-study says so, else None (threads here). A study's
    address is never connected to unasked: it is said, with the flag that would use it."""
    if from_study:
        if scheduler is not None:
            raise click.UsageError("--scheduler and --scheduler-from-study: give one")
        if study.scheduler is None:
            raise click.UsageError(f"--scheduler-from-study: {study.file} names no "
                                   "scheduler (dask: {scheduler: ADDRESS})")
        try:
            return scheduler_address(study.scheduler)
        except ValueError as exc:
            raise MechanismError(str(exc), study.file, None, "dask.scheduler") from None
    if study.scheduler is not None and scheduler is None:
        status_console.print(f"[yellow]![/] {escape(study.file)} names a Dask scheduler "
                             f"({escape(repr(study.scheduler))}): not connected to, as a "
                             "study file does not choose where code runs; running on this "
                             "machine (--scheduler-from-study runs there)")
    return scheduler


def _outputs(study: Study, out: Path, plot: bool) -> dict[str, Path | list[Path] | None]:
    """Every file a trusted study writes, by the option that asks for it (an untrusted one
    writes each under its untrusted_path instead)."""
    trajectories = trajectories_path(out) if study.trajectories else None
    varied = any(spec.varied for spec in study.specs)
    pictures = picture_paths(out, trajectories is not None, varied) if plot else None
    return {"--out": out, "trajectories": trajectories, "--plot": pictures}


def _run(study: Study, prepared: Any, mech: Any, out: Path,
         outputs: dict[str, Path | list[Path] | None], address: str | None,
         workers: int | None, build_dir: Path | None, plot: bool, max_failed: int) -> None:
    """The study run, its results merged and said, under the lock of ``out``."""
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
                             f"{escape(str(work_directory(out)))}; the same command resumes")
        raise
    elapsed = time.perf_counter() - begin
    trusted = outcome.failed <= max_failed
    if not trusted:  # kept for a look, never under the names asked for (checked up front)
        outputs = {option: [untrusted_path(p) for p in value] if isinstance(value, list)
                   else None if value is None else untrusted_path(value)
                   for option, value in outputs.items()}
    runs_file, trajectories = outputs["--out"], outputs["trajectories"]
    assert isinstance(runs_file, Path) and not isinstance(trajectories, list)
    finish(store, runs_file, trajectories)
    where = f"on the Dask cluster at {address}" if address else \
        f"on {workers or usable_cores()} threads"
    resumed = (f", {outcome.resumed} of {outcome.chunks} chunks taken up from an earlier run"
               if outcome.resumed else "")
    if store.damaged:
        status_console.print(f"[yellow]![/] {len(store.damaged)} chunk(s) of the earlier run "
                             "did not read back (cut short?): computed again")
    mark = "[green]✓[/]" if not outcome.failed else "[yellow]![/]" if trusted else "[red]✗[/]"
    status_console.print(f"{mark} {escape(mech.name)}: {study.runs:,} runs of "
                         f"{study.steps:,} steps ({study.integrator}, dt {study.dt:g} s) in "
                         f"{elapsed:.1f} s {escape(where)}{resumed}")
    if outcome.failed:
        reasons = "; ".join(f"{count} {escape(reason)}" for reason, count in
                            outcome.failures.most_common(3))
        status_console.print(f"  {outcome.failed:,} of {study.runs:,} runs failed, marked in "
                             f"the status column ({reasons})")
    written = [runs_file] + ([trajectories] if trajectories else [])
    pictures = outputs["--plot"]
    if plot and isinstance(pictures, list):
        written += _pictures(study, mech.name, runs_file, trajectories, pictures)
    status_console.print(escape("\n".join(f"  wrote {path}" for path in written)))
    if not trusted:
        raise UntrustedResultError(f"{outcome.failed:,} runs failed, more than --max-failed "
                                   f"{max_failed}")


def _pictures(study: Study, title: str, runs: Path, trajectories: Path | None,
              paths: list[Path]) -> list[Path]:
    """The --plot pictures (to ``paths``, picture_paths' order) from the written results;
    what Matplotlib warns of is said as a `!` line, not as a warning naming its source."""
    from mbgen.io.chunks import read_parquet_columns
    from mbgen.sweep.design import column_name
    from mbgen.sweep.plots import write_pictures

    figures = [f"{f.of}_{stat}" for f in study.figures for stat in f.stats]
    varied = [column_name(spec) for spec in study.specs if spec.varied]
    traces = None if trajectories is None else read_parquet_columns(trajectories)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        written = write_pictures(read_parquet_columns(runs), figures, varied, traces, paths,
                                 title)
    for message in dict.fromkeys(str(w.message).splitlines()[0] for w in caught if
                                 str(w.message)):
        status_console.print(f"[yellow]![/] --plot: {escape(message)}")
    return written

"""`mbgen estimate`: track a mechanism from a readings file with the particle filter, or the
errorEKF or the UKF in independent coordinates."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import numpy as np
from rich.markup import escape

from mbgen.cli import BUILD_DIR, status_console
from mbgen.cli.conventions import (
    DEVIATION,
    NON_NEGATIVE,
    PARAM,
    POSITIVE,
    Command,
    apply_parameters,
    check_paths,
    check_work,
    max_steps_option,
    no_sensors,
    untrusted_path,
)
from mbgen.errors import MbgenError, UntrustedResultError
from mbgen.escaping import mathtext
from mbgen.estimation import filter_defaults as defaults
from mbgen.io.figures import plot_paths
from mbgen.runtime.integration import PREDICTORS

if TYPE_CHECKING:
    from mbgen.estimation.particle_filter import Track
    from mbgen.runtime.compiled import CompiledMechanism

#: The estimators, by --method (the first the default).
METHODS = ("particle", "ekf", "ukf", "smoother")
#: The methods on q0's branch with the Kalman filters' options and track
#: (estimation/kalman.py, estimation/ukf.py, estimation/smoother.py).
KALMAN = ("ekf", "ukf", "smoother")
#: Options that only the particle filter takes.
PARTICLE_ONLY = ("particles", "pool", "seed", "integrator")
#: --noise-force's value that asks for the intensity to be chosen from the readings.
AUTO = "auto"


class DeviationOrAuto(click.ParamType):
    """A deviation (cli/conventions.DEVIATION) or ``auto``."""

    name = "deviation|auto"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.strip().lower() == AUTO:
            return AUTO
        return DEVIATION.convert(value, param, ctx)


DEVIATION_OR_AUTO = DeviationOrAuto()


@click.command(cls=Command, renamed={"--sensors": "--data", "--sigma-a": "--noise-accel",
                                     "--sigma-s": "--noise-sensor"}, example=(
    "mbgen estimate mechanisms/fourbar.yaml --data examples/fourbar-readings.csv \\\n"
    "  --noise-sensor 0.0175 --out estimate.csv"))
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--data", "readings_path", type=click.Path(exists=True, dir_okay=False,
                                                         path_type=Path), required=True,
              help="Readings CSV: t [s], then one column per sensor label and per "
              "accelerometer label (empty: no reading); `mbgen simulate --sensors-out` "
              "writes one.")
@click.option("--method", type=click.Choice(METHODS), default=METHODS[0], show_default=True,
              help="particle: the particle filter (finds the assembly branch; "
              "docs/estimation.md); ekf: the errorEKF in independent coordinates on the "
              "branch of the file's q0 (real time, input estimation); ukf: the unscented "
              "Kalman filter on the same state; smoother: the factor-graph smoother (offline, or "
              "with --lag).")
@click.option("--unknown-forces", "unknown_forces", default=None, metavar="C1,C2",
              help="ekf, ukf: estimate the generalized forces at these coordinates too (a "
              "random walk, --noise-force), written as force_<c>.")
@click.option("--noise-force", "sigma_f", type=DEVIATION_OR_AUTO,
              default=defaults.NOISE_FORCE, show_default=True,
              help="ekf, ukf: the unknown forces' random-walk intensity [N/√s on point "
              "coordinates, N·m/√s on angles], or auto: the smallest on a log grid whose "
              "innovations pass the consistency tests, times √10 (chosen from the "
              "readings, printed).")
@click.option("--model-error", "model_error", is_flag=True,
              help="ekf, ukf: also estimate a generalized force at each independent "
              "coordinate (a random walk of --noise-force, written as force_<c>) that "
              "absorbs the model's own error (masses, friction off).")
@click.option("--lag", default=None, metavar="SECONDS|all",
              help="smoother: the later readings each step's estimate weighs at least [s], "
              "or all: the whole file in one batch [default: all].")
@click.option("--particles", type=click.IntRange(min=1), default=defaults.PARTICLES,
              show_default=True,
              help="Particles that carry the belief after the first readings (fewer make "
              "the branch probability less reliable: docs/estimation.md).")
@click.option("--pool", type=click.IntRange(min=1), default=defaults.POOL, show_default=True,
              help="The initial belief holds this many times --particles, until the "
              "readings have narrowed it to what --particles can carry.")
@click.option("--noise-accel", "sigma_a", type=DEVIATION, default=defaults.SIGMA_A,
              show_default=True,
              help="Standard deviation of the prediction's acceleration noise [m/s² on "
              "point coordinates, rad/s² on angles].")
@click.option("--noise-sensor", "sigma_s", type=DEVIATION, default=None,
              help="Standard deviation of every reading, in the sensors' units [default: "
              "each sensor's `noise` in the file; a sensor without one needs this option].")
@click.option("--dt", type=POSITIVE, default=None, help="Filter step [s] [default: the "
              "readings' period].")
@click.option("--integrator", type=click.Choice(list(PREDICTORS)),
              default=defaults.INTEGRATOR, show_default=True,
              help="Explicit integrator of the prediction.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the filter's random numbers: the same seed, the same estimate.")
@click.option("--spread", type=POSITIVE, default=None,
              help="Initial belief within ±SPREAD of q0 in every coordinate [m or rad] "
              "[default: every configuration the mechanism can take, in every branch; "
              f"ekf: the initial σ of z, default {defaults.EKF_SPREAD:g}].")
@click.option("--speed", type=NON_NEGATIVE, default=defaults.SPEED, show_default=True,
              help="Initial velocities uniform within ±SPEED per coordinate [m/s or rad/s].")
@click.option("--out", "csv_path", type=click.Path(dir_okay=False, path_type=Path),
              required=True, help="Estimate CSV to write.")
@click.option("--covariance", is_flag=True, help="Also write <name>_sigma per coordinate: "
              "its standard deviation (the particles' spread, or the Kalman filter's σ) "
              "[m or rad].")
@click.option("--plot", is_flag=True, help="Also write the estimate and branch PNGs.")
@PARAM
@max_steps_option("filter steps")
@BUILD_DIR
def estimate(file: Path, readings_path: Path, method: str, unknown_forces: str | None,
             sigma_f: float | str, model_error: bool, lag: str | None, particles: int,
             pool: int, sigma_a: float, sigma_s: float | None, dt: float | None,
             integrator: str, seed: int,
             spread: float | None, speed: float, csv_path: Path, covariance: bool, plot: bool,
             param_values: tuple[tuple[str, float], ...], max_steps: int,
             build_dir: Path | None) -> None:
    """Estimate FILE's state (and, with the particle filter, its assembly branch) from
    sensor readings: writes t, each coordinate's expected value with <name>_lo/<name>_hi
    (95 %), then ess, restart (1 where the filter started over) and p_branch<k> (particle)
    or force_<c> with its interval, nis and lost (ekf, ukf). An estimate that is not to be
    trusted ends with exit code 4."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from mbgen.cli import load_with_status
    from mbgen.estimation.particle_filter import MAX_SPEED, ParticleFilter, belief_bytes

    context = click.get_current_context()
    if method != "particle":
        given = [name for name in PARTICLE_ONLY if context.get_parameter_source(name)
                 == click.core.ParameterSource.COMMANDLINE]
        if given:
            raise click.UsageError(f"--{given[0]} is an option of --method particle only")
    elif unknown_forces is not None or model_error or context.get_parameter_source(
            "sigma_f") == click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("--unknown-forces, --model-error and --noise-force are "
                               f"options of --method {', '.join(KALMAN)} only")
    if method == "smoother" and (model_error or sigma_f == AUTO):
        raise click.UsageError("--model-error and --noise-force auto are options of "
                               "--method ekf and ukf only")
    if lag is not None and method != "smoother":
        raise click.UsageError("--lag is an option of --method smoother only")
    lag_seconds = _lag(lag)
    for out in (csv_path, untrusted_path(csv_path)):  # where an untrusted estimate goes too
        check_paths({"FILE": file, "--data": readings_path},
                    {"--out": out, "--plot": plot_paths(out, "estimate") if plot else None})
    if speed > MAX_SPEED:
        raise click.BadParameter(f"{speed:g} is above {MAX_SPEED:g}, the largest span whose "
                                 "variance the filter computes with", param_hint="--speed")
    mech, _ = load_with_status(file, build_dir)
    apply_parameters(mech, param_values)
    if method in KALMAN:
        _kalman(method, mech, file, readings_path, unknown_forces, sigma_f, sigma_a, sigma_s, dt,
                spread, speed, csv_path, covariance, plot, max_steps, lag_seconds,
                model_error)
        return
    # the initial belief's particles, allocated at once: refused beyond memory
    belief = particles * pool
    check_work(belief, belief, f"particles in the initial belief (--particles {particles} "
               f"× --pool {pool})", "--particles", belief_bytes(mech))
    if not mech.sensor_labels:
        raise click.UsageError(no_sensors(
            file, mech.accelerometer_labels, "which the filter weighs alongside sensors of "
            "the state only (alone, its intervals come out too narrow: docs/estimation.md)"))
    t, readings, step, steps = _readings(mech, readings_path, dt, max_steps)
    noise, accelerometer_noise = _noises(mech, sigma_s)
    try:
        observer = ParticleFilter(mech, particles=particles, sigma_a=sigma_a,
                                  sigma_s=noise, seed=seed, spread=spread,
                                  speed=speed, pool=pool, integrator=integrator,
                                  sigma_acc=accelerometer_noise)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    console = status_console
    with Progress(TextColumn("[bold]estimating"), BarColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task("pf", total=steps)
        with np.errstate(invalid="ignore", divide="ignore"):  # NaN is checked below
            track = observer.run(t, readings, dt, progress=lambda: bar.advance(task))
    names = mech.coordinate_names
    header, data = track.table(names, sigma=covariance)
    broken = np.flatnonzero(~np.isfinite(data).all(axis=1))
    if broken.size:
        raise UntrustedResultError(
            f"the estimate is not finite from t = {data[broken[0], 0]:g} s on (the "
            f"particles' prediction over steps of {step:g} s diverged): nothing written; a "
            "smaller --dt may help")
    doubt = track.distrust()
    csv_path, pictures = _written(mech, file, readings_path, csv_path, header, data, names,
                                  doubt is not None, plot)
    report(track, doubt, mech.name, step, particles, csv_path, pictures)


def _readings(mech: CompiledMechanism, readings_path: Path, dt: float | None,
              max_steps: int) -> tuple[np.ndarray, np.ndarray, float, int]:
    """The readings file's t (N,) and readings (N, sensors + accelerometers), the filter's
    step and its number of steps (refused beyond --max-steps), saying how many readings
    fall between steps."""
    from mbgen.estimation.particle_filter import filter_step, readings_between_steps
    from mbgen.io.readings import read_readings

    t, readings = read_readings(readings_path, [*mech.sensor_labels,
                                                *mech.accelerometer_labels])
    try:
        step, steps = filter_step(t, dt)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--dt") from None
    check_work(steps, max_steps, f"filter steps (t = {t[0]:g} to {t[-1]:g} s every "
               f"{step:g} s)", "--max-steps", 16.0 * (3 * mech.n + 8))
    left_out = readings_between_steps(t, step)
    if left_out:
        status_console.print(f"[yellow]![/] {left_out} of {len(t)} readings fall between "
                             f"filter steps of {step:g} s and are not used (a smaller --dt "
                             "uses them)")
    return t, readings, step, steps


def _noises(mech: CompiledMechanism, sigma_s: float | None) -> tuple[np.ndarray, np.ndarray]:
    """The sensors' reading noise (--noise-sensor or the file's) and the accelerometers'
    (their own units, m/s²: only from the file; none declared is bad input)."""
    try:
        noise = mech.sensor_noise(sigma_s)
    except MbgenError as exc:
        raise click.BadParameter(f"{exc}, or here", param_hint="--noise-sensor") from None
    return noise, mech.accelerometer_noise()


def _force_coordinates(mech: CompiledMechanism, text: str | None) -> list[str]:
    """--unknown-forces as coordinate names (none given: none), each once."""
    if text is None:
        return []
    names = [name.strip() for name in text.split(",")]
    for name in names:
        if name not in mech.coordinate_names:
            raise click.BadParameter(
                f"{name!r} is not a coordinate of {mech.name} (coordinates: "
                f"{', '.join(mech.coordinate_names)})", param_hint="--unknown-forces")
    if len(set(names)) != len(names):
        raise click.BadParameter(f"{text!r} names a coordinate twice",
                                 param_hint="--unknown-forces")
    return names


def _lag(text: str | None) -> float | None:
    """--lag in seconds (None: all, the whole file in one batch); 0 or less refused."""
    if text is None or text.strip().lower() == "all":
        return None
    try:
        seconds = float(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither a number of seconds nor all",
                                 param_hint="--lag") from None
    if not (np.isfinite(seconds) and seconds > 0):
        raise click.BadParameter(f"the lag must be positive seconds or all, got {text}",
                                 param_hint="--lag")
    return seconds


def _kalman(method: str, mech: CompiledMechanism, file: Path, readings_path: Path,
            unknown_forces: str | None, sigma_f: float | str, sigma_a: float,
            sigma_s: float | None, dt: float | None, spread: float | None, speed: float,
            csv_path: Path, covariance: bool, plot: bool, max_steps: int,
            lag: float | None = None, model_error: bool = False) -> None:
    """estimate --method ekf or ukf: the errorEKF or the UKF from the file's q0 at rest (σ
    of z SPREAD/√3, of ż SPEED/√3: the particle filter's uniform belief's), on q0's
    branch; with --noise-force auto, at the intensity filter_tuning chooses."""
    from mbgen.estimation.filter_tuning import tune_noise_force
    from mbgen.estimation.kalman import ErrorEKF, KalmanError
    from mbgen.estimation.smoother import FactorSmoother
    from mbgen.estimation.ukf import UnscentedKF

    if not mech.sensor_labels and not mech.accelerometer_labels:
        raise click.UsageError(no_sensors(file, []))
    forces = _force_coordinates(mech, unknown_forces)
    t, readings, step, steps = _readings(mech, readings_path, dt, max_steps)
    noise, accelerometer_noise = _noises(mech, sigma_s)
    root3 = np.sqrt(3.0)
    kind = {"ekf": ErrorEKF, "ukf": UnscentedKF, "smoother": FactorSmoother}[method]
    extra: dict[str, Any] = {} if method == "smoother" else {"model_error": model_error}

    def make(intensity: float) -> Any:
        return kind(mech, sigma_a=sigma_a, sigma_s=noise, sigma_acc=accelerometer_noise,
                    unknown_forces=forces, sigma_f=intensity,
                    spread=(defaults.EKF_SPREAD if spread is None else spread) / root3,
                    speed=speed / root3, force_spread=defaults.EKF_FORCE_SPREAD, **extra)

    try:
        ekf = make(defaults.NOISE_FORCE if sigma_f == AUTO else float(sigma_f))
    except KalmanError as exc:
        raise click.ClickException(str(exc)) from None
    forces = list(getattr(ekf, "force_names", forces))
    if sigma_f == AUTO and not forces:
        raise click.UsageError("--noise-force auto needs forces to estimate: "
                               "--unknown-forces or --model-error")
    # a lag at least as long as the file smooths it all in one batch (and a huge one
    # must not overflow the step count)
    steps_of_lag = None if lag is None or lag / step >= len(t) else int(round(lag / step))
    if steps_of_lag is not None and steps_of_lag < 1:
        raise click.BadParameter(f"{lag:g} s is shorter than one step of {step:g} s",
                                 param_hint="--lag")
    with np.errstate(invalid="ignore", divide="ignore"):  # NaN is checked below
        if sigma_f == AUTO:
            tuned = tune_noise_force(make, lambda kalman: kalman.run(t, readings, step))
            ekf, track = tuned.kalman, tuned.track
            status_console.print(escape(f"  {tuned.describe()}"))
        elif isinstance(ekf, FactorSmoother):
            track = ekf.run(t, readings, step, lag=steps_of_lag)
        else:
            track = ekf.run(t, readings, step)
    names = mech.coordinate_names
    header, data = track.table(names, forces, sigma=covariance)
    if not np.isfinite(data[:, :-2]).all() or not len(data):
        raise UntrustedResultError(
            f"the {ekf.label}'s estimate is not finite or empty (its state could not be "
            "assembled from the start): nothing written")
    doubt = track.distrust()
    csv_path, pictures = _written(mech, file, readings_path, csv_path, header, data, names,
                                  bool(doubt), plot, ekf.label)
    z = ", ".join(names[i] for i in ekf.zi)
    final = "; forces at the end " + ", ".join(
        f"{c} {v:.4g} ± {1.96 * sd:.2g}" for c, v, sd in zip(
            forces, track.force[-1], track.sigma_force[-1], strict=True)) if forces else ""
    mark = "[red]✗[/]" if doubt else "[green]✓[/]"
    status_console.print(f"{mark} {escape(mech.name)}: {len(track.t)} steps of {step:g} s, "
                         f"{ekf.label} on the branch of q0 (z: {escape(z)}, chosen again "
                         f"{ekf.switches} time(s)){escape(final)}")
    status_console.print(escape(f"  wrote {csv_path}"
                                + "".join(f"\n  wrote {p}" for p in pictures)))
    if doubt:
        raise UntrustedResultError(f"{doubt}; the estimate is in {csv_path}")


def report(track: Track, doubt: str | None, name: str, step: float, particles: int,
           csv_path: Path, pictures: list[Path]) -> None:
    """✓ for a trusted track (``doubt``: Track.distrust's words, None) that never started
    over; ! when it did and is trusted since; ✗ and exit code 4 when it is not trusted
    (gave up, not recovered, or readings inconsistent with the cloud)."""
    final = np.round(track.branch_probability[-1], 3).tolist()
    restarts = track.restarts
    at = ", ".join(f"{t:g}" for t in track.t[track.reinitialized][:5])
    at += ", ..." if restarts > 5 else ""
    mark = "[red]✗[/]" if doubt is not None else "[green]✓[/]" if not restarts \
        else "[yellow]![/]"
    status_console.print(f"{mark} {escape(name)}: {len(track.t)} steps of {step:g} s, "
                         f"{particles} particles; branch probabilities at the end {final}"
                         + (f"; started over {restarts} time(s) (no particle near the "
                            f"readings at t = {at} s)" if restarts else ""))
    status_console.print(escape(f"  wrote {csv_path}"
                                + "".join(f"\n  wrote {p}" for p in pictures)))
    if doubt is not None:
        raise UntrustedResultError(f"{doubt}; the estimate is in {csv_path}")


def _written(mech: Any, file: Path, readings_path: Path, csv_path: Path, header: list[str],
             data: Any, names: list[str], untrusted: bool, plot: bool,
             method: str = "particle-filter") -> tuple[Path, list[Path]]:
    """The estimate written (an untrusted one beside the name asked for, never under it)
    and its pictures: where it went and the pictures' paths."""
    from mbgen.io.tables import write_table

    if untrusted:
        csv_path = untrusted_path(csv_path)
        check_paths({"FILE": file, "--data": readings_path}, {"--out": csv_path})
    write_table(csv_path, header, data)
    labels = [f"{name} [{unit}]" for name, unit in zip(names, mech.coordinate_units,
                                                        strict=True)]
    pictures = _plot(header, data, names, labels, mech.coordinate_units, csv_path,
                     mathtext(mech.name), method) if plot else []
    return csv_path, pictures


def _plot(header: list[str], data: np.ndarray, names: list[str], labels: list[str],
          units: list[str], csv_path: Path, title: str,
          method: str = "particle-filter") -> list[Path]:
    """The estimate of each coordinate simulate's plot shows (its positions and angles,
    not a spatial file's unit-vector components: io.figures.coordinate_panels) with its
    95 % band, and the branch probabilities, from the table's columns by name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mbgen.columns import TIME, branches, interval
    from mbgen.io.figures import coordinate_panels, plot_path, save_figure

    shown = sorted(k for _, columns in coordinate_panels(units) for k in columns)
    names, labels = [names[k] for k in shown], [labels[k] for k in shown]
    column = {name: data[:, k] for k, name in enumerate(header)}
    t = column[TIME]
    written = []
    fig, axes = plt.subplots(len(labels), 1, figsize=(9, 2.2 * len(labels)), sharex=True,
                             squeeze=False)
    for ax, name, label in zip(axes[:, 0], names, labels, strict=True):
        low, high = interval(name)
        ax.fill_between(t, column[low], column[high], alpha=0.3, label="95 %")
        ax.plot(t, column[name], label="estimate")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("t [s]")
    axes[0, 0].set_title(f"{title}: {method} estimate")
    written.append(save_figure(fig, plot_path(csv_path, "estimate"), dpi=100))
    if not branches(header):  # a filter on one branch
        return written
    fig, ax = plt.subplots(figsize=(9, 3.5))
    for b, branch in enumerate(branches(header)):
        ax.plot(t, column[branch], label=f"branch {b}")
    ax.set(xlabel="t [s]", ylabel="probability", title=f"{title}: assembly branch")
    ax.legend()
    ax.grid(alpha=0.3)
    written.append(save_figure(fig, plot_path(csv_path, "branches"), dpi=100))
    return written

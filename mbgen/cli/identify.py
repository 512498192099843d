"""`mbgen identify`: joint state and parameter identification from recorded sensor data."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
import numpy as np
from rich.markup import escape

from mbgen.cli import BUILD_DIR, status_console
from mbgen.cli.conventions import (
    DEVIATION,
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
from mbgen.estimation.identification_inputs import COORDINATES, SCHEMES, Settings
from mbgen.io.figures import plot_paths

if TYPE_CHECKING:  # loaded with the command: `mbgen --help` stays fast
    from mbgen.estimation.identify import Identification
    from mbgen.runtime.compiled import CompiledMechanism


def _pairs(values: tuple[str, ...], option: str, parts: int) -> dict[str, tuple[float, ...]]:
    """``NAME=A`` or ``NAME=A:B`` options as {name: numbers}."""
    out: dict[str, tuple[float, ...]] = {}
    for text in values:
        name, _, rest = text.partition("=")
        try:
            numbers = tuple(float(v) for v in rest.split(":"))
        except ValueError:
            numbers = ()
        if not name or len(numbers) != parts:
            form = "NAME=VALUE" if parts == 1 else "NAME=LOW:HIGH" if option == "--bounds" \
                else "NAME=MEAN:STD"
            raise click.BadParameter(f"expected {form}, got {text!r}", param_hint=option)
        out[name.strip()] = numbers
    return out


@click.command(cls=Command, renamed={"--impulse-noise": "--noise-impulse"}, example=(
    "mbgen identify mechanisms/actuated-double-pendulum.yaml \\\n"
    "  --data examples/double-pendulum-encoders.csv --params b1,b2 \\\n"
    "  --initial b1=0.03 --initial b2=0.006 --substeps 2 --noise-impulse 2e-5 \\\n"
    "  --out identified.yaml"))
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--data", "data_path", required=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Recorded readings CSV: t (uniform), then one column per sensor label "
              "(an empty cell: no reading).")
@click.option("--params", required=True, help="Parameters to identify, comma-separated.")
@click.option("--inputs", "inputs_path",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Actuator commands CSV: t, then one column per actuator name.")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False,
                                                                    path_type=Path),
              help="YAML of the identified parameters (mergeable into the mechanism).")
@click.option("--initial", multiple=True, metavar="NAME=VALUE",
              help="Starting value (default: the file's).")
@click.option("--bounds", multiple=True, metavar="NAME=LOW:HIGH", help="Box bounds.")
@click.option("--prior", multiple=True, metavar="NAME=MEAN:STD",
              help="Independent knowledge of a parameter, e.g. a weighed mass.")
@click.option("--noise-impulse", "impulse_noise", type=DEVIATION,
              default=Settings.impulse_noise,
              show_default=True, help="Standard deviation of the impulse residuals "
              "[N·s or N·m·s]: the weight of the dynamics against the sensors' `noise`.")
@click.option("--scheme", type=click.Choice(SCHEMES), default=Settings.scheme,
              show_default=True, help="The step read as inverse dynamics: the second-order "
              "midpoint rule or the paper's first-order SPOOK step.")
@click.option("--coordinates", type=click.Choice(COORDINATES),
              default=Settings.coordinates, show_default=True, help="The states: all "
              "coordinates, held on the constraints by --compliance (the paper's), or only "
              "the independent ones, exactly on the constraints (no compliance and its "
              "bias, far fewer unknowns; the midpoint scheme); auto: independent where the "
              "file declares independent_coordinates and the problem allows them.")
@click.option("--compliance", type=POSITIVE, default=Settings.compliance,
              show_default=True, help="Compliance of every constraint [units of Φ per "
              "unit of force].")
@click.option("--substeps", type=click.IntRange(min=1), default=Settings.substeps,
              show_default=True,
              help="Steps per sample.")
@click.option("--max-iterations", type=click.IntRange(min=1),
              default=Settings.max_iterations,
              show_default=True, help="Levenberg–Marquardt iterations before the run is "
              "called not converged (exit code 4).")
@click.option("--step-check/--no-step-check", default=Settings.step_check,
              show_default=True, help="Solve again at half the step and report that "
              "solution, each σ including how far its value moved (the σ of the noise "
              "alone do not cover what the step does; about twice the time).")
@click.option("--plot", is_flag=True, help="Also write <out>_fit.png: measured against "
              "fitted readings.")
@PARAM
@max_steps_option("time steps (samples × substeps)")
@BUILD_DIR
def identify(file: Path, data_path: Path, params: str, inputs_path: Path | None,
             out_path: Path, initial: tuple[str, ...], bounds: tuple[str, ...],
             prior: tuple[str, ...], impulse_noise: float, scheme: str, coordinates: str,
             compliance: float, substeps: int, max_iterations: int, step_check: bool, plot: bool,
             param_values: tuple[tuple[str, float], ...], max_steps: int,
             build_dir: Path | None) -> None:
    """Identify parameters of FILE (and its state trajectory) from recorded sensor data,
    by least squares on inverse-dynamics impulses and the sensor residuals. A run that
    does not converge, or a parameter the data do not determine, ends with exit code 4."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from mbgen.cli import load_with_status
    from mbgen.estimation.identify import Recording, Settings
    from mbgen.estimation.identify import identify as run
    from mbgen.io.identified import write_identified
    from mbgen.io.readings import read_readings
    from mbgen.model.parser import load_mechanism

    for out in (out_path, untrusted_path(out_path)):  # where an untrusted result goes too
        check_paths({"FILE": file, "--data": data_path, "--inputs": inputs_path},
                    {"--out": out, "--plot": plot_paths(out, "identify") if plot else None})
    coordinates = _coordinates_for_compliance(coordinates)
    mech, _ = load_with_status(file, build_dir)
    if not mech.sensor_labels:
        raise click.UsageError(no_sensors(file, mech.accelerometer_labels,
                                          "which identification takes alongside sensors "
                                          "of the state only"))
    names = [name.strip() for name in params.split(",") if name.strip()]
    identified = sorted({name for name, _ in param_values} & set(names))
    if identified:
        raise click.BadParameter(f"{', '.join(identified)} is identified (--params): its "
                                 "starting value is --initial", param_hint="--param")
    apply_parameters(mech, param_values)
    # the accelerometers' columns may be left out (empty: no readings)
    t, readings = read_readings(data_path, mech.sensor_labels,
                                optional=mech.accelerometer_labels)
    state = readings[:, :len(mech.sensor_labels)]
    if np.isnan(state).all():
        raise MbgenError(f"{data_path}: no reading of a state sensor (the columns "
                         f"{', '.join(mech.sensor_labels)} are empty): identification takes "
                         "accelerometers only alongside readings of a state sensor (q̈ "
                         "alone does not fix the state)")
    commands = None if inputs_path is None else read_commands(mech, file, inputs_path, t)
    # the Jacobian's blocks: about 60 w² doubles a step for w unknowns a state (n, or the
    # dof in independent coordinates, whose states also map z to q: a few n² more; twice
    # the steps for the check)
    steps = (len(t) - 1) * substeps * (2 if step_check else 1)
    width = mech.dof if coordinates == "independent" else mech.n
    per_step = 60 * width**2 + 20 * width * len(names) + (
        4 * mech.n**2 if coordinates == "independent" else 0)
    check_work(steps, max_steps, f"time steps ({len(t)} samples × {substeps} substeps)",
               "--max-steps", 8.0 * per_step)
    start = {name: value[0] for name, value in _pairs(initial, "--initial", 1).items()}
    settings = Settings(scheme=scheme, coordinates=coordinates, impulse_noise=impulse_noise,
                        compliance=compliance, substeps=substeps, max_iterations=max_iterations,
                        step_check=step_check)
    with Progress(SpinnerColumn(), TextColumn("[bold]identifying[/] {task.description}"),
                  TimeElapsedColumn(), console=status_console, transient=True) as bar:
        task = bar.add_task("", total=None)
        result = run(mech, Recording(t, readings, commands), names, initial=start,
                     bounds={k: (v[0], v[1]) for k, v in _pairs(bounds, "--bounds",
                                                                2).items()},
                     priors={k: (v[0], v[1]) for k, v in _pairs(prior, "--prior",
                                                                 2).items()},
                     settings=settings,
                     progress=lambda i, cost: bar.update(
                         task, description=f"iteration {i}, cost {cost:.6g}"),
                     model=load_mechanism(file))
    trusted = result.trusted
    written = out_path if trusted else untrusted_path(out_path)
    if not trusted:  # the name asked for was checked before the work
        check_paths({"FILE": file, "--data": data_path, "--inputs": inputs_path},
                    {"--out": written})
    write_identified(written, result, file, data_path)
    print_result(result, trusted, written)
    if plot:
        labels = [f"{label} [{unit}]" for label, unit in zip(mech.sensor_labels,
                                                             mech.sensor_units, strict=True)]
        labels += [f"{label} [m/s²]" for label in mech.accelerometer_labels]
        read = [k for k in range(len(labels)) if k < len(mech.sensor_labels)
                or not np.isnan(readings[:, k]).all()]  # not accelerometers without data
        picture = _plot(t, readings[:, read], result.fitted[:, read],
                        [labels[k] for k in read], written)
        status_console.print(f"  wrote {picture}")
    if not trusted:
        raise UntrustedResultError(distrust(result, written, out_path))


def _coordinates_for_compliance(coordinates: str) -> str:
    """The coordinates to solve in when ``--compliance`` is given: it holds dependent
    coordinates on the constraints, so with independent ones it would be ignored (refused,
    exit code 2), and with ``auto`` it asks for dependent ones (said with ``!``)."""
    from click.core import ParameterSource

    given = click.get_current_context().get_parameter_source("compliance")
    if given in (None, ParameterSource.DEFAULT) or coordinates == "dependent":
        return coordinates
    if coordinates == "independent":
        raise click.BadParameter("independent coordinates are exactly on the constraints: "
                                 "no compliance to set (leave it out, or add --coordinates "
                                 "dependent)", param_hint="--compliance")
    status_console.print("[yellow]![/] --compliance holds dependent coordinates on the "
                         "constraints: solving in dependent coordinates")
    return "dependent"


def distrust(result: Identification, written: Path, out_path: Path) -> str:
    """Why a result is not trusted: not converged, undetermined combinations of the
    parameters, residuals inconsistent with their noise, or values no real mechanism
    has."""
    reasons = []
    if not result.converged:
        reasons.append(f"identification did not converge ({result.message})")
    if result.undetermined:
        reasons.append("the data do not determine " + "; ".join(result.undetermined)
                       + " (fix one of them in the file, add a --prior, or record motion "
                       "that excites them)")
    if result.misfit:
        reasons.append(result.misfit_advice)
    reasons += [f"the identified values are impossible: {problem}"
                for problem in result.problems]
    return (f"{'; '.join(reasons)}. The result is in {written}, {out_path} is not "
            "written")


def read_commands(mech: CompiledMechanism, file: Path, inputs_path: Path,
                  t: np.ndarray) -> np.ndarray:
    """The actuators' commands (N, actuators) at the readings' times t (N,), interpolated
    from the --inputs file, which must cover them."""
    from mbgen.io.readings import read_readings

    actuators = [a["name"] for a in mech.meta.get("actuators", [])]
    if not actuators:
        raise click.UsageError(f"{file} has no actuators to take --inputs")
    t_in, values = read_readings(inputs_path, actuators, what="actuator")
    if np.isnan(values).any():
        raise click.BadParameter(f"{inputs_path}: every row needs every actuator's "
                                 "command", param_hint="--inputs")
    if t_in[0] > t[0] + 1e-9 or t_in[-1] < t[-1] - 1e-9:
        raise click.BadParameter(f"{inputs_path} covers t = {t_in[0]:g}..{t_in[-1]:g}, "
                                 f"the data {t[0]:g}..{t[-1]:g}", param_hint="--inputs")
    return np.column_stack([np.interp(t, t_in, column) for column in values.T])


def print_result(result: Identification, trusted: bool, written: Path) -> None:
    """The parameters as a table, then whether the run is trusted and where it went."""
    from rich.table import Table

    checked = bool(np.isfinite(result.step_change).any())
    table = Table("parameter", "initial", "identified", "std (1σ)",
                  *(["moved at half the step"] if checked else []), title="identified")
    for name, first, value, std, moved in zip(result.names, result.initial, result.values,
                                              result.std, result.step_change, strict=True):
        table.add_row(name, f"{first:.6g}", f"{value:.6g}",
                      f"{std:.3g}" if np.isfinite(std) else "not identifiable",
                      *([f"{moved:.3g}"] if checked else []))
    status_console.print(table)
    strong = strong_correlations(result)
    if len(result.names) <= CORRELATION_TABLE and len(result.names) > 1:
        matrix = Table("", *result.names, title="correlation")
        for name, row in zip(result.names, result.correlation, strict=True):
            matrix.add_row(name, *(f"{c:+.2f}" if np.isfinite(c) else "-" for c in row))
        status_console.print(matrix)
    elif strong:
        status_console.print("strongly correlated (|ρ| ≥ 0.9): " + ", ".join(strong))
    if result.fit:
        status_console.print("fit (RMS of the normalized residuals, bound): " + ", ".join(
            f"{'' if test.passed else '[red]'}{escape(test.what)} {np.sqrt(test.mean_square):.3g}"
            f" ≤ {np.sqrt(test.bound):.3g}{'' if test.passed else ' ✗[/]'}"
            for test in result.fit))
    state = "[green]✓[/] converged" if trusted else "[red]✗[/] not trusted:"
    status_console.print(f"{state} {result.iterations} iterations, {result.seconds:.2f} s "
                         f"in {result.coordinates} coordinates ({escape(result.message)}); "
                         f"final cost {result.cost:.6g}")
    status_console.print(escape(f"  wrote {written}"))


#: Up to this many parameters the correlation matrix is printed whole; above, only the
#: strongly correlated pairs.
CORRELATION_TABLE = 8


def strong_correlations(result: Identification, limit: float = 0.9) -> list[str]:
    """Pairs of parameters whose linearized correlation reaches ``limit``: "a1~I1 +0.97"."""
    names, rho = result.names, result.correlation
    return [f"{names[i]}~{names[j]} {rho[i, j]:+.2f}" for i in range(len(names))
            for j in range(i + 1, len(names)) if abs(rho[i, j]) >= limit]


def _plot(t: np.ndarray, readings: np.ndarray, fitted: np.ndarray, labels: list[str],
          out_path: Path) -> Path:
    """Each reading (N, outputs) against the identified model's (``fitted``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mbgen.io.figures import plot_path, save_figure

    fig, axes = plt.subplots(len(labels), 1, figsize=(9, 2.4 * len(labels)), sharex=True,
                             squeeze=False)
    for k, (ax, label) in enumerate(zip(axes[:, 0], labels, strict=True)):
        ax.plot(t, readings[:, k], ".", ms=2, label="measured")
        ax.plot(t, fitted[:, k], "-", lw=1, label="identified model")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper right")
    axes[-1, 0].set_xlabel("t [s]")
    axes[0, 0].set_title("measured and fitted readings")
    return save_figure(fig, plot_path(out_path, "fit"), dpi=100)

"""`mbgen simulate`: compile if needed, integrate, write CSV (and plots)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.markup import escape

from mbgen.cli import BUILD_DIR, status_console
from mbgen.cli.conventions import (
    NON_NEGATIVE,
    PARAM,
    POSITIVE,
    Command,
    NoiseLevel,
    announce_one_time_builds,
    apply_parameters,
    check_paths,
    check_work,
    max_steps_option,
    no_sensors,
    reading_noise,
    untrusted_path,
)
from mbgen.cli.states import initial_state
from mbgen.errors import UntrustedResultError
from mbgen.io.figures import plot_paths
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.runtime.integration import INTEGRATORS, VARIATIONAL
from mbgen.simulation.trust import (
    ENERGY_TOL,
    PHI_TOL,
    conservative,
    constraint_limit,
    energy_change,
)


def parse_forces(specs: tuple[str, ...], mech: CompiledMechanism,
                 ) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """``COORD=EXPR(t)`` (a generalized force) or ``ACTUATOR=EXPR(t)`` (the actuator's
    command u: the force gain·u on its coordinate), through the whitelist parser; the
    only name allowed in EXPR is ``t``. Returns coordinate name → F(t)."""
    if not specs:
        return {}
    import sympy as sp

    from mbgen.model.expressions import ExpressionError, FunctionOfTime

    actuators = {a["name"]: (a["coordinate"], float(gain)) for a, gain in zip(
        mech.meta.get("actuators", []), mech.actuator_gains(), strict=True)}
    totals: dict[str, sp.Expr] = {}
    for spec in specs:
        if "=" not in spec:
            raise click.BadParameter(f"expected COORD=EXPR or ACTUATOR=EXPR, got {spec!r}",
                                     param_hint="--force")
        name, text = (part.strip() for part in spec.split("=", 1))
        coordinate, gain = actuators.get(name, (name, 1.0))
        if coordinate not in mech.coordinate_names:
            known = f"coordinates: {', '.join(mech.coordinate_names)}"
            if actuators:
                known += f"; actuators: {', '.join(actuators)}"
            raise click.BadParameter(f"unknown coordinate or actuator {name!r} ({known})",
                                     param_hint="--force")
        try:
            expr = FunctionOfTime.parse(text, name).expr
        except ExpressionError as exc:
            raise click.BadParameter(str(exc), param_hint="--force") from None
        scaled = expr if gain == 1.0 else sp.Float(gain) * expr
        totals[coordinate] = totals.get(coordinate, sp.Integer(0)) + scaled
    return {name: FunctionOfTime(expr, f"the force on {name}") for name, expr in totals.items()}


def run_factor_graph(mech: CompiledMechanism, t_end: float, dt: float, integrator: str,
                     coords: str, window: int, smoother: str, q0: np.ndarray,
                     qd0: np.ndarray, forces: dict[str, Callable[[np.ndarray], np.ndarray]],
                     progress: Callable[[int, int], None], covariance: bool = False) -> Any:
    """The factor-graph simulator, with the CLI's forces as one vector function of t."""
    from mbgen.simulation.factor_graph import FactorGraphSimulator
    from mbgen.simulation.integrators import force_vector

    simulator = FactorGraphSimulator(mech, dt, window=window, coords=coords,
                                     smoother=smoother, integrator=integrator)
    result = simulator.run(t_end, q0, qd0, force_vector(mech, forces), progress,
                           covariance=covariance)
    result.forces = dict(forces)
    return result


def reading_stride(mech: CompiledMechanism, dt: float, period: float) -> int:
    """Steps between readings; checked before the run, so a refused option writes
    nothing."""
    if not mech.sensor_labels and not mech.accelerometer_labels:
        raise click.BadParameter(no_sensors(mech.name, []) + " or accelerometers",
                                 param_hint="--sensors-out")
    every = int(round(period / dt))
    if every < 1 or abs(every * dt - period) > 1e-9 * period:
        raise click.BadParameter(f"{period:g} s is not a multiple of --dt {dt:g} s",
                                 param_hint="--sensor-period")
    return every


@click.command(cls=Command, renamed={"--sensor-noise": "--noise-sensor"}, example=(
    "mbgen simulate mechanisms/fourbar.yaml --t-end 5 --dt 1e-3 --out run.csv --plot"))
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--t-end", type=POSITIVE, required=True, help="Simulated time [s].")
@click.option("--dt", type=POSITIVE, required=True, help="Fixed time step [s].")
@click.option("--integrator", type=click.Choice(list(INTEGRATORS)), default=None,
              help="Time discretization [default: rk4; trapezoidal with --solver "
              "factor-graph, which also takes euler]. variational: conserves energy and "
              "momentum over long runs (quasi-Newton; variational-newton: exact Newton; "
              "variational-4: fourth order), never projected. spook: the regularized "
              "stepper of the identification paper (--compliance, --damping).")
@click.option("--compliance", type=NON_NEGATIVE, default=None,
              help="spook: compliance ε of every constraint (springs of stiffness 1/ε) "
              "[units of Φ per unit of force] [default: 0, stiff].")
@click.option("--damping", type=NON_NEGATIVE, default=None,
              help="spook: damping time τ of every constraint [s] [default: 2 dt].")
@click.option("--solver", type=click.Choice(["integrator", "factor-graph"]),
              default="integrator", show_default=True,
              help="Step by step in C, or as a sliding-window factor graph (GTSAM).")
@click.option("--window", type=click.IntRange(min=1), default=2, show_default=True,
              help="Factor graph: time steps kept by the fixed-lag smoother.")
@click.option("--smoother", type=click.Choice(["batch", "incremental"]), default="batch",
              show_default=True, help="Factor graph: Levenberg–Marquardt over the window, "
              "or iSAM2.")
@click.option("--coords", type=click.Choice(["dependent", "independent"]), default="dependent",
              show_default=True, help="Integrate all q, or only z (q follows).")
@click.option("--projection", type=click.Choice(["manifold", "energy", "none"]),
              default="manifold", show_default=True,
              help="After each step of rk4, trapezoidal or the Euler steppers in dependent "
              "coordinates: back onto Φ=0, Φq q̇=0 (energy: also onto E(0)); refused where "
              "nothing is projected (spook, variational, factor graph, independent "
              "coordinates).")
@click.option("--phi-tol", type=POSITIVE, default=PHI_TOL,
              show_default=True, help="Largest accepted constraint error max ‖Φ‖, times "
              "the mechanism's size squared (the largest |x| or |y| of its points in the "
              "file) [dimensionless]; a run above it ends with exit code 4, its CSV "
              "written as <out>.untrusted.csv.")
@click.option("--energy-tol", type=POSITIVE, default=ENERGY_TOL, show_default=True,
              help="Largest accepted energy change of a run without applied forces, "
              "dampers or friction: max |E(t) - E(0)| over the energy in play (the "
              "largest T, or V's swing, over the run) [dimensionless]; a run above it "
              "ends with exit code 4 (<out>.untrusted.csv). A run with forces or "
              "dampers only reports the figure.")
@click.option("--q0", help='Initial q [m, rad]: "v1,v2,..." or "name=value,...". As many '
              "names as the DOF are met exactly, on the assembly branch of the file's "
              "positions (or --guess); any other change is printed.")
@click.option("--qd0", help="Initial q̇ [m/s, rad/s], same forms (named DOF met exactly, "
              "else the nearest admissible q̇).")
@click.option("--guess", help='Where the assembly starts instead of the file\'s q0 [m, rad]: '
              '"v1,v2,..." or "name=value,..." (e.g. the other branch of a four-bar).')
@click.option("--strict", is_flag=True, help="Refuse to run when the initial state has to "
              "be changed (re-assembled q0, projected q̇) instead of printing the change.")
@click.option("--force", "forces", multiple=True, metavar="NAME=EXPR(t)",
              help="A generalized force on a coordinate, e.g. theta0='5*sin(2*pi*t)', or "
              "an actuator's command by the actuator's name (force gain*u on its "
              "coordinate), e.g. motor='0.2*sin(t)'.")
@click.option("--out", "csv_path", type=click.Path(dir_okay=False, path_type=Path),
              required=True, help="CSV to write.")
@click.option("--plot", is_flag=True, help="Also write PNG plots next to the CSV.")
@click.option("--with", "extras", type=click.Choice(["sensors", "lambda", "forces"]),
              multiple=True, help="Add columns: the sensor outputs (by label; accelerometers "
              "from the run's q̈), the "
              "multipliers λ, the applied generalized forces (force_<coordinate> for each "
              "coordinate with a --force or an actuator, gain·u included, 0 where none).")
@click.option("--covariance", is_flag=True, help="Factor graph, independent coordinates: "
              "also write <name>_sigma per coordinate, the standard deviation of q under "
              "the graph's noise models (GTSAM's marginals; the paper's noise models are "
              "relative weights, so read it as how loosely the graph holds the motion).")
@click.option("--every", type=click.IntRange(min=1), default=1, show_default=True,
              help="Write every K-th step (the last one always).")
@click.option("--sensors-out", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Also write synthetic sensor readings (t, one column per "
              "sensor label, then per accelerometer label), the input of `mbgen estimate`.")
@click.option("--noise-sensor", "sensor_noise", type=NoiseLevel(), multiple=True,
              help="Standard deviation of the Gaussian noise added to the readings [the "
              "sensors' units: rad/s for a gyroscope] [default: each sensor's and "
              "accelerometer's `noise` in the file, 0 where none]: SIGMA for every "
              "sensor, NAME=SIGMA for one sensor or accelerometer (by name or output "
              "label); repeat it for more.")
@click.option("--sensor-period", type=POSITIVE, default=None,
              help="Time between readings [s] [default: --dt; a multiple of it].")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the reading noise.")
@PARAM
@max_steps_option("time steps")
@BUILD_DIR
def simulate(file: Path, t_end: float, dt: float, integrator: str | None,
             compliance: float | None, damping: float | None, solver: str,
             window: int, smoother: str, coords: str, projection: str, phi_tol: float,
             energy_tol: float,
             q0: str | None, qd0: str | None, guess: str | None, strict: bool,
             forces: tuple[str, ...], csv_path: Path,
             plot: bool,
             extras: tuple[str, ...], covariance: bool, every: int, sensors_out: Path | None,
             sensor_noise: tuple[tuple[str | None, float], ...],
             sensor_period: float | None, seed: int,
             param_values: tuple[tuple[str, float], ...], max_steps: int,
             build_dir: Path | None) -> None:
    """Simulate FILE's forward dynamics and write t, q, q̇, q̈, energy and ‖Φ‖ to a CSV.
    A run that stops early, leaves its constraints (--phi-tol) or, with no force, damper
    or friction, changes its energy (--energy-tol) ends with exit code 4, its rows kept
    as <out>.untrusted.csv (docs/cli.md)."""
    from mbgen.cli import detail, load_with_status
    from mbgen.io.readings import write_readings
    from mbgen.io.tables import write_csv
    from mbgen.model.expressions import ExpressionError
    from mbgen.simulation import RunStopped
    from mbgen.simulation.plots import plot as write_plots

    integrator, spook = integrator_settings(solver, integrator, compliance, damping)
    refuse_ignored(solver, integrator, coords, sensors_out)
    if covariance:
        covariance_settings(solver, coords)
    try:
        check_paths({"FILE": file}, {"--out": csv_path, "--sensors-out": sensors_out,
                                     "--plot": plot_paths(csv_path, "simulate") if plot
                                     else None})
        kept = untrusted_path(csv_path)  # where an untrusted run goes: no input either
        check_paths({"FILE": file}, {"--out": kept, "--sensors-out": sensors_out
                                     and untrusted_path(sensors_out),
                                     "--plot": plot_paths(kept, "simulate") if plot else None})
        mech, _ = load_with_status(file, build_dir)
        apply_parameters(mech, param_values)
        check_work(t_end / dt, max_steps, f"time steps ({t_end:g} s every {dt:g} s)",
                   "--max-steps", 16.0 * (3 * mech.n + 2 + mech.m))
        initial_q, initial_qd = initial_state(mech, q0, qd0, guess, strict)
        stride = None if sensors_out is None else reading_stride(mech, dt,
                                                                  sensor_period or dt)
        sensor_sigma, accelerometer_sigma, noise_lines = reading_noise(
            mech, sensor_noise, "--noise-sensor")
        force_functions = parse_forces(forces, mech)
        if "forces" in extras and not force_functions and not mech.meta.get("actuators"):
            raise click.BadParameter(f"no force is applied: {mech.name} has no actuators "
                                     "and no --force is given", param_hint="--with forces")
        detail(f"initial state ({', '.join(mech.coordinate_names)}): q = "
               f"{np.array2string(initial_q, precision=6)}, q̇ = "
               f"{np.array2string(initial_qd, precision=6)}")
        detail(f"{integrator}, {coords} coordinates, projection {projection}, "
               f"t_end {t_end:g} s, dt {dt:g} s"
               + (f", forces on {', '.join(force_functions)}" if force_functions else ""))

        def start(progress: Callable[[int, int], None]) -> Any:
            if solver == "factor-graph":
                return run_factor_graph(mech, t_end, dt, integrator, coords, window,
                                        smoother, initial_q, initial_qd, force_functions,
                                        progress, covariance)
            from mbgen.simulation import simulate as run

            return run(mech, t_end, dt, integrator=integrator, coords=coords, q0=initial_q,
                       qd0=initial_qd, forces=force_functions, project=projection,
                       progress=progress, spook=spook)

        if solver == "factor-graph":
            announce_one_time_builds()
        begin = time.perf_counter()
        stopped = None
        try:
            result = with_progress_bar(start, dt)
        except RunStopped as exc:  # its rows up to the stop are kept for a look
            result, stopped = exc.result, str(exc)
        elapsed = time.perf_counter() - begin
        if not len(result.t):
            raise UntrustedResultError(f"{stopped}: no state to write")
        with np.errstate(over="ignore", invalid="ignore"):  # a run that blew up: said below
            drift, energy_text = energy_change(result)
            reasons = [reason for reason in (
                stopped, constraint_violation(result, phi_tol, fix_hint(
                    solver, integrator, coords, projection)),
                energy_distrust(result, drift, energy_tol)) if reason]
        if reasons:  # kept for a look, never under the names asked for
            csv_path = untrusted_path(csv_path)
            sensors_out = sensors_out and untrusted_path(sensors_out)
            check_paths({"FILE": file}, {"--out": csv_path, "--sensors-out": sensors_out})
        # a K beyond the run's rows writes its first and last (a K beyond int64 reached
        # NumPy's indices as floats)
        write_csv(result, csv_path, extras=extras, every=min(every, len(result.t)))
        if sensors_out is not None:
            assert stride is not None  # set with --sensors-out
            write_readings(sensors_out, mech, result.t, result.q, result.qd, result.qdd,
                           sensor_sigma + accelerometer_sigma, stride, seed)
        pictures = write_plots(result, csv_path) if plot else []
    except ExpressionError as exc:  # a --force not finite at some time of the run
        raise click.BadParameter(str(exc), param_hint="--force") from None
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    how = f"{integrator}, {coords}"
    if solver == "factor-graph":
        how += (f", factor graph: window {window}, {smoother} smoother, "
                f"{result.settings['mean_iterations']:.2f} iterations per step")
        if result.settings["z_switches"]:
            how += f", z chosen again {len(result.settings['z_switches'])} times"
    if result.reselected:
        how += (f", the redundant constraints' kept rows chosen again "
                f"{len(result.reselected)} times (first at t = {result.reselected[0]:g} s)")
    status_console.print(
        f"{'[red]✗[/]' if reasons else '[green]✓[/]'} {escape(mech.name)}: "
        f"{len(result.t) - 1} steps of {dt:g} s ({how}) in {elapsed:.3f} s"
        f"{' before it stopped' if stopped else ''}; max ‖Φ‖ = "
        f"{result.constraint_error.max():.2e}, {energy_text}")
    written: list[Path | str] = [csv_path, *pictures]
    if sensors_out is not None:
        written.append(f"{sensors_out}; noise σ: {', '.join(noise_lines)}")
    status_console.print(escape("".join(f"\n  wrote {p}" for p in written)[1:]))
    if reasons:
        raise UntrustedResultError("; ".join(reasons))


def integrator_settings(solver: str, integrator: str | None, compliance: float | None,
                        damping: float | None) -> tuple[str, dict[str, float]]:
    """The integrator (its default depends on the solver) and the spook settings given,
    checked against each other before anything is loaded."""
    factor_graph = solver == "factor-graph"
    if integrator is None:
        integrator = "trapezoidal" if factor_graph else "rk4"
    if factor_graph and integrator not in ("trapezoidal", "euler"):
        raise click.BadParameter("the factor graph integrates with trapezoidal or euler "
                                 "factors", param_hint="--integrator")
    spook = {key: value for key, value in (("compliance", compliance), ("damping", damping))
             if value is not None}
    if spook and integrator != "spook":
        raise click.BadParameter("--compliance and --damping set the spook integrator "
                                 "(add --integrator spook)", param_hint="--compliance")
    return integrator, spook


def covariance_settings(solver: str, coords: str) -> None:
    """Refuses --covariance where no honest σ comes out, before anything is loaded."""
    from mbgen.simulation.factor_graph import covariance_refusal

    if solver != "factor-graph":
        raise click.BadParameter("standard deviations come from the factor graph's "
                                 "marginals (add --solver factor-graph --coords independent)",
                                 param_hint="--covariance")
    refusal = covariance_refusal(coords)
    if refusal is not None:
        raise click.BadParameter(refusal, param_hint="--covariance")


def with_progress_bar(start: Callable[[Callable[[int, int], None]], Any], dt: float) -> Any:
    """What ``start(progress)`` returns, with a progress bar of the simulated time."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]simulating"), BarColumn(), TextColumn("{task.fields[t]}"),
                  TimeElapsedColumn(), console=status_console, transient=True) as bar:
        task = bar.add_task("sim", total=1.0, t="")

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done / total, t=f"t = {done * dt:.3f} s")

        return start(progress)


def energy_distrust(result: Any, drift: float | None, tolerance: float) -> str | None:
    """Why a conservative run whose energy changes beyond ``tolerance`` (relative, as
    :func:`energy_change`) is not trusted, or None."""
    if drift is None or not conservative(result) or drift <= tolerance:
        return None
    return (f"the energy of a run without applied forces, dampers or friction changes by "
            f"{drift:.3g} of the energy in play (tolerance --energy-tol {tolerance:g}): "
            "the rows are not the mechanism's motion (use rk4, trapezoidal or a "
            "variational integrator, or a smaller --dt, or raise --energy-tol)")


def fix_hint(solver: str, integrator: str, coords: str, projection: str) -> str:
    """What helps a run that leaves its constraints, for what it ran with."""
    if integrator == "spook":
        return "a smaller --dt or --damping (spook is never projected), or raise --phi-tol"
    if solver == "integrator" and coords == "dependent" and projection == "none" \
            and integrator not in VARIATIONAL:
        return "use --projection manifold or a smaller --dt, or raise --phi-tol"
    return "use a smaller --dt, or raise --phi-tol"


def refuse_ignored(solver: str, integrator: str, coords: str,
                   sensors_out: Path | None) -> None:
    """Refuses (exit code 2) an option given on the command line that this run would
    ignore, before anything is loaded: a silently ignored option is a wrong answer."""
    from click.core import ParameterSource

    ctx = click.get_current_context()

    def given(name: str) -> bool:
        return ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)

    factor_graph = solver == "factor-graph"
    for name, option in (("window", "--window"), ("smoother", "--smoother")):
        if given(name) and not factor_graph:
            raise click.BadParameter("sets the factor graph (add --solver factor-graph)",
                                     param_hint=option)
    why = ("the factor graph holds the constraints by its factors" if factor_graph else
           f"{integrator} keeps the constraints itself" if integrator == "spook"
           or integrator in VARIATIONAL else
           "in independent coordinates q follows z by the position problem"
           if coords == "independent" else None)
    if given("projection") and why:
        raise click.BadParameter(f"{why}: nothing is projected (leave --projection out)",
                                 param_hint="--projection")
    for name, option in (("sensor_noise", "--noise-sensor"),
                         ("sensor_period", "--sensor-period"), ("seed", "--seed")):
        if given(name) and sensors_out is None:
            raise click.BadParameter("sets the readings of --sensors-out (add it)",
                                     param_hint=option)


def constraint_violation(result: Any, phi_tol: float, fix: str) -> str | None:
    """None when max ‖Φ‖ stays within ``phi_tol`` × size² (Φ holds squared lengths; size:
    ``mech.size``, no floor: a 7 mm crank is measured in its own size); else what is
    wrong and ``fix`` (:func:`fix_hint`), so no ✓ is printed over rows that are not a
    motion of the mechanism (a stretched rocker, drift without projection)."""
    error = result.constraint_error
    limit = constraint_limit(result.mechanism, phi_tol)
    bad = np.flatnonzero(~(error <= limit))  # NaN counts as bad
    if not bad.size:
        return None
    return (f"the constraint error ‖Φ‖ reaches {np.nanmax(error):.3g} (tolerance {limit:.3g}"
            f" = --phi-tol {phi_tol:g} × size²), first exceeded at t = "
            f"{result.t[bad[0]]:.6g} s: the rows are not a motion of the mechanism ({fix})")

"""`mbgen inverse`: the actuator forces of a prescribed motion, as CSV (and plots)."""

from __future__ import annotations

import time
from pathlib import Path

import click
from rich.markup import escape

from mbgen.cli import BUILD_DIR, status_console
from mbgen.cli.conventions import (
    PARAM,
    POSITIVE,
    Command,
    announce_one_time_builds,
    apply_parameters,
    check_paths,
    check_work,
    max_steps_option,
)
from mbgen.io.figures import plot_paths


@click.command(cls=Command, example=(
    "mbgen inverse mechanisms/slider-crank.yaml --motion 'phi=2*t' --t-end 2 \\\n"
    "  --dt 0.005 --out torque.csv"))
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--trajectory", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Samples: t, then one column per imposed coordinate ('%' comments).")
@click.option("--motion", "motions", multiple=True, metavar="COORD=EXPR(t)",
              help="Instead of --trajectory: an imposed coordinate as a function of t "
              "(sampled every --dt up to --t-end), e.g. theta0='1.2*(1-cos(2*t))'.")
@click.option("--t-end", type=POSITIVE, help="With --motion: duration [s].")
@click.option("--dt", type=POSITIVE, help="With --motion: sample spacing [s].")
@click.option("--imposed", help="With --trajectory: the imposed coordinates, by name or index "
              "(as many as the DOF), in the file's column order; a point's x,y for an "
              "end-effector path.")
@click.option("--actuated", help="Coordinates the actuators act on (default: the imposed "
              "ones).")
@click.option("--method", type=click.Choice(["direct", "factor-graph"]), default="direct",
              show_default=True, help="Kinematics then forces, batched in C; or the paper's "
              "staged factor graph over the whole trajectory.")
@click.option("--out", "csv_path", type=click.Path(dir_okay=False, path_type=Path),
              required=True, help="CSV to write.")
@click.option("--covariance", is_flag=True, help="With --method factor-graph: also each force's "
              "marginal standard deviation (force_<coordinate>_sigma) under the graph's noise "
              "models (costs more than the solve on large mechanisms).")
@click.option("--plot", is_flag=True, help="Also write force and following-error PNGs.")
@PARAM
@max_steps_option("samples of --motion")
@BUILD_DIR
def inverse(file: Path, trajectory: Path | None, motions: tuple[str, ...],
            t_end: float | None, dt: float | None, imposed: str | None, actuated: str | None,
            method: str, csv_path: Path, covariance: bool, plot: bool,
            param_values: tuple[tuple[str, float], ...], max_steps: int,
            build_dir: Path | None) -> None:
    """Forces that make FILE's mechanism follow a prescribed motion: writes t, every
    coordinate's q, q̇, q̈ (<name>, <name>_dot, <name>_ddot; the imposed ones as followed)
    and force_<coordinate> per actuator (the generalized force the actuator applies on its
    coordinate)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from mbgen.cli import load_with_status
    from mbgen.inverse.direct import inverse_dynamics_direct
    from mbgen.inverse.motion import coordinate_indices
    from mbgen.inverse.plots import plot_inverse
    from mbgen.io.tables import write_csv
    from mbgen.io.trajectory import read_trajectory, trajectory_from_expressions

    console = status_console
    if (trajectory is None) == (not motions):
        raise click.UsageError("give either --trajectory FILE or --motion COORD=EXPR")
    if motions and (t_end is None or dt is None):
        raise click.UsageError("--motion needs --t-end and --dt")
    if trajectory is not None and not imposed:
        raise click.UsageError("--trajectory needs --imposed (its columns' coordinates)")
    if covariance and method != "factor-graph":
        raise click.UsageError("--covariance needs --method factor-graph (the direct method "
                               "has no noise models to give the forces a σ)")
    check_paths({"FILE": file, "--trajectory": trajectory},
                {"--out": csv_path, "--plot": plot_paths(csv_path, "inverse") if plot else None})
    mech, _ = load_with_status(file, build_dir)
    apply_parameters(mech, param_values)
    if motions:
        pairs: list[tuple[str, str]] = []
        for spec in motions:
            if "=" not in spec:
                raise click.BadParameter(f"expected COORD=EXPR, got {spec!r}",
                                         param_hint="--motion")
            name, text = spec.split("=", 1)
            pairs.append((name.strip(), text.strip()))
        indices = coordinate_indices(mech, [name for name, _ in pairs], "--motion")
        assert t_end is not None and dt is not None  # --motion needs them (checked above)
        check_work(t_end / dt + 1, max_steps, f"samples ({t_end:g} s every {dt:g} s)",
                   "--max-steps", 8.0 * (8 * mech.n + mech.m) * (4 if method != "direct" else 1))
        samples = trajectory_from_expressions(dict(pairs), t_end, dt)
    else:
        assert trajectory is not None  # either --trajectory or --motion (checked above)
        indices = coordinate_indices(mech, imposed or "", "--imposed")
        samples = read_trajectory(trajectory, len(indices))
    acting = None if actuated is None else coordinate_indices(mech, actuated, "--actuated")
    start = time.perf_counter()
    if method == "direct":
        result = inverse_dynamics_direct(mech, samples, indices, acting)
    else:
        from mbgen.inverse.factor_graph import inverse_dynamics_factor_graph

        announce_one_time_builds()
        with Progress(TextColumn("[bold]factor graph"), BarColumn(), TimeElapsedColumn(),
                      console=console, transient=True) as bar:
            task = bar.add_task("inverse", total=None)
            result = inverse_dynamics_factor_graph(
                mech, samples, indices, acting, covariance=covariance,
                progress=lambda done, total: bar.update(task, completed=done, total=total))
    elapsed = time.perf_counter() - start
    write_csv(result, csv_path)
    pictures = plot_inverse(result, csv_path) if plot else []
    names = mech.coordinate_names
    peaks = ", ".join(f"{names[i]}: {abs(result.forces[:, k]).max():.4g}"
                      for k, i in enumerate(result.actuated))
    console.print(f"[green]✓[/] {escape(mech.name)}: {len(result.t)} samples ({method}) in "
                  f"{elapsed:.3f} s; peak |force| {peaks}; max following error "
                  f"{abs(result.following_error).max():.2e}")
    console.print(escape(f"  wrote {csv_path}" + "".join(f"\n  wrote {p}" for p in pictures)))

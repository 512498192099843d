"""`mbgen draw` and `mbgen animate`: the mechanism as a picture and a result as a movie."""

from __future__ import annotations

import re
from pathlib import Path

import click
import numpy as np
from rich.markup import escape

from mbgen.cli import BUILD_DIR, status_console
from mbgen.cli.conventions import (
    ANIMATION_SUFFIXES,
    MAX_FRAMES,
    PAGE_SUFFIX,
    PICTURE_SUFFIXES,
    Command,
    OutputFile,
    check_paths,
    check_work,
)

VIEW = click.option(
    "--view", type=(float, float), default=None, metavar="ELEVATION AZIMUTH",
    help="Spatial mechanisms only: where the 3-D axes are seen from [degrees] (default 25 -60); "
    "90 -90 looks down the z axis.")


def check_view(dimension: int, view: tuple[float, float] | None) -> None:
    """--view turns 3-D axes: on a planar mechanism, drawn in its plane, it is refused."""
    if view is not None and dimension != 3:
        raise click.BadParameter("a planar mechanism is drawn in its plane; --view turns "
                                 "the 3-D axes of spatial ones (dimension: 3)",
                                 param_hint="--view")
    if view is not None and not all(abs(angle) <= 360 for angle in view):
        raise click.BadParameter(f"angles in degrees within ±360, got {view[0]:g} "
                                 f"{view[1]:g}", param_hint="--view")


@click.command(cls=Command, example="mbgen draw mechanisms/fourbar.yaml --out fourbar.png")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "png", type=OutputFile((*PICTURE_SUFFIXES, PAGE_SUFFIX)),
              required=True, help="Picture to write; its suffix names the format: "
              f"{', '.join(PICTURE_SUFFIXES)}, or {PAGE_SUFFIX} for an interactive 3-D "
              "page (one file, no network needed to open it).")
@click.option("--q", "q_text", help='State to draw [m, rad]: "v1,v2,..." or "name=value,..." '
              "(named DOF met exactly on the file's assembly branch); default q0.")
@click.option("--guess", help="Where the assembly starts instead of the file's q0, same "
              "forms.")
@VIEW
@BUILD_DIR
def draw(file: Path, png: Path, q_text: str | None, guess: str | None,
         view: tuple[float, float] | None, build_dir: Path | None) -> None:
    """Draw FILE's mechanism: bodies, ground, sliders, springs, sensors, point labels."""
    from mbgen.cli import load_with_status
    from mbgen.cli.states import initial_state

    check_paths({"FILE": file}, {"--out": png})
    mech, _ = load_with_status(file, build_dir)
    check_view(int(mech.meta.get("dimension", 2)), view)
    q, _ = initial_state(mech, q_text, None, guess, q_option="--q")
    title = f"{mech.name}" + ("" if q_text else " at q0")
    if png.suffix.lower() == PAGE_SUFFIX:
        from mbgen.io.page import draw_figure, write_page

        write_page(draw_figure(mech, q, title=title, view=view), mech.name, png)
    else:
        from mbgen.io.drawing import draw_png

        draw_png(mech, q, png, title=title, view=view)
    fixed = sum(bool(p["fixed"]) for p in mech.meta["points"])
    status_console.print(f"[green]✓[/] {escape(mech.name)}: {len(mech.meta['bodies'])} "
                         f"bodies, {fixed} fixed points; wrote {escape(str(png))}")


def read_states(path: Path, names: list[str]) -> tuple[np.ndarray, np.ndarray,
                                                      np.ndarray | None]:
    """t (N,), q (N, n) and, for an estimate, the branch probabilities (N, B) (else None)
    from a result CSV that has a column t and every coordinate (other columns ignored)."""
    from mbgen.columns import branches, velocity
    from mbgen.errors import TrajectoryError
    from mbgen.io.datafile import read_data

    data = read_data(path, required=names, what="coordinate")
    foreign = [name for name in data.names if name not in names and (
        velocity(name) in data.names or re.fullmatch(r"u?[xyz][0-9]+", name))]
    if foreign:  # another mechanism's result, e.g. a spatial run's x1, y1, z1 on a planar one
        raise TrajectoryError(f"{path}: column(s) {', '.join(foreign)} are coordinates the "
                              f"mechanism does not have (its coordinates: "
                              f"{', '.join(names)}): a result of another mechanism?")
    branch_names = branches(data.names)
    return (data.t, np.column_stack([data.column(name) for name in names]),
            np.column_stack([data.column(name) for name in branch_names]) if branch_names else None)


@click.command(cls=Command, example=(
    "mbgen animate examples/fourbar-run.csv --mechanism mechanisms/fourbar.yaml \\\n"
    "  --out run.gif --fps 10"))
@click.argument("csv_path", metavar="CSV", type=click.Path(exists=True, dir_okay=False,
                                                           path_type=Path))
@click.option("--mechanism", "file", type=click.Path(exists=True, dir_okay=False,
                                                     path_type=Path), required=True,
              help="The mechanism file the result belongs to.")
@click.option("--out", "movie", type=OutputFile((*ANIMATION_SUFFIXES, PAGE_SUFFIX)),
              required=True, help="Animation to write: .gif (Pillow), .mp4 (ffmpeg) or "
              f"{PAGE_SUFFIX}, an interactive 3-D page with play, pause and a time slider "
              "(at most 300 frames, spread evenly over a longer run).")
@click.option("--fps", type=click.IntRange(1, 120), default=30, show_default=True,
              help="Frames per second of simulated time [1/s].")
@click.option("--trace", help="A point (name or index) whose path is drawn.")
@click.option("--truth", "truth_path", type=click.Path(exists=True, dir_okay=False,
                                                       path_type=Path), default=None,
              help="For an estimate: a result CSV of the true motion, drawn beside it.")
@click.option("--max-frames", type=click.IntRange(min=1), default=MAX_FRAMES,
              show_default=True, help="Refuse to render more frames than this (duration × "
              "--fps; the estimate is printed first).")
@VIEW
@BUILD_DIR
def animate(csv_path: Path, file: Path, movie: Path, fps: int, trace: str | None,
            truth_path: Path | None, max_frames: int, view: tuple[float, float] | None,
            build_dir: Path | None) -> None:
    """Animate a result CSV (simulation, inverse dynamics, estimate: any file with t and
    every coordinate). An estimate's branch probabilities are drawn as bars."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from mbgen.cli import load_with_status
    from mbgen.io.drawing import animate as make

    check_paths({"CSV": csv_path, "--mechanism": file, "--truth": truth_path}, {"--out": movie})
    mech, _ = load_with_status(file, build_dir)
    check_view(int(mech.meta.get("dimension", 2)), view)
    t, q, branches = read_states(csv_path, mech.coordinate_names)
    page = movie.suffix.lower() == PAGE_SUFFIX
    if page:
        from mbgen.io.page import page_frames

        wanted: float = page_frames(t, fps)
    else:
        wanted = (t[-1] - t[0]) * fps + 1
    check_work(wanted, max_frames, f"frames ({t[-1] - t[0]:g} s at {fps} fps)",
               "--max-frames")
    truth = None if truth_path is None else read_states(truth_path,
                                                        mech.coordinate_names)[:2]
    point = None
    if trace is not None:
        names = [p["name"] for p in mech.meta["points"]]
        if trace in names:
            point = names.index(trace)
        elif trace.isascii() and trace.isdigit() and len(trace) < 10 and int(trace) < len(names):
            point = int(trace)
        else:
            raise click.BadParameter(f"unknown point {trace!r} (points: {', '.join(names)})",
                                     param_hint="--trace")
    console = status_console
    if page:
        from mbgen.io.page import animation_figure, write_page

        figure = animation_figure(mech, t, q, fps=fps, trace=point, truth=truth,
                                  branches=branches, view=view)
        write_page(figure, mech.name, movie)
        console.print(f"[green]✓[/] {escape(mech.name)}: {len(figure['frames'])} frames at "
                      f"{fps} fps; wrote {escape(str(movie))}")
        return
    try:
        with Progress(TextColumn("[bold]rendering"), BarColumn(),
                      TextColumn("{task.completed}/{task.total} frames"),
                      TimeElapsedColumn(), console=console, transient=True) as bar:
            task = bar.add_task("frames", total=None)
            frames = make(mech, t, q, movie, fps=fps, trace=point, truth=truth,
                          branches=branches, view=view,
                          progress=lambda done, total: bar.update(task, completed=done,
                                                                  total=total))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    console.print(f"[green]✓[/] {escape(mech.name)}: {frames} frames at {fps} fps; wrote "
                  f"{escape(str(movie))}")

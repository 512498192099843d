"""Pictures of a mechanism: a drawing at one state, and an animation of a result.

Natural coordinates make this direct: a mobile point i is at (q[x<i>], q[y<i>]) (and
q[z<i>] in a spatial mechanism, drawn on 3-D axes), a fixed one where the file puts it.
Everything drawn comes from the compiled module's metadata (points, bodies, sliders,
springs, sensors), so any result with the coordinates in its columns can be shown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mbgen.escaping import mathtext
from mbgen.files import atomic_write
from mbgen.io.figures import save_figure
from mbgen.runtime.compiled import CompiledMechanism

Array = np.ndarray
BODY_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
               "#17becf")


@dataclass
class Drawing:
    """The artists of one drawing, by kind, so an animation can move them."""

    bodies: list[Any] = field(default_factory=list)
    ground: list[Any] = field(default_factory=list)
    sliders: list[Any] = field(default_factory=list)
    springs: list[Any] = field(default_factory=list)
    sensors: list[Any] = field(default_factory=list)
    labels: list[Any] = field(default_factory=list)
    trace: Any = None
    outlines: dict[int, Array] = field(default_factory=dict)  # plate → its points in order


class Geometry:
    """Point positions of a mechanism at a state q (n,) → (points, dimension)."""

    def __init__(self, mechanism: CompiledMechanism) -> None:
        meta = mechanism.meta
        self.meta = meta
        self.dimension = int(meta.get("dimension", 2))
        axes = "xyz"[:self.dimension]
        names = mechanism.coordinate_names
        self.count = len(meta["points"])
        self.fixed = np.array([[p.get(a, 0.0) for a in axes] for p in meta["points"]])
        self.columns = {p["index"]: [names.index(f"{a}{p['index']}") for a in axes]
                        for p in meta["points"] if not p["fixed"]}

    def positions(self, q: Array) -> Array:
        xy = self.fixed.copy()
        for index, columns in self.columns.items():
            xy[index] = q[columns]
        return xy

    def limits(self, states: Array) -> list[tuple[float, float]]:
        """Axis limits (one pair per axis) that hold every point of every state, with a
        margin; in 3-D, a cube, so that the axes keep one scale."""
        every = np.concatenate([self.positions(q) for q in states])
        low, high = every.min(axis=0), every.max(axis=0)
        pad = 0.1 * max(float((high - low).max()), 1e-3)
        if self.dimension == 3:
            centre, half = (low + high) / 2, float((high - low).max()) / 2 + pad
            return [(float(c - half), float(c + half)) for c in centre]
        return [(float(lo - pad), float(hi + pad)) for lo, hi in zip(low, high, strict=True)]

    def set_limits(self, ax: Any, states: Array) -> None:
        limits = self.limits(states)
        ax.set_xlim(*limits[0])
        ax.set_ylim(*limits[1])
        if self.dimension == 3:
            ax.set_zlim(*limits[2])
            ax.set_box_aspect((1, 1, 1))


def spring_path(a: Array, b: Array, turns: int = 6) -> Array:
    """A zigzag from a to b: (2 turns + 4, 2)."""
    axis = b - a
    length = float(np.hypot(*axis)) or 1e-9
    normal = np.array([-axis[1], axis[0]]) / length
    t = np.linspace(0.15, 0.85, 2 * turns + 1)
    side = 0.06 * length * np.where(np.arange(t.size) % 2 == 0, 0.0, 1.0) * np.where(
        np.arange(t.size) % 4 == 1, 1.0, -1.0)
    middle = a + np.outer(t, axis) + np.outer(side, normal)
    return np.vstack([a, a + 0.15 * axis, middle, b - 0.15 * axis, b])


def draw(ax: Any, geometry: Geometry, q: Array, labels: bool = True,
         drawing: Drawing | None = None) -> Drawing:
    """Draws the mechanism at q into a Matplotlib Axes (3-D axes for a spatial mechanism),
    or moves an existing ``drawing``."""
    meta = geometry.meta
    xy = geometry.positions(q)
    if geometry.dimension == 3:
        return _draw_spatial(ax, geometry, xy, labels, drawing)
    if drawing is not None:
        _update(drawing, geometry, xy)
        return drawing
    result = Drawing()
    span = float(np.ptp(geometry.fixed, axis=0).max()) if geometry.count > 1 else 1.0
    for k, body in enumerate(meta["bodies"]):
        pts = xy[body["points"]]
        color = BODY_COLORS[k % len(BODY_COLORS)]
        if len(pts) > 2:  # a plate: its outline (points by angle, a rigid order), filled
            from matplotlib.patches import Polygon

            order = outline_order(pts)
            result.outlines[k] = order
            patch = Polygon(pts[order], closed=True, facecolor=color, alpha=0.25, edgecolor=color,
                            linewidth=2.0, zorder=2)
            ax.add_patch(patch)
            result.bodies.append(patch)
        else:
            (line,) = ax.plot(pts[:, 0], pts[:, 1], "-o", color=color, linewidth=5,
                              markersize=7, markerfacecolor="white", zorder=3,
                              solid_capstyle="round")
            result.bodies.append(line)
    for point in meta["points"]:
        if point["fixed"]:
            x, y = xy[point["index"]]
            (ground,) = ax.plot([x], [y], marker="^", markersize=14, color="0.3", zorder=1)
            ax.plot([x - 0.04 * span, x + 0.04 * span], [y - 0.025 * span] * 2, color="0.3",
                    linewidth=2, zorder=1)
            result.ground.append(ground)
    for slider in meta.get("sliders", []):
        a, b = xy[slider["line_points"]]
        direction = (b - a) / (np.hypot(*(b - a)) or 1.0)
        guide = np.array([a - 0.3 * span * direction, b + 0.3 * span * direction])
        (line,) = ax.plot(guide[:, 0], guide[:, 1], "--", color="0.5", linewidth=1.2,
                          zorder=1)
        (block,) = ax.plot(*xy[slider["point"]], marker="s", markersize=13, color="0.2",
                           markerfacecolor="none", markeredgewidth=2, zorder=4)
        result.sliders.append((line, block, slider))
    for spring in meta.get("springs", []):
        path = spring_path(*xy[spring["points"]])
        (line,) = ax.plot(path[:, 0], path[:, 1], color="#7f7f7f", linewidth=1.3, zorder=2)
        result.springs.append((line, spring))
    for sensor in placed_sensors(meta):
        where = sensor_point(meta, sensor, xy)
        if where is None:
            continue
        (mark,) = ax.plot(*where, marker="*", markersize=12, color="#bcbd22", zorder=5)
        result.sensors.append((mark, sensor))
    if labels:
        for point in meta["points"]:
            x, y = xy[point["index"]]
            result.labels.append(ax.annotate(point["name"], (x, y), textcoords="offset points",
                                             xytext=(6, 6), fontsize=8, color="0.25"))
    ax.set_aspect("equal")
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    ax.grid(alpha=0.25)
    return result


def _draw_spatial(ax: Any, geometry: Geometry, xyz: Array, labels: bool,
                  drawing: Drawing | None) -> Drawing:
    """A spatial mechanism on 3-D axes: each body as segments from its first point to its
    others, fixed points as triangles, springs as thin lines."""
    meta = geometry.meta

    def body_path(body: dict) -> Array:
        return xyz[star(body["points"])]

    if drawing is not None:
        for body, line in zip(meta["bodies"], drawing.bodies, strict=True):
            line.set_data_3d(*body_path(body).T)
        for line, spring in drawing.springs:
            line.set_data_3d(*xyz[spring["points"]].T)
        for mark, sensor in drawing.sensors:
            where = sensor_point(meta, sensor, xyz)
            assert where is not None  # only sensors with a place are drawn
            mark.set_data_3d(*([v] for v in where))
        return drawing
    result = Drawing()
    for k, body in enumerate(meta["bodies"]):
        (line,) = ax.plot(*body_path(body).T, "-o", color=BODY_COLORS[k % len(BODY_COLORS)],
                          linewidth=4, markersize=5, markerfacecolor="white")
        result.bodies.append(line)
    for point in meta["points"]:
        if point["fixed"]:
            (ground,) = ax.plot(*([v] for v in xyz[point["index"]]), marker="^",
                                markersize=12, color="0.3")
            result.ground.append(ground)
    for spring in meta.get("springs", []):
        (line,) = ax.plot(*xyz[spring["points"]].T, color="#7f7f7f", linewidth=1.3)
        result.springs.append((line, spring))
    for sensor in placed_sensors(meta):
        where = sensor_point(meta, sensor, xyz)
        if where is not None:
            (mark,) = ax.plot(*([v] for v in where), marker="*", markersize=12,
                              color="#bcbd22")
            result.sensors.append((mark, sensor))
    if labels:
        for point in meta["points"]:
            result.labels.append(ax.text(*xyz[point["index"]], f" {point['name']}",
                                         fontsize=8, color="0.25"))
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    ax.set_zlabel("z [m]")
    return result


def outline_order(pts: Array) -> Array:
    """A planar plate's points (k, 2) in order of angle about their centre: (k,) indices,
    found at the first state and kept (the order of a rigid plate's outline holds)."""
    centre = pts.mean(axis=0)
    return np.argsort(np.arctan2(pts[:, 1] - centre[1], pts[:, 0] - centre[0]))


def star(points: list[int]) -> list[int]:
    """A spatial body drawn as segments from its first point to each other one: the point
    indices of that path, first point repeated between segments."""
    if len(points) == 1:
        return list(points)
    return [i for other in points[1:] for i in (points[0], other)]


def placed_sensors(meta: dict) -> list[dict]:
    """The sensors to mark on a drawing: the state sensors, then the accelerometers (which
    meta.json keeps apart), each as {"kind", "target", ...}; an accelerometer's target is
    the point it sits on."""
    return [*meta.get("sensors", []),
            *({"kind": "accelerometer", "target": a["point"], **a}
              for a in meta.get("accelerometers", []))]


def sensor_point(meta: dict, sensor: dict, xy: Array) -> Array | None:
    if sensor["kind"] in ("position", "velocity", "accelerometer"):
        return xy[int(sensor["target"])]
    if sensor["kind"] == "gyroscope":
        return xy[meta["bodies"][int(sensor["target"])]["points"]].mean(axis=0)
    return None  # an encoder measures a coordinate, not a place


def _update(drawing: Drawing, geometry: Geometry, xy: Array) -> None:
    for k, (body, artist) in enumerate(zip(geometry.meta["bodies"], drawing.bodies,
                                           strict=True)):
        pts = xy[body["points"]]
        if hasattr(artist, "set_xy"):
            artist.set_xy(pts[drawing.outlines[k]])
        else:
            artist.set_data(pts[:, 0], pts[:, 1])
    for _line, block, slider in drawing.sliders:
        block.set_data(*([v] for v in xy[slider["point"]]))
    for line, spring in drawing.springs:
        path = spring_path(*xy[spring["points"]])
        line.set_data(path[:, 0], path[:, 1])
    for mark, sensor in drawing.sensors:
        where = sensor_point(geometry.meta, sensor, xy)
        assert where is not None  # only sensors with a place are drawn
        mark.set_data([where[0]], [where[1]])
    if drawing.labels:
        for label, point in zip(drawing.labels, geometry.meta["points"], strict=True):
            label.xy = tuple(xy[point["index"]])


View = tuple[float, float]  # a 3-D drawing's elevation and azimuth [degrees]
DEFAULT_VIEW: View = (25.0, -60.0)


def _axes_options(geometry: Geometry, view: View | None) -> dict[str, Any]:
    """``subplot_kw`` for the drawing's axes: 3-D ones, seen from ``view``, in space."""
    if geometry.dimension != 3:
        return {}
    elevation, azimuth = view or DEFAULT_VIEW
    return {"projection": "3d", "elev": elevation, "azim": azimuth}


def draw_png(mechanism: CompiledMechanism, q: Array, path: Path,
             title: str | None = None, view: View | None = None) -> Drawing:
    """One drawing as a PNG (written atomically); ``view``: (elevation, azimuth) of a
    spatial mechanism's 3-D axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    geometry = Geometry(mechanism)
    fig, ax = plt.subplots(figsize=(7, 6), subplot_kw=_axes_options(geometry, view))
    result = draw(ax, geometry, q)
    geometry.set_limits(ax, q[None])
    ax.set_title(mathtext(title or f"{mechanism.name} at q0"))
    save_figure(fig, Path(path))
    return result


def animate(mechanism: CompiledMechanism, t: Array, q: Array, path: Path, fps: int = 30,
            trace: int | None = None, progress: Callable[[int, int], None] | None = None,
            truth: tuple[Array, Array] | None = None, branches: Array | None = None,
            view: View | None = None) -> int:
    """An animation of the states q (N, n) at times t (N,) as GIF (Pillow) or MP4 (ffmpeg);
    frames are sampled at ``fps`` in simulated time. For an estimate: ``truth`` = (times
    (M,), states (M, n)) is drawn beside it, and ``branches`` (N, B), the probability of
    each assembly branch, as bars; ``view`` as :func:`draw_png`'s. Returns the number of
    frames."""
    path = Path(path)
    writer = _movie_writer(path, fps)
    times = frame_times(t, fps)
    frames = len(times)
    rows = rows_at(t, times)
    shown = [("", q[rows])]  # (title, states at the frames) per drawing
    if truth is not None:
        shown = [("estimate", q[rows]), ("ground truth", truth[1][rows_at(truth[0], times)])]
    scene = Scene(mechanism, shown, times, trace,
                  None if branches is None else branches[rows], view)
    _write_movie(scene, writer, path, frames, progress)
    return frames


def _movie_writer(path: Path, fps: int) -> Any:
    """Matplotlib's writer for the suffix: Pillow for .gif, ffmpeg for .mp4."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.animation import FFMpegWriter, PillowWriter

    if path.suffix.lower() not in (".gif", ".mp4"):
        raise ValueError(f"{path}: the animation must be a .gif or an .mp4")
    if path.suffix.lower() == ".mp4" and not FFMpegWriter.isAvailable():
        raise ValueError("MP4 needs ffmpeg on the PATH; write a .gif instead")
    class Gif(PillowWriter):
        def grab_frame(self, **_options: Any) -> None:
            """The canvas as it is (:meth:`Scene.render` drew it), as PillowWriter's."""
            from PIL import Image

            canvas: Any = self.fig.canvas  # Agg's
            image = Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba(),
                                     "raw", "RGBA", 0, 1)
            extrema: Any = image.getextrema()  # per band: RGBA has four
            alpha = extrema[3]
            frames: list[Any] = self._frames  # type: ignore[attr-defined]  # setup's list
            frames.append(image if alpha[0] < 255 else image.convert("RGB"))

    class Mp4(FFMpegWriter):
        def grab_frame(self, **_options: Any) -> None:
            """The canvas as it is, piped to ffmpeg (rgba frames of the setup's size)."""
            canvas: Any = self.fig.canvas  # Agg's
            assert canvas.get_width_height() == tuple(self.frame_size)
            pipe: Any = self._proc.stdin  # type: ignore[attr-defined]  # setup's ffmpeg
            pipe.write(canvas.buffer_rgba())

    return Gif(fps=fps) if path.suffix.lower() == ".gif" else Mp4(fps=fps)


class Scene:
    """An animation's figure, laid out once: one drawing per (title, states (K, n)) of
    ``shown`` and, for an estimate, bars of the branch probabilities (K, B); ``frame(k)``
    moves the artists to frame k."""

    def __init__(self, mechanism: CompiledMechanism, shown: list[tuple[str, Array]],
                 times: Array, trace: int | None, branches: Array | None,
                 view: View | None = None) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        self.name, self.shown, self.times, self.branches = mechanism.name, shown, times, branches
        self.geometry = geometry = Geometry(mechanism)
        widths = [1.0] * len(shown) + ([0.4] if branches is not None else [])
        self.fig = plt.figure(figsize=(1 + 6 * sum(widths), 6), layout="constrained")
        grid = self.fig.add_gridspec(1, len(widths), width_ratios=widths)
        self.axes = [self.fig.add_subplot(grid[0, k], **_axes_options(geometry, view))
                     for k in range(len(shown))]
        if branches is not None:
            self.axes.append(self.fig.add_subplot(grid[0, len(shown)]))
        every = np.vstack([x for _, x in shown])
        self.drawings = []
        for ax, (_, states) in zip(self.axes, shown, strict=False):
            self.drawings.append(draw(ax, geometry, states[0], labels=False))
            geometry.set_limits(ax, every)
            if trace is not None:
                empty: list[list[float]] = [[] for _ in range(geometry.dimension)]
                (self.drawings[-1].trace,) = ax.plot(*empty, color="0.4", linewidth=1, zorder=0)
        self.titles = [ax.set_title("") for ax in self.axes[:len(shown)]]
        self.traced = [np.array([geometry.positions(x)[trace] for x in states])
                       for _, states in shown] if trace is not None else []
        self.bars = None
        if branches is not None:
            self.bars = self.axes[-1].bar([f"B{b}" for b in range(branches.shape[1])],
                                          branches[0], color="tab:purple")
            self.axes[-1].set(ylim=(0, 1), ylabel="probability", title="assembly branch")
        self.fig.canvas.draw()
        self.fig.set_layout_engine("none")  # laid out once: the frames only move artists
        self.background: Any = None

    def moving(self) -> list[tuple[Any, Any]]:
        """(axes, artist) of everything a frame moves or rewrites, in drawing order: the
        bodies, slider blocks, springs, sensors, traces and titles, the branches' bars."""
        pairs = []
        for ax, drawing, title in zip(self.axes, self.drawings, self.titles, strict=False):
            artists = [*drawing.bodies, *(block for _, block, _ in drawing.sliders),
                       *(line for line, _ in drawing.springs),
                       *(mark for mark, _ in drawing.sensors), *drawing.labels,
                       *([drawing.trace] if drawing.trace is not None else [])]
            pairs += [(ax, a) for a in sorted(artists, key=lambda a: a.get_zorder())]
            pairs.append((ax, title))
        if self.bars is not None:
            pairs += [(self.axes[-1], bar) for bar in self.bars]
        return pairs

    def prepare(self) -> None:
        """Draws what stays (axes, ticks, grid, ground, guides) once, at the movie's size;
        each frame then restores that picture and draws only what moves on it (3-D axes
        took 0.3 s a frame to redraw whole)."""
        for _, artist in self.moving():
            artist.set_animated(True)
        canvas: Any = self.fig.canvas  # Agg's, which keeps regions
        canvas.draw()
        self.background = canvas.copy_from_bbox(self.fig.bbox)

    def render(self, k: int) -> None:
        """Frame k on the canvas: the background, then the moving artists at frame k."""
        if self.background is None:
            self.prepare()
        self.frame(k)
        canvas: Any = self.fig.canvas
        canvas.restore_region(self.background)
        for ax, artist in self.moving():
            ax.draw_artist(artist)

    def frame(self, k: int) -> None:
        for ax, drawing, title, (label, states) in zip(self.axes, self.drawings, self.titles,
                                                       self.shown, strict=False):
            draw(ax, self.geometry, states[k], drawing=drawing)
            title.set_text(f"{mathtext(self.name)}{': ' + label if label else ''}: "
                           f"t = {self.times[k]:.3f} s")
        for drawing, path_xy in zip(self.drawings, self.traced, strict=False):
            if self.geometry.dimension == 3:
                drawing.trace.set_data_3d(*path_xy[:k + 1].T)
            else:
                drawing.trace.set_data(path_xy[:k + 1, 0], path_xy[:k + 1, 1])
        if self.bars is not None and self.branches is not None:
            for bar, height in zip(self.bars, self.branches[k], strict=True):
                bar.set_height(height)


def _write_movie(scene: Scene, writer: Any, path: Path, frames: int,
                 progress: Callable[[int, int], None] | None) -> None:
    """Every frame through ``writer``, into ``path`` whole (atomically)."""
    import matplotlib.pyplot as plt

    suffix = path.suffix

    def save(tmp: Path) -> None:
        target = tmp.with_suffix(suffix)  # the writers pick the format by the suffix
        try:
            with writer.saving(scene.fig, str(target), dpi=scene.fig.dpi):
                scene.prepare()  # after the writer's setup, which may resize the figure
                for k in range(frames):  # only what moves is drawn (FuncAnimation: twice all)
                    scene.render(k)
                    writer.grab_frame()
                    if progress is not None:
                        progress(k + 1, frames)
            target.replace(tmp)
        finally:
            target.unlink(missing_ok=True)

    atomic_write(path, save)
    plt.close(scene.fig)


def frame_times(t: Array, fps: int, limit: int | None = None) -> Array:
    """The times (K,) of an animation's frames over the time column t (N,): one every
    1/fps of simulated time; at most ``limit`` of them, spread evenly over the run, when
    that would be more."""
    duration = float(t[-1] - t[0])
    frames = max(1, int(round(duration * fps)) + 1)
    if limit is not None and frames > limit:
        return np.linspace(t[0], t[-1], limit)
    return t[0] + np.arange(frames) / fps


def rows_at(t: Array, times: Array) -> Array:
    """For each of ``times``, the first row of the time column t (N,) at or after it."""
    return np.searchsorted(t, times).clip(0, len(t) - 1)

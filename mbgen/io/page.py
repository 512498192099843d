"""The interactive page: a mechanism at one state, or a result's motion, as one HTML file.

Drawn with Plotly: its Python package carries plotly.js (4.8 MB, MIT), which is embedded
whole in the file, so the page opens with no network. Plotly gives what a page needs with
no JavaScript of ours beyond one line: 3-D axes that orbit and zoom with the mouse (2-D
axes that pan and zoom for a planar mechanism, drawn in its plane), and animation frames
with play and pause buttons and a time slider. What is drawn comes from the compiled
module's metadata, as in :mod:`mbgen.io.drawing`: bodies as segments between their
points (a planar plate as its outline), the ground's fixed points, slider guides, springs
and the sensors that sit somewhere.

Text from the file (the mechanism's, bodies', points' and sensors' names) goes into the
page only as data: HTML-escaped for Plotly's labels, inside the figure's JSON, which
Plotly writes with ``<``, ``>`` and ``/`` as ``\\u`` escapes, so no name can close the
script or open a tag. A long run is subsampled to at most :data:`PAGE_FRAMES` frames,
spread evenly over it, which bounds the file's size: plotly.js's 4.8 MB and, measured on
20 s runs, 2.5 kB a frame for a 6-link spatial chain (a 5.6 MB page), 11 kB for a planar
100-bar chain (8.1 MB).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mbgen.escaping import html_text
from mbgen.files import atomic_write_text
from mbgen.io.drawing import (
    BODY_COLORS,
    Geometry,
    View,
    frame_times,
    outline_order,
    placed_sensors,
    rows_at,
    sensor_point,
    spring_path,
    star,
)
from mbgen.runtime.compiled import CompiledMechanism

Array = np.ndarray
#: The most frames one page holds; a longer run is sampled evenly at this many times.
PAGE_FRAMES = 300
GROUND, SENSOR, TRUTH, PATH = "#4d4d4d", "#bcbd22", "#8c8c8c", "#a0a0a0"
#: Marker symbols by dimension (3-D scatter has fewer: no triangles or stars).
SYMBOLS = {2: {"ground": "triangle-up", "sensor": "star", "slider": "square-open"},
           3: {"ground": "square", "sensor": "diamond", "slider": "square-open"}}
#: The camera's distance from the scene's centre, in Plotly's scene units (default 2.2).
EYE_DISTANCE = 1.5
#: Runs when the page opens with ``#play`` after its address: presses the play button
#: (so a browser, headless too, can be shown the page playing; our own constant code).
PLAY_ON_FRAGMENT = """
var page = document.getElementById('{plot_id}');
if (window.location.hash === '#play') {
  var play = page.querySelector('.updatemenu-button');
  if (play) { play.dispatchEvent(new MouseEvent('click', {bubbles: true})); }
}
"""
PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>html, body {{margin: 0; height: 100%; overflow: hidden; background: white;}}</style>
</head>
<body>
{figure}
</body>
</html>
"""


def page_frames(t: Array, fps: int) -> int:
    """How many frames a page of the time column t (N,) at ``fps`` holds."""
    return len(frame_times(t, fps, PAGE_FRAMES))


class PageScene:
    """The Plotly traces of a mechanism: ``fixed`` ones (the ground, slider guides, a
    point's path) drawn once, and ``moving`` ones (bodies, slider blocks, springs,
    sensors) recomputed per state, always the same number in the same order."""

    def __init__(self, mechanism: CompiledMechanism, states: Array) -> None:
        self.geometry = geometry = Geometry(mechanism)
        self.meta = meta = geometry.meta
        self.dimension = geometry.dimension
        self.symbols = SYMBOLS[self.dimension]
        limits = geometry.limits(states)
        self.limits = limits
        span = max(hi - lo for lo, hi in limits)
        self.decimals = max(0, 6 - int(np.floor(np.log10(span))))  # µm on a metre scale
        first = geometry.positions(states[0])
        self.orders = {k: outline_order(first[body["points"]])
                       for k, body in enumerate(meta["bodies"])
                       if self.dimension == 2 and len(body["points"]) > 2}
        self.points = [p["name"] for p in meta["points"]]
        self.sensors = [(s, sensor_point(meta, s, first) is not None)
                        for s in placed_sensors(meta)]
        self.span = float(np.ptp(geometry.fixed, axis=0).max()) if geometry.count > 1 else 1.0

    # -- traces ------------------------------------------------------------------------

    def _trace(self, xyz: Array, **style: Any) -> dict[str, Any]:
        """A scatter trace through the rows of xyz (K, dimension); NaN rows break it."""
        rounded = np.round(np.asarray(xyz, dtype=float).reshape(-1, self.dimension),
                           self.decimals)
        columns = {axis: [None if np.isnan(v) else float(v) for v in rounded[:, k]]
                   for k, axis in enumerate("xyz"[:self.dimension])}
        kind = "scatter3d" if self.dimension == 3 else "scatter"
        return {"type": kind, **columns, **style}

    def _body_path(self, k: int, xyz: Array) -> tuple[Array, list[str]]:
        """Body k's path (P, dimension) through its points and the point names along it."""
        points = self.meta["bodies"][k]["points"]
        if k in self.orders:  # a planar plate: its outline, closed
            order = [points[i] for i in self.orders[k]]
            path = [*order, order[0]]
        elif self.dimension == 2:
            path = list(points)
        else:
            path = star(points)
        return xyz[path], [self.points[i] for i in path]

    def bodies(self, xyz: Array, color: str | None = None) -> list[dict[str, Any]]:
        """The bodies at the positions xyz (points, dimension): one trace per colour of
        :data:`BODY_COLORS` (body k has colour k mod 8, as in the PNG), bodies apart;
        with ``color``, all in one trace of that colour (a ground truth beside)."""
        bodies = self.meta["bodies"]
        groups = ([list(range(len(bodies)))] if color is not None else
                  [list(range(c, len(bodies), len(BODY_COLORS)))
                   for c in range(min(len(BODY_COLORS), len(bodies)))])
        traces = []
        for c, members in enumerate(groups):
            paths, text = [], []
            for k in members:
                path, names = self._body_path(k, xyz)
                paths += [path, np.full((1, self.dimension), np.nan)]
                text += [f"{html_text(bodies[k]['name'])}: point {html_text(n)}"
                         for n in names] + [""]
            colour = color or BODY_COLORS[c]
            width = 6 if self.dimension == 3 else 5
            traces.append(self._trace(
                np.vstack(paths) if paths else np.empty((0, self.dimension)),
                mode="lines+markers", text=text, hoverinfo="text",
                line={"color": colour, "width": width},
                marker={"color": "white" if self.dimension == 2 else colour,
                        "size": 8 if self.dimension == 2 else 4,
                        "line": {"color": colour, "width": 2}},
                name="ground truth" if color else "bodies", legendgroup=color or "bodies",
                showlegend=c == 0, opacity=0.6 if color else 1.0))
        return traces

    def moving(self, xyz: Array) -> list[dict[str, Any]]:
        """Everything that moves, at the positions xyz (points, dimension)."""
        traces = self.bodies(xyz)
        sliders = self.meta.get("sliders", [])
        if sliders:
            traces.append(self._trace(
                xyz[[s["point"] for s in sliders]], mode="markers", name="sliders",
                text=[html_text(s["name"]) for s in sliders], hoverinfo="text",
                marker={"symbol": self.symbols["slider"], "size": 14, "color": "#333333",
                        "line": {"width": 2}}))
        springs = self.meta.get("springs", [])
        if springs:
            paths = [spring_path(*xyz[s["points"]]) if self.dimension == 2
                     else xyz[s["points"]] for s in springs]
            traces.append(self._trace(
                np.vstack([row for p in paths for row in (p, np.full((1, self.dimension),
                                                                   np.nan))]),
                mode="lines", name="springs", hoverinfo="skip",
                line={"color": "#7f7f7f", "width": 2}))
        placed = [s for s, where in self.sensors if where]
        if placed:
            marks = np.array([sensor_point(self.meta, s, xyz) for s in placed])
            traces.append(self._trace(
                marks, mode="markers", name="sensors",
                text=[f"{html_text(s['name'])} ({html_text(s['kind'])})" for s in placed],
                hoverinfo="text", marker={"symbol": self.symbols["sensor"], "size": 14
                                          if self.dimension == 2 else 7, "color": SENSOR,
                                          "line": {"color": "#5c5c10", "width": 1}}))
        return traces

    def fixed(self, xyz: Array, path: Array | None = None,
              path_name: str = "") -> list[dict[str, Any]]:
        """What stays: the fixed points (the ground), slider guides and, given, the whole
        path (K, dimension) of a traced point."""
        traces = []
        ground = [p for p in self.meta["points"] if p["fixed"]]
        if ground:
            traces.append(self._trace(
                xyz[[p["index"] for p in ground]], mode="markers", name="ground",
                text=[f"point {html_text(p['name'])} (fixed)" for p in ground],
                hoverinfo="text", marker={"symbol": self.symbols["ground"], "color": GROUND,
                                          "size": 22 if self.dimension == 2 else 8}))
        for slider in self.meta.get("sliders", []):
            a, b = xyz[slider["line_points"]]
            direction = (b - a) / (np.linalg.norm(b - a) or 1.0)
            traces.append(self._trace(
                np.array([a - 0.3 * self.span * direction, b + 0.3 * self.span * direction]),
                mode="lines", name="slider guide", hoverinfo="skip", showlegend=False,
                line={"color": "#808080", "width": 1.5, "dash": "dash"}))
        if path is not None:
            traces.append(self._trace(path, mode="lines", name=f"path of {html_text(path_name)}",
                                      hoverinfo="skip", line={"color": PATH, "width": 1.5}))
        return traces

    # -- layout ------------------------------------------------------------------------

    def layout(self, title: str, view: View | None) -> dict[str, Any]:
        """Axes at fixed ranges that hold every state (one scale on every axis)."""
        layout: dict[str, Any] = {
            "title": {"text": title, "x": 0.02, "xanchor": "left", "font": {"size": 16}},
            "margin": {"l": 60, "r": 130, "t": 70, "b": 60}, "paper_bgcolor": "white",
            "plot_bgcolor": "white", "hovermode": "closest", "uirevision": "keep",
            "legend": {"x": 1.02, "xanchor": "left", "y": 1.0, "yanchor": "top"}}
        if self.dimension == 3:
            elevation, azimuth = np.radians(view or (25.0, -60.0))
            eye = EYE_DISTANCE * np.array([np.cos(elevation) * np.cos(azimuth),
                                           np.cos(elevation) * np.sin(azimuth),
                                           np.sin(elevation)])
            up = [-np.sin(elevation) * np.cos(azimuth), -np.sin(elevation) * np.sin(azimuth),
                  np.cos(elevation)]  # the screen's up: towards +z, or +y seen from above
            axes = {f"{a}axis": {"range": list(r), "title": {"text": f"{a} [m]"},
                                 "autorange": False}
                    for a, r in zip("xyz", self.limits, strict=True)}
            layout["scene"] = {**axes, "aspectmode": "cube", "camera": {
                "eye": dict(zip("xyz", map(float, eye), strict=True)),
                "up": dict(zip("xyz", map(float, up), strict=True)),
                "center": {"x": 0, "y": 0, "z": 0}, "projection": {"type": "orthographic"}}}
        else:
            grid = {"showgrid": True, "gridcolor": "#e6e6e6", "zeroline": False,
                    "constrain": "domain", "autorange": False}
            layout["xaxis"] = {**grid, "range": list(self.limits[0]),
                               "title": {"text": "x [m]"}}
            layout["yaxis"] = {**grid, "range": list(self.limits[1]),
                               "title": {"text": "y [m]"}, "scaleanchor": "x",
                               "scaleratio": 1}
        return layout

    def unplaced(self) -> str:
        """A line naming the sensors that measure a coordinate, not a place (encoders)."""
        others = [f"{html_text(s['name'])} ({html_text(s['target'])})"
                  for s, where in self.sensors if not where]
        return f"encoders: {', '.join(others)}" if others else ""


def _title(name: str, line: str, extra: str) -> str:
    lines = [f"<b>{html_text(name)}</b>{line}", *([extra] if extra else [])]
    return "<br>".join(lines[:1]) + "".join(f"<br><span style='font-size:12px'>{x}</span>"
                                            for x in lines[1:])


def _html(figure: dict[str, Any], name: str) -> str:
    """The page: Plotly's figure (its JavaScript inside) in a page of its own."""
    import plotly.io

    div = plotly.io.to_html(figure, include_plotlyjs=True, full_html=False, auto_play=False,
                            validate=False, post_script=PLAY_ON_FRAGMENT,
                            default_width="100%", default_height="100%",
                            config={"displaylogo": False, "responsive": True,
                                    "scrollZoom": True})
    return PAGE.format(title=html_text(f"{name} · mbgen"), figure=div)


def draw_figure(mechanism: CompiledMechanism, q: Array, title: str | None = None,
                view: View | None = None) -> dict[str, Any]:
    """Plotly's figure (a dict) of the mechanism at q (n,); ``view``: (elevation, azimuth)
    of a spatial mechanism's camera [degrees]."""
    scene = PageScene(mechanism, q[None])
    xyz = scene.geometry.positions(q)
    layout = scene.layout(_title(title or f"{mechanism.name} at q0", "", scene.unplaced()),
                          view)
    return {"data": [*scene.fixed(xyz), *scene.moving(xyz)], "layout": layout}


def write_page(figure: dict[str, Any], name: str, path: Path) -> None:
    """The figure as one self-contained HTML page, written atomically."""
    atomic_write_text(Path(path), _html(figure, name))


def animation_figure(mechanism: CompiledMechanism, t: Array, q: Array, fps: int = 30,
                     trace: int | None = None, truth: tuple[Array, Array] | None = None,
                     branches: Array | None = None,
                     view: View | None = None) -> dict[str, Any]:
    """Plotly's figure (a dict) of the states q (N, n) at times t (N,), with play, pause and a time
    slider: frames every 1/fps of simulated time, at most :data:`PAGE_FRAMES` (then spread
    evenly), played at the speed of simulated time. ``trace``: a point whose whole path is
    drawn; ``truth`` = (times (M,), states (M, n)), a ground truth drawn in grey beside an
    estimate; ``branches`` (N, B): each assembly branch's probability, in the title."""
    times = frame_times(t, fps, PAGE_FRAMES)
    rows = rows_at(t, times)
    states = q[rows]
    truth_states = None if truth is None else truth[1][rows_at(truth[0], times)]
    every = states if truth_states is None else np.vstack([states, truth_states])
    scene = PageScene(mechanism, every)
    positions = [scene.geometry.positions(x) for x in states]
    traced = None
    if trace is not None:  # at every row, or as many as 20 frames' worth, evenly
        along = rows_at(t, np.linspace(t[0], t[-1], min(len(t), 20 * PAGE_FRAMES)))
        traced = np.array([scene.geometry.positions(x)[trace] for x in q[along]])
    fixed = scene.fixed(positions[0], traced, scene.points[trace] if trace is not None else "")

    def moving(k: int) -> list[dict[str, Any]]:
        found = scene.moving(positions[k])
        if truth_states is not None:
            found += scene.bodies(scene.geometry.positions(truth_states[k]), color=TRUTH)
        return found

    def title(k: int) -> str:
        line = f": t = {times[k]:.3f} s"
        extra = scene.unplaced()
        if branches is not None:
            shares = " · ".join(f"B{b} {p:.2f}" for b, p in enumerate(branches[rows[k]]))
            extra = f"assembly branch probabilities: {shares}" + (
                f"; {extra}" if extra else "")
        return _title(mechanism.name + (" (estimate; ground truth in grey)"
                                        if truth is not None else ""), line, extra)

    first = moving(0)
    indices = list(range(len(fixed), len(fixed) + len(first)))
    frames = [{"name": str(k), "data": moving(k) if k else first, "traces": indices,
               "layout": {"title": {"text": title(k)}}} for k in range(len(times))]
    step_ms = 1000.0 * float(times[1] - times[0]) if len(times) > 1 else 1000.0 / fps
    layout = scene.layout(title(0), view)
    layout["updatemenus"] = [{
        "type": "buttons", "direction": "left", "showactive": False, "x": 0.0, "y": 0.0,
        "xanchor": "left", "yanchor": "top", "pad": {"t": 40, "r": 10},
        "buttons": [
            {"label": "▶ play", "method": "animate",
             "args": [None, {"frame": {"duration": step_ms, "redraw": True},
                             "transition": {"duration": 0}, "fromcurrent": True,
                             "mode": "immediate"}]},
            {"label": "❚❚ pause", "method": "animate",
             "args": [[None], {"frame": {"duration": 0, "redraw": False},
                               "transition": {"duration": 0}, "mode": "immediate"}]}]}]
    layout["sliders"] = [{
        "active": 0, "x": 0.3, "len": 0.7, "y": 0.0, "yanchor": "top", "pad": {"t": 30},
        "currentvalue": {"prefix": "t = ", "suffix": " s", "visible": True},
        "transition": {"duration": 0},
        "steps": [{"label": f"{time:.3f}", "method": "animate",
                   "args": [[str(k)], {"frame": {"duration": 0, "redraw": True},
                                       "transition": {"duration": 0}, "mode": "immediate"}]}
                  for k, time in enumerate(times)]}]
    layout["margin"]["b"] = 110
    return {"data": [*fixed, *first], "layout": layout, "frames": frames}

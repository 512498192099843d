"""The interactive page (`draw`/`animate --out x.html`, mbgen/io/page.py): the figure's
content against the states it shows, its size bound on long runs, and, in Debian's
headless Chromium, a page that opens with the network blocked, shows the bodies where
their points project, plays when its play button is pressed, and shows hostile names as
text that never runs."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SHIPPED, SHIPPED_DIR, mechanism_id
from PIL import Image

from mbgen.cli.main import cli
from mbgen.io.drawing import BODY_COLORS, placed_sensors
from mbgen.io.page import (
    GROUND,
    PAGE_FRAMES,
    SENSOR,
    animation_figure,
    draw_figure,
    write_page,
)
from mbgen.io.tables import write_csv
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.simulation import simulate

Compiled = Callable[[Path], CompiledMechanism]
CHROMIUM = shutil.which("chromium")
browser = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                             "(apt-get install chromium): the page's browser tests need it")
# The brief's headless flags; software WebGL (SwiftShader) for the 3-D scenes, asked for
# by name (Chromium's silent fallback to it is deprecated); every host name resolves to
# nothing and every request goes to a closed proxy: the page must open with no network.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-unsafe-swiftshader", "--host-resolver-rules=MAP * ~NOTFOUND",
         "--proxy-server=127.0.0.1:9", "--window-size=800,600"]


def chromium(page: Path, tmp_path: Path, *args: str, fragment: str = "") -> str:
    """Runs headless Chromium on the page from disk; its stdout."""
    profile = tmp_path / "profile"
    done = subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args,
                           page.resolve().as_uri() + fragment],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def screenshot(page: Path, tmp_path: Path, fragment: str = "",
               budget_ms: int | None = None) -> np.ndarray:
    """The page's screenshot: RGB (rows, columns, 3) as ints."""
    png = tmp_path / f"shot{len(list(tmp_path.glob('shot*')))}.png"
    budget = [f"--virtual-time-budget={budget_ms}"] if budget_ms else []
    chromium(page, tmp_path, f"--screenshot={png}", *budget, fragment=fragment)
    return np.asarray(Image.open(png).convert("RGB"), dtype=int)


def figure_size(dom: str) -> tuple[int, int]:
    """The drawn figure's width and height [px] in a page's DOM (Plotly's main SVG)."""
    found = re.search(r'<svg class="main-svg"[^>]*?width="(\d+)" height="(\d+)"', dom)
    assert found, "no figure in the page"
    return int(found.group(1)), int(found.group(2))


def near(image: np.ndarray, colour: str, tolerance: int = 45) -> np.ndarray:
    """Mask (rows, columns) of the pixels of about that #rrggbb colour."""
    rgb = [int(colour[k:k + 2], 16) for k in (1, 3, 5)]
    return np.all(np.abs(image - rgb) < tolerance, axis=2)


def point(mech: CompiledMechanism, q: np.ndarray, index: int) -> np.ndarray:
    """Point ``index`` at q from its natural coordinates (x<i>, y<i>[, z<i>]), or where
    the file fixes it: independent of the page's geometry."""
    spec = mech.meta["points"][index]
    axes = "xyz"[:int(mech.meta.get("dimension", 2))]
    if spec["fixed"]:
        return np.array([spec[a] for a in axes])
    return np.array([q[mech.coordinate_names.index(f"{a}{index}")] for a in axes])


def furuta_at(mech: CompiledMechanism, theta1: float, theta2: float) -> np.ndarray:
    """The Furuta pendulum's q at these joint angles."""
    guess = mech.q0.copy()
    guess[mech.coordinate_indices(["theta1", "theta2"])] = theta1, theta2
    return mech.solve_position(guess, z=["theta1", "theta2"])


def traces(figure: dict, name: str) -> list[dict]:
    return [t for t in figure["data"] if t.get("name") == name]


def segments(trace: dict, dimension: int) -> list[np.ndarray]:
    """The polylines of a trace (None breaks them), each (points, dimension)."""
    columns = list(zip(*(trace[a] for a in "xyz"[:dimension]), strict=True))
    found, current = [], []
    for row in [*columns, (None,) * dimension]:
        if row[0] is None:
            if current:
                found.append(np.array(current, dtype=float))
            current = []
        else:
            current.append(row)
    return found


@pytest.mark.parametrize("path", SHIPPED, ids=mechanism_id)
def test_every_shipped_mechanism_makes_a_valid_page_figure(compiled: Compiled,
                                                           path: Path) -> None:
    """Each body a polyline through its points (at q0, from the natural coordinates), each
    fixed point on the ground, each placed sensor marked; Plotly's schema accepts it."""
    import plotly.graph_objects as go

    mech = compiled(path)
    meta, dim = mech.meta, int(mech.meta.get("dimension", 2))
    figure = draw_figure(mech, mech.q0)
    go.Figure(figure)  # raises on an attribute Plotly does not have
    drawn = [s for t in traces(figure, "bodies") for s in segments(t, dim)]
    assert len(drawn) == len(meta["bodies"])
    by_colour = [segments(t, dim) for t in traces(figure, "bodies")]
    for k, body in enumerate(meta["bodies"]):
        polyline = by_colour[k % len(BODY_COLORS)][k // len(BODY_COLORS)]
        expected = np.array([point(mech, mech.q0, i) for i in body["points"]])
        for p in expected:  # every point of the body is a vertex, and nothing else is
            assert np.abs(polyline - p).max(axis=1).min() < 1e-5
        for v in polyline:
            assert np.abs(expected - v).max(axis=1).min() < 1e-5
    ground = [p for p in meta["points"] if p["fixed"]]
    (marks,) = traces(figure, "ground")
    assert len(marks["x"]) == len(ground)
    placed = [s for s in placed_sensors(meta) if s["kind"] != "encoder"]  # the rest sit
    assert len(next(iter(traces(figure, "sensors")), {"x": []})["x"]) == len(placed)


def test_a_long_run_is_bounded_and_each_frame_is_its_state(compiled: Compiled,
                                                           tmp_path: Path) -> None:
    """3 s at 120 fps asks 361 frames: the page holds PAGE_FRAMES, evenly from the first
    time to the last, each the run's state at its time; the file embeds plotly.js and
    loads nothing."""
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    run = simulate(mech, 3.0, 1e-3)
    figure = animation_figure(mech, run.t, run.q, fps=120, trace=2)
    frames = figure["frames"]
    assert len(frames) == PAGE_FRAMES < 361
    steps = figure["layout"]["sliders"][0]["steps"]
    times = np.linspace(0.0, 3.0, PAGE_FRAMES)  # evenly, first to last
    assert [s["label"] for s in steps] == [f"{time:.3f}" for time in times]
    for k in (0, 123, PAGE_FRAMES - 1):
        row = min(int(np.searchsorted(run.t, times[k])), len(run.t) - 1)  # at or after
        crank = segments(frames[k]["data"][0], 2)[0]  # body 0, first colour
        np.testing.assert_allclose(crank, [point(mech, run.q[row], 0),
                                           point(mech, run.q[row], 1)], atol=1e-5)
        assert f"t = {times[k]:.3f} s" in frames[k]["layout"]["title"]["text"]
    (path,) = [t for t in figure["data"] if t["name"].startswith("path of")]
    assert len(path["x"]) > PAGE_FRAMES  # drawn whole, from more rows than frames
    page = tmp_path / "run.html"
    write_page(figure, mech.name, page)
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]+src=|<link|<iframe|@import", text)
    assert "Plotly.newPlot" in text and 4e6 < len(text) < 7e6  # plotly.js: 4.8 MB
    assert not list(tmp_path.glob(".*"))  # no temporary file left


def test_draw_and_animate_write_pages(compiled: Compiled, tmp_path: Path,
                                      out_dir: Path) -> None:
    path = SHIPPED_DIR / "fourbar.yaml"
    mech = compiled(path)
    runner = CliRunner()
    result = runner.invoke(cli, ["draw", str(path), "--out", str(tmp_path / "d.html"),
                                 "--build-dir", str(out_dir)])
    assert result.exit_code == 0, result.output
    assert "Plotly.newPlot" in (tmp_path / "d.html").read_text(encoding="utf-8")
    csv_path = tmp_path / "run.csv"
    write_csv(simulate(mech, 0.2, 1e-3), csv_path)
    result = runner.invoke(cli, ["animate", str(csv_path), "--mechanism", str(path), "--out",
                                 str(tmp_path / "a.html"), "--fps", "10", "--build-dir",
                                 str(out_dir)])
    assert result.exit_code == 0 and "3 frames at 10 fps" in result.output, result.output
    for command in (["draw", str(path)], ["animate", str(csv_path), "--mechanism", str(path)]):
        result = runner.invoke(cli, [*command, "--out", str(tmp_path / "b.htm"),
                                     "--build-dir", str(out_dir)])
        assert result.exit_code == 2 and ".html" in result.output, result.output
        result = runner.invoke(cli, [*command, "--out", str(tmp_path / "b.html"), "--view",
                                     "90", "-90", "--build-dir", str(out_dir)])
        assert result.exit_code == 2 and "in its plane" in result.output, result.output
    assert not (tmp_path / "b.htm").exists() and not (tmp_path / "b.html").exists()


@browser
def test_a_planar_page_shows_the_bodies_where_their_points_are(compiled: Compiled,
                                                               tmp_path: Path) -> None:
    """The four-bar at a moved state, drawn in its plane on axes of one scale: every
    body's colour along the segment between its points' pixels (axis ranges and margins
    of the figure, Plotly's equal-scale rule: the tighter axis sets the scale, the other
    is centred), the gyroscope's star at the coupler's middle, the ground's triangles at
    the fixed points; the same check at q0's pixels fails (the test can fail)."""
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    run = simulate(mech, 0.6, 1e-3)
    q = run.q[-1]
    figure = draw_figure(mech, q, title="fourbar at t = 0.6 s")
    page = tmp_path / "fourbar.html"
    write_page(figure, mech.name, page)
    width, height = figure_size(chromium(page, tmp_path, "--dump-dom"))
    image = screenshot(page, tmp_path)
    assert image.shape[1] == width and image.shape[0] >= height
    layout = figure["layout"]
    margin, (x0, x1), (y0, y1) = (layout["margin"], layout["xaxis"]["range"],
                                  layout["yaxis"]["range"])
    plot_w, plot_h = width - margin["l"] - margin["r"], height - margin["t"] - margin["b"]
    scale = min(plot_w / (x1 - x0), plot_h / (y1 - y0))

    def pixel(xy: np.ndarray) -> np.ndarray:
        return np.array([margin["l"] + (plot_w - scale * (x1 - x0)) / 2 + scale * (xy[0] - x0),
                         margin["t"] + (plot_h - scale * (y1 - y0)) / 2 + scale * (y1 - xy[1])])

    def found_along(state: np.ndarray, k: int) -> float:
        """Share of 21 places along body k (its ends' markers left out) that have its
        colour within 3 px."""
        a, b = (pixel(point(mech, state, i)) for i in mech.meta["bodies"][k]["points"])
        mask = near(image, BODY_COLORS[k])
        hits = [mask[int(r) - 3:int(r) + 4, int(c) - 3:int(c) + 4].any()
                for c, r in (a + f * (b - a) for f in np.linspace(0.2, 0.8, 21))]
        return float(np.mean(hits))

    for k in range(len(mech.meta["bodies"])):  # the coupler's middle: under the gyro's star
        assert found_along(q, k) >= 0.9, k
    assert min(found_along(mech.q0, k) for k in range(3)) < 0.5  # elsewhere: not found
    gyro = near(image, SENSOR, 30)
    rows, cols = np.nonzero(gyro)
    star = pixel((point(mech, q, 1) + point(mech, q, 2)) / 2)
    assert np.hypot(cols[cols < width - margin["r"]].mean() - star[0],
                    rows[cols < width - margin["r"]].mean() - star[1]) < 4
    ground = near(image, GROUND, 20)
    for fixed in (0, 3):
        c, r = pixel(point(mech, q, fixed)).astype(int)
        assert ground[r - 12:r + 13, c - 12:c + 13].sum() > 40  # its triangle, around it


@browser
def test_a_spatial_page_shows_the_bodies_as_they_project(compiled: Compiled,
                                                         tmp_path: Path) -> None:
    """The Furuta pendulum at θ1 = 0.6, θ2 = 1.2 seen from above (--view 90 -90; the
    camera is orthographic): each body's pixels lie along its segment's direction in the
    x-y plane, the pendulum beyond the arm, their lengths in the plane's ratio."""
    mech = compiled(SHIPPED_DIR / "furuta.yaml")
    q = furuta_at(mech, 0.6, 1.2)
    figure = draw_figure(mech, q, title="furuta", view=(90.0, -90.0))
    page = tmp_path / "furuta.html"
    write_page(figure, mech.name, page)
    image = screenshot(page, tmp_path)
    image[:, image.shape[1] - figure["layout"]["margin"]["r"]:] = 255  # not the legend
    found = []
    for k in (0, 1):
        rows, cols = np.nonzero(near(image, BODY_COLORS[k]))
        assert len(rows) > 100, "the body is not drawn"
        xy = np.column_stack([cols, -rows]).astype(float)  # screen up = +y
        centre = xy.mean(axis=0)
        direction = np.linalg.eigh(np.cov((xy - centre).T))[1][:, -1]
        found.append((centre, direction, np.ptp((xy - centre) @ direction)))
    o, p, t = (point(mech, q, i)[:2] for i in range(3))

    def angle(v: np.ndarray) -> float:
        return float(np.degrees(np.arctan2(v[1], v[0])))

    for (_, direction, _), segment in zip(found, (p - o, t - p), strict=True):
        assert abs((angle(direction) - angle(segment) + 90) % 180 - 90) < 2.0
    between = found[1][0] - found[0][0]
    assert abs((angle(between) - angle((p + t) / 2 - (o + p) / 2) + 180) % 360 - 180) < 10
    assert found[0][2] / found[1][2] == pytest.approx(np.hypot(*(p - o)) /
                                                      np.hypot(*(t - p)), rel=0.15)


@browser
def test_pressing_play_moves_the_mechanism(compiled: Compiled, tmp_path: Path,
                                           out_dir: Path) -> None:
    """`mbgen animate --out run.html` of a Furuta run: opened, the page holds still (two
    screenshots alike); opened with #play, it presses its play button: the slider's time
    moves on and the screenshot of the 3-D scene differs."""
    path = SHIPPED_DIR / "furuta.yaml"
    mech = compiled(path)
    csv_path = tmp_path / "furuta.csv"
    write_csv(simulate(mech, 2.0, 1e-3, q0=furuta_at(mech, 0.0, 2.5)), csv_path)
    page = tmp_path / "run.html"
    result = CliRunner().invoke(cli, ["animate", str(csv_path), "--mechanism", str(path),
                                      "--out", str(page), "--fps", "30", "--build-dir",
                                      str(out_dir)])
    assert result.exit_code == 0, result.output
    still = [screenshot(page, tmp_path, budget_ms=2000) for _ in range(2)]
    played = screenshot(page, tmp_path, fragment="#play", budget_ms=4000)
    scene = (slice(80, 400), slice(0, 650))  # the 3-D scene, below the title
    assert np.abs(still[0][scene] - still[1][scene]).max() < 60  # anti-aliasing at most
    assert (np.abs(played[scene] - still[0][scene]).max(axis=2) > 60).sum() > 50
    assert near(still[0], BODY_COLORS[0]).sum() > 100 < near(played, BODY_COLORS[0]).sum()
    dom = chromium(page, tmp_path, "--dump-dom", "--virtual-time-budget=4000",
                   fragment="#play")
    current = re.search(r'class="slider-label"[^>]*data-unformatted="t = ([0-9.]+) s"', dom)
    assert current and float(current.group(1)) > 0, "the slider did not move"


@browser
def test_names_are_shown_as_text_and_never_run(compiled: Compiled, tmp_path: Path) -> None:
    """A mechanism, body, point and sensor named like markup that closes the script and
    runs its own: the file never holds it verbatim, the page runs none of it (the DOM
    has no mark of it) and shows it as text."""
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    hostile = ("</script><script>document.documentElement.dataset.pwned = 1</script>"
               "<img src=x onerror=\"document.documentElement.dataset.pwned = 2\">"
               "</title><script>document.documentElement.dataset.pwned = 3</script>")
    meta = copy.deepcopy(mech.meta)
    for item in (*meta["bodies"], *meta["points"], *meta["sensors"]):
        item["name"] = f"{item['name']}{hostile}"
    stub = SimpleNamespace(meta=meta, name=f"four{hostile}", q0=mech.q0,
                           coordinate_names=mech.coordinate_names)
    figure = draw_figure(stub, mech.q0)  # type: ignore[arg-type]  # a mechanism's fields
    page = tmp_path / "hostile.html"
    write_page(figure, stub.name, page)
    text = page.read_text(encoding="utf-8")
    assert hostile not in text and "<script>document.documentElement" not in text
    dom = chromium(page, tmp_path, "--dump-dom", "--virtual-time-budget=2000")
    assert "data-pwned" not in dom and "<img src=\"x\"" not in dom  # never run, ...
    shown = "four&lt;/script&gt;&lt;script&gt;document.documentElement.dataset.pwned"
    assert re.search(f"<tspan[^>]*>{shown}", dom)  # ... drawn as text in the title
    assert re.search(r"<title>four&lt;/script&gt;", dom)

"""Drawings and animations: every shipped mechanism renders with its bodies and ground,
an animation has the frames its duration asks for, and the CLI refuses unusable input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SHIPPED, SHIPPED_DIR, mechanism_id
from PIL import Image

from mbgen.cli.conventions import EXIT_BAD_INPUT
from mbgen.cli.main import cli
from mbgen.io.drawing import animate, draw_png
from mbgen.io.tables import write_csv
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.simulation import simulate

Compiled = Callable[[Path], CompiledMechanism]


def ink(path: Path) -> float:
    """Share of pixels that are not background white."""
    pixels = np.asarray(Image.open(path).convert("L"), dtype=float)
    return float((pixels < 200).mean())


@pytest.mark.parametrize("path", SHIPPED, ids=mechanism_id)
def test_every_shipped_mechanism_draws(compiled: Compiled, tmp_path: Path, path: Path) -> None:
    mech = compiled(path)
    png = tmp_path / "drawing.png"
    drawing = draw_png(mech, mech.q0, png)
    meta = mech.meta
    assert len(drawing.bodies) == len(meta["bodies"]) > 0
    assert len(drawing.ground) == sum(p["fixed"] for p in meta["points"])
    assert len(drawing.sliders) == len(meta["sliders"])
    assert len(drawing.springs) == len(meta["springs"])
    assert len(drawing.labels) == len(meta["points"])
    assert 0.01 < ink(png) < 0.5  # something is drawn, and it is not a black square


def test_animation_has_the_frames_its_duration_asks_for(compiled: Compiled,
                                                        tmp_path: Path) -> None:
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    run = simulate(mech, 0.5, 1e-3)
    frames = animate(mech, run.t, run.q, tmp_path / "run.gif", fps=10, trace=2)
    image = Image.open(tmp_path / "run.gif")
    assert frames == image.n_frames == 6
    first = np.asarray(image.convert("L"))
    image.seek(5)
    assert not np.array_equal(first, np.asarray(image.convert("L")))  # it moves
    assert not list(tmp_path.glob(".*"))  # no temporary file left


def test_draw_and_animate_commands(compiled: Compiled, tmp_path: Path, out_dir: Path) -> None:
    path = SHIPPED_DIR / "fourbar.yaml"
    mech = compiled(path)
    runner = CliRunner()
    result = runner.invoke(cli, ["draw", str(path), "--out", str(tmp_path / "d.png"),
                                 "--q", "y2=1.9", "--build-dir", str(out_dir)])
    assert result.exit_code == 0, result.output
    assert ink(tmp_path / "d.png") > 0.01
    csv_path = tmp_path / "run.csv"
    write_csv(simulate(mech, 0.2, 1e-3), csv_path)
    result = runner.invoke(cli, ["animate", str(csv_path), "--mechanism", str(path), "--out",
                                 str(tmp_path / "a.gif"), "--fps", "10", "--build-dir",
                                 str(out_dir)])
    assert result.exit_code == 0, result.output
    assert Image.open(tmp_path / "a.gif").n_frames == 3
    partial = tmp_path / "partial.csv"
    partial.write_text("t,x1\n0,1\n")
    result = runner.invoke(cli, ["animate", str(partial), "--mechanism", str(path), "--out",
                                 str(tmp_path / "b.gif"), "--build-dir", str(out_dir)])
    assert result.exit_code == EXIT_BAD_INPUT and "partial.csv:1: missing coordinate column(s) " \
        "y1, x2, y2" in " ".join(result.output.split())
    result = runner.invoke(cli, ["animate", str(csv_path), "--mechanism", str(path), "--out",
                                 str(tmp_path / "b.gif"), "--truth", str(partial),
                                 "--build-dir", str(out_dir)])
    assert result.exit_code == EXIT_BAD_INPUT and "partial.csv:1: missing" in result.output
    result = runner.invoke(cli, ["animate", str(csv_path), "--mechanism", str(path), "--out",
                                 str(tmp_path / "b.avi"), "--build-dir", str(out_dir)])
    assert result.exit_code == 2 and "one of .gif, .mp4" in " ".join(result.output.split())
    assert not (tmp_path / "b.gif").exists() and not (tmp_path / "b.avi").exists()


def _panels(fig: object) -> list[object]:
    """The plotting axes of a figure, without its colour bars."""
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]  # type: ignore[attr-defined]


def test_coordinate_plots_have_units_and_grouped_panels(compiled: Compiled,
                                                        tmp_path: Path) -> None:
    """Positions [m] and angles [rad] in their own panels with legends; a 12-bar chain's 24
    coordinates in x and y panels coloured by index, with no legend covering the plot."""
    import matplotlib.pyplot as plt

    from mbgen.io.figures import LEGEND_LIMIT, coordinate_panels, panel_figure
    from mbgen.model.chain import chain_yaml

    mech = compiled(SHIPPED_DIR / "actuated-double-pendulum.yaml")
    run = simulate(mech, 0.02, 1e-3)
    fig = panel_figure(run.t, run.q, run.coordinate_names,
                       coordinate_panels(mech.coordinate_units), "title")
    axes = _panels(fig)
    assert [ax.get_ylabel() for ax in axes] == ["position [m]", "angle [rad]"]
    assert [[text.get_text() for text in ax.get_legend().get_texts()] for ax in axes] == [
        ["x1", "y1", "x2", "y2"], ["theta1", "theta2"]]
    assert axes[-1].get_xlabel() == "t [s]"
    plt.close(fig)

    chain = tmp_path / "chain12.yaml"
    chain.write_text(chain_yaml(12))
    mech = compiled(chain)
    run = simulate(mech, 0.02, 1e-3)
    fig = panel_figure(run.t, run.q, run.coordinate_names,
                       coordinate_panels(mech.coordinate_units), "title")
    axes = _panels(fig)
    assert [ax.get_ylabel() for ax in axes] == ["x [m]", "y [m]"]
    assert [len(ax.lines) for ax in axes] == [12, 12] and LEGEND_LIMIT < 12
    assert all(ax.get_legend() is None for ax in axes)
    assert len(fig.axes) == 4  # one colour bar per panel
    np.testing.assert_array_equal(axes[1].lines[3].get_ydata(), run.q[:, 7])  # y4
    plt.close(fig)


def test_constraint_error_plot_shows_round_off_as_round_off(compiled: Compiled) -> None:
    """The scale spans decades above round-off; a projected run stays under the projection
    tolerance drawn on it, an unprojected explicit Euler run rises far above it."""
    import matplotlib.pyplot as plt

    from mbgen.simulation.plots import constraint_figure

    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    tolerance = mech.options.projection_tol  # a tenth of newton_tol (mbgen.h)
    for integrator, project in (("rk4", "manifold"), ("euler", "none")):
        run = simulate(mech, 0.5, 1e-3, integrator=integrator, project=project)
        fig = constraint_figure(run, "title")
        ax = fig.axes[0]
        levels = [line.get_ydata()[0] for line in ax.lines[1:]]
        roundoff = levels[0]
        low, high = ax.get_ylim()
        assert low < roundoff < tolerance and high >= 1e6 * roundoff
        assert ax.get_yscale() == "log" and "[m², m]" in ax.get_ylabel()
        if project == "manifold":
            # the projection holds max |Φ| of the kept rows to it; ‖Φ‖ is their 2-norm
            assert levels[1] == tolerance
            assert run.constraint_error.max() <= np.sqrt(mech.m) * tolerance
        else:
            assert len(levels) == 1 and run.constraint_error.max() > 100 * tolerance
        plt.close(fig)


def test_a_result_of_another_mechanism_is_refused(compiled: Compiled, tmp_path: Path,
                                                  out_dir: Path) -> None:
    """A spatial run has x1, y1 like a planar four-bar: it drew a wrong movie with a ✓;
    now exit 1, naming the file and the columns the mechanism does not have."""
    mech = compiled(SHIPPED_DIR / "furuta.yaml")
    csv_path = tmp_path / "furuta.csv"
    write_csv(simulate(mech, 0.05, 1e-3), csv_path)
    planar = SHIPPED_DIR / "double-pendulum.yaml"
    result = CliRunner().invoke(cli, ["animate", str(csv_path), "--mechanism", str(planar),
                                      "--out", str(tmp_path / "a.gif"), "--build-dir",
                                      str(out_dir)])
    output = " ".join(result.output.split())
    assert result.exit_code == EXIT_BAD_INPUT, output
    assert "furuta.csv" in output and "z1, z2" in output and "does not have" in output
    assert not (tmp_path / "a.gif").exists()


def test_draw_names_the_option_typed(tmp_path: Path, out_dir: Path) -> None:
    """draw --q th=nan named --q0, an option draw does not have."""
    for q in ("x1=nan", "nope=1"):
        result = CliRunner().invoke(cli, ["draw", str(SHIPPED_DIR / "double-pendulum.yaml"),
                                          "--out", str(tmp_path / "d.png"), "--q", q,
                                          "--build-dir", str(out_dir)])
        assert result.exit_code == 2 and "--q" in result.output, result.output
        assert "--q0" not in result.output


@pytest.mark.parametrize("name", ["fourbar.yaml", "furuta.yaml"])
def test_frames_drawn_on_a_kept_background_match_whole_redraws(compiled: Compiled,
                                                               name: str) -> None:
    """Scene.render draws only what moves (bodies, springs, sensors, trace, the title with
    its time) on a background drawn once: the frame is the picture a whole redraw gives,
    planar and 3-D (benchmarks/animation.py times both)."""
    mech = compiled(SHIPPED_DIR / name)
    run = simulate(mech, 0.3, 1e-3)
    from mbgen.io.drawing import Scene

    rows = np.searchsorted(run.t, [0.0, 0.1, 0.2, 0.3]).clip(0, len(run.t) - 1)
    pictures = []
    for kept in (True, False):
        scene = Scene(mech, [("", run.q[rows])], run.t[rows], 1, None)
        frames = []
        for k in range(len(rows)):
            if kept:
                scene.render(k)
            else:
                scene.frame(k)
                scene.fig.canvas.draw()
            frames.append(np.asarray(scene.fig.canvas.buffer_rgba(), dtype=float).copy())
        assert scene.titles[0].get_text().endswith(f"t = {run.t[rows[-1]]:.3f} s")
        pictures.append(frames)
    for kept, whole in zip(*pictures, strict=True):
        assert np.abs(kept - whole).mean() < 1.0  # of 255: anti-aliasing, 3-D draw order
    assert np.abs(pictures[0][0] - pictures[0][-1]).mean() > 0.01  # it moves

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

from mbgen.cli.main import cli
from mbgen.dynamics import simulate
from mbgen.dynamics.drawing import animate, draw_png
from mbgen.dynamics.output import write_csv
from mbgen.runtime.compiled import CompiledMechanism

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
    assert result.exit_code == 2 and "no column for y1, x2, y2" in " ".join(result.output.split())
    result = runner.invoke(cli, ["animate", str(csv_path), "--mechanism", str(path), "--out",
                                 str(tmp_path / "b.avi"), "--build-dir", str(out_dir)])
    assert result.exit_code == 1 and ".gif or an .mp4" in " ".join(result.output.split())
    assert not (tmp_path / "b.gif").exists() and not (tmp_path / "b.avi").exists()

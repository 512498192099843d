"""`mbgen animate`: milliseconds per frame on the shipped mechanisms, planar and spatial,
drawing only what moves on a background drawn once (mbgen/io/drawing.py's Scene.render)
against redrawing the whole figure every frame (what it did: Matplotlib's writers save
the figure), in the same run; and `mbgen animate` of a 2-million-row CSV over 2 s.

Why: frames of the 3-D files took 0.3 s each (their axes, ticks and panes redrawn);
target ≤ 50 ms a frame. A 2-million-row CSV ran past 60 s, in the reader.

Run: ``.venv/bin/python benchmarks/animation.py``. Writes ``benchmarks/results/animation.json``.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import MECHANISMS, Figure, mbgen_executable, print_table, write_results

import mbgen
from mbgen.io import drawing
from mbgen.simulation import simulate

FPS, SECONDS = 30, 2.0


def per_frame(mech: object, q: np.ndarray, t: np.ndarray, whole: bool, out: Path) -> float:
    """Milliseconds per frame of a GIF of the run (frames at FPS), rendering included."""
    from matplotlib.animation import PillowWriter

    times = drawing.frame_times(t, FPS)
    frames = len(times)
    rows = drawing.rows_at(t, times)
    scene = drawing.Scene(mech, [("", q[rows])], times, None, None)  # type: ignore[arg-type]
    writer = PillowWriter(fps=FPS) if whole else drawing._movie_writer(out, FPS)
    with writer.saving(scene.fig, str(out), dpi=scene.fig.dpi):
        if not whole:
            scene.prepare()
        start = time.perf_counter()
        for k in range(frames):
            if whole:
                scene.frame(k)
            else:
                scene.render(k)
            writer.grab_frame()
        elapsed = time.perf_counter() - start
    return 1000 * elapsed / frames


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="mbgen-bench-animation-"))
    figures = []
    for name in ("fourbar", "furuta", "bricard"):
        mech = mbgen.load(str(MECHANISMS / f"{name}.yaml"), str(work / "build"))
        run = simulate(mech, SECONDS, 1e-3)
        old = per_frame(mech, run.q, run.t, True, work / "old.gif")
        new = per_frame(mech, run.q, run.t, False, work / "new.gif")
        figures += [Figure(f"{name}: a frame, moving artists on a kept background", new,
                           "ms", 50.0, f"{int(SECONDS * FPS) + 1} frames at {FPS} fps"),
                    Figure(f"{name}: a frame, the whole figure redrawn", old, "ms",
                           note=f"{old / new:.1f}× the new time")]
    mech = mbgen.load(str(MECHANISMS / "fourbar.yaml"), str(work / "build"))
    run = simulate(mech, SECONDS, 1e-3)
    rows = 2_000_000
    t = np.linspace(0.0, SECONDS, rows)
    q = np.column_stack([np.interp(t, run.t, run.q[:, k]) for k in range(mech.n)])
    csv = work / "rows.csv"
    with csv.open("w") as out:
        out.write(",".join(["t", *mech.coordinate_names]) + "\n")
        for s in range(0, rows, 200_000):
            block = np.column_stack([t[s:s + 200_000], q[s:s + 200_000]])
            out.write("\n".join(",".join(f"{v:.12g}" for v in r) for r in block.tolist())
                      + "\n")
    start = time.perf_counter()
    subprocess.run([str(mbgen_executable()), "animate", str(csv), "--mechanism",
                    str(MECHANISMS / "fourbar.yaml"), "--out", str(work / "rows.gif"),
                    "--build-dir", str(work / "build")], check=True, capture_output=True,
                   timeout=600)
    figures.append(Figure(f"mbgen animate, {rows:,} rows over {SECONDS:g} s (four-bar)",
                          time.perf_counter() - start, "s", 20.0,
                          f"{int(SECONDS * FPS) + 1} frames; the whole command"))
    print_table("animation", figures)
    print(f"wrote {write_results('animation', figures)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Inverse dynamics of a prescribed motion: wall time of the direct method and of the
staged factor graph, with the accuracy against MSC Adams.

Why these figures: the paper (Blanco-Claraco et al., section 7.2) solves the four-bar's
crank torque for θ = 1.2 (1 − cos 2t) over 10 s (2000 samples) and the pick-and-place
robot's two motor torques (1001 samples) with its staged factor graph in C++: 5.3 s and
15.9 s. mbgen's direct method (kinematics along the path, then the forces, all batched in
C) and its factor graph (the paper's graph and stages over the whole trajectory,
linearized in batched C calls and solved by a banded Levenberg–Marquardt) are timed on
the same inputs (the reference trajectory files), whole calls including the spline
differentiation; the same graph solved by GTSAM in windows of 10 samples is timed with
mbgen's native factors (the GTSAM route's targets of issue 36: 0.5 s and 1.6 s) and once
with the Python callbacks, for comparison. The four-bar's torque is compared with the
Adams table (RMS error over the peak).

Run: ``.venv/bin/python benchmarks/inverse_dynamics.py [--quick]`` (any cwd). Writes
``benchmarks/results/inverse_dynamics.json`` (not with ``--quick``).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from _common import REPO, Figure, best_time, print_table, write_results

import mbgen
from mbgen.factors import native
from mbgen.inverse.direct import inverse_dynamics_direct
from mbgen.inverse.factor_graph import inverse_dynamics_factor_graph
from mbgen.io.trajectory import read_trajectory

DATA = REPO / "tests" / "data" / "reference"
CASES = {  # name: (imposed coordinates, paper's seconds, direct target, graph target)
    "fourbars1-with-rel-angle": ([4], 5.3, 0.05, 0.5),
    "pick-and-place-robot": ([20, 21], 15.9, 0.2, 1.6),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="the first 200 samples only (results not written)")
    args = parser.parse_args(argv)
    figures: list[Figure] = []
    start = time.perf_counter()
    for name, (imposed, paper, direct_target, graph_target) in CASES.items():
        mech = mbgen.load(str(DATA / "config" / "mechanisms" / f"{name}.yaml"))
        path = DATA / "config" / "trajectories" / f"{name}-trajectory.txt"
        trajectory = read_trajectory(Path(path), len(imposed))
        if args.quick:
            from mbgen.io.trajectory import Trajectory

            trajectory = Trajectory(trajectory.t[:200], trajectory.values[:200], path.name)
        samples = len(trajectory.t)
        direct = best_time(lambda m=mech, tr=trajectory, i=imposed:
                           inverse_dynamics_direct(m, tr, i), 5)
        graph = best_time(lambda m=mech, tr=trajectory, i=imposed:
                          inverse_dynamics_factor_graph(m, tr, i), 3)
        graph_result = inverse_dynamics_factor_graph(mech, trajectory, imposed)
        gtsam = best_time(lambda m=mech, tr=trajectory, i=imposed:
                          inverse_dynamics_factor_graph(m, tr, i, solver="gtsam"), 3)
        gtsam_result = inverse_dynamics_factor_graph(mech, trajectory, imposed, solver="gtsam")
        os.environ[native.ENVIRONMENT] = "0"  # the Python callbacks, once
        native.native_module.cache_clear()
        begin = time.perf_counter()
        inverse_dynamics_factor_graph(mech, trajectory, imposed, solver="gtsam")
        python = time.perf_counter() - begin
        os.environ[native.ENVIRONMENT] = "1"
        native.native_module.cache_clear()
        direct_result = inverse_dynamics_direct(mech, trajectory, imposed)
        agreement = _disagreement(graph_result.forces, direct_result.forces)
        figures += [
            Figure(f"{name} ({samples} samples): direct method", direct, "s",
                   None if args.quick else direct_target,
                   f"best of 5; paper's factor graph: {paper} s"),
            Figure(f"{name}: factor graph (staged, batched, banded LM)", graph, "s",
                   None if args.quick else graph_target, f"best of 3; paper: {paper} s"),
            Figure(f"{name}: the same graph by GTSAM, windows of 10, native factors", gtsam,
                   "s", None if args.quick else graph_target,
                   f"best of 3; {gtsam / graph:.1f}× the banded solver's time; forces "
                   f"differ by {_disagreement(gtsam_result.forces, graph_result.forces):.1e} "
                   "% of the peak"),
            Figure(f"{name}: the same graph by GTSAM, Python factors", python, "s",
                   note=f"one run; {python / gtsam:.1f}× the native factors' time"),
            Figure(f"{name}: paper / direct", paper / direct, "×",
                   note="speed-up of the direct method over the paper's C++"),
            Figure(f"{name}: methods' disagreement (RMS / peak)", agreement, "%", 0.1),
        ]
        if name.startswith("fourbars"):
            table = np.loadtxt(DATA / "experiments" / "InverseDynamics_4bars_MSC.tab",
                               comments="%")
            adams = -np.interp(direct_result.t, table[:, 0], table[:, 1])
            for label, result in (("direct", direct_result), ("factor graph", graph_result)):
                rms = np.sqrt(np.mean((result.forces[:, 0] - adams) ** 2))
                figures.append(Figure(f"{name}: {label} torque vs MSC Adams (RMS / peak)",
                                      float(rms / np.abs(adams).max() * 100), "%", 0.05))
    print_table("inverse dynamics of the reference trajectories", figures)
    if args.quick:
        print("--quick: results not written")
        return 0
    path = write_results("inverse_dynamics", figures)
    missed = [f.name for f in figures if f.met is False]
    print(f"wrote {path} ({time.perf_counter() - start:.1f} s)"
          + (f"; targets missed: {', '.join(missed)}" if missed else ""))
    return 0


def _disagreement(forces: np.ndarray, reference: np.ndarray) -> float:
    """The largest RMS difference over the actuators, in % of the reference's peak."""
    peak = np.abs(reference).max(axis=0)
    return float((np.sqrt(np.mean((forces - reference) ** 2, axis=0)) / peak).max() * 100)


if __name__ == "__main__":
    raise SystemExit(main())

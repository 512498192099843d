"""Particle filter: time per step (predict with RK4 + update + resampling when needed).

Why these figures: a filter is real-time when a step costs less than the sensor period
(the paper: 3 ms per step, 50 particles, C++). Every step is a few batched C calls over
all particles, so the cost per particle falls as the batch grows; the issue's target is
10 000 particles in ≤ 3 ms on this 2-core machine.

Run: ``.venv/bin/python benchmarks/pf_speed.py [--quick]``. Writes
``benchmarks/results/pf_speed.json`` (not with ``--quick``).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from _common import MECHANISMS, REPO, Figure, best_time, print_table, write_results

import mbgen
from mbgen.estimation.particle_filter import ParticleFilter

CASES = ((50, 20), (1_000, 10), (10_000, 3), (100_000, 2))  # particles, steps timed
TARGET_10K_MS = 3.0


def fourbar_with_gyro() -> Path:
    text = (REPO / "tests" / "data" / "reference" / "config" / "mechanisms" /
            "fourbars1.yaml").read_text()
    path = Path(tempfile.mkdtemp()) / "fourbar_gyro.yaml"
    path.write_text(text + "sensors:\n  - {type: gyroscope, body: 2, name: rocker_gyro}\n")
    return path


def per_step(mech: mbgen.runtime.compiled.CompiledMechanism, particles: int,
             steps: int, reading: list[float]) -> float:
    # pool=1: the steady state, M particles per step (the default pooled initial belief
    # starts with 20 M until the readings let it come down)
    observer = ParticleFilter(mech, particles=particles, seed=0, pool=1)
    observer.step(1e-3, reading)  # warm up
    assert len(observer.q) == particles
    return best_time(lambda: observer.step(1e-3, reading), 3, steps) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    cases = CASES[:2] if args.quick else CASES
    fourbar = mbgen.load(str(fourbar_with_gyro()))
    figures = []
    for particles, steps in cases:
        ms = per_step(fourbar, particles, steps, [0.1])
        figures.append(Figure(f"four-bar, {particles} particles", ms, "ms/step",
                              TARGET_10K_MS if particles == 10_000 else None,
                              f"{ms * 1e3 / particles:.2f} µs per particle"))
    robot = mbgen.load(str(MECHANISMS / "pick-and-place-robot.yaml"))
    ms = per_step(robot, 1_000, 3, [np.nan] * len(robot.sensor_labels))
    figures.append(Figure("pick-and-place robot, 1000 particles", ms, "ms/step",
                          note="prediction only (no reading)"))
    print_table("particle filter: time per step", figures)
    if not args.quick:
        print(f"wrote {write_results('pf_speed', figures)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Particle filter: time per step (predict with RK4 + update + resampling when needed).

Why these figures: a filter is real-time when a step costs less than the sensor period
(the paper: 3 ms per step, 50 particles, C++). The prediction of all particles is one
batched C call (split across the cores), the update one more, so the cost per particle
falls as the batch grows; the issue's target is 10 000 particles in ≤ 3 ms on this
2-core machine. Timed while tracking (the four-bar falling from q0, its gyroscope read
every step), after a warm-up: the best and the median step. 10 000 particles are timed on
one thread too (``MBGEN_THREADS=1``): this shared machine's second core comes and goes,
and that figure tells a slow machine from a slower filter.

Run: ``.venv/bin/python benchmarks/pf_speed.py [--quick]``. Writes
``benchmarks/results/pf_speed.json`` (not with ``--quick``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from _common import MECHANISMS, REPO, Figure, best_time, print_table, write_results

import mbgen
from mbgen.estimation.branches import sample_configurations
from mbgen.estimation.particle_filter import ParticleFilter
from mbgen.simulation import simulate

CASES = ((50, 200), (1_000, 100), (10_000, 100), (100_000, 10))  # particles, steps timed
DT, WARM_UP = 1e-3, 30
TARGET_10K_MS = 3.0
T = TypeVar("T")


def fourbar_with_gyro() -> Path:
    text = (REPO / "tests" / "data" / "reference" / "config" / "mechanisms" /
            "fourbars1.yaml").read_text()
    path = Path(tempfile.mkdtemp()) / "fourbar_gyro.yaml"
    path.write_text(text + "sensors:\n  - {type: gyroscope, body: 2, name: rocker_gyro}\n")
    return path


def per_step(mech: mbgen.runtime.compiled.CompiledMechanism, particles: int,
             steps: int, readings: np.ndarray) -> tuple[float, float]:
    """Best and median time [ms] of one step while tracking: a belief near the truth's
    start, WARM_UP steps along its readings (rows of ``readings``, NaN: none), then steps
    timed."""
    # pool=1: the steady state, M particles per step (the default pooled initial belief
    # starts with 20 M until the readings let it come down)
    observer = ParticleFilter(mech, particles=particles, seed=0, pool=1, spread=0.02,
                              speed=0.1, sigma_s=np.radians(1.0))
    for k in range(WARM_UP):
        observer.step(DT, readings[k])
    assert len(observer.q) == particles
    times = []
    for k in range(WARM_UP, WARM_UP + steps):
        began = time.perf_counter()
        observer.step(DT, readings[k])
        times.append(time.perf_counter() - began)
    return min(times) * 1e3, float(np.median(times)) * 1e3


def one_thread(measure: Callable[..., T], *args: Any) -> T:
    """measure(*args) with batches kept on one thread (MBGEN_THREADS=1): the work of one core,
    which the machine's noise touches less than the second core's share."""
    os.environ["MBGEN_THREADS"] = "1"
    try:
        return measure(*args)
    finally:
        del os.environ["MBGEN_THREADS"]


def separate_calls_predict(mech: mbgen.runtime.compiled.CompiledMechanism, q: np.ndarray,
                           qd: np.ndarray, noise: np.ndarray, dt: float) -> None:
    """The baseline: the same RK4 step from the runtime's separate batched calls (four
    forward dynamics, the position and velocity projections), as the filter did before
    its prediction moved into one C call. noise: (M, n) on q̈."""
    def acceleration(x: np.ndarray, v: np.ndarray) -> np.ndarray:
        return mech.forward_dynamics(x, v, errors="status")[0] + noise

    k1 = acceleration(q, qd)
    k2 = acceleration(q + 0.5 * dt * qd, qd + 0.5 * dt * k1)
    k3 = acceleration(q + 0.5 * dt * (qd + 0.5 * dt * k1), qd + 0.5 * dt * k2)
    k4 = acceleration(q + dt * (qd + 0.5 * dt * k2), qd + dt * k3)
    q1 = q + dt * qd + dt * dt / 6 * (k1 + k2 + k3)
    q1, _ = mech.solve_position(q1, minimum_norm=True, errors="status")
    mech.project_velocity(q1, qd + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4), errors="status")


def prediction_alone(mech: mbgen.runtime.compiled.CompiledMechanism, count: int,
                     ) -> tuple[float, float]:
    """Best times [ms] of one prediction of ``count`` particles spread over the four-bar's
    configurations: the C call, and the baseline of separate calls."""
    rng = np.random.default_rng(0)
    q = sample_configurations(mech, count, rng)
    qd = mech.project_velocity(q, rng.uniform(-1.0, 1.0, q.shape))
    noise = rng.normal(size=(len(q), mech.dof))
    fused = best_time(lambda: mech.predict_particles(q.copy(), qd.copy(), noise, DT), 5)
    separate = best_time(lambda: separate_calls_predict(mech, q, qd, np.zeros_like(q), DT),
                         5)
    return fused * 1e3, separate * 1e3


def gyro_readings(mech: mbgen.runtime.compiled.CompiledMechanism, count: int) -> np.ndarray:
    """(count, sensors): the four-bar falling from q0, its gyroscope with σ = 0.3 deg/s."""
    truth = simulate(mech, DT * count, DT)
    noise = np.radians(0.3) * np.random.default_rng(0).standard_normal((count, 1))
    return mech.sensors(truth.q[:count], truth.qd[:count]) + noise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    cases = CASES[:2] if args.quick else CASES
    fourbar = mbgen.load(str(fourbar_with_gyro()))
    readings = gyro_readings(fourbar, WARM_UP + max(steps for _, steps in cases))
    figures = []
    for particles, steps in cases:
        best, median = per_step(fourbar, particles, steps, readings)
        figures.append(Figure(f"four-bar, {particles} particles", best, "ms/step",
                              TARGET_10K_MS if particles == 10_000 else None,
                              f"{best * 1e3 / particles:.2f} µs per particle; median "
                              f"{median:.3g} ms"))
        if particles == 10_000:
            alone, _ = one_thread(per_step, fourbar, particles, steps, readings)
            figures.append(Figure("four-bar, 10000 particles, one thread", alone, "ms/step",
                                  note=f"two threads {alone / best:.2f}x faster in this run"))
    fused, separate = prediction_alone(fourbar, 10_000)
    figures.append(Figure("four-bar, prediction of 10 000 particles, one C call", fused,
                          "ms", note=f"{separate / fused:.1f}x faster than the same RK4 "
                          f"from separate batched calls ({separate:.3g} ms, same run)"))
    robot = mbgen.load(str(MECHANISMS / "pick-and-place-robot.yaml"))
    silent = np.full((WARM_UP + 10, len(robot.sensor_labels)), np.nan)
    best, median = per_step(robot, 1_000, 10, silent)
    figures.append(Figure("pick-and-place robot, 1000 particles", best, "ms/step",
                          note=f"prediction only (no reading); median {median:.3g} ms"))
    print_table("particle filter: time per step", figures)
    if not args.quick:
        print(f"wrote {write_results('pf_speed', figures)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

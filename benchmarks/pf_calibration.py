"""Particle filter: can a user act on the branch probability it reports?

Why these figures: the estimators issue's first target. At the filter's default settings,
over ≥ 200 seeded runs per set-up (both branches), a wrong assembly branch may reach
P ≥ 0.99 at some reading in at most 1 % of runs, and the true branch must reach 0.99
within 1.5 times the readings that a near-exact posterior (500 000 initial particles,
10 000 kept; the default filter: 100 000 and 1 000) needs on the same readings (median
over runs).

Set-ups:
- **prototype**: ``benchmarks/pf_prototype.py``'s simulated prototype four-bar released
  from a raised crank, a gyroscope on the longest bar read every 6 ms (σr = 0.3 deg/s),
  filter steps of 3 ms, σa = 4 m/s², σs = 1 deg/s;
- **shipped four-bar**: ``mechanisms/fourbar.yaml`` released from rest at a random
  configuration of the branch, its coupler gyroscope read every 2 ms with the file's
  noise (1 deg/s), filter steps of 2 ms, σa = 1, the file's σs.

- **four-bar, truth from the prior**: as the shipped four-bar, but each truth is drawn
  from the filter's own model: a configuration of the branch as the belief draws them, a
  velocity from the belief's prior (Gaussian on the tangent space, speed²/3), and the
  filter's prediction with its acceleration noise σa at every step. Here the model is
  right, so an exact posterior would put a wrong branch at 0.99 in at most 1/99 of the
  runs (Ville's inequality for the likelihood ratio); the other set-ups' truths start at
  rest under a belief whose velocities span ±1 rad/s, and have no process noise.

Each run follows 80 readings (prototype) or 150 (four-bar). The default filter and the
near-exact one see the same readings. ``pf_calibration.png``: the calibration curve,
the claimed probability of branch 0 against how often the truth was branch 0, per set-up.

Run: ``.venv/bin/python benchmarks/pf_calibration.py [--runs N] [--checkpoint DIR]``
(default 200 per set-up; --quick: 20). Writes ``benchmarks/results/pf_calibration.json``
and the PNG. The full run takes about two hours: with ``--checkpoint DIR`` each set-up's
results are kept in DIR as it finishes, and a rerun picks up the set-ups found there.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.progress import track

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MECHANISMS, RESULTS, Figure, fresh_dir, print_table, write_results
from pf_prototype import prototype_file, speed_bound

import mbgen
from mbgen.estimation.branches import Branches, find_branches
from mbgen.estimation.particle_filter import ParticleFilter
from mbgen.simulation import simulate

PROBABILITY = 0.99
EXACT_PARTICLES, EXACT_POOL = 10_000, 50  # 500 000 initial particles (the default: 100 000)
BINS = np.array([0.0, 0.01, 0.05, 0.2, 0.4, 0.6, 0.8, 0.95, 0.99, 1.0 + 1e-12])


@dataclass(frozen=True)
class SetUp:
    name: str
    path: Path
    sensor_period: float
    filter_period: float
    sigma_a: float
    sigma_s: float | None  # None: the file's
    sigma_r: float  # the readings' true noise
    readings: int
    release_raised: bool  # the prototype's release from a raised crank
    speed: float | None = None  # the belief's speed bound (None: the filter's default)
    from_prior: bool = False  # the truth drawn from the filter's own model


@dataclass(frozen=True)
class Truth:
    q: np.ndarray
    qd: np.ndarray


def truth_from_prior(mech, branches: Branches, setup: SetUp, branch: int,
                     rng: np.random.Generator) -> Truth:
    """A truth from the filter's model: the belief's configuration and velocity prior, then
    its prediction (the same C call) with acceleration noise σa at every step."""
    start = branches.samples[branches.label == branch]
    q0 = start[rng.integers(len(start))]
    tangent = mech.project_velocity(q0, rng.standard_normal(mech.n))
    speed = setup.speed if setup.speed is not None else inspect.signature(
        ParticleFilter).parameters["speed"].default
    qd0 = tangent / np.linalg.norm(tangent) * rng.standard_normal() * speed / np.sqrt(3.0)
    q, qd = q0[None].copy(), mech.project_velocity(q0, qd0)[None].copy()
    path_q, path_qd = [q[0].copy()], [qd[0].copy()]
    for _ in range(round(setup.sensor_period / setup.filter_period) * setup.readings):
        noise = rng.normal(0.0, setup.sigma_a, (1, mech.dof))
        if mech.predict_particles(q, qd, noise, setup.filter_period).any():
            raise RuntimeError("the truth's prediction failed")
        path_q.append(q[0].copy())
        path_qd.append(qd[0].copy())
    return Truth(np.array(path_q), np.array(path_qd))


def truth_run(mech, branches: Branches, setup: SetUp, branch: int, rng: np.random.Generator):
    if setup.from_prior:
        return truth_from_prior(mech, branches, setup, branch, rng)
    start = branches.samples[branches.label == branch]
    if setup.release_raised:
        crank = np.arctan2(start[:, 1], start[:, 0])
        start = start[np.abs(crank - rng.uniform(0.0, np.pi)) < 0.2]
    span = setup.sensor_period * (setup.readings + 1)
    return simulate(mech, span, setup.filter_period, q0=start[rng.integers(len(start))])


def follow(observer: ParticleFilter, readings: np.ndarray, every: int, period: float,
           ) -> np.ndarray:
    """The probability of every branch after each reading (readings, branches): a reading
    every ``every`` filter steps of ``period``."""
    claimed = []
    for k in range(every * (len(readings) - 1) + 1):
        reading = [readings[k // every]] if k % every == 0 else None
        estimate = (observer.estimate(observer.update(reading)) if k == 0
                    else observer.step(period, reading))
        if reading is not None:
            claimed.append(estimate.branch_probability)
    return np.array(claimed)


def make_filter(mech, setup: SetUp, branches: Branches, seed: int, exact: bool,
                ) -> ParticleFilter:
    options = {"particles": EXACT_PARTICLES, "pool": EXACT_POOL} if exact else {}
    if setup.speed is not None:
        options["speed"] = setup.speed
    return ParticleFilter(mech, sigma_a=setup.sigma_a, sigma_s=setup.sigma_s, seed=seed,
                          branches=branches, **options)


def first_above(probability: np.ndarray) -> int | None:
    above = np.flatnonzero(probability >= PROBABILITY)
    return int(above[0]) + 1 if above.size else None


def run_setup(setup: SetUp, runs: int) -> tuple[list[Figure], dict]:
    mech = mbgen.load(setup.path, out_dir=fresh_dir("mbgen-pfcal-"))
    if setup.release_raised:
        setup = SetUp(**{**setup.__dict__, "speed": speed_bound(mech)})
    branches = find_branches(mech)
    every = round(setup.sensor_period / setup.filter_period)
    wrong, exact_wrong, default_needs, exact_needs, claims, truths = 0, 0, [], [], [], []
    for seed in track(range(runs), description=setup.name):
        branch = seed % branches.count
        rng = np.random.default_rng(10_000 + seed)
        truth = truth_run(mech, branches, setup, branch, rng)
        clean = mech.sensors(truth.q, truth.qd)[::every, 0][:setup.readings]
        readings = clean + setup.sigma_r * rng.standard_normal(len(clean))
        default = follow(make_filter(mech, setup, branches, seed, False), readings, every,
                         setup.filter_period)
        exact = follow(make_filter(mech, setup, branches, seed, True), readings, every,
                       setup.filter_period)
        wrong += bool((np.delete(default, branch, axis=1) >= PROBABILITY).any())
        exact_wrong += bool((np.delete(exact, branch, axis=1) >= PROBABILITY).any())
        default_needs.append(first_above(default[:, branch]))
        exact_needs.append(first_above(exact[:, branch]))
        claims.append(default[:, 0])
        truths.append(np.full(len(default), branch == 0))
    both = [(d, e) for d, e in zip(default_needs, exact_needs, strict=True)
            if d is not None and e is not None]
    ratio = float(np.median([d for d, _ in both]) / np.median([e for _, e in both])) \
        if both else float("nan")
    figures = [
        Figure(f"{setup.name}: runs where a wrong branch reached {PROBABILITY}",
               100.0 * wrong / runs, "per 100 runs", 1.0, f"{wrong} of {runs}; the "
               f"near-exact posterior: {exact_wrong}"),
        Figure(f"{setup.name}: readings to {PROBABILITY}, default / near-exact (medians)",
               ratio, "", 1.5, f"default median "
               f"{np.median([d for d, _ in both]) if both else float('nan'):g}, near-exact "
               f"{np.median([e for _, e in both]) if both else float('nan'):g}; default "
               f"never within {setup.readings}: {default_needs.count(None)}, near-exact: "
               f"{exact_needs.count(None)}")]
    raw = {"default_readings": default_needs, "exact_readings": exact_needs}
    return figures, {"raw": raw, "claims": np.concatenate(claims),
                     "truths": np.concatenate(truths)}


def finished_setup(setup: SetUp, runs: int, checkpoint: Path | None) -> tuple[list[Figure], dict]:
    """``run_setup``, or its results kept in ``checkpoint`` by an earlier run of as many runs."""
    if checkpoint is None:
        return run_setup(setup, runs)
    kept = checkpoint / f"{setup.name.replace(' ', '_').replace(',', '')}-{runs}.json"
    if kept.exists():
        print(f"{setup.name}: results of {kept}")
        saved = json.loads(kept.read_text())
        return [Figure(**f) for f in saved["figures"]], {
            "raw": saved["raw"], "claims": np.array(saved["claims"]),
            "truths": np.array(saved["truths"], dtype=bool)}
    figures, data = run_setup(setup, runs)
    checkpoint.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps({
        "figures": [f.__dict__ for f in figures], "raw": data["raw"],
        "claims": data["claims"].tolist(), "truths": data["truths"].tolist()}))
    return figures, data


def calibration_png(curves: dict[str, tuple[np.ndarray, np.ndarray]]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 6))
    ax.plot([0, 1], [0, 1], color="0.6", ls="--", label="calibrated")
    for name, (claims, truths) in curves.items():
        index = np.digitize(claims, BINS) - 1
        centres, observed, counts = [], [], []
        for b in range(len(BINS) - 1):
            chosen = index == b
            if chosen.sum():
                centres.append(float(claims[chosen].mean()))
                observed.append(float(truths[chosen].mean()))
                counts.append(int(chosen.sum()))
        ax.plot(centres, observed, "o-", label=name)
    ax.set(xlabel="claimed probability of branch 0", ylabel="observed frequency of branch 0",
           title="particle filter at its defaults: calibration", xlim=(0, 1), ylim=(0, 1))
    ax.legend()
    ax.grid(alpha=0.3)
    target = RESULTS / "pf_calibration.png"
    fig.savefig(target, dpi=100)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="directory keeping each finished set-up's results")
    args = parser.parse_args()
    runs = 20 if args.quick else args.runs
    setups = [
        SetUp("prototype", prototype_file(), 6e-3, 3e-3, 4.0, np.radians(1.0),
              np.radians(0.3), 80, True),
        SetUp("shipped four-bar", MECHANISMS / "fourbar.yaml", 2e-3, 2e-3, 1.0, None,
              np.radians(1.0), 150, False),
        SetUp("four-bar, truth from the prior", MECHANISMS / "fourbar.yaml", 2e-3, 2e-3,
              1.0, None, np.radians(1.0), 150, False, from_prior=True),
    ]
    began = time.perf_counter()
    figures, extra, curves = [], {}, {}
    for setup in setups:
        found, data = finished_setup(setup, runs, args.checkpoint)
        figures += found
        extra[setup.name] = data["raw"]
        curves[setup.name] = (data["claims"], data["truths"])
    png = calibration_png(curves)
    print_table(f"particle-filter calibration, {runs} runs per set-up, "
                f"{time.perf_counter() - began:.0f} s", figures)
    print(f"wrote {write_results('pf_calibration', figures, {'runs': runs, **extra})}, {png}")


if __name__ == "__main__":
    main()

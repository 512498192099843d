"""Identification's honesty: are the reported standard deviations the real spread, and
does a stiff compliance still give a trusted answer or an honest "not converged"?

Why these figures: the estimators issue asks that, over ≥ 50 synthetic noisy data sets
from a known truth, the reported σ match the observed spread of the estimates within
±30 %, and that stiff compliance never crash nor report convergence it does not have.

Set-up: ``mechanisms/actuated-double-pendulum.yaml`` driven by the identification
benchmark's command, RK4 at 1 ms (a model the identification does not share), encoders
at 100 Hz with Gaussian noise of 1e-4 rad (the file's stated noise), 4 s of data.

- **σ calibration**: 50 noise realisations (seeds 0..49); identified: the inertias, the
  viscous and dry frictions and the motor gain (masses, offsets, tilt and encoder offset
  known), from 10 % off, with the identification benchmark's settings (two midpoint
  steps per sample, impulse noise 2e-5). Per parameter: the ratio of the estimates'
  standard deviation to the mean reported σ (target 0.7 ≤ ratio ≤ 1.3, shown as
  |ratio − 1| ≤ 0.3), and the bias of the mean estimate in reported σ.
- **Compliance**: the inertias and centre-of-mass offsets free (masses known), 30 % off,
  at the compliances 1e-5, 1e-7 and 1e-9: converged or not, and the largest distance to
  the truth in reported σ.

Run: ``.venv/bin/python benchmarks/identification_sigma.py [--quick]`` (--quick: 12 data
sets). Writes ``benchmarks/results/identification_sigma.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from rich.progress import Progress

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MECHANISMS, Figure, fresh_dir, print_table, write_results
from identification import recording

import mbgen
from mbgen.estimation.identify import Recording, Settings, identify

CALIBRATED = ["I1", "I2", "b1", "b2", "c1", "c2", "K"]
NOISE = 1e-4
SETTINGS = {"substeps": 2, "impulse_noise": 2e-5, "coordinates": "dependent",
            "step_check": False}  # the σ of the noise alone, in the paper's coordinates


def noisy(clean: Recording, seed: int) -> Recording:
    rng = np.random.default_rng(seed)
    return Recording(clean.t, clean.readings + NOISE * rng.normal(size=clean.readings.shape),
                     clean.commands)


def calibration(mech, clean: Recording, sets: int) -> list[Figure]:
    truth = np.array([mech.parameters[n] for n in CALIBRATED])
    start = {n: 1.1 * v for n, v in zip(CALIBRATED, truth, strict=True)}
    values, sigmas, trusted = [], [], 0
    with Progress() as bar:
        task = bar.add_task("data sets", total=sets)
        for seed in range(sets):
            result = identify(mech, noisy(clean, seed), CALIBRATED, initial=start,
                              settings=Settings(**SETTINGS))
            trusted += result.trusted
            values.append(result.values)
            sigmas.append(result.std)
            bar.advance(task)
    values, sigmas = np.array(values), np.array(sigmas)
    spread = values.std(axis=0, ddof=1)
    reported = sigmas.mean(axis=0)
    bias = (values.mean(axis=0) - truth) / reported
    figures = [Figure("trusted runs", float(trusted), f"of {sets}", None, "converged, "
                      "determined, possible")]
    for name, s, r, b in zip(CALIBRATED, spread, reported, bias, strict=True):
        figures.append(Figure(f"{name}: |observed spread / reported σ − 1|",
                              float(abs(s / r - 1)),
                              "", 0.3, f"ratio {s / r:.3f}; mean estimate {b:+.2f} σ from "
                              "the truth"))
    return figures


def compliance(mech, clean: Recording) -> list[Figure]:
    names = ["I1", "I2", "a1", "a2"]
    truth = np.array([mech.parameters[n] for n in names])
    start = {n: 1.3 * v for n, v in zip(names, truth, strict=True)}
    figures = []
    for eps in (1e-5, 1e-7, 1e-9):
        begin = time.perf_counter()
        result = identify(mech, clean, names, initial=start,
                          settings=Settings(compliance=eps, **SETTINGS))
        worst = float(np.max(np.abs(result.values - truth) / result.std))
        figures.append(Figure(f"compliance {eps:g}: largest distance to the truth", worst,
                              "σ", None, f"{'converged' if result.converged else 'NOT converged'}"
                              f" ({result.message}), {time.perf_counter() - begin:.1f} s"))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    mech = mbgen.load(MECHANISMS / "actuated-double-pendulum.yaml",
                      out_dir=fresh_dir("mbgen-idsigma-"))
    clean = recording(mech, 4.0, gaussian=0.0)
    figures = calibration(mech, clean, 12 if args.quick else 50)
    figures += compliance(mech, noisy(clean, 1000))
    print_table("identification: reported σ against the observed spread", figures)
    write_results("identification_sigma", figures, {"quick": args.quick})


if __name__ == "__main__":
    main()

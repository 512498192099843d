"""Joint state and parameter identification of the Furuta pendulum, in 3-D.

Why these figures: issue 33's "identification of the real thing": the 13 parameters of
seed paper 004's Furuta pendulum (inertial, viscous and dry friction, gravity tilt, motor
gain, encoder offset) identified by ``mbgen identify``'s method on the spatial model
``mechanisms/furuta.yaml`` (17 natural coordinates, 15 constraints), from data of an
independent model: the pendulum's closed-form equations of motion (Cazzolato & Prime
2011, with tilted gravity, viscous and smoothed dry friction: ``tests/independent.py``,
against which ``tests/test_spatial.py`` checks mbgen's accelerations), integrated by SciPy's Radau
to 1e-11, sampled at 100 Hz and rounded to 16-bit encoder counts. A motor command of
four sines drives the arm from rest, hanging down; the slowest spins it up to 7 rad/s,
slows it almost to rest and spins it up again (35 rad in 10 s), and at its speed the
viscous friction (1e-4 N·m·s) is 0.7 mN·m against the dry friction's 4 (with the three
others alone, 2.5 rad/s at most, b1 had σ 41 %). Targets, as for the
planar stand-in (``benchmarks/identification.py``): each parameter within 2 % of the
truth, within 3 linearized standard deviations, in at most 10 s.

The method: ``identify`` in independent coordinates (``--coordinates independent``: the
states are the joint angles and their rates, exactly on the constraints). For
comparison the same data in dependent coordinates (the paper's, 17 coordinates held on
15 constraints by a compliance of 1e-5): the compliance's give biases the arm's friction
there (context rows).

The 13: masses m1, m2 and centre-of-mass distances l1, l2 (priors of 0.5 %, weighed and
balanced, since encoder data cannot fix the overall scale of inertia, friction and gain
nor separate a mass from its offset), the inertias across the arm and the pendulum J1p,
J2p, viscous b1, b2 and dry friction c1, c2, the motor gain K, the gravity tilt and the
second encoder's offset. They start 30 % off (tilt and offset from 0.7 of their value).
``identification_furuta_fit.png``: measured and fitted encoder readings.

Run: ``.venv/bin/python benchmarks/identification_furuta.py [--quick]``. Writes
``benchmarks/results/identification_furuta.json`` and the PNG beside it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy.integrate import solve_ivp

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _common import (
    MECHANISMS,
    Figure,
    fresh_dir,
    parameter_figures,
    plot_fit,
    print_table,
    write_results,
)
from independent import furuta_acceleration

import mbgen
from mbgen.estimation.identify import Recording, Settings, identify

NAMES = ["m1", "m2", "l1", "l2", "J1p", "J2p", "b1", "b2", "c1", "c2", "K", "tilt",
         "offset2"]
WEIGHED = ("m1", "m2", "l1", "l2")
TRUTH = {"c1": 4e-3, "c2": 5e-4, "K": 0.9, "tilt": 0.02, "offset2": 0.01}
COUNT = 2 * np.pi / 2**16  # a 16-bit encoder's count [rad]
EVERY = 0.01  # sample period [s]
IMPULSE_NOISE = 2e-5
SUBSTEPS = 2


def command(t: np.ndarray) -> np.ndarray:
    return (0.1 * np.sin(2 * np.pi * 0.15 * t) + 0.15 * np.sin(2 * np.pi * 0.6 * t)
            + 0.1 * np.sin(2 * np.pi * 1.7 * t + 1.0) + 0.05 * np.sin(2 * np.pi * 3.1 * t + 2.0))


def recording(p: dict[str, float], seconds: float) -> tuple[Recording, np.ndarray]:
    """100 Hz encoder readings (16-bit counts) of the closed form, and the true angles."""
    t = np.arange(int(round(seconds / EVERY)) + 1) * EVERY

    def rhs(time: float, x: np.ndarray) -> np.ndarray:
        return np.concatenate([x[2:], furuta_acceleration(p, x[:2], x[2:], float(command(time)))])

    run = solve_ivp(rhs, (0.0, t[-1]), np.zeros(4), method="Radau", t_eval=t, rtol=1e-11,
                    atol=1e-12)
    theta = run.y[:2].T
    clean = theta + np.array([0.0, p["offset2"]])
    readings = np.round(clean / COUNT) * COUNT
    return Recording(t, readings, command(t)[:, None]), theta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 s of data instead of 10")
    args = parser.parse_args()
    out = fresh_dir("identification-furuta")
    mech = mbgen.load(str(MECHANISMS / "furuta.yaml"), out_dir=str(out))
    mech.set_parameters(**TRUTH)
    truth = dict(mech.parameters)
    start = time.perf_counter()
    data, theta = recording(truth, 4.0 if args.quick else 10.0)
    simulated = time.perf_counter() - start
    rng = np.random.default_rng(1)
    initial = {n: truth[n] * (0.7 if n in ("tilt", "offset2")
                              else 1 + 0.3 * rng.choice([-1, 1])) for n in NAMES}
    priors = {n: (truth[n] * (1 + 0.005 * rng.normal()), 0.005 * truth[n]) for n in WEIGHED}
    bounds = {n: (0.0, np.inf) for n in NAMES if n not in ("tilt", "offset2")}
    start = time.perf_counter()
    result = identify(mech, data, NAMES, initial=initial, bounds=bounds, priors=priors,
                      settings=Settings(coordinates="independent", impulse_noise=IMPULSE_NOISE,
                                        substeps=SUBSTEPS, step_check=False))
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    dependent = identify(mech, data, NAMES, initial=initial, bounds=bounds, priors=priors,
                         settings=Settings(coordinates="dependent", step_check=False,
                                           impulse_noise=IMPULSE_NOISE, substeps=SUBSTEPS))
    dependent_seconds = time.perf_counter() - start
    errors = np.abs(dependent.values / np.array([truth[n] for n in NAMES]) - 1)
    figures = [Figure("wall time, 13 parameters", seconds, "s", 10.0,
                      f"{result.iterations} iterations, {len(result.t)} states"
                      + ("" if result.converged else ", NOT converged")),
               Figure("swing of the pendulum in the data", float(np.ptp(theta[:, 1])), "rad",
                      note=f"arm {float(np.ptp(theta[:, 0])):.2f} rad; closed form "
                      f"integrated in {simulated:.1f} s")]
    figures += parameter_figures(NAMES, result.values, result.std, truth, initial)
    figures += [Figure("context, dependent coordinates: wall time", dependent_seconds, "s",
                       note=f"{dependent.iterations} iterations"
                       + ("" if dependent.converged else ", NOT converged")),
                Figure("context, dependent coordinates: largest error", 100 * errors.max(),
                       "%", note=f"of {NAMES[int(errors.argmax())]}")]
    print_table("Identification: Furuta pendulum (spatial, independent data)", figures)
    picture = plot_fit(data.t, data.readings, result.fitted, mech.sensor_labels,
                       "identification_furuta_fit")
    print(f"wrote {write_results('identification_furuta', figures)} and {picture}")


if __name__ == "__main__":
    main()

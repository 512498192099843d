"""Joint state and parameter identification on the Furuta stand-in.

Why these figures: the issue's acceptance test for ``mbgen identify``, after Marklund,
Servin and Larson (13 parameters of a Furuta pendulum identified in seconds).

The mechanism is ``mechanisms/actuated-double-pendulum.yaml``: a motor on the first joint
(known command u, torque K u), 16-bit encoders on both joints at 100 Hz, viscous and dry
friction on both joints, a gravity tilt and a second-encoder offset. Data: mbgen's RK4 at
1 ms (10 times finer than the identification step), sampled at 100 Hz, each angle rounded
to the encoder's count (2π/2¹⁶ rad: a reading error of std 2.8e-5 rad; the file states a
conservative 1e-4, which sets the readings' weight). The 13 parameters start 30 % off.
Encoder data cannot fix the overall scale of inertia, friction and motor gain (the
equations are homogeneous in them: a bar's m·a and I + m·a² scale with the gain whatever
its mass), nor separate a bar's mass from its centre-of-mass offset on a fixed pivot:
masses and offsets get priors of 0.5 % (bars weighed and balanced on an edge), as in
practice; the other nine parameters come from the data alone. Method settings: two
midpoint steps per sample (5 ms) and an impulse noise of 2e-5 N m s per sample, with the
step check (``--step-check``: the values of a second solve at 2.5 ms, each σ that of the
noise and how far the value moved together).

Figures: each parameter's error against the truth (target ≤ 2 %) and its distance to the
truth in linearized standard deviations (target ≤ 3), the wall time (target ≤ 10 s), and
the robustness of the result: the largest change of any parameter (relative to its true
value) when the weight of the dynamics residuals changes by 0.1× and 10× (two orders of
magnitude) and when the identification step halves (target ≤ 1 %), each run from the
same poor start without the step check, also in units of its standard deviation (the
noise's alone). As context, the weight changes
with Gaussian encoder noise of 1e-4 rad instead (3.6 times the rounding error: the second
joint's small viscous friction b2 = 0.004, a torque of about 0.01 N m, is then determined
to ~3 % only, and moves by about that much with the weight), and the largest error of the
parameters of the dynamics with the default second-order midpoint residuals and with the
paper's first-order SPOOK ones.
``identification_fit.png``: measured and fitted encoder readings.

Run: ``.venv/bin/python benchmarks/identification.py [--quick]``. Writes
``benchmarks/results/identification.json`` and the PNG beside it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    MECHANISMS,
    Figure,
    fresh_dir,
    parameter_figures,
    plot_fit,
    print_table,
    write_results,
)

import mbgen
from mbgen.estimation.identify import Recording, Settings, identify

NAMES = ["m1", "m2", "I1", "I2", "a1", "a2", "b1", "b2", "c1", "c2", "K", "tilt", "offset2"]
FINE, EVERY = 1e-3, 10
COUNT = 2 * np.pi / 2**16  # a 16-bit encoder's count [rad]; its rounding error: std 2.8e-5
GAUSSIAN = 1e-4  # the context run's encoder noise: the file's stated noise
WEIGHED = ("m1", "m2", "a1", "a2")
IMPULSE_NOISE = 2e-5
SUBSTEPS = 2


def command(t: np.ndarray) -> np.ndarray:
    return (0.3 * np.sin(2 * np.pi * 0.7 * t) + 0.2 * np.sin(2 * np.pi * 1.9 * t + 1.0)
            + 0.1 * np.sin(2 * np.pi * 3.3 * t + 2.0))


def recording(mech, seconds: float, gaussian: float | None = None) -> Recording:
    """Encoder readings at 100 Hz of an RK4 run at 1 ms: 16-bit encoders (the angle
    rounded to a count), or the exact angle plus Gaussian noise of std ``gaussian``."""
    steps = int(round(seconds / FINE))
    half = np.arange(2 * steps + 1) * FINE / 2
    forces = np.zeros((2 * steps + 1, mech.n))
    forces[:, mech.coordinate_index("theta1")] = mech.parameters["K"] * command(half)
    q, qd, _ = mech.integrate(mech.q0, np.zeros(mech.n), FINE, steps, "rk4", forces=forces)
    rows = np.arange(0, steps + 1, EVERY)
    clean = mech.sensors(q[rows], qd[rows])
    if gaussian is None:
        readings = np.round(clean / COUNT) * COUNT
    else:
        readings = clean + gaussian * np.random.default_rng(0).normal(size=clean.shape)
    t = rows * FINE
    return Recording(t, readings, command(t)[:, None])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 s of data instead of 10")
    args = parser.parse_args()
    out = fresh_dir("mbgen-bench-identification-")
    mech = mbgen.load(str(MECHANISMS / "actuated-double-pendulum.yaml"), out_dir=str(out))
    truth = dict(mech.parameters)
    data = recording(mech, 4.0 if args.quick else 10.0)
    rng = np.random.default_rng(1)
    initial = {n: truth[n] * (1 + 0.3 * rng.choice([-1, 1])) for n in NAMES}
    priors = {n: (truth[n] * (1 + 0.005 * rng.normal()), 0.005 * truth[n]) for n in WEIGHED}
    bounds = {n: (0.0, np.inf) for n in NAMES if n not in ("tilt", "offset2")}

    def run(data: Recording = data, **settings: float | str | bool) -> tuple:
        start = time.perf_counter()
        result = identify(mech, data, NAMES, initial=initial, bounds=bounds, priors=priors,
                          settings=Settings(**({"coordinates": "dependent",
                                                "step_check": False} | settings)))
        return result, time.perf_counter() - start

    base, seconds = run(impulse_noise=IMPULSE_NOISE, substeps=SUBSTEPS, step_check=True)
    figures = [Figure("wall time, 13 parameters", seconds, "s", 10.0,
                      f"{base.iterations} iterations, {len(base.t)} states, with the step "
                      "check" + ("" if base.converged else ", NOT converged"))]
    figures += parameter_figures(NAMES, base.values, base.std, truth, initial)
    moved = base.step_change / np.sqrt(np.maximum(base.std**2 - base.step_change**2, 1e-300))
    figures.append(Figure("step check: largest move at half the step / σ of the noise",
                          float(moved.max()), "σ", None,
                          f"of {NAMES[int(np.argmax(moved))]}: joins its σ"))
    # the robustness rows: each run and its reference without the step check
    plain, _ = run(impulse_noise=IMPULSE_NOISE, substeps=SUBSTEPS)
    scale = np.abs([truth[n] for n in NAMES])
    variants = (("dynamics weight ×0.1", {"impulse_noise": 10 * IMPULSE_NOISE}),
                ("dynamics weight ×10", {"impulse_noise": IMPULSE_NOISE / 10}),
                ("step halved", {"impulse_noise": IMPULSE_NOISE, "substeps": 2 * SUBSTEPS}))
    for label, settings in variants:
        other, _ = run(**({"substeps": SUBSTEPS} | settings))
        relative = np.abs(other.values - plain.values) / scale
        figures.append(Figure(f"robustness, {label}: largest change",
                              float(relative.max()) * 100, "%", 1.0,
                              f"of {NAMES[int(np.argmax(relative))]}"
                              + ("" if other.converged else ", NOT converged")))
        in_std = np.abs(other.values - plain.values) / plain.std
        figures.append(Figure(f"robustness, {label}: largest change / std",
                              float(in_std.max()), "σ", None,
                              f"of {NAMES[int(np.argmax(in_std))]}"))
    # context: the same with Gaussian encoder noise of the file's stated 1e-4 rad (3.6 times
    # a 16-bit encoder's rounding error), where b2 is determined to ~3 % only
    noisy = recording(mech, 4.0 if args.quick else 10.0, gaussian=GAUSSIAN)
    gaussian_base, _ = run(data=noisy, impulse_noise=IMPULSE_NOISE, substeps=SUBSTEPS)
    for label, settings in variants[:2]:
        other, _ = run(data=noisy, substeps=SUBSTEPS, **settings)
        relative = np.abs(other.values - gaussian_base.values) / scale
        figures.append(Figure(
            f"context, Gaussian encoder noise {GAUSSIAN:g} rad, {label}: largest change",
            float(relative.max()) * 100, "%", None,
            f"of {NAMES[int(np.argmax(relative))]}; largest error at the base weight "
            f"{float(np.max(np.abs(gaussian_base.values / scale - 1))) * 100:.2f} %"
            + ("" if other.converged else ", NOT converged")))
    dynamic = [k for k, n in enumerate(NAMES) if n not in ("tilt", "offset2")]
    spook, _ = run(impulse_noise=IMPULSE_NOISE, substeps=SUBSTEPS, scheme="spook")
    for label, result in (("midpoint (default)", base), ("SPOOK instead", spook)):
        error = np.abs(result.values / scale - 1)[dynamic]
        figures.append(Figure(f"{label}: largest error of m, I, a, b, c, K",
                              float(error.max()) * 100, "%", None,
                              f"of {NAMES[dynamic[int(np.argmax(error))]]}"))
    # context: independent coordinates (no compliance to absorb the midpoint rule's own
    # error, so the impulse noise must cover it: at the base 2e-5 the solver creeps)
    for noise in (IMPULSE_NOISE, 5 * IMPULSE_NOISE):
        independent, seconds = run(impulse_noise=noise, substeps=SUBSTEPS,
                                   coordinates="independent")
        error = np.abs(independent.values / scale - 1)
        figures.append(Figure(
            f"context, independent coordinates, impulse noise {noise:g}: largest error",
            float(error.max()) * 100, "%", None,
            f"of {NAMES[int(np.argmax(error))]}; {seconds:.1f} s, {independent.iterations} "
            "iterations" + ("" if independent.converged else ", NOT converged")))
    print_table("Identification: Furuta stand-in (actuated double pendulum)", figures)
    picture = plot_fit(data.t, data.readings, base.fitted, mech.sensor_labels,
                       "identification_fit")
    print(f"wrote {write_results('identification', figures)} and {picture}")


if __name__ == "__main__":
    main()

"""The IFToMM multibody benchmark library (González, Dopico, Lugrís, Cuadrado 2006):
error against an independent reference, energy drift and CPU time per problem.

Why these figures: issue 33's benchmark table, with the library's published timings of
OpenSim 3.2 (Intel i5-4570 at 3.2 GHz, rehabenggroup.github.io/MBSbenchmarksInOpenSim)
beside mbgen's on this machine. Each problem is simulated by mbgen's C RK4 with the
manifold projection (dependent coordinates, no redundant row in the way: mbgen keeps it
out; A02 by the trapezoidal rule, see below) and compared with a reference computed
here by other means:

- A01, simple pendulum (planar, 1 kg point mass on a 1 m massless bar, from horizontal,
  10 s): the pendulum's ODE θ̈ = −(g/L) cos θ by SciPy's DOP853 at 1e-13; error: the
  largest distance of the mass from the reference's [m].
- A02, N four-bars (planar, N = 2: five 1 m, 1 kg bars, from 45° with B0 moving at
  1 m/s along +x, 10 s): through the horizontal singular position, where the degrees of
  freedom jump from 1 to 3, again and again. RK4 evaluates q̈ at the singular position
  itself and stops there (a located SingularConfigurationError); the trapezoidal rule,
  implicit, steps across it. Reference: the parallelogram's one-DOF
  equation (constant inertia (N+1) m L²/3 + N m L², potential in sin θ) by DOP853; error:
  the largest |x(B0) − reference| [m].
- A04, Bricard's mechanism (spatial, overconstrained, 10 s from rest): point C against the
  independent product-of-exponentials model of ``tests/independent.py`` at the simulated
  first joint angle [m].

The energy drift is max |E(t) − E(0)| over the largest kinetic energy of the run (a
relative figure that does not divide by an energy that happens to be 0). A03 (Andrews'
squeezer) and A05 (the stiff flyball governor) are not modelled yet; their published
OpenSim times are listed for completeness.

Run: ``.venv/bin/python benchmarks/iftomm.py``. Writes ``benchmarks/results/iftomm.json``
and ``benchmarks/results/iftomm.png`` (the references and mbgen's motions).
"""

from __future__ import annotations

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
    print_table,
    remove_dir,
    save_png,
    write_results,
)
from independent import BricardChain

import mbgen
from mbgen.simulation import simulate

G, DT = 9.81, 1e-3
#: OpenSim 3.2's CPU times for the library's problems [s] (the pages cited above)
OPENSIM = {"A01": 0.637, "A02": 0.455, "A03": 0.38, "A04": 0.258}

PENDULUM = """\
name: iftomm-a01
points:
  - {x: 0, y: 0, fixed: true}
  - {x: -1, y: 0}
planar_bodies:  # a point mass at the bar's end: I0 = m L^2, the centre of mass at P
  - {points: [0, 1], mass: 1, I0: 1, cog: [1, 0]}
relative_coordinates:
  - {type: RelativeAngleAbsoluteDOF, points: [0, 1], name: theta}
gravity: [0, -9.81]
"""

FOURBARS = """\
name: iftomm-a02
parameters:
  c: cos(pi/4)
  s: sin(pi/4)
points:
  - {x: 0, y: 0, fixed: true}
  - {x: 1, y: 0, fixed: true}
  - {x: 2, y: 0, fixed: true}
  - {x: c, y: s, name: B0}
  - {x: 1 + c, y: s}
  - {x: 2 + c, y: s}
planar_bodies:
  - {points: [0, 3], mass: 1}
  - {points: [1, 4], mass: 1}
  - {points: [2, 5], mass: 1}
  - {points: [3, 4], mass: 1}
  - {points: [4, 5], mass: 1}
gravity: [0, -9.81]
"""


def timed(mech, t_end: float, qd0=None, integrator: str = "rk4"):
    """The run, and the best of three wall times of it [s]."""
    best, result = np.inf, None
    for _ in range(3):
        start = time.perf_counter()
        result = simulate(mech, t_end, DT, integrator, qd0=qd0)
        best = min(best, time.perf_counter() - start)
    return result, best


def drift(mech, result) -> float:
    """max |E(t) − E(0)| over the largest kinetic energy of the run (E(0) may be 0)."""
    kinetic, potential = mech.energy_parts(result.q, result.qd).T
    energy = kinetic + potential
    return float(np.max(np.abs(energy - energy[0])) / np.max(kinetic))


def reference(acceleration, start: list[float], t: np.ndarray) -> np.ndarray:
    """θ(t) of θ̈ = acceleration(θ), DOP853 at 1e-13."""
    run = solve_ivp(lambda _, x: [x[1], acceleration(x[0])], (0.0, t[-1]), start, t_eval=t,
                    method="DOP853", rtol=1e-13, atol=1e-13)
    return run.y[0]


def a01(work: Path) -> dict:
    path = work / "a01.yaml"
    path.write_text(PENDULUM)
    mech = mbgen.load(str(path), out_dir=str(work))
    result, seconds = timed(mech, 10.0)
    theta = reference(lambda a: -G * np.cos(a), [np.pi, 0.0], result.t)
    names = mech.coordinate_names
    mass = result.q[:, [names.index("x1"), names.index("y1")]]
    error = float(np.max(np.hypot(mass[:, 0] - np.cos(theta), mass[:, 1] - np.sin(theta))))
    return {"error": error, "drift": drift(mech, result), "seconds": seconds, "t": result.t,
            "simulated": mass[:, 0], "reference": np.cos(theta), "what": "x of the mass [m]"}


def a02(work: Path, bars: int = 2) -> dict:
    path = work / "a02.yaml"
    path.write_text(FOURBARS)
    mech = mbgen.load(str(path), out_dir=str(work))
    theta0, rate = np.pi / 4, -1.0 / np.sin(np.pi / 4)  # B0 along +x at 1 m/s
    velocity = np.zeros(mech.n)
    names = mech.coordinate_names
    for k in range(bars + 1):  # every top point moves like B0
        velocity[names.index(f"x{3 + k}")] = -np.sin(theta0) * rate
        velocity[names.index(f"y{3 + k}")] = np.cos(theta0) * rate
    # the trapezoidal rule: RK4 evaluates q̈ at the singular position itself, where the
    # KKT matrix is singular, and stops there with a SingularConfigurationError
    result, seconds = timed(mech, 10.0, velocity, "trapezoidal")
    inertia = (bars + 1) / 3 + bars
    weight = ((bars + 1) / 2 + bars) * G
    theta = reference(lambda a: -weight / inertia * np.cos(a), [theta0, rate], result.t)
    b0 = result.q[:, names.index("x3")]
    error = float(np.max(np.abs(b0 - np.cos(theta))))
    crossings = int(np.sum(np.diff(np.sign(np.sin(theta))) != 0))
    return {"error": error, "drift": drift(mech, result), "seconds": seconds, "t": result.t,
            "simulated": b0, "reference": np.cos(theta), "what": "x of B0 [m]",
            "integrator": "trapezoidal",
            "note": f"{crossings} passes through the singular horizontal position; RK4 "
                    "stops at the first"}


def a04(work: Path) -> dict:
    mech = mbgen.load(str(MECHANISMS / "bricard.yaml"), out_dir=str(work))
    result, seconds = timed(mech, 10.0)
    names = mech.coordinate_names
    chain = BricardChain()
    angle = np.mod(result.q[:, names.index("thetaA")], 2 * np.pi)
    angle = np.where(angle > np.pi + 1e-9, angle - 2 * np.pi, angle)
    rows = np.arange(0, len(result.t), 50)
    c = result.q[:, [names.index(f"{axis}2") for axis in "xyz"]]
    expected = np.array([chain.point_c(float(np.clip(angle[k], 0.0, np.pi))) for k in rows])
    error = float(np.max(np.linalg.norm(c[rows] - expected, axis=1)))
    return {"error": error, "drift": drift(mech, result), "seconds": seconds, "t": result.t[rows],
            "simulated": c[rows, 0], "reference": expected[:, 0], "what": "x of C [m]"}


def main() -> None:
    work = fresh_dir("iftomm")
    try:
        runs = {"A01": ("simple pendulum", a01(work)), "A02": ("N four-bars, N = 2", a02(work)),
                "A04": ("Bricard's mechanism", a04(work))}
    finally:
        remove_dir(work)
    figures = []
    for key, (title, run) in runs.items():
        figures += [
            Figure(f"{key} {title}: error against the reference", run["error"], "m",
                   note=run["what"] + ("; " + run["note"] if "note" in run else "")),
            Figure(f"{key}: energy drift", run["drift"], "relative"),
            Figure(f"{key}: CPU time, 10 s at dt = 1 ms ({run.get('integrator', 'RK4')})",
                   run["seconds"], "s",
                   note=f"OpenSim 3.2: {OPENSIM[key]} s"),
        ]
    figures += [Figure(f"{key}: not modelled", float("nan"), "s",
                       note=f"{what}; OpenSim 3.2: {OPENSIM.get(key, 'n/a')} s")
                for key, what in (("A03", "Andrews' squeezer (planar, stiff)"),
                                  ("A05", "stiff flyball governor (spatial)"))]
    print_table("IFToMM benchmark library", figures)
    write_results("iftomm", figures, {"opensim_seconds": OPENSIM})
    plot(runs)


def plot(runs: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 7), sharex=True)
    for ax, (key, (title, run)) in zip(axes, runs.items(), strict=True):
        ax.plot(run["t"], run["reference"], color="0.3", lw=3, label="reference")
        ax.plot(run["t"], run["simulated"], "--", color="tab:orange", lw=1.5, label="mbgen")
        ax.set(ylabel=run["what"], title=f"{key}: {title}")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper right")
    axes[-1].set_xlabel("t [s]")
    save_png(fig, "iftomm")


if __name__ == "__main__":
    main()

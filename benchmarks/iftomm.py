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
- A03, Andrews' squeezer (planar, seven bodies, a stiff spring and a motor, 0.03 s): the
  crank angle β against Hairer & Wanner's formulation in the seven joint angles (their
  mass matrix and loop equations, Lagrange's equations by SymPy, DOP853 at 1e-12), itself
  checked against the published value of β at 0.03 s; error: the largest |β − reference|
  [rad]. RK4 at dt = 10 µs.
- A04, Bricard's mechanism (spatial, overconstrained, 10 s from rest): point C against the
  independent product-of-exponentials model of ``tests/independent.py`` at the simulated
  first joint angle [m].
- A05, the stiff flyball governor (spatial, 10 s from a spin of 2π rad/s; geometry, masses
  and spring-dampers of the library's OpenSim implementation, ``tests/data/
  flyball-governor.yaml``): the slider's height s against the Lagrangian in the four
  joint coordinates of ``tests/independent.py`` (SymPy, Radau at 1e-11) [m]. The library's
  own reference solution was not at hand. The dampers make it stiff (m/C = 0.1 ms): RK4
  at dt = 0.1 ms. Its energy is dissipated, so its drift is the angular momentum's about
  the spin axis (no torque acts about it), relative.

The energy drift is max |E(t) − E(0)| over the largest kinetic energy of the run (a
relative figure that does not divide by an energy that happens to be 0; the motor's work
is in mbgen's energy as the potential of a constant generalized force).

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
from independent import BricardChain, FlyballGovernor

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

# Andrews' squeezer (Hairer & Wanner, Solving ODEs II, sec. VII.7; Schiehlen 1990): mbgen's
# file, and for the reference the geometry, masses, inertias about the centres of mass,
# spring and motor torque, and the initial joint angles (β, Θ, γ, Φ, δ, Ω, ε).
ANDREWS = Path(__file__).resolve().parents[1] / "tests" / "data" / "andrews-squeezer.yaml"
FLYBALL = ANDREWS.with_name("flyball-governor.yaml")
P = {"xa": -.06934, "ya": -.00227, "xb": -.03635, "yb": .03273, "xc": .014, "yc": .072,
     "d": 28e-3, "da": 115e-4, "e": 2e-2, "ea": 1421e-5, "rr": 7e-3, "ra": 92e-5,
     "ss": 35e-3, "sa": 1874e-5, "sb": 1043e-5, "sc": 18e-3, "sd": 2e-2, "ta": 2308e-5,
     "tb": 916e-5, "u": 4e-2, "ua": 1228e-5, "ub": 449e-5, "zf": 2e-2, "zt": 4e-2,
     "fa": 1421e-5, "mom": 33e-3, "c0": 4530.0, "lo": 7785e-5}
M_ = [.04325, .00365, .02373, .00706, .07050, .00706, .05498]
I_ = [2.194e-6, 4.410e-7, 5.255e-6, 5.667e-7, 1.169e-5, 5.667e-7, 1.912e-5]
Q0 = [-0.0617138900142764496358948458001, 0.0, 0.455279819163070380255912382449,
      0.222668390165885884674473185609, 0.487364979543842550225598953530,
      -0.222668390165885884674473185609, 1.23054744454982119249735015568]
#: The published reference angles at t = 0.03 s (the Bari test set for IVP solvers)
ANDREWS_AT_END = [15.81077119629904, -15.75637105984298, 0.04082224013073101,
                  -0.5347301163226948, 0.5244099658805304, 0.5347301163226948,
                  1.048080741042263]


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


def andrews_reference(t: np.ndarray) -> np.ndarray:
    """The seven angles (len(t), 7) by Hairer & Wanner's formulation: Lagrange's equations
    in the angles with their mass matrix, the six loop-closure equations at the
    acceleration level, DOP853 at 1e-12 (SymPy derives the terms; nothing of mbgen)."""
    import sympy as sp

    q, v = sp.symbols("q0:7"), sp.symbols("v0:7")
    be, th, ga, ph, de, om, ep = q
    p, m, inertia = P, M_, I_
    eg, hf = p["e"] - p["ea"], p["zf"] - p["fa"]
    mass = sp.zeros(7, 7)
    mass[0, 0] = (m[0] * p["ra"] ** 2 + m[1] * (p["rr"] ** 2 - 2 * p["da"] * p["rr"]
                  * sp.cos(th) + p["da"] ** 2) + inertia[0] + inertia[1])
    mass[1, 0] = mass[0, 1] = m[1] * (p["da"] ** 2 - p["da"] * p["rr"] * sp.cos(th)) + inertia[1]
    mass[1, 1] = m[1] * p["da"] ** 2 + inertia[1]
    mass[2, 2] = m[2] * (p["sa"] ** 2 + p["sb"] ** 2) + inertia[2]
    mass[3, 3] = m[3] * eg ** 2 + inertia[3]
    mass[4, 3] = mass[3, 4] = m[3] * (eg ** 2 + p["zt"] * eg * sp.sin(ph)) + inertia[3]
    mass[4, 4] = (m[3] * (p["zt"] ** 2 + 2 * p["zt"] * eg * sp.sin(ph) + eg ** 2)
                  + m[4] * (p["ta"] ** 2 + p["tb"] ** 2) + inertia[3] + inertia[4])
    mass[5, 5] = m[5] * hf ** 2 + inertia[5]
    mass[6, 5] = mass[5, 6] = m[5] * (hf ** 2 - p["u"] * hf * sp.sin(om)) + inertia[5]
    mass[6, 6] = (m[5] * (hf ** 2 - 2 * p["u"] * hf * sp.sin(om) + p["u"] ** 2)
                  + m[6] * (p["ua"] ** 2 + p["ub"] ** 2) + inertia[5] + inertia[6])
    rate = sp.Matrix(v)
    kinetic = (rate.T * mass * rate)[0] / 2
    xd = p["xb"] + p["sc"] * sp.sin(ga) + p["sd"] * sp.cos(ga)
    yd = p["yb"] - p["sc"] * sp.cos(ga) + p["sd"] * sp.sin(ga)
    stretch = sp.sqrt((xd - p["xc"]) ** 2 + (yd - p["yc"]) ** 2) - p["lo"]
    potential = p["c0"] * stretch ** 2 / 2 - p["mom"] * be
    ex = p["rr"] * sp.cos(be) - p["d"] * sp.cos(be + th)  # E from the crank's side
    ey = p["rr"] * sp.sin(be) - p["d"] * sp.sin(be + th)
    loop = sp.Matrix([
        ex - p["ss"] * sp.sin(ga) - p["xb"], ey + p["ss"] * sp.cos(ga) - p["yb"],
        ex - p["e"] * sp.sin(ph + de) - p["zt"] * sp.cos(de) - p["xa"],
        ey + p["e"] * sp.cos(ph + de) - p["zt"] * sp.sin(de) - p["ya"],
        ex - p["zf"] * sp.cos(om + ep) - p["u"] * sp.sin(ep) - p["xa"],
        ey - p["zf"] * sp.sin(om + ep) + p["u"] * sp.cos(ep) - p["ya"]])
    jacobian = loop.jacobian(q)
    momentum_rate = (mass * rate).jacobian(q) * rate  # Ṁ v
    force = (-momentum_rate + sp.Matrix([sp.diff(kinetic - potential, x) for x in q]))
    curvature = -(jacobian * rate).jacobian(q) * rate
    terms = sp.lambdify([q, v], [mass, force, jacobian, curvature], "numpy")

    def rhs(_: float, x: np.ndarray) -> np.ndarray:
        mm, ff, gg, cc = (np.array(a, dtype=float) for a in terms(x[:7], x[7:]))
        kkt = np.block([[mm, gg.T], [gg, np.zeros((6, 6))]])
        return np.concatenate([x[7:], np.linalg.solve(kkt, np.concatenate(
            [ff.ravel(), cc.ravel()]))[:7]])

    run = solve_ivp(rhs, (0.0, t[-1]), np.concatenate([Q0, np.zeros(7)]), t_eval=t,
                    method="DOP853", rtol=1e-12, atol=1e-12)
    return run.y[:7].T


def a03(work: Path) -> dict:
    mech = mbgen.load(str(ANDREWS), out_dir=str(work))
    step = 1e-5  # the spring's time scale is well under a millisecond
    best, result = np.inf, None
    for _ in range(3):
        start = time.perf_counter()
        result = simulate(mech, 0.03, step, "rk4")
        best = min(best, time.perf_counter() - start)
    beta = result.q[:, mech.coordinate_index("beta")]
    reference = andrews_reference(result.t[::10])
    published = abs(reference[-1, 0] - ANDREWS_AT_END[0])
    return {"error": float(np.max(np.abs(beta[::10] - reference[:, 0]))),
            "drift": drift(mech, result), "seconds": best, "t": result.t[::10],
            "simulated": beta[::10], "reference": reference[:, 0], "what": "β [rad]",
            "unit": "rad",
            "steps": "0.03 s at dt = 10 µs (RK4)",
            "note": f"the reference's β(0.03 s) is {published:.1e} rad from the published "
                    "value (Bari test set)"}


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


def a05(work: Path) -> dict:
    mech = mbgen.load(str(FLYBALL), out_dir=str(work))
    model = FlyballGovernor()
    joints = ["phi", "s", "beta1", "beta2"]
    columns = [mech.coordinate_index(name) for name in joints]
    qd0 = mech.solve_velocity(mech.q0, model.qd0, z=joints)
    best, result = np.inf, None
    for _ in range(3):
        start = time.perf_counter()
        result = simulate(mech, 10.0, 1e-4, "rk4", qd0=qd0)
        best = min(best, time.perf_counter() - start)
    rows = np.arange(0, len(result.t), 100)
    q, qd = result.q[rows][:, columns], result.qd[rows][:, columns]
    expected, _ = model.run(result.t[rows])
    momentum = np.array([model.spin_momentum(a, b) for a, b in zip(q, qd, strict=True)])
    return {"error": float(np.max(np.abs(q[:, 1] - expected[:, 1]))),
            "drift": float(np.ptp(momentum) / abs(momentum[0])),
            "drift_of": "angular momentum about the spin axis",
            "seconds": best, "t": result.t[rows], "simulated": q[:, 1],
            "reference": expected[:, 1], "what": "the slider's height s [m]",
            "steps": "10 s at dt = 0.1 ms (RK4)",
            "note": f"largest error of the rods' angles "
                    f"{np.max(np.abs(q[:, 2:] - expected[:, 2:])):.1e} rad"}


def main() -> None:
    work = fresh_dir("iftomm")
    try:
        runs = {"A01": ("simple pendulum", a01(work)), "A02": ("N four-bars, N = 2", a02(work)),
                "A03": ("Andrews' squeezer", a03(work)),
                "A04": ("Bricard's mechanism", a04(work)),
                "A05": ("stiff flyball governor", a05(work))}
    finally:
        remove_dir(work)
    figures = []
    for key, (title, run) in runs.items():
        figures += [
            Figure(f"{key} {title}: error against the reference", run["error"],
                   run.get("unit", "m"),
                   note=run["what"] + ("; " + run["note"] if "note" in run else "")),
            Figure(f"{key}: {run.get('drift_of', 'energy')} drift", run["drift"], "relative"),
            Figure(f"{key}: CPU time, "
                   + run.get("steps", f"10 s at dt = 1 ms ({run.get('integrator', 'RK4')})"),
                   run["seconds"], "s",
                   note=f"OpenSim 3.2: {OPENSIM[key]} s" if key in OPENSIM else
                   "OpenSim 3.2: no time published"),
        ]
    print_table("IFToMM benchmark library", figures)
    write_results("iftomm", figures, {"opensim_seconds": OPENSIM})
    plot(runs)


def plot(runs: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 11))
    for ax, (key, (title, run)) in zip(axes, runs.items(), strict=True):
        ax.plot(run["t"], run["reference"], color="0.3", lw=3, label="reference")
        ax.plot(run["t"], run["simulated"], "--", color="tab:orange", lw=1.5, label="mbgen")
        ax.set(ylabel=run["what"], title=f"{key}: {title}", xlabel="t [s]")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper right")
    save_png(fig, "iftomm")


if __name__ == "__main__":
    main()

"""URDF robots of ``example-robot-data`` compiled by mbgen, against Pinocchio on the same
files (issue 53, items 2 and 3): compile time, agreement and speed.

Per robot (fixed base, the files as shipped): the build's time (derive, C generation, C
compile, from the build's meta.json); at random joint states, z̈ (``independent_dynamics``)
against ``pin.aba`` (relative, the largest over the states) and ∂z̈/∂z, ∂z̈/∂ż, ∂z̈/∂τ
against ``computeABADerivatives``; the time per state of mbgen's batched z̈ and z̈ with its
Jacobians against a Python loop of Pinocchio's ``aba`` and ``aba`` + derivatives (Pinocchio
has no batched call), and of one state from Python. The robots' joint damping enters
mbgen's model as viscous friction and Pinocchio's ``aba`` not: its τ gets −b v added.
Not done here: the C++ loop of Pinocchio's targets (ratios are against its Python calls)
and g1 (29 joints; ``--g1`` adds it).

Run: ``.venv/bin/python benchmarks/robots.py [--quick] [--build-dir DIR] [--g1]`` (needs
the bench extra: ``pin``, ``example-robot-data``). Writes benchmarks/results/robots.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Figure, best_time, fresh_dir, print_table, remove_dir, write_results

import mbgen

ROBOTS = {"ur5": "ur_description/urdf/ur5_robot.urdf",
          "panda": "panda_description/urdf/panda.urdf",
          "g1": "g1_description/urdf/g1_29dof_rev_1_0.urdf"}


def robots_dir() -> Path:
    import pinocchio as pin

    prefix = Path(pin.__file__).resolve()
    while prefix.name != "cmeel.prefix":
        prefix = prefix.parent
    return prefix / "share" / "example-robot-data" / "robots"


def measure(name: str, path: Path, out: Path, count: int, repeat: int) -> dict:
    import pinocchio as pin

    start = time.perf_counter()
    mech = mbgen.load(str(path), out_dir=str(out))
    load_seconds = time.perf_counter() - start
    build = next(out.glob(f"{path.stem}/*/meta.json"))
    timings = json.loads(build.read_text()).get("timings", {})
    model = pin.buildModelFromUrdf(str(path))
    data = model.createData()
    names = list(model.names)[1:]
    assert all(j.nq == 1 for j in model.joints[1:]), "continuous joints not handled here"
    rng = np.random.default_rng(0)
    low, high = model.lowerPositionLimit, model.upperPositionLimit
    angles = rng.uniform(np.maximum(low, -1.0), np.minimum(high, 1.0), (count, len(names)))
    rates = rng.normal(0.0, 1.0, (count, len(names)))
    index = mech.coordinate_indices(names)
    guess = np.repeat(mech.q0[None], count, axis=0)
    guess[:, index] = angles
    q = mech.solve_position(guess, z=names)
    qd = mech.solve_velocity(q, rates, z=names)
    damping = model.damping
    zdd, jz, jzd, jq = mech.independent_dynamics(q, qd, z=names)
    worst = {"zdd": 0.0, "dq": 0.0, "dv": 0.0, "dtau": 0.0}
    for k in range(min(count, 200)):
        tau = -damping * rates[k]
        reference = pin.aba(model, data, angles[k], rates[k], tau)
        worst["zdd"] = max(worst["zdd"], float(np.max(np.abs(zdd[k] - reference))
                                               / np.max(np.abs(reference))))
        pin.computeABADerivatives(model, data, angles[k], rates[k], tau)
        minv = np.triu(data.Minv) + np.triu(data.Minv, 1).T
        for key, mine, theirs in (("dq", jz[k], data.ddq_dq),
                                  ("dv", jzd[k], data.ddq_dv - minv * damping),
                                  ("dtau", jq[k][:, index], minv)):
            worst[key] = max(worst[key], float(np.max(np.abs(mine - theirs))
                                               / np.max(np.abs(theirs))))
    zeros = np.zeros(len(names))
    out_z = np.empty((count, len(names)))

    def loop(call) -> None:
        for a, r in zip(angles, rates, strict=True):
            call(model, data, a, r, zeros)

    return {
        "joints": len(names), "n": mech.n, "m": mech.m, "route": mech.meta.get("joint_space"),
        "build_s": timings, "load_s": load_seconds, "agreement": worst,
        "mbgen zdd": best_time(lambda: mech.independent_dynamics(
            q, qd, z=names, jacobians=False, out=(out_z,)), repeat) / count,
        "mbgen zdd+J": best_time(lambda: mech.independent_dynamics(q, qd, z=names),
                                 repeat) / count,
        "mbgen one state": best_time(lambda: mech.independent_dynamics(
            q[0], qd[0], z=names, jacobians=False), repeat, number=200),
        "pinocchio aba": best_time(lambda: loop(pin.aba), repeat) / count,
        "pinocchio aba+J": best_time(lambda: loop(pin.computeABADerivatives),
                                     repeat) / count,
        "pinocchio one state": best_time(lambda: pin.aba(model, data, angles[0], rates[0],
                                                         zeros), repeat, number=200),
        "version": pin.__version__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--build-dir", type=Path, help="reuse builds here (else fresh)")
    parser.add_argument("--g1", action="store_true", help="also g1 (29 joints)")
    args = parser.parse_args()
    count, repeat = (256, 3) if args.quick else (2000, 5)
    out = args.build_dir or fresh_dir("robots")
    chosen = ["ur5", "panda"] + (["g1"] if args.g1 else [])
    found: dict[str, dict] = {}
    try:
        for name in chosen:
            found[name] = measure(name, robots_dir() / ROBOTS[name], out, count, repeat)
    finally:
        if args.build_dir is None:
            remove_dir(out)
    figures = []
    for name, r in found.items():
        build = sum(r["build_s"].values())
        route = "joint space" if isinstance(r["route"], list) else "KKT (natural coordinates)"
        figures += [
            Figure(f"{name}: build (derive + C + compile)", build, "s",
                   note=f"{r['joints']} joints, n = {r['n']}, m = {r['m']}; {route}"),
            Figure(f"{name}: z̈ against pin.aba", r["agreement"]["zdd"], "relative",
                   target=1e-10),
            Figure(f"{name}: ∂z̈/∂z, ∂z̈/∂ż, ∂z̈/∂τ against computeABADerivatives",
                   max(r["agreement"][k] for k in ("dq", "dv", "dtau")), "relative",
                   target=1e-8),
            Figure(f"{name}: batched z̈ / Pinocchio's aba (Python loop)",
                   r["mbgen zdd"] / r["pinocchio aba"], "x", target=1.0,
                   note=f"{r['mbgen zdd'] * 1e6:.2f} against {r['pinocchio aba'] * 1e6:.2f} "
                        "µs per state"),
            Figure(f"{name}: batched z̈ + J / Pinocchio's aba + derivatives (Python loop)",
                   r["mbgen zdd+J"] / r["pinocchio aba+J"], "x", target=1.0,
                   note=f"{r['mbgen zdd+J'] * 1e6:.2f} against "
                        f"{r['pinocchio aba+J'] * 1e6:.2f} µs per state"),
            Figure(f"{name}: one state from Python / Pinocchio's", r["mbgen one state"]
                   / r["pinocchio one state"], "x", target=1.0,
                   note=f"{r['mbgen one state'] * 1e6:.2f} against "
                        f"{r['pinocchio one state'] * 1e6:.2f} µs"),
        ]
    print_table("URDF robots against Pinocchio", figures)
    write_results("robots", figures, {"robots": found})


if __name__ == "__main__":
    main()

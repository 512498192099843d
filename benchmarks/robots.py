"""URDF robots of ``example-robot-data`` compiled by mbgen, against Pinocchio on the same
files (issue 53, items 2 and 3): compile time and memory, agreement and speed.

Per robot (fixed base, the files as shipped): the build's time (derive, C generation, C
compile, from the build's meta.json) and the peak memory of the process that built it;
at random joint states, z̈ (``independent_dynamics``) against ``pin.aba`` (relative, the
largest over the states) and ∂z̈/∂z, ∂z̈/∂ż, ∂z̈/∂τ against ``computeABADerivatives``; the
time per state of mbgen's batched z̈ and z̈ with its Jacobians against Pinocchio's
``aba`` and ``computeABADerivatives`` in a C++ loop over the same states
(``pinocchio_loop.cpp``, built here against the `pin` wheel's headers with mbgen's core
flags: -O3, its -march, -ffp-contract=off, -fno-trapping-math, -fno-math-errno; its sums
checked against Pinocchio from Python), and against a Python loop of the same calls; and
one state from Python. The robots' joint damping enters mbgen's model as viscous friction
and Pinocchio's ``aba`` not: its τ gets −b v added for the agreement. ``panda-arm`` is the
Panda with its fingers locked half open (a file including the URDF with ``locked:``;
Pinocchio's ``buildReducedModel`` at the same values): its seven revolute joints take
the joint-space route, the whole Panda (nine joints, two of them sliding) the KKT one.

Run: ``.venv/bin/python benchmarks/robots.py [--quick] [--build-dir DIR] [--g1]`` (needs
the bench extra: ``pin``, ``example-robot-data``; a C++ compiler). Writes
benchmarks/results/robots.json. The C++ loop takes about 4 minutes to compile (Pinocchio's
templates); with --build-dir it is kept there.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Figure, best_time, fresh_dir, print_table, remove_dir, write_results

import mbgen
from mbgen.codegen.build import CORE_FLAGS
from mbgen.cpu import march_flags, vector_level
from mbgen.model import load_mechanism
from mbgen.symbolic.joint_space import placed_coordinates

LOOP_SOURCE = Path(__file__).resolve().parent / "pinocchio_loop.cpp"
# what Pinocchio's CMake config gives its users (a joint variant of 25 types)
PINOCCHIO_DEFINES = ["-DBOOST_MPL_LIMIT_LIST_SIZE=30", "-DBOOST_MPL_LIMIT_VECTOR_SIZE=30",
                     "-DBOOST_MPL_CFG_NO_PREPROCESSED_HEADERS",
                     "-DBOOST_FUSION_INVOKE_MAX_ARITY=12", "-DNDEBUG"]

ROBOTS = {"ur5": "ur_description/urdf/ur5_robot.urdf",
          "panda": "panda_description/urdf/panda.urdf",
          "panda-arm": "panda_description/urdf/panda.urdf",
          "g1": "g1_description/urdf/g1_29dof_rev_1_0.urdf"}
# robots with joints held (a YAML file including the URDF, ``locked:``; Pinocchio's
# buildReducedModel at the same values): the Panda's fingers, half open
LOCKED = {"panda-arm": {"panda_finger_joint1": 0.02, "panda_finger_joint2": 0.02}}


def robots_dir() -> Path:
    import pinocchio as pin

    prefix = Path(pin.__file__).resolve()
    while prefix.name != "cmeel.prefix":
        prefix = prefix.parent
    return prefix / "share" / "example-robot-data" / "robots"


def loop_flags() -> list[str]:
    """mbgen's core C flags that carry over to C++ (optimization and floating point), its
    vector level, Pinocchio's definitions."""
    kept = [f for f in CORE_FLAGS if f.startswith(("-O", "-ffp", "-fno-trapping",
                                                   "-fno-math"))]
    return [*kept, *march_flags(vector_level()), "-std=c++17", *PINOCCHIO_DEFINES]


def build_loop(out: Path) -> Path:
    """The C++ loop program, built once into ``out`` (kept while its source is older)."""
    prefix = robots_dir().parents[2]  # cmeel.prefix
    target = out / "pinocchio_loop"
    if target.exists() and target.stat().st_mtime > LOOP_SOURCE.stat().st_mtime:
        return target
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(["c++", *loop_flags(), f"-I{prefix / 'include'}",
                    f"-I{prefix / 'include' / 'eigen3'}", str(LOOP_SOURCE), "-o", str(target),
                    f"-L{prefix / 'lib'}", "-lpinocchio_default", "-lboost_serialization",
                    f"-Wl,-rpath,{prefix / 'lib'}"], check=True)
    return target


def cpp_loop(program: Path, model, angles: np.ndarray, rates: np.ndarray, out: Path,
             name: str, repeat: int) -> dict:
    """Pinocchio's C++ loop over the states (τ = 0), and its sums."""
    model_file, states = out / f"{name}-model.bin", out / f"{name}-states.bin"
    model.saveToBinary(str(model_file))
    with states.open("wb") as f:
        np.array(angles.shape, dtype=np.int64).tofile(f)
        for block in (angles, rates, np.zeros_like(rates)):
            np.ascontiguousarray(block, dtype=float).tofile(f)
    found = subprocess.run([str(program), str(model_file), str(states), str(repeat)],
                           capture_output=True, text=True, check=True).stdout
    return json.loads(found)


def reduced_model(path: Path, locked: dict[str, float]):
    """Pinocchio's model of the URDF with the ``locked`` joints held at their values."""
    import pinocchio as pin

    model = pin.buildModelFromUrdf(str(path))
    if not locked:
        return model
    reference = pin.neutral(model)
    for joint, value in locked.items():
        reference[model.joints[model.getJointId(joint)].idx_q] = value
    return pin.buildReducedModel(model, [model.getJointId(j) for j in locked], reference)


def assemble(mech, mechanism, names: list[str], angles: np.ndarray) -> tuple[np.ndarray, str]:
    """Consistent states (N, n) at the joint angles (N, d), and how they were found.

    A tree of revolute joints: each state placed body after body with numbers
    (``placed_coordinates``), then the constraint rows the dynamics keep chosen again at
    the first of them (the rows independent at the URDF's zero pose, where many axes are
    parallel, lose rank away from it: the g1's did), and Newton polishes. Otherwise
    (sliding joints), Newton from the zero pose in four steps (a full turn of ±1 rad on
    every joint at once diverged on 5 of 2000 Panda states)."""
    index = mech.coordinate_indices(names)
    try:
        placed = np.array([placed_coordinates(mechanism, dict(zip(names, a, strict=True)))
                           for a in angles])
    except ValueError:
        q = np.repeat(mech.q0[None], len(angles), axis=0)
        for fraction in (0.25, 0.5, 0.75, 1.0):
            guess = q.copy()
            guess[:, index] = fraction * angles
            q = mech.solve_position(guess, z=names)
        return q, "Newton from the zero pose in four steps"
    reselected = mech.reselect_rows(placed[0])
    return mech.solve_position(placed, z=names), (
        "placed by the joint angles" + ("; rows chosen again at the first state"
                                        if reselected else ""))


def measure(name: str, path: Path, out: Path, count: int, repeat: int,
            program: Path) -> dict:
    import pinocchio as pin

    locked = LOCKED.get(name, {})
    source = path
    if locked:  # a mechanism file including the URDF with the joints held
        source = out / f"{name.replace('-', '_')}.yaml"  # its build folder's name
        source.write_text(f"urdf: {json.dumps(str(path))}\nlocked: {json.dumps(locked)}\n")
    reused = any(out.glob(f"{source.stem}/*/meta.json"))  # then nothing is built here
    start = time.perf_counter()
    mech = mbgen.load(str(source), out_dir=str(out))
    load_seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB, the whole
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # run so far
    build = next(out.glob(f"{source.stem}/*/meta.json"))
    timings = json.loads(build.read_text()).get("timings", {})
    model = reduced_model(path, locked)
    data = model.createData()
    names = list(model.names)[1:]
    assert all(j.nq == 1 for j in model.joints[1:]), "continuous joints not handled here"
    rng = np.random.default_rng(0)
    low, high = model.lowerPositionLimit, model.upperPositionLimit
    angles = rng.uniform(np.maximum(low, -1.0), np.minimum(high, 1.0), (count, len(names)))
    rates = rng.normal(0.0, 1.0, (count, len(names)))
    index = mech.coordinate_indices(names)
    q, assembly = assemble(mech, load_mechanism(source), names, angles)
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
    cpp = cpp_loop(program, model, angles, rates, out, name, repeat)
    python_sum = sum(float(pin.aba(model, data, a, r, zeros).sum())
                     for a, r in zip(angles, rates, strict=True))
    cpp["sums agree"] = abs(cpp["sum ddq"] - python_sum) <= 1e-10 * abs(python_sum)

    def loop(call) -> None:
        for a, r in zip(angles, rates, strict=True):
            call(model, data, a, r, zeros)

    return {
        "joints": len(names), "locked": locked, "assembly": assembly, "n": mech.n,
        "m": mech.m,
        "route": mech.meta.get("joint_space"),
        "build_s": timings, "load_s": load_seconds, "agreement": worst,
        "peak MiB": None if reused else {"python": peak, "compiler": children},
        "pinocchio C++ aba": cpp["aba"], "pinocchio C++ aba+J": cpp["aba+J"], "cpp": cpp,
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
    chosen = ["ur5", "panda", "panda-arm"] + (["g1"] if args.g1 else [])
    found: dict[str, dict] = {}
    try:
        program = build_loop(out)
        for name in chosen:
            found[name] = measure(name, robots_dir() / ROBOTS[name], out, count, repeat,
                                  program)
            assert found[name]["cpp"]["sums agree"], found[name]["cpp"]
    finally:
        if args.build_dir is None:
            remove_dir(out)
    figures = []
    for name, r in found.items():
        build = sum(r["build_s"].values())
        route = "joint space" if isinstance(r["route"], list) else "KKT (natural coordinates)"
        figures += [
            Figure(f"{name}: build (derive + C + compile)", build, "s",
                   target=60.0 if name == "g1" else None,
                   note=f"{r['joints']} joints, n = {r['n']}, m = {r['m']}; {route}"
                     + (f"; locked: {', '.join(r['locked'])}" if r.get("locked") else "")),
            *([] if r["peak MiB"] is None else [Figure(
                f"{name}: peak memory of the building process (Python; compiler)",
                max(r["peak MiB"].values()) / 1024, "GiB",
                target=2.0 if name == "g1" else None,
                note=f"{r['peak MiB']['python']:.0f} MiB; {r['peak MiB']['compiler']:.0f} "
                     "MiB (peaks of the run so far)")]),
            Figure(f"{name}: z̈ against pin.aba", r["agreement"]["zdd"], "relative",
                   target=1e-10),
            Figure(f"{name}: ∂z̈/∂z, ∂z̈/∂ż, ∂z̈/∂τ against computeABADerivatives",
                   max(r["agreement"][k] for k in ("dq", "dv", "dtau")), "relative",
                   target=1e-8),
            Figure(f"{name}: batched z̈ / Pinocchio's aba (C++ loop)",
                   r["mbgen zdd"] / r["pinocchio C++ aba"], "x",
                   target=2.0 if name == "g1" else 1.0,
                   note=f"{r['mbgen zdd'] * 1e6:.2f} against "
                        f"{r['pinocchio C++ aba'] * 1e6:.2f} µs per state"),
            Figure(f"{name}: batched z̈ + J / Pinocchio's aba + derivatives (C++ loop)",
                   r["mbgen zdd+J"] / r["pinocchio C++ aba+J"], "x",
                   target=2.0 if name == "g1" else 1.0,
                   note=f"{r['mbgen zdd+J'] * 1e6:.2f} against "
                        f"{r['pinocchio C++ aba+J'] * 1e6:.2f} µs per state"),
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

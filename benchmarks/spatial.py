"""Spatial mechanisms' speed: the Furuta pendulum against its planar stand-in, and the
growth of a spatial chain's cost with its length.

Why these figures: issue 33's targets for 3-D natural coordinates ("speed holds in 3-D").
(1) The Furuta pendulum (``mechanisms/furuta.yaml``: n = 17 coordinates, m = 15
constraints) against the planar double pendulum (``mechanisms/double-pendulum.yaml``,
n = 4, m = 2): per state of one batched call, q̈ and q̈ with ∂q̈/∂q, ∂q̈/∂q̇, ∂q̈/∂Q, and
z̈ with its Jacobians in the independent coordinates θ1, θ2 (for the planar pendulum
on ``actuated-double-pendulum.yaml``, the same pendulum with relative angles), on the
same number of consistent states; target: the Furuta pendulum's accelerations with their
Jacobians within 2× the double pendulum's, taken where each is fastest: the Furuta
pendulum in its two joint angles (joint-space dynamics, docs/dynamics.md), the planar
pendulum in natural coordinates (its unrolled KKT code); both paths of each are context
rows. (2) Spatial chains of N = 5 … 80 rods (``mbgen generate chain
--spatial``: revolute joints with alternating axes, 6N coordinates, 5N equations, N DOF):
q̈ per state; target: linear growth, the log–log slope of time against N at most 1.2
over N ≥ 20. Up to about 10 rods the KKT factorization is unrolled into straight-line
code (``codegen/kkt.py``'s operation budget), beyond it the core's generic sparse
factorization runs: the cost per rod steps up once between the two. (3) A 6-DOF serial
arm (the same chain, 6 rods, with its joint angles as the independent coordinates)
against Pinocchio's model of it (revolute joints about y and z in turn, the rods'
inertias): z̈ (``independent_dynamics``) against ``aba``, and z̈ with ∂z̈/∂z, ∂z̈/∂ż,
∂z̈/∂Q against ``computeABADerivatives``, checked to agree first; target: within 2×
Pinocchio's per-state time. Pinocchio has no batched call: its figure is a Python loop
(its per-call overhead included). It is the optional peer of ``benchmarks/peers.py``; the
arm's rows are skipped, with the reason, where it cannot be imported.

Times are the best of repeated trials (``_common.best_time``), measured side by side in
one run. Run: ``.venv/bin/python benchmarks/spatial.py [--quick]``. Writes
``benchmarks/results/spatial.json`` and ``benchmarks/results/spatial.png``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    MECHANISMS,
    Figure,
    best_time,
    fresh_dir,
    loglog_slope,
    manifold_states,
    mbgen_executable,
    print_table,
    remove_dir,
    save_png,
    write_results,
)

import mbgen

Z = ["theta1", "theta2"]
ARM = 6  # joints of the serial arm


def per_state(call, count: int, repeat: int) -> float:
    """Best time per state [s] of one batched call over ``count`` states, after a call
    that warms up (the first touch of the output pages, caches)."""
    call()
    return best_time(call, repeat) / count


def outputs(*shapes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """Preallocated outputs: every call here writes into them, as peers.py's do, so the
    figures are the computation and not the page faults of fresh multi-MB arrays (a
    process with one module loaded paid them on every call: 126 against 35 ns per state
    for the double pendulum's q̈ + J)."""
    return tuple(np.empty(shape) for shape in shapes)


def costs(mech, count: int, repeat: int, z: list[str] | None) -> dict[str, float]:
    """q̈, q̈ + Jacobians and (with ``z``) z̈ + Jacobians per state [s]."""
    q, qd = manifold_states(mech, count)
    n, d = mech.n, mech.dof
    (qdd,) = outputs((count, n))
    jacobians = outputs((count, n), (count, n, n), (count, n, n), (count, n, n))
    found = {
        "qdd": per_state(lambda: mech.forward_dynamics(q, qd, out=qdd), count, repeat),
        "qdd+J": per_state(lambda: mech.forward_dynamics_jacobians(q, qd, out=jacobians),
                           count, repeat),
    }
    if z is not None:
        zdd = outputs((count, d))
        joint = outputs((count, d), (count, d, d), (count, d, d), (count, d, n))
        found["zdd"] = per_state(lambda: mech.independent_dynamics(
            q, qd, z=z, jacobians=False, out=zdd), count, repeat)
        found["zdd+J"] = per_state(lambda: mech.independent_dynamics(q, qd, z=z, out=joint),
                                   count, repeat)
        mech.options.method = "unrolled"  # the KKT path (the joint space's is "auto" only)
        found["zdd+J kkt"] = per_state(lambda: mech.independent_dynamics(
            q, qd, z=z, out=joint), count, repeat)
        mech.options.method = "auto"
    return found


def arm_against_pinocchio(directory: Path, count: int, repeat: int) -> dict[str, float]:
    """Per-state times [s] of mbgen's z̈ and z̈ + J and Pinocchio's aba and its derivatives
    on the same states of the 6-DOF arm, after checking that z̈ agrees (relative)."""
    import pinocchio as pin

    from mbgen.model.chain import spatial_chain_yaml

    path = directory / "arm.yaml"
    path.write_text(spatial_chain_yaml(ARM, joint_angles=True))
    mech = mbgen.load(str(path), out_dir=str(directory))
    z = [f"q{k + 1}" for k in range(ARM)]
    model = pin.Model()
    parent, rod = 0, mech.parameters
    along = rod["m"] * 2 * (rod["L"] / 20) ** 2 / 12
    across = rod["m"] * (rod["L"] ** 2 + (rod["L"] / 20) ** 2) / 12
    for k in range(ARM):
        placement = pin.SE3(np.eye(3), np.array([rod["L"] if k else 0.0, 0.0, 0.0]))
        joint = pin.JointModelRY() if k % 2 == 0 else pin.JointModelRZ()
        parent = model.addJoint(parent, joint, placement, f"joint{k}")
        model.appendBodyToJoint(parent, pin.Inertia(rod["m"], np.array([rod["L"] / 2, 0, 0]),
                                                    np.diag([along, across, across])),
                                pin.SE3.Identity())
    data = model.createData()
    rng = np.random.default_rng(0)
    angles, rates = rng.uniform(-0.4, 0.4, (count, ARM)), rng.normal(0.0, 1.0, (count, ARM))
    guess = np.repeat(mech.q0[None], count, axis=0)
    guess[:, mech.coordinate_indices(z)] = angles
    q = mech.solve_position(guess, z=z)
    qd = mech.solve_velocity(q, rates, z=z)
    zdd = mech.independent_dynamics(q, qd, z=z, jacobians=False)  # z̈ alone: (count, 6)
    torque = np.zeros(ARM)
    reference = np.array([pin.aba(model, data, a, r, torque) for a, r in zip(angles, rates,
                                                                             strict=True)])
    agreement = float(np.max(np.abs(zdd - reference)) / np.max(np.abs(reference)))
    mech.options.method = "unrolled"  # the KKT path, for context

    def loop(call) -> None:
        for a, r in zip(angles, rates, strict=True):
            call(model, data, a, r, torque)

    zdd_kkt = per_state(lambda: mech.independent_dynamics(q, qd, z=z), count, repeat)
    mech.options.method = "auto"
    return {
        "agreement": agreement,
        "mbgen zdd": per_state(lambda: mech.independent_dynamics(q, qd, z=z, jacobians=False),
                               count, repeat),
        "mbgen zdd+J": per_state(lambda: mech.independent_dynamics(q, qd, z=z), count, repeat),
        "mbgen zdd+J kkt": zdd_kkt,
        "pinocchio aba": per_state(lambda: loop(pin.aba), count, repeat),
        "pinocchio aba+J": per_state(lambda: loop(pin.computeABADerivatives), count, repeat),
        "version": pin.__version__,
    }


def spatial_chain(bodies: int, directory: Path) -> Path:
    target = directory / f"spatial-chain{bodies}.yaml"
    subprocess.run([str(mbgen_executable()), "generate", "chain", "--spatial", "--bodies",
                    str(bodies), "--out", str(target)], check=True, capture_output=True,
                   timeout=120)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer states and chains")
    args = parser.parse_args()
    count, repeat = (1024, 3) if args.quick else (8192, 7)
    sizes = [5, 10, 20, 40] if args.quick else [5, 10, 20, 40, 80]
    work = fresh_dir("spatial")
    try:
        spatial = mbgen.load(str(MECHANISMS / "furuta.yaml"), out_dir=str(work))
        furuta = costs(spatial, count, repeat, Z)
        pendulum = mbgen.load(str(MECHANISMS / "double-pendulum.yaml"), out_dir=str(work))
        planar = costs(pendulum, count, repeat, None)
        sizes_note = (f"n = {spatial.n}, m = {spatial.m} against n = {pendulum.n}, "
                      f"m = {pendulum.m}")
        planar_z = mbgen.load(str(MECHANISMS / "actuated-double-pendulum.yaml"),
                              out_dir=str(work))
        planar_joints = costs(planar_z, count, repeat, Z)
        planar.update({what: planar_joints[what] for what in ("zdd+J", "zdd+J kkt")})
        chains = {}
        for bodies in sizes:
            mech = mbgen.load(str(spatial_chain(bodies, work)), out_dir=str(work))
            chains[bodies] = costs(mech, max(64, count // bodies), repeat, None)["qdd"]
        try:
            arm: dict | str = arm_against_pinocchio(work, min(count, 2000), repeat)
        except ImportError as exc:
            arm = f"Pinocchio is not importable ({exc}): install the bench extra"
    finally:
        remove_dir(work)
    slope = loglog_slope(list(chains), list(chains.values()), smallest=20)
    figures = [
        Figure(f"furuta {what} per state", furuta[what] * 1e9, "ns",
               note=f"planar double pendulum {planar[what] * 1e9:.0f} ns")
        for what in ("qdd", "qdd+J", "zdd+J kkt")
    ]
    figures.insert(2, Figure("furuta q̈ + J in natural coordinates / double pendulum's",
                             furuta["qdd+J"] / planar["qdd+J"], "x", note=sizes_note))
    figures += [
        Figure("furuta θ̈ (joint space) per state", furuta["zdd"] * 1e9, "ns",
               note=f"planar double pendulum's q̈ {planar['qdd'] * 1e9:.0f} ns"),
        Figure("furuta θ̈ + J (joint space) per state", furuta["zdd+J"] * 1e9, "ns",
               note=f"KKT path {furuta['zdd+J kkt'] * 1e9:.0f} ns"),
        Figure("furuta θ̈ + J (joint space) / double pendulum's q̈ + J",
               furuta["zdd+J"] / planar["qdd+J"], "x", target=2.0,
               note="its dynamics in its two joint angles against the planar pendulum's "
                    "fastest (natural coordinates, unrolled KKT)"),
    ]
    figures += [Figure(f"spatial chain {bodies} rods, q̈ per state", seconds * 1e6, "µs",
                       note=f"{seconds / bodies * 1e9:.0f} ns per rod")
                for bodies, seconds in chains.items()]
    figures.append(Figure("spatial chain: slope of log time against log N (N ≥ 20)",
                          slope, "", target=1.2, note="1 = linear"))
    if isinstance(arm, str):
        figures.append(Figure("6-DOF arm against Pinocchio: skipped", float("nan"), "",
                              note=arm))
    else:
        figures += [
            Figure("6-DOF arm: z̈ agrees with Pinocchio's aba", arm["agreement"], "relative"),
            Figure("6-DOF arm: z̈ per state", arm["mbgen zdd"] * 1e6, "µs",
                   note=f"Pinocchio {arm['version']} aba {arm['pinocchio aba'] * 1e6:.2f} µs "
                        "(a Python loop)"),
            Figure("6-DOF arm: z̈ + J / Pinocchio's aba + computeABADerivatives",
                   arm["mbgen zdd+J"] / arm["pinocchio aba+J"], "x", target=2.0,
                   note=f"{arm['mbgen zdd+J'] * 1e6:.1f} against "
                        f"{arm['pinocchio aba+J'] * 1e6:.2f} µs per state (joint space; "
                        f"KKT path {arm['mbgen zdd+J kkt'] * 1e6:.1f} µs)"),
        ]
    print_table("Spatial mechanisms: per-state cost", figures)
    write_results("spatial", figures, {"furuta_ns": {k: v * 1e9 for k, v in furuta.items()},
                                       "double_pendulum_ns": {k: v * 1e9
                                                              for k, v in planar.items()},
                                       "chain_qdd_s": chains,
                                       "arm": arm})
    plot(chains)


def plot(chains: dict[int, float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    sizes = np.array(list(chains))
    seconds = np.array(list(chains.values())) * 1e6
    ax.loglog(sizes, seconds, "o-", label="q̈ per state (batched)")
    ax.loglog(sizes, seconds[0] * sizes / sizes[0], "--", color="0.5", label="linear")
    ax.set(xlabel="rods N", ylabel="time per state [µs]",
           title="Spatial chain: q̈ cost against length")
    ax.legend()
    save_png(fig, "spatial")


if __name__ == "__main__":
    main()

"""Spatial mechanisms' speed: the Furuta pendulum against its planar stand-in, and the
growth of a spatial chain's cost with its length.

Why these figures: issue 33's targets for 3-D natural coordinates ("speed holds in 3-D").
(1) The Furuta pendulum (``mechanisms/furuta.yaml``: n = 17 coordinates, m = 15
constraints) against the planar double pendulum (``mechanisms/double-pendulum.yaml``,
n = 4, m = 2): per state of one batched call, q̈ and q̈ with ∂q̈/∂q, ∂q̈/∂q̇, ∂q̈/∂Q, and
z̈ with its Jacobians in the independent coordinates θ1, θ2 (for the planar pendulum
on ``actuated-double-pendulum.yaml``, the same pendulum with relative angles), on the
same number of consistent states; target: the Furuta pendulum's q̈ + Jacobians within
2× the double pendulum's. (2) Spatial chains of N = 5 … 80 rods (``mbgen generate chain
--spatial``: revolute joints with alternating axes, 6N coordinates, 5N equations, N DOF):
q̈ per state; target: linear growth, the log–log slope of time against N at most 1.2
over N ≥ 20. Up to about 10 rods the KKT factorization is unrolled into straight-line
code (``codegen/kkt.py``'s operation budget), beyond it the core's generic sparse
factorization runs: the cost per rod steps up once between the two.

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


def per_state(call, count: int, repeat: int) -> float:
    """Best time per state [s] of one batched call over ``count`` states."""
    return best_time(call, repeat) / count


def costs(mech, count: int, repeat: int, z: list[str] | None) -> dict[str, float]:
    """q̈, q̈ + Jacobians and (with ``z``) z̈ + Jacobians per state [s]."""
    q, qd = manifold_states(mech, count)
    found = {
        "qdd": per_state(lambda: mech.forward_dynamics(q, qd), count, repeat),
        "qdd+J": per_state(lambda: mech.forward_dynamics_jacobians(q, qd), count, repeat),
    }
    if z is not None:
        found["zdd+J"] = per_state(lambda: mech.independent_dynamics(q, qd, z=z), count,
                                   repeat)
    return found


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
        planar["zdd+J"] = costs(planar_z, count, repeat, Z)["zdd+J"]
        chains = {}
        for bodies in sizes:
            mech = mbgen.load(str(spatial_chain(bodies, work)), out_dir=str(work))
            chains[bodies] = costs(mech, max(64, count // bodies), repeat, None)["qdd"]
    finally:
        remove_dir(work)
    slope = loglog_slope(list(chains), list(chains.values()), smallest=20)
    figures = [
        Figure(f"furuta {what} per state", furuta[what] * 1e9, "ns",
               note=f"planar double pendulum {planar[what] * 1e9:.0f} ns")
        for what in ("qdd", "qdd+J", "zdd+J")
    ]
    figures.insert(2, Figure("furuta q̈ + J / double pendulum's", furuta["qdd+J"]
                             / planar["qdd+J"], "x", target=2.0,
                             note=sizes_note))
    figures += [Figure(f"spatial chain {bodies} rods, q̈ per state", seconds * 1e6, "µs",
                       note=f"{seconds / bodies * 1e9:.0f} ns per rod")
                for bodies, seconds in chains.items()]
    figures.append(Figure("spatial chain: slope of log time against log N (N ≥ 20)",
                          slope, "", target=1.2, note="1 = linear"))
    print_table("Spatial mechanisms: per-state cost", figures)
    write_results("spatial", figures, {"furuta_ns": {k: v * 1e9 for k, v in furuta.items()},
                                       "double_pendulum_ns": {k: v * 1e9
                                                              for k, v in planar.items()},
                                       "chain_qdd_s": chains})
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

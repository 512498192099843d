"""Peer comparison: mbgen's forward dynamics against Pinocchio, SymForce and CasADi.

Same machine, same run, same states. Per state, for three mechanisms:

* the four-bar (closed loop): q̈ and q̈ with Jacobians; peer: Pinocchio's constraint
  dynamics (``constraintDynamics`` with a loop-closure ``RigidConstraintModel``, and
  ``computeConstraintDynamicsDerivatives``);
* the double pendulum: q̈ and q̈ with Jacobians; peers: SymForce-generated C++ and
  CasADi-generated C, compiled here and timed in a C loop over the batch (like mbgen's
  batched call), and Pinocchio (``aba``, ``computeABADerivatives``);
* an N-bar chain (``mbgen generate chain``, N = 100 by default): q̈ and q̈ with
  Jacobians; peer: Pinocchio ABA and its derivatives;
* one double-pendulum q̈ called from Python: mbgen's one-state path
  (``mech.evaluator().forward_dynamics``)
  against ``pinocchio.aba``, SymForce's generated Python function and a CasADi Function.

Pinocchio has no batched call, so its "batched" figure is a Python loop over the states
(it includes the binding's per-call overhead, which matters only for the double pendulum).
"q̈ with Jacobians" is q̈, ∂q̈/∂q, ∂q̈/∂q̇ and ∂q̈/∂τ for every tool; mbgen's are in its
natural coordinates (n = 2 × points), the peers' in joint angles (n = bars).

Before timing, every tool's q̈ is checked against mbgen's on the same states: mbgen's
point accelerations are turned into joint-angle accelerations (angle of each bar from its
two points, differentiated twice) and compared with the peers' q̈; the maximum difference
per tool and mechanism is printed and recorded.

The peers are the optional ``bench`` extra (``pip install ".[test,bench]"``); a peer that
cannot be imported (or built) is skipped with its reason, and mbgen's rows still run.

Run: ``.venv/bin/python benchmarks/peers.py [--quick] [--bodies N]`` (any cwd). Writes
``benchmarks/results/peers.json``, ``peers.md`` (the table), ``peers.png`` (mbgen's time
over each peer's, per row) and the README's table (peers_table.py); not with ``--quick``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import peers_table
import yaml
from _common import (
    MECHANISMS,
    REPO,
    RESULTS,
    Figure,
    best_time,
    chain_file,
    fresh_dir,
    print_table,
    remove_dir,
    save_png,
    write_results,
)
from _peers import (
    SerialLinkage,
    joint_coordinates,
    joint_jacobians,
    natural_coordinates,
    uniform_bar,
)
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import mbgen

PEERS = ("Pinocchio", "SymForce", "CasADi")
PEER_MODULES = {"Pinocchio": "pinocchio", "SymForce": "symforce", "CasADi": "casadi"}
AGREEMENT = 1e-6  # relative; q̈ agrees to ~1e-13, the Jacobian check (differences) to ~1e-9
JACOBIAN_CHECK = 10  # states for the Jacobian check (mbgen's chain rule costs dof solves)
FOURBAR_NOISE = 0.1  # m; q0 perturbation before projecting onto Φ = 0 (stays on its branch)


@dataclass(frozen=True)
class Sizes:
    """Batch sizes (states) and repeats; ``--quick`` uses the small ones."""

    pendulum: int  # mbgen, SymForce, CasADi: C loops, cheap per state
    fourbar: int
    chain: int  # q̈ of the N-bar chain
    chain_jacobians: int  # 3 dense n×n per state: memory bound (n = 200: ~1 MB per state)
    python_loop: int  # Pinocchio's per-state Python loop on the small mechanisms
    repeat: int
    single_number: int
    single_repeat: int
    check: int  # states used for the agreement check


FULL = Sizes(pendulum=100_000, fourbar=50_000, chain=500, chain_jacobians=40,
             python_loop=10_000, repeat=5, single_number=2000, single_repeat=7, check=200)
QUICK = Sizes(pendulum=5_000, fourbar=2_000, chain=20, chain_jacobians=4, python_loop=500,
              repeat=2, single_number=200, single_repeat=3, check=20)


@dataclass(frozen=True)
class Row:
    """One line of the comparison: a mechanism, a quantity, its unit and targets."""

    case: str  # "fourbar", "pendulum", "chain"
    kind: str  # "qdd", "jacobians", "single"
    title: str
    unit: str
    scale: float  # seconds → unit
    target: float | None = None  # mbgen's target from the issue, in ``unit``
    issue: str = ""  # the peers' figures the issue measured
    # issue 34's target for mbgen's time over one peer's: (peer, largest ratio)
    against: tuple[str, float] | None = None


@dataclass
class Case:
    """A mechanism in both descriptions, with its states."""

    key: str
    title: str
    mech: Any
    linkage: SerialLinkage
    q: np.ndarray  # mbgen states (S, n)
    qd: np.ndarray
    joints: np.ndarray = field(init=False)  # the same states in joint angles (S, dof)
    rates: np.ndarray = field(init=False)
    tau: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        names = self.mech.coordinate_names
        self.joints, self.rates, _ = joint_coordinates(self.linkage, names, self.q, self.qd)
        self.tau = np.zeros_like(self.joints)


# -- mechanisms and states ---------------------------------------------------------------------
def parameters(path: Path) -> dict[str, float]:
    return {k: float(v) for k, v in (yaml.safe_load(path.read_text()).get("parameters")
                                      or {}).items()}


def fourbar_linkage(path: Path) -> SerialLinkage:
    """mechanisms/fourbar.yaml: crank 0→1 (L, 1 kg), coupler 1→2 (2L, 2 kg), rocker 2→3.

    Each body: I0 = m l²/3 about its first point, cog = [l/2, 0] (given in the file);
    the rocker's length is ``auto``: |p2 - p3| at q0 = |(L, 2L) - (xb, 0)|.
    """
    p = parameters(path)
    length, xb = p["L"], p["xb"]
    rocker = float(np.hypot(xb - length, 2 * length))
    bars = (uniform_bar(1.0, length), uniform_bar(2.0, 2 * length), uniform_bar(4.0, rocker))
    return SerialLinkage("fourbar", bars, (0, 1, 2, 3), {0: (0.0, 0.0), 3: (xb, 0.0)},
                         closed=True)


def chain_linkage(path: Path, bodies: int) -> SerialLinkage:
    """The double pendulum and `mbgen generate chain` files: uniform bars L, m from a pivot."""
    p = parameters(path)
    bars = tuple(uniform_bar(p["m"], p["L"]) for _ in range(bodies))
    return SerialLinkage(path.stem, bars, tuple(range(bodies + 1)), {0: (0.0, 0.0)})


def open_chain_states(mech: Any, linkage: SerialLinkage, count: int, seed: int,
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Random bar angles (uniform) and rates (normal, 1 rad/s), exactly on the manifold."""
    rng = np.random.default_rng(seed)
    theta = rng.uniform(-np.pi, np.pi, (count, linkage.dof))
    omega = rng.standard_normal((count, linkage.dof))
    return natural_coordinates(linkage, mech.coordinate_names, theta, omega)


def closed_loop_states(mech: Any, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """As benchmarks/dynamics.py: perturb q0, project on Φ = 0, project a random q̇."""
    rng = np.random.default_rng(seed)
    q = mech.solve_position(mech.q0 + FOURBAR_NOISE * rng.standard_normal((count, mech.n)),
                            minimum_norm=True)
    qd = mech.project_velocity(q, rng.standard_normal((count, mech.n)))
    return q, qd


def make_cases(sizes: Sizes, bodies: int, out_dir: Path, say: Callable[[str], None],
               ) -> dict[str, Case]:
    pendulum_file = MECHANISMS / "double-pendulum.yaml"
    fourbar_file = MECHANISMS / "fourbar.yaml"
    chain_path = chain_file(bodies, out_dir, "peers")
    cases = {}
    for key, title, path, linkage, count in (
        ("fourbar", "four-bar (closed loop)", fourbar_file, fourbar_linkage(fourbar_file),
         sizes.fourbar),
        ("pendulum", "double pendulum", pendulum_file, chain_linkage(pendulum_file, 2),
         sizes.pendulum),
        ("chain", f"{bodies}-bar chain", chain_path, chain_linkage(chain_path, bodies),
         max(sizes.chain, sizes.chain_jacobians)),
    ):
        start = time.perf_counter()
        mech = mbgen.load(str(path), out_dir=str(out_dir))
        say(f"mbgen: {title} (n = {mech.n}) loaded in {time.perf_counter() - start:.1f} s")
        if linkage.closed:
            q, qd = closed_loop_states(mech, count, seed=1)
        else:
            q, qd = open_chain_states(mech, linkage, count, seed=2)
        cases[key] = Case(key, title, mech, linkage, q, qd)
    return cases


# -- peers -------------------------------------------------------------------------------------
@dataclass
class Peers:
    pinocchio: dict[str, Any] = field(default_factory=dict)  # case key → PinocchioRunner
    compiled: dict[str, Any] = field(default_factory=dict)  # "SymForce"/"CasADi" → CompiledPeer
    skipped: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


def load_peers(cases: dict[str, Case], workdir: Path, say: Callable[[str], None]) -> Peers:
    import _peers

    peers = Peers()
    for tool in PEERS:
        module = PEER_MODULES[tool]
        try:
            imported = importlib.import_module(module)
        except Exception as exc:  # ImportError, or a broken binary wheel
            peers.skipped[tool] = (f"`import {module}` failed ({type(exc).__name__}: {exc}); "
                                   "install the bench extra: pip install \".[bench]\"")
            continue
        peers.versions[tool] = str(getattr(imported, "__version__", "?"))
        start = time.perf_counter()
        try:
            if tool == "Pinocchio":
                for key, case in cases.items():
                    peers.pinocchio[key] = _peers.pinocchio_runner(case.linkage)
                peers.info[tool] = {k: {"algorithm": r.algorithm,
                                        "jacobians": r.jacobian_algorithm, **r.info}
                                    for k, r in peers.pinocchio.items()}
            else:
                build = _peers.symforce_build if tool == "SymForce" else _peers.casadi_build
                peer = build(cases["pendulum"].linkage, workdir)
                peers.compiled[tool] = peer
                peers.info[tool] = peer.info
        except Exception as exc:  # a peer that does not build is skipped, not fatal
            if tool == "Pinocchio":
                peers.pinocchio.clear()
            peers.skipped[tool] = f"set-up failed: {type(exc).__name__}: {exc}"
            continue
        say(f"{tool} {peers.versions[tool]}: ready in {time.perf_counter() - start:.1f} s")
    for tool, reason in peers.skipped.items():
        say(f"[yellow]skipped {tool}[/]: {escape(reason)}")
    return peers


# -- agreement ---------------------------------------------------------------------------------
def agreement(cases: dict[str, Case], peers: Peers, count: int) -> list[dict[str, Any]]:
    """Max |q̈_peer - q̈_mbgen| in joint-angle accelerations, on the first ``count`` states."""
    rows = []
    for key, case in cases.items():
        k = min(count, case.q.shape[0])
        q, qd = case.q[:k], case.qd[:k]
        qdd = case.mech.forward_dynamics(q, qd)
        _, _, reference = joint_coordinates(case.linkage, case.mech.coordinate_names, q, qd,
                                            qdd)
        assert reference is not None
        scale = float(np.abs(reference).max())
        results: dict[str, np.ndarray] = {}
        jacobian_sets: dict[str, list[np.ndarray]] = {}
        joints, rates, tau = case.joints[:k], case.rates[:k], case.tau[:k]
        if key in peers.pinocchio:
            runner = peers.pinocchio[key]
            results["Pinocchio"] = np.array([runner.qdd(*s) for s in zip(joints, rates, tau,
                                                                          strict=True)])
            jac = [[np.array(a) for a in runner.qdd_jacobians(*s)]
                   for s in zip(joints, rates, tau, strict=True)]
            results["Pinocchio (derivatives call)"] = np.array([j[0] for j in jac])
            jacobian_sets["Pinocchio"] = [np.array([j[i] for j in jac]) for i in (1, 2, 3)]
        if key == "pendulum":
            for tool, peer in peers.compiled.items():
                results[f"{tool} (C)"] = peer.qdd_batch(joints, rates, tau)
                out = peer.jacobians_batch(joints, rates, tau)
                results[f"{tool} (C, Jacobians call)"] = out[0]
                jacobian_sets[tool] = list(out[1:])
                results[f"{tool} (Python)"] = np.array(
                    [np.asarray(peer.python_qdd(*s), dtype=float).ravel()
                     for s in zip(joints, rates, tau, strict=True)])
        phi = float(np.abs(case.mech.phi(q)).max())
        for tool, values in results.items():
            diff = float(np.abs(values - reference).max())
            rows.append({"mechanism": case.title, "tool": tool, "states": k,
                         "max_abs_qdd_difference": diff, "max_abs_qdd": scale,
                         "relative": diff / scale, "max_abs_phi_of_states": phi})
        # Jacobians in joint angles: mbgen's mapped by the chain rule (open chains only; a
        # closed loop's joint angles are not independent, so there is no common set).
        if jacobian_sets and not case.linkage.closed:
            j = min(k, JACOBIAN_CHECK)
            mine = joint_jacobians(case.linkage, case.mech.coordinate_names, joints[:j],
                                   rates[:j], case.mech.forward_dynamics_jacobians)
            size = max(float(np.abs(m).max()) for m in mine)
            for tool, jac in jacobian_sets.items():
                diff = max(float(np.abs(a[:j] - b).max()) for a, b in zip(jac, mine,
                                                                          strict=True))
                rows.append({"mechanism": case.title, "tool": f"{tool}: Jacobians "
                             "(∂q̈/∂q, ∂q̈/∂q̇, ∂q̈/∂τ)", "states": j,
                             "max_abs_qdd_difference": diff, "max_abs_qdd": size,
                             "relative": diff / size, "max_abs_phi_of_states": phi})
    return rows


# -- timing ------------------------------------------------------------------------------------
def python_loop(call: Callable[..., Any], *columns: np.ndarray) -> Callable[[], None]:
    states = list(zip(*(list(c) for c in columns), strict=True))

    def run() -> None:
        for s in states:
            call(*s)

    return run


def measure(cases: dict[str, Case], peers: Peers, sizes: Sizes,
            say: Callable[[str], None]) -> tuple[dict[tuple[str, str, str], float],
                                                 dict[tuple[str, str, str], str]]:
    """Seconds per state (or per call) for every (case, kind, tool) that ran."""
    times: dict[tuple[str, str, str], float] = {}
    notes: dict[tuple[str, str, str], str] = {}
    r = sizes.repeat

    def record(key: tuple[str, str, str], function: Callable[[], Any], count: int,
               note: str, repeat: int = r) -> None:
        function()  # warm up (first touch of the output pages, caches)
        times[key] = best_time(function, repeat) / count
        notes[key] = note
        say(f"  {key[0]:8s} {key[1]:9s} {key[2]:10s} {times[key] * 1e6:10.4g} µs  ({note})")

    for key, case in cases.items():
        mech = case.mech
        counts = {"qdd": case.q.shape[0], "jacobians": case.q.shape[0]}
        if key == "chain":
            counts = {"qdd": sizes.chain, "jacobians": sizes.chain_jacobians}
        for kind, count in counts.items():
            q, qd = case.q[:count], case.qd[:count]
            # every batched tool writes into preallocated outputs: the figures are the
            # computation, not the page faults of fresh arrays (mbgen's Jacobians, in
            # natural coordinates, are 4x the peers' in joint angles)
            if kind == "qdd":
                call, out = mech.forward_dynamics, np.empty((count, mech.n))
            else:
                call = mech.forward_dynamics_jacobians
                out = (np.empty((count, mech.n)),
                       *(np.empty((count, mech.n, mech.n)) for _ in range(3)))
            record((key, kind, "mbgen"), lambda c=call, q=q, qd=qd, o=out: c(q, qd, out=o), count,
                   f"batched into preallocated outputs, N = {count}, best of {r}")
            runner = peers.pinocchio.get(key)
            if runner is not None:
                loop = min(count, sizes.python_loop)
                pcall = runner.qdd if kind == "qdd" else runner.qdd_jacobians
                name = runner.algorithm if kind == "qdd" else runner.jacobian_algorithm
                record((key, kind, "Pinocchio"),
                       python_loop(pcall, case.joints[:loop], case.rates[:loop],
                                   case.tau[:loop]), loop,
                       f"{name}; Python loop, N = {loop}, best of {r}")
                if runner.iterations is not None:
                    notes[(key, kind, "Pinocchio")] += (f"; proximal iterations "
                                                        f"{runner.iterations()}")
            if key == "pendulum":
                for tool, peer in peers.compiled.items():
                    batch = peer.qdd_batch if kind == "qdd" else peer.jacobians_batch
                    j, v, t = case.joints[:count], case.rates[:count], case.tau[:count]
                    out = batch(j, v, t)
                    record((key, kind, tool), lambda b=batch, j=j, v=v, t=t, o=out: b(j, v, t, o),
                           count, f"generated code, C loop into preallocated outputs, "
                           f"N = {count}, best of {r}")

    # one state from Python: double pendulum and four-bar, q̈ and q̈ with Jacobians
    n, rep = sizes.single_number, sizes.single_repeat
    for key in ("pendulum", "fourbar"):
        case = cases[key]
        q1, qd1 = case.q[0].copy(), case.qd[0].copy()
        j1, v1, t1 = case.joints[0].copy(), case.rates[0].copy(), case.tau[0].copy()
        evaluator = case.mech.evaluator()
        path = "pybind11 extension" if evaluator.fast else "cffi"
        single: list[tuple[str, str, Callable[[], Any], str]] = [
            ("single", "mbgen", lambda e=evaluator, q=q1, v=qd1: e.forward_dynamics(q, v),
             f"mech.evaluator().forward_dynamics(q, qd) ({path})"),
            ("single_jacobians", "mbgen",
             lambda e=evaluator, q=q1, v=qd1: e.forward_dynamics_jacobians(q, v),
             f"mech.evaluator().forward_dynamics_jacobians(q, qd) ({path})")]
        if key in peers.pinocchio:
            runner = peers.pinocchio[key]
            single += [("single", "Pinocchio",
                        lambda r=runner, j=j1, v=v1, t=t1: r.qdd(j, v, t),
                        f"pinocchio.{runner.algorithm}"),
                       ("single_jacobians", "Pinocchio",
                        lambda r=runner, j=j1, v=v1, t=t1: r.qdd_jacobians(j, v, t),
                        f"pinocchio.{runner.jacobian_algorithm}")]
        if key == "pendulum":
            for tool, peer in peers.compiled.items():
                single.append(("single", tool,
                               lambda p=peer, j=j1, v=v1, t=t1: p.python_qdd(j, v, t),
                               peer.info["python"]))
        for kind, tool, function, what in single:
            function()
            entry = (key, kind, tool)
            times[entry] = best_time(function, rep, n)
            notes[entry] = f"{what}; best of {rep}×{n}"
            say(f"  {key} {kind:16s} {tool:10s} {times[entry] * 1e6:10.4g} µs  "
                f"({notes[entry]})")
    return times, notes


# -- report ------------------------------------------------------------------------------------
def rows_for(bodies: int) -> list[Row]:
    chain = f"{bodies}-bar chain"
    # The issue's targets are for the 100-bar chain; another length is context only.
    chain_targets = (20.0, 500.0) if bodies == 100 else (None, None)
    chain_against = ("Pinocchio", 0.5) if bodies == 100 else None
    return [
        Row("fourbar", "qdd", "four-bar (closed loop) q̈", "µs/state", 1e6,
            issue="Pinocchio constraint dynamics 6.8 µs"),
        Row("fourbar", "jacobians", "four-bar (closed loop) q̈ with Jacobians", "µs/state", 1e6,
            issue="Pinocchio constraint dynamics derivatives 16.7 µs"),
        Row("pendulum", "qdd", "double pendulum q̈", "ns/state", 1e9,
            issue="SymForce C++ 63 ns; CasADi C 168 ns", against=("SymForce", 1.0)),
        Row("pendulum", "jacobians", "double pendulum q̈ with Jacobians", "ns/state", 1e9,
            target=250.0, issue="SymForce C++ 134 ns; CasADi C 241 ns",
            against=("SymForce", 1.0)),
        Row("chain", "qdd", f"{chain} q̈", "µs/state", 1e6, target=chain_targets[0],
            issue="Pinocchio ABA 47 µs" if bodies == 100 else ""),
        Row("chain", "jacobians", f"{chain} q̈ with Jacobians", "µs/state", 1e6,
            target=chain_targets[1], against=chain_against,
            issue="Pinocchio ABA derivatives 526 µs" if bodies == 100 else ""),
        Row("pendulum", "single", "one state from Python, double pendulum q̈", "µs/call", 1e6,
            issue="Pinocchio 1.3 µs; SymForce 2.8 µs", against=("Pinocchio", 1.0)),
        Row("pendulum", "single_jacobians",
            "one state from Python, double pendulum q̈ with Jacobians", "µs/call", 1e6,
            against=("Pinocchio", 1.0)),
        Row("fourbar", "single", "one state from Python, four-bar q̈", "µs/call", 1e6,
            against=("Pinocchio", 1.0)),
        Row("fourbar", "single_jacobians", "one state from Python, four-bar q̈ with Jacobians",
            "µs/call", 1e6, against=("Pinocchio", 1.0)),
    ]


def build_figures(rows: list[Row], times: dict[tuple[str, str, str], float],
                  notes: dict[tuple[str, str, str], str]) -> tuple[list[Figure], list[dict]]:
    figures: list[Figure] = []
    summary = []
    for row in rows:
        measured = {tool: times[(row.case, row.kind, tool)] * row.scale
                    for tool in ("mbgen", *PEERS) if (row.case, row.kind, tool) in times}
        for tool, value in measured.items():
            figures.append(Figure(f"{row.title}: {tool}", value, row.unit,
                                  row.target if tool == "mbgen" else None,
                                  notes[(row.case, row.kind, tool)]))
        peer_values = {t: v for t, v in measured.items() if t != "mbgen"}
        best = min(peer_values, key=peer_values.__getitem__) if peer_values else None
        ratio = measured["mbgen"] / peer_values[best] if best else None
        if best is not None and ratio is not None:
            figures.append(Figure(f"{row.title}: mbgen / best peer", ratio, "×",
                                  note=f"best peer here: {best}; < 1 means mbgen is faster"))
        if row.against is not None and row.against[0] in measured:
            peer, limit = row.against
            figures.append(Figure(f"{row.title}: mbgen / {peer}",
                                  measured["mbgen"] / measured[peer], "×", limit,
                                  f"issue 34's target: ≤ {limit:g} × {peer}'s time"))
        summary.append({"row": row.title, "unit": row.unit, "values": measured,
                        "best_peer": best, "mbgen_over_best_peer": ratio,
                        "target": row.target, "issue_peer_figures": row.issue})
    return figures, summary


def _num(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def print_comparison(summary: list[dict], console: Console) -> None:
    table = Table(title="per state: mbgen vs peers (this machine, this run)",
                  title_justify="left")
    table.add_column("")
    table.add_column("unit")
    for tool in ("mbgen", *PEERS):
        table.add_column(tool, justify="right")
    table.add_column("mbgen / best peer", justify="right")
    table.add_column("mbgen target", justify="right")
    table.add_column("issue's peer figures", style="dim")
    for item in summary:
        values = item["values"]
        ratio = item["mbgen_over_best_peer"]
        verdict = "" if ratio is None else (f"[green]{ratio:.2g}×[/]" if ratio <= 1
                                            else f"[red]{ratio:.2g}×[/]")
        if item["best_peer"]:
            verdict += f" ({item['best_peer']})"
        target = "" if item["target"] is None else f"≤ {_num(item['target'])}"
        table.add_row(item["row"], item["unit"], *(_num(values.get(t)) for t in ("mbgen", *PEERS)),
                      verdict, target, item["issue_peer_figures"])
    console.print(table)


def print_agreement(rows: list[dict], console: Console) -> None:
    if not rows:
        console.print("same physics: no peer available, nothing to compare")
        return
    table = Table(title="same physics: max |peer - mbgen| in joint angles (q̈ \\[rad/s²]; "
                  "Jacobians: mbgen's mapped by the chain rule)", title_justify="left")
    for column in ("mechanism", "tool", "states", "max |Δ|", "max |mbgen|", "relative"):
        table.add_column(column, justify="left" if column in ("mechanism", "tool") else "right")
    for r in rows:
        table.add_row(r["mechanism"], r["tool"], str(r["states"]),
                      f"{r['max_abs_qdd_difference']:.2e}", f"{r['max_abs_qdd']:.3g}",
                      f"{r['relative']:.1e}")
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="small batches and few repeats: a fast check, not a measurement")
    parser.add_argument("--bodies", type=int, default=100,
                        help="length of the N-bar chain (default 100)")
    args = parser.parse_args(argv)
    if args.bodies < 1:
        parser.error("--bodies must be at least 1")
    sizes = QUICK if args.quick else FULL
    console = Console(width=None if sys.stdout.isatty() else 180)
    say = console.print
    out_dir = Path(os.environ.get("MBGEN_OUT", REPO / "generated"))
    workdir = fresh_dir("peers")
    start = time.perf_counter()
    try:
        cases = make_cases(sizes, args.bodies, out_dir, say)
        peers = load_peers(cases, workdir, say)
        check = agreement(cases, peers, sizes.check)
        print_agreement(check, console)
        worst = max((r["relative"] for r in check), default=0.0)
        if worst > AGREEMENT:
            say(f"[red]the tools disagree (relative {worst:.1e}): the timings below compare "
                "different problems[/]")
        say("timing" + (" (--quick: small batches, not a measurement)" if args.quick else ""))
        times, notes = measure(cases, peers, sizes, say)
    finally:
        remove_dir(workdir)
    elapsed = time.perf_counter() - start
    rows = rows_for(args.bodies)
    figures, summary = build_figures(rows, times, notes)
    print_comparison(summary, console)
    print_table("peers: figures (per state; targets are mbgen's from the issue)", figures,
                console)
    extra = {
        "quick": args.quick,
        "bodies": args.bodies,
        "sizes": sizes.__dict__,
        "agreement": check,
        "agreement_note": "max |peer - mbgen| in joint angles on the same states; relative to "
                          "max |mbgen|; Jacobian rows: mbgen's exact Jacobians mapped to joint "
                          "angles by the chain rule (central differences of the coordinate "
                          "maps only), open chains only",
        "comparison": summary,
        "peers": {"versions": peers.versions, "skipped": peers.skipped, "info": peers.info},
        "mbgen_note": "mbgen figures are of the C core at the time of the run",
        "benchmark_seconds": elapsed,
    }
    missed = [f.name for f in figures if f.met is False]
    verdict = f"targets missed: {', '.join(missed)}" if missed else "all targets met"
    if args.quick:  # a quick check never replaces the measured figures
        say(f"--quick: results not written ({elapsed:.1f} s); {verdict}")
        return 0
    path = write_results("peers", figures, extra)
    results = peers_table.load(path)
    table = peers_table.render(results)
    (RESULTS / "peers.md").write_text(table + "\n")
    readme = REPO / "README.md"
    readme.write_text(peers_table.with_table(readme.read_text(), table))
    png = ratio_chart(summary)
    say(f"wrote {path}, peers.md, {png.name} and the README's table ({elapsed:.1f} s); "
        f"{verdict}")
    return 0


def ratio_chart(summary: list[dict]) -> Path:
    """peers.png: mbgen's time over each peer's, per row (log scale; < 1: mbgen ahead)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(10, 0.45 * len(summary) + 1.5))
    rows = list(reversed(summary))
    peers = [tool for tool in PEERS if any(tool in r["values"] for r in rows)]
    height = 0.8 / max(len(peers), 1)
    for k, tool in enumerate(peers):
        ratios = [r["values"]["mbgen"] / r["values"][tool] if tool in r["values"] else 0.0
                  for r in rows]
        axes.barh([i + (k - (len(peers) - 1) / 2) * height for i in range(len(rows))],
                  ratios, height, label=f"mbgen / {tool}")
    axes.axvline(1.0, color="k", lw=1)
    axes.set_xscale("log")
    axes.set_yticks(range(len(rows)), [r["row"] for r in rows], fontsize=7)
    axes.set(xlabel="mbgen's time / the peer's (< 1: mbgen is faster)",
             title="mbgen against its peers, one run of benchmarks/peers.py")
    axes.legend(fontsize=7)
    return save_png(figure, "peers")


if __name__ == "__main__":
    sys.exit(main())

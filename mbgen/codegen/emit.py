"""KernelSet → C source, cffi declarations and the metadata the runtime needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy as sp

from mbgen.codegen.c_printer import element_names, eliminate
from mbgen.codegen.kkt import KktProgram, kkt_program
from mbgen.codegen.lanes import (
    JACOBIAN_LANE_KERNELS,
    JOINT_SPACE_LANE_KERNELS,
    LANE_ARRAYS,
    LANE_KERNELS,
    LANE_STATEMENTS,
    jacobians_have_lanes,
    kkt_has_lanes,
)
from mbgen.codegen.ordering import coupling_graph, minimum_degree_order
from mbgen.codegen.templates import render
from mbgen.redundancy import independent_rows
from mbgen.symbolic.derive import Kernel, KernelSet
from mbgen.version import __version__

# Every kernel is f(q, x, p) with x one of q̇, v, λ, q̈ (the core's mb_kernel_fn).
# The joint-space kernels read their parameter parts k (symbolic/reduced.py) where the
# others read p.
ARRAY_NAMES = {"q": "q", "qd": "x", "v": "x", "lam": "x", "qdd": "x", "p": "p", "k": "p"}

# The generated file is compiled as several translation units side by side (parts, one
# gcc each: build.py). What a piece of it costs gcc (at -O2, in µs; -O1 keeps the shares),
# measured on the four-bar and a 100-bar chain (within a factor 2): per statement and per
# character of a kernel, the kernels' lane variants (vectorized) LANES times over, per
# statement of the unrolled KKT code (its lane functions counted three times over); a part
# is about PART_COST (a part of its own costs ~20 ms: starting gcc, reading the headers)
STATEMENT_COST, CHARACTER_COST, LANES = 250, 10, 4
KKT_STATEMENT_COST = 270
PART_COST = 150_000
MAX_PARTS = 16


@dataclass
class GeneratedSource:
    c_source: str
    meta: dict[str, Any]
    parts: int = 1  # translation units (MBGEN_PART = 0 … parts - 1) it is compiled as


def kernel_elements(kernels: KernelSet) -> dict[sp.Symbol, tuple[str, int]]:
    """Each input symbol's array and index in the kernels' arguments."""
    return {symbol: (ARRAY_NAMES[array], k) for array, symbols in kernels.symbols.items()
            for k, symbol in enumerate(symbols)}


def kernel_data(kernel: Kernel, elements: dict[sp.Symbol, tuple[str, int]],
                jacobian_lanes: bool = False) -> dict[str, Any]:
    """What mechanism.c.j2 writes a kernel from: its pattern and its printed expressions,
    once per state and, for the kernels the batched prediction (and, with
    ``jacobian_lanes``, the batched Jacobians) uses, once per lane."""
    eliminated = eliminate([e for _, e in kernel.entries])
    lanes = kernel.name in LANE_KERNELS or (jacobian_lanes
                                            and kernel.name in JACOBIAN_LANE_KERNELS) or (
        kernel.name in JOINT_SPACE_LANE_KERNELS
        and len(eliminated.replacements) <= LANE_STATEMENTS)
    return {
        "name": kernel.name, "doc": kernel.doc, "nnz": kernel.nnz,
        "rows": [index[0] for index, _ in kernel.entries],
        "cols": [index[1] for index, _ in kernel.entries] if len(kernel.shape) > 1 else [],
        "body": eliminated.printed(element_names(elements)),
        "lane_body": (eliminated.printed_in_lanes(element_names(elements, LANE_ARRAYS))
                      if lanes else None),
    }


def coordinate_order(kernels: KernelSet) -> list[int]:
    """Fill-reducing order of q for the sparse KKT factorization (see ordering.py)."""
    rows: dict[int, list[int]] = {}
    for (i, j), _ in kernels["phi_q"].entries:
        rows.setdefault(i, []).append(j)
    mass = [index for index, _ in kernels["mass"].entries]
    return minimum_degree_order(coupling_graph(kernels.model.n, mass, rows.values()))


def rows_independent_at_q0(kernels: KernelSet) -> list[int]:
    """The constraint rows the runtime's dynamics will use (the same rule, mbgen/redundancy.py),
    from Φq evaluated at q0 here."""
    mech = kernels.model.mechanism
    values = dict(zip(kernels.symbols["q"], mech.initial_coordinates(), strict=True))
    values.update(mech.parameter_values)
    jacobian = np.zeros((kernels.model.m, kernels.model.n))
    for (i, j), expr in kernels["phi_q"].entries:
        jacobian[i, j] = float(expr.xreplace(values))
    return independent_rows(jacobian)[0]


def generate(kernels: KernelSet, progress: Any = None) -> GeneratedSource:
    """Render the module's C source; ``progress(kernel_name)`` is called per kernel."""
    model = kernels.model
    mechanism = model.mechanism
    elements = kernel_elements(kernels)
    order = coordinate_order(kernels)
    patterns = {k.name: [index for index, _ in k.entries] for k in kernels.kernels}
    kkt = kkt_program(model.n, rows_independent_at_q0(kernels), order, patterns)
    kkt_lanes = kkt is not None and kkt_has_lanes(kkt)
    jacobian_lanes = jacobians_have_lanes(kkt)
    rendered = []
    for k in kernels.kernels:
        if progress is not None:
            progress(k.name)
        rendered.append(kernel_data(k, elements, jacobian_lanes))
    groups = kkt_costs(kkt, kkt_lanes, jacobian_lanes) if kkt is not None else {}
    parts, where = assign_parts([*map(kernel_cost, rendered), *groups.values()])
    for kernel, part in zip(rendered, where, strict=False):
        kernel["part"] = part
    kkt_parts = dict(zip(groups, where[len(rendered):], strict=True))
    c_source = render(
        "mechanism.c.j2", version=__version__, source=mechanism.source, name=mechanism.name,
        n=model.n, m=model.m, np=len(model.params), length=repr(mechanism.length_scale()),
        kernels=rendered, order=order, kkt=kkt,
        kkt_lanes=kkt_lanes, jacobian_lanes=jacobian_lanes, kkt_parts=kkt_parts,
        parts=parts, joint_space=[] if isinstance(kernels.joint_space, str)
        else kernels.joint_space)
    return GeneratedSource(c_source, build_meta(kernels), parts)


def kernel_cost(data: dict[str, Any]) -> int:
    """What compiling a kernel costs (µs, roughly), from its statements and their length."""
    body = data["body"]
    statements = len(body.temporaries) + len(body.outputs)
    characters = sum(len(t.value) for t in body.temporaries) + sum(map(len, body.outputs))
    cost = STATEMENT_COST * statements + CHARACTER_COST * characters
    return cost * (LANES if data["lane_body"] is not None else 1)


def kkt_costs(kkt: KktProgram, lanes: bool, jacobian_lanes: bool = False) -> dict[str, int]:
    """The same for each group of the unrolled KKT functions (kkt_functions.c.j2)."""
    factor = kkt.prologue.statements + sum(c.statements for body in kkt.factor for c in body)
    solve = sum(map(len, kkt.solve))
    statements = {"factor": factor, "solve": solve}
    if kkt.inverse is not None:
        statements["inverse"] = sum(map(len, kkt.inverse))
    if lanes:
        statements.update(factor_lanes=3 * factor, solve_lanes=3 * solve)
    if kkt.jacobians:
        statements["jacobians"] = sum(len(column.sums) + len(column.outputs)
                                      for block in kkt.jacobians for column in block.columns)
    if jacobian_lanes:
        statements.update(inverse_lanes=3 * statements["inverse"],
                          jacobians_lanes=3 * statements["jacobians"])
    return {group: KKT_STATEMENT_COST * count for group, count in statements.items()}


def assign_parts(costs: list[int]) -> tuple[int, list[int]]:
    """Pieces of the given costs spread over parts of about PART_COST each (an even number
    of them beyond one: machines have an even number of cores), the largest first onto
    the lightest part: the number of parts and each piece's part (part 0 also holds the
    tables)."""
    count = min(MAX_PARTS, max(1, round(sum(costs) / PART_COST)))
    count -= count % 2 if count > 1 else 0  # even: three parts on two cores take two rounds
    load = [0] * count
    parts = [0] * len(costs)
    for index in sorted(range(len(costs)), key=lambda i: -costs[i]):
        part = min(range(count), key=load.__getitem__)
        parts[index] = part
        load[part] += costs[index]
    return count, parts


def build_meta(kernels: KernelSet) -> dict[str, Any]:
    model = kernels.model
    mech = model.mechanism
    values = mech.parameter_values

    def number(expr: sp.Expr) -> float:
        return float(sp.N(expr.subs(values)))

    return {
        "name": mech.name,
        "source": mech.source,
        "mbgen_version": __version__,
        "n": model.n,
        "m": model.m,
        "coordinate_names": model.coordinate_names,
        "coordinate_units": mech.coordinate_units,
        "q0": mech.initial_coordinates(),
        "parameters": {p.name: p.value for p in mech.parameters},
        "constraint_labels": [c.label for c in model.constraints],
        "sensor_labels": model.sensor_labels,
        # one entry per output row: the sensor's `noise` (standard deviation) or None
        "sensor_noise": [s.noise for s in mech.sensors
                         for _ in range(s.outputs)],
        "actuators": [{"name": a.name, "coordinate": a.coordinate} for a in mech.actuators],
        # dry friction: coordinate and stiction rate (bounds: the `coefficients` kernel)
        "friction": [{"name": f.name, "coordinate": f.coordinate, "stiction": f.stiction}
                     for f in mech.frictions],
        "independent": mech.independent,
        # the joint-space dynamics' independent coordinates, or why there is none
        "joint_space": kernels.joint_space,
        "dissipative": (any(s.damping != 0 for s in mech.springs)
                        or any(f.viscous != 0 or f.coulomb != 0 for f in mech.frictions)),
        "dimension": mech.dimension,
        "points": [{"index": p.index, "name": p.name, "fixed": p.fixed, "x": number(p.x),
                    "y": number(p.y), "z": number(p.z)} for p in mech.points],
        "bodies": [{"name": b.name, "points": list(b.points), "mass": number(b.mass),
                    "visual": b.visual} for b in mech.all_bodies],
        # spatial: unit vectors, and each body's basis (origin point, three directions'
        # ends), whose determinant's sign tells a body from its mirror image
        "vectors": [{"index": v.index, "name": v.name, "fixed": v.fixed, "x": number(v.x),
                     "y": number(v.y), "z": number(v.z)} for v in mech.vectors],
        "frames": [{"origin": ["point", b.origin],
                    "basis": [[e.kind, e.index] for e in b.basis]}
                   for b in mech.spatial_bodies],
        # what a drawing needs besides points and bodies
        "sliders": [{"name": s.name, "point": s.point, "line_points": list(s.line_points)}
                    for s in mech.sliders],
        "springs": [{"name": s.name, "points": list(s.points)} for s in mech.springs],
        "sensors": [{"name": s.name, "kind": s.kind, "target": s.target,
                     "outputs": s.outputs} for s in mech.sensors],
        # read with q̈, apart from the sensors: labels, and where each sits
        "accelerometer_labels": model.accelerometer_labels,
        "accelerometer_noise": [s.noise for s in mech.accelerometers
                                for _ in range(s.outputs)],
        "accelerometers": [{"name": s.name, "body": s.target, "point": s.point,
                            "outputs": s.outputs} for s in mech.accelerometers],
        "kernels": {k.name: {"inputs": list(k.inputs), "shape": list(k.shape),
                             "indices": [list(index) for index, _ in k.entries]}
                    for k in kernels.kernels},
    }

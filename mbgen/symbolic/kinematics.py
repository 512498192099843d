"""q, q̇ and every point's and unit vector's position and velocity in them.

Natural coordinates: a mobile point's coordinates are its x, y (and z); a mobile unit
vector's are its three components. Fixed ones are constants.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from mbgen.model.mechanism import Mechanism

Vec = tuple[sp.Expr, ...]  # one entry per axis: (x, y) in the plane, (x, y, z) in space


@dataclass(frozen=True)
class Constraint:
    label: str  # shown by `mbgen info`, e.g. "body1: |p1-p2| = length"
    expr: sp.Expr


@dataclass(frozen=True)
class Kinematics:
    """q, q̇ and positions and velocities of points and vectors (by index), with ``slot``:
    a mobile point → the index of its x coordinate in q (``vector_slot`` for vectors)."""

    q: list[sp.Symbol]
    qd: list[sp.Symbol]
    index: dict[str, int]  # coordinate name → index in q
    position: dict[int, Vec]
    velocity: dict[int, Vec]
    slot: dict[int, int]
    vector: dict[int, Vec]
    vector_rate: dict[int, Vec]
    vector_slot: dict[int, int]

    def delta(self, a: int, b: int) -> Vec:
        """r_b − r_a."""
        return tuple(pb - pa for pa, pb in zip(self.position[a], self.position[b],
                                               strict=True))

    def relative_velocity(self, a: int, b: int) -> Vec:
        """ṙ_b − ṙ_a."""
        return tuple(vb - va for va, vb in zip(self.velocity[a], self.velocity[b],
                                               strict=True))


def kinematics(mechanism: Mechanism) -> Kinematics:
    names = mechanism.coordinate_names
    q = [sp.Symbol(f"q_{k}", real=True) for k in range(len(names))]
    qd = [sp.Symbol(f"qd_{k}", real=True) for k in range(len(names))]
    index = {name: k for k, name in enumerate(names)}
    dim = mechanism.dimension
    zero = (sp.Integer(0),) * dim
    position: dict[int, Vec] = {}
    velocity: dict[int, Vec] = {}
    slot: dict[int, int] = {}
    for point in mechanism.points:
        if point.fixed:
            position[point.index] = (point.x, point.y, point.z)[:dim]
            velocity[point.index] = zero
        else:
            k = index[f"x{point.index}"]
            slot[point.index] = k
            position[point.index] = tuple(q[k:k + dim])
            velocity[point.index] = tuple(qd[k:k + dim])
    vector: dict[int, Vec] = {}
    vector_rate: dict[int, Vec] = {}
    vector_slot: dict[int, int] = {}
    for v in mechanism.vectors:
        if v.fixed:
            vector[v.index] = (v.x, v.y, v.z)
            vector_rate[v.index] = (sp.Integer(0),) * 3
        else:
            k = index[f"ux{v.index}"]
            vector_slot[v.index] = k
            vector[v.index] = tuple(q[k:k + 3])
            vector_rate[v.index] = tuple(qd[k:k + 3])
    return Kinematics(q, qd, index, position, velocity, slot, vector, vector_rate,
                      vector_slot)

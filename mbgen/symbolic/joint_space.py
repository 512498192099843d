"""A spatial open chain's velocities in its joint rates, q̇ = J(q) ż, in closed form.

Why: where a file's independent coordinates are the angles of a tree of revolute joints,
q̇ = J(q) ż with J polynomial in q: joint k turns everything beyond it about its axis
u_k through its pivot p_k, so a point r beyond it moves by ż_k u_k × (r − p_k) and a unit
vector v by ż_k u_k × v. The dynamics can then be written in z alone, d equations
(``reduced.py``) instead of the KKT system's n + m, from the state q itself: nothing
nests, so the expressions grow with the chain, not with its depth.

Which joints move what is found by placing the bodies one after another, with numbers:
a body is placed once it has a placed point and two placed, non-parallel directions (its
placed vectors, differences of its placed points, or the direction an independent angle
turns about a placed axis the body carries), and it then moves with every joint its
placing elements move with, and with the angle that placed it about that angle's axis
through the body's placed point. The result is checked, not assumed: at random placements
Φ must vanish, and every column of J must be tangent to it (Φq J = 0) with J's z rows the
identity, so J is the null-space basis of the KKT path. Anything else (a closed loop, a
dependent angle, an angle not measured from its parent) yields the reason there is no J,
and the mechanism keeps the KKT path alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy as sp

from mbgen.model.mechanism import Mechanism
from mbgen.model.spatial import Direction, Element, SpatialBody, SpatialCoordinate
from mbgen.symbolic.kinematics import Kinematics, kinematics
from mbgen.symbolic.model import SymbolicModel
from mbgen.symbolic.spatial import file_value

CHECKS = 3  # random placements J is checked at
# Joint angles beyond which the joint-space kernels are not written: their code grows as
# d³ (∂Mz/∂z), and a serial arm's cold build took 6.3 → 13 s with them at 6 joints, 14 →
# 150 s at 10 (2026-11-26); 7 for the Panda's arm (benchmarks/robots.py, a loaded
# machine: 4.4 MB of C, built in 433 s against the UR5's 2.0 MB and 254 s)
MAX_JOINTS = 7
TOLERANCE = 1e-8  # on |Φ| and |Φq J| (relative to the mechanism's size), and on J's z rows


@dataclass(frozen=True)
class JointSpace:
    """q̇ = J ż: ``basis[i][k]`` = ∂q_i/∂z_k in q (sparse: zero entries are 0);
    ``z`` the indices of the independent coordinates in q."""

    z: list[int]
    basis: list[list[sp.Expr]]  # n × d


@dataclass(frozen=True)
class _Turn:
    axis: Element  # the angle's unit vector
    pivot: Element  # a point on its axis: the placed point of the body it turns


def _direction_elements(direction: Direction) -> list[Element]:
    if direction.vector is not None:
        return [Element("vector", direction.vector)]
    assert direction.a is not None and direction.b is not None
    return [Element("point", direction.a), Element("point", direction.b)]


def _direction(value: dict[Element, np.ndarray], direction: Direction) -> np.ndarray:
    if direction.vector is not None:
        return value[Element("vector", direction.vector)]
    assert direction.a is not None and direction.b is not None
    return value[Element("point", direction.b)] - value[Element("point", direction.a)]


class _NoJointSpace(Exception):
    """Why q̇ is not J(q) ż in closed form."""


class _Placement:
    """Elements placed with numbers at given joint angles, and the joints each moves with."""

    def __init__(self, mechanism: Mechanism, angles: dict[str, float]) -> None:
        numbers = mechanism.parameter_values
        self.angles = angles
        self.file: dict[Element, np.ndarray] = {}
        self.value: dict[Element, np.ndarray] = {}
        self.moves_with: dict[Element, frozenset[str]] = {}
        items: list[tuple[Element, Any]] = [
            *((Element("point", p.index), p) for p in mechanism.points),
            *((Element("vector", v.index), v) for v in mechanism.vectors)]
        for e, item in items:
            self.file[e] = np.array(file_value(mechanism, e).xreplace(numbers), dtype=float
                                    ).ravel()
            if item.fixed:
                self.value[e], self.moves_with[e] = self.file[e], frozenset()
        self.turns: dict[str, _Turn] = {}

    def _turned(self, angle: SpatialCoordinate) -> np.ndarray:
        """``angle.end`` at its angle about the placed axis û from the placed ``start``
        (its component along û and its length across û as in the file)."""
        u = self.value[Element("vector", angle.axis)]
        a = _direction(self.value, angle.start)
        across = a - a.dot(u) * u
        if across.dot(across) < 1e-24:
            raise _NoJointSpace(f"{angle.name}: its zero direction lies along its axis")
        across /= np.sqrt(across.dot(across))
        end, u_file = _direction(self.file, angle.end), self.file[Element("vector",
                                                                           angle.axis)]
        along = end.dot(u_file)
        length = np.sqrt(max(end.dot(end) - along ** 2, 0.0))
        theta = self.angles[angle.name]
        return along * u + length * (np.cos(theta) * across + np.sin(theta) * np.cross(u,
                                                                                       across))

    def place(self, body: SpatialBody, angles: list[SpatialCoordinate]) -> bool:
        """Places ``body`` if it can now be (see the module's docstring)."""
        elements = [Element("point", k) for k in body.points] + [
            Element("vector", k) for k in body.vectors]
        if all(e in self.value for e in elements):
            return True
        points = [e for e in elements if e.kind == "point" and e in self.value]
        if not points:
            return False
        origin = points[0]
        # (now, in the file, the joints it moves with, the angle that turns it)
        directions: list[tuple[np.ndarray, np.ndarray, frozenset[str], str | None]] = [
            (self.value[e], self.file[e], self.moves_with[e], None)
            for e in elements if e.kind == "vector" and e in self.value]
        directions += [(self.value[e] - self.value[origin], self.file[e] - self.file[origin],
                        self.moves_with[e] | self.moves_with[origin], None)
                       for e in points[1:]]
        for angle in angles:
            axis, start = Element("vector", angle.axis), _direction_elements(angle.start)
            if (angle.name in self.angles and angle.name not in self.turns
                    and axis in self.value and axis in elements
                    and all(e in elements for e in _direction_elements(angle.end))
                    and all(e in self.value for e in start)):
                moves = self.moves_with[axis].union(*(self.moves_with[e] for e in start))
                directions.append((self._turned(angle), _direction(self.file, angle.end),
                                   moves | {angle.name}, angle.name))
        pair = _independent_pair(directions)
        if pair is None:
            return False
        (d1, f1, moves1, turn1), (d2, f2, moves2, turn2) = pair
        for turn in (turn1, turn2):
            if turn is not None:
                self.turns[turn] = _Turn(Element("vector", next(
                    a.axis for a in angles if a.name == turn)), origin)
        rotation = _frame(d1, d2, f1, f2) @ _frame(f1, f2, f1, f2).T
        moves = moves1 | moves2 | self.moves_with[origin]
        for e in elements:
            if e not in self.value:
                if e.kind == "point":
                    self.value[e] = self.value[origin] + rotation @ (self.file[e]
                                                                     - self.file[origin])
                else:
                    self.value[e] = rotation @ self.file[e]
                self.moves_with[e] = moves
        return True


def _independent_pair(directions: list) -> tuple | None:
    for i, first in enumerate(directions):
        for second in directions[i + 1:]:
            if np.linalg.norm(np.cross(first[1], second[1])) > 1e-9:
                return first, second
    return None


def _frame(d1: np.ndarray, d2: np.ndarray, f1: np.ndarray, f2: np.ndarray) -> np.ndarray:
    """Orthonormal columns [e1 e2 e1×e2] from d1, d2, with the lengths and the angle that
    f1 and f2 (the same directions in the file) have: constant on a rigid body."""
    along = f2.dot(f1) / f1.dot(f1)
    e1 = d1 / np.sqrt(f1.dot(f1))
    e2 = (d2 - along * d1) / np.linalg.norm(f2 - along * f1)
    return np.column_stack([e1, e2, np.cross(e1, e2)])


def _place_all(mechanism: Mechanism, angles: dict[str, float]) -> _Placement:
    placement = _Placement(mechanism, angles)
    relative = [c for c in mechanism.spatial_coordinates if c.kind == "angle"]
    waiting = list(mechanism.spatial_bodies)
    while waiting:
        left = [body for body in waiting if not placement.place(body, relative)]
        if len(left) == len(waiting):
            raise _NoJointSpace(f"body {left[0].name} is not placed by the joint angles")
        waiting = left
    return placement


def placed_coordinates(mechanism: Mechanism, angles: dict[str, float]) -> np.ndarray:
    """The natural coordinates q (n,) of a tree of revolute joints at ``angles`` (every
    independent angle by name), each body placed from those before with numbers, as J is
    found: a consistent state far from the file's pose without Newton's steps from it.
    ValueError where the angles do not place every body."""
    try:
        return _state(kinematics(mechanism), _place_all(mechanism, angles))
    except _NoJointSpace as failure:
        raise ValueError(str(failure)) from None


def joint_space(mechanism: Mechanism, kin: Kinematics,
                constraints: Callable[[np.ndarray], np.ndarray]) -> JointSpace | str:
    """J(q) for the file's independent coordinates, or why there is none.
    ``constraints``: Φ at numbers (q with the parameters at their values) → (m,)."""
    if mechanism.dimension != 3:
        return "only spatial mechanisms' joint angles are recognized"
    names = mechanism.independent
    if not names:
        return "the file names no independent coordinates"
    if len(names) > MAX_JOINTS:
        return (f"{len(names)} independent coordinates: beyond {MAX_JOINTS} the joint-space "
                "code takes longer to build than the KKT path")
    if any(joint.slides for joint in mechanism.joints) or any(
            joint.points[0] != joint.points[1] for joint in mechanism.joints):
        return "a joint between two separate points or a sliding joint"
    angles = {c.name for c in mechanism.spatial_coordinates if c.kind == "angle"}
    others = [c.name for c in mechanism.spatial_coordinates if c.name not in names]
    if set(names) - angles or others:
        return "the relative coordinates are not exactly the independent joint angles"
    rng = np.random.default_rng(1)
    try:
        placements = [_place_all(mechanism, {name: float(rng.uniform(-np.pi, np.pi))
                                             for name in names})
                      for _ in range(CHECKS)]
    except _NoJointSpace as failure:
        return str(failure)
    found = _basis(kin, names, placements[0])
    reason = _check(mechanism, kin, names, found, placements, constraints)
    return reason if reason else found


def _basis(kin: Kinematics, names: list[str], placement: _Placement) -> JointSpace:
    z = [kin.index[name] for name in names]
    column = {name: k for k, name in enumerate(names)}
    basis: list[list[sp.Expr]] = [[sp.Integer(0)] * len(z) for _ in kin.q]
    for name, k in column.items():
        basis[kin.index[name]][k] = sp.Integer(1)
    for e, moves in placement.moves_with.items():
        slot = (kin.slot if e.kind == "point" else kin.vector_slot).get(e.index)
        if slot is None:
            continue
        value = sp.Matrix(kin.position[e.index] if e.kind == "point" else kin.vector[e.index])
        for name in moves:
            turn = placement.turns[name]
            u = sp.Matrix(kin.vector[turn.axis.index])
            arm = value - sp.Matrix(kin.position[turn.pivot.index]) if e.kind == "point" \
                else value
            for axis, entry in enumerate(u.cross(arm)):
                basis[slot + axis][column[name]] = sp.expand(entry)
    return JointSpace(z, basis)


def _state(kin: Kinematics, placement: _Placement) -> np.ndarray:
    q = np.zeros(len(kin.q))
    for e, value in placement.value.items():
        slot = (kin.slot if e.kind == "point" else kin.vector_slot).get(e.index)
        if slot is not None:
            q[slot:slot + 3] = value
    for name, angle in placement.angles.items():
        q[kin.index[name]] = angle
    return q


def _check(mechanism: Mechanism, kin: Kinematics, names: list[str], found: JointSpace,
           placements: list[_Placement], constraints: Callable[[np.ndarray], np.ndarray]
           ) -> str | None:
    # lambdify prints the model's own expressions (parameters already numbers): no user text
    basis_at = sp.lambdify(kin.q, sp.Matrix(found.basis).xreplace(
        mechanism.parameter_values), "numpy")
    scale = max(1.0, len(kin.q))
    for placement in placements:
        q = _state(kin, placement)
        if np.max(np.abs(constraints(q)), initial=0.0) > TOLERANCE * scale:
            return "the bodies placed by the joint angles leave a constraint open (a loop?)"
        basis = np.asarray(basis_at(*q), dtype=float)
        step = 1e-6
        for k in range(len(found.z)):
            tangent = (constraints(q + step * basis[:, k])
                       - constraints(q - step * basis[:, k])) / (2 * step)
            if np.max(np.abs(tangent), initial=0.0) > 1e-6 * scale:
                return (f"joint angle {names[k]} does not turn its body "
                        "about its axis alone")
    return None


def joint_space_of(model: SymbolicModel) -> JointSpace | str:
    """:func:`joint_space` of a symbolic model (its constraints evaluated with numbers)."""
    numbers = model.mechanism.parameter_values
    phi = sp.lambdify(model.q, [c.expr.xreplace(numbers) for c in model.constraints],
                      "numpy")
    return joint_space(model.mechanism, kinematics(model.mechanism),
                       lambda q: np.asarray(phi(*q), dtype=float))

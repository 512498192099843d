"""Spatial mechanism → equations, in 3-D natural coordinates (García de Jalón & Bayo, ch. 3).

A body's material points are r = r_o + X c, with r_o its origin point, X = [d1 d2 d3] its
three basis directions (r_j − r_o for a point, u for a unit vector) and c constant. So:
- rigidity is XᵀX constant (six quadratic equations, fewer where elements are fixed or
  already constrained), and each further point or vector is linear in the basis;
- the mass matrix is constant, A ⊗ 1₃ on (r_o, e1, e2, e3) where e_k is the point or
  vector giving d_k (A from the mass, centre of mass and inertia: ``inertia_and_gravity``);
- gravity is a constant force; the angular velocity in the body's axes is the skew part
  of X̄⁻ᵀ Xᵀ Ẋ X̄⁻¹, polynomial in q and q̇ (X̄: X as the file places the body).
"""

from __future__ import annotations

import sympy as sp

from mbgen.model.mechanism import Mechanism
from mbgen.model.spatial import Direction, Element, SpatialBody
from mbgen.symbolic.differentiate import Differentiator
from mbgen.symbolic.kinematics import Constraint, Kinematics


def file_value(mechanism: Mechanism, element: Element) -> sp.Matrix:
    """A point's or unit vector's placement in the file (in the parameters)."""
    if element.kind == "point":
        p = mechanism.points[element.index]
        return sp.Matrix([p.x, p.y, p.z])
    v = mechanism.vectors[element.index]
    return sp.Matrix([v.x, v.y, v.z])


def _value(kin: Kinematics, element: Element) -> sp.Matrix:
    source = kin.position if element.kind == "point" else kin.vector
    return sp.Matrix(source[element.index])


def _slot(kin: Kinematics, element: Element) -> int | None:
    """The index of the element's x coordinate in q (None when fixed)."""
    return (kin.slot if element.kind == "point" else kin.vector_slot).get(element.index)


def _directions(body: SpatialBody, value: dict[Element, sp.Matrix]) -> sp.Matrix:
    """X = [d1 d2 d3]: r_j − r_origin for a point, u for a vector."""
    origin = value[Element("point", body.origin)]
    return sp.Matrix.hstack(*[value[e] - origin if e.kind == "point" else value[e]
                              for e in body.basis])


def _elements(body: SpatialBody) -> list[Element]:
    return [Element("point", body.origin), *body.basis, *body.extra]


def _file_basis(mechanism: Mechanism, body: SpatialBody) -> sp.Matrix:
    return _directions(body, {e: file_value(mechanism, e) for e in _elements(body)})


def _moving_basis(kin: Kinematics, body: SpatialBody) -> sp.Matrix:
    return _directions(body, {e: _value(kin, e) for e in _elements(body)})


def _has_coordinates(expr: sp.Expr, kin: Kinematics) -> bool:
    return bool(expr.free_symbols & set(kin.q))


def _direction(kin: Kinematics, direction: Direction) -> sp.Matrix:
    if direction.vector is not None:
        return sp.Matrix(kin.vector[direction.vector])
    assert direction.a is not None and direction.b is not None
    return sp.Matrix(kin.delta(direction.a, direction.b))


def constraints(mechanism: Mechanism, kin: Kinematics) -> list[Constraint]:
    """Φ: bodies' rigidity, their further elements, joints, then relative coordinates."""
    found: list[Constraint] = []
    seen: set[tuple[int, ...] | frozenset[Element]] = set()
    implied = {e for body in mechanism.spatial_bodies for e in body.extra}

    def add(label: str, expr: sp.Expr) -> None:
        if _has_coordinates(expr, kin):  # rows among fixed elements only are constants
            found.append(Constraint(label, sp.expand(expr)))

    for body in mechanism.spatial_bodies:
        x, x_file = _moving_basis(kin, body), _file_basis(mechanism, body)
        ends = body.basis
        for k in range(3):
            for j in range(k, 3):
                # an element's own length (a point pair's distance, a vector's unit norm) is
                # stated once: by the first body, never when another body implies it
                key = frozenset({Element("point", body.origin), ends[k]}) if (
                    k == j and ends[k].kind == "point") else frozenset({ends[k], ends[j]})
                if k == j and (key in seen or (ends[k].kind == "vector"
                                               and ends[k] in implied)):
                    continue
                seen.add(key)
                what = "|d|^2" if k == j else "angle"
                add(f"{body.name}: {what}({ends[k]}, {ends[j]}) = const",
                    x[:, k].dot(x[:, j]) - x_file[:, k].dot(x_file[:, j]))
        inverse = x_file.inv()
        origin = _value(kin, Element("point", body.origin))
        for element in body.extra:
            offset = file_value(mechanism, element)
            if element.kind == "point":
                offset -= file_value(mechanism, Element("point", body.origin))
            local = inverse * offset
            moving = _value(kin, element)
            if element.kind == "point":
                moving -= origin
            residual = moving - x * local
            for axis, expr in zip("xyz", residual, strict=True):
                add(f"{body.name}: {element} fixed to the body ({axis})", expr)
    found += _joint_constraints(mechanism, kin)
    for coordinate in mechanism.spatial_coordinates:
        u = sp.Matrix(kin.vector[coordinate.axis])
        value = kin.q[kin.index[coordinate.name]]
        if coordinate.kind == "angle":
            a, b = _direction(kin, coordinate.start), _direction(kin, coordinate.end)
            expr = (a.cross(b).dot(u) * sp.cos(value)
                    - (a.dot(b) - a.dot(u) * b.dot(u)) * sp.sin(value))
            found.append(Constraint(f"{coordinate.name}: angle", expr))
        else:
            found.append(Constraint(f"{coordinate.name}: distance",
                                    value - _direction(kin, coordinate.end).dot(u)))
    return found


def _joint_constraints(mechanism: Mechanism, kin: Kinematics) -> list[Constraint]:
    found: list[Constraint] = []
    for joint in mechanism.joints:
        a, b = joint.points
        gap = sp.Matrix(kin.delta(a, b))
        if joint.slides:
            assert joint.axis is not None
            gap -= kin.q[kin.index[joint.name]] * sp.Matrix(kin.vector[joint.axis])
        if joint.slides or a != b:
            found += [Constraint(f"{joint.name}: {joint.kind} ({axis})", expr)
                      for axis, expr in zip("xyz", gap, strict=True)]
        if joint.axes is not None:
            u, v = joint.axes
            now = sp.Matrix(kin.vector[u]).dot(sp.Matrix(kin.vector[v]))
            file = file_value(mechanism, Element("vector", u)).dot(
                file_value(mechanism, Element("vector", v)))
            found.append(Constraint(f"{joint.name}: angle(u{u}, u{v}) = const", now - file))
    return found


def inertia_and_gravity(mechanism: Mechanism, kin: Kinematics,
                        ) -> tuple[dict[tuple[int, int], sp.Expr], list[sp.Expr]]:
    """The constant sparse mass matrix (both triangles, no zeros) and each body's potential
    energy in gravity."""
    mass: dict[tuple[int, int], sp.Expr] = {}
    potential: list[sp.Expr] = []
    g = sp.Matrix(mechanism.gravity)
    for body in mechanism.spatial_bodies:
        x_file = _file_basis(mechanism, body)
        inverse = x_file.inv()
        rho = sp.Matrix(body.cog)
        tensor = sp.Matrix(body.inertia)
        second_moment = (tensor.trace() / 2 * sp.eye(3) - tensor
                         + body.mass * rho * rho.T)  # ∫ρρᵀ dm about the origin
        c = inverse * rho
        z = inverse * second_moment * inverse.T
        s = sp.Matrix([1 if e.kind == "point" else 0 for e in body.basis])
        a = sp.zeros(4, 4)
        a[0, 0] = body.mass - 2 * body.mass * s.dot(c) + (s.T * z * s)[0, 0]
        for k in range(3):
            a[0, k + 1] = a[k + 1, 0] = body.mass * c[k] - (z * s)[k]
            for j in range(3):
                a[k + 1, j + 1] = z[k, j]
        slots = [_slot(kin, e) for e in [Element("point", body.origin), *body.basis]]
        for r, row in enumerate(slots):
            for col_index, col in enumerate(slots):
                if row is None or col is None:
                    continue
                value = sp.simplify(a[r, col_index])
                for axis in range(3):
                    key = (row + axis, col + axis)
                    mass[key] = mass.get(key, 0) + value
        origin = _value(kin, Element("point", body.origin))
        centre = origin + _moving_basis(kin, body) * c
        potential.append(-body.mass * g.dot(centre))
    return {k: v for k, v in mass.items() if v != 0}, potential


def rotation(mechanism: Mechanism, kin: Kinematics, body_index: int) -> sp.Matrix:
    """A body's rotation R = X X_file⁻¹ from its placement in the file: its axes (the
    world's as the file places it) in the world's, as columns."""
    body = mechanism.spatial_bodies[body_index]
    return _moving_basis(kin, body) * _file_basis(mechanism, body).inv()


def angular_velocity(mechanism: Mechanism, kin: Kinematics, body_index: int) -> list[sp.Expr]:
    """A body's angular velocity along its own axes (the world's as the file places it)."""
    body = mechanism.spatial_bodies[body_index]
    inverse = _file_basis(mechanism, body).inv()
    x = _moving_basis(kin, body)
    position = {qk: k for k, qk in enumerate(kin.q)}
    diff = Differentiator()
    rate = x.applyfunc(lambda e: sp.Add(*(diff(e, qk) * kin.qd[position[qk]]
                                          for qk in e.free_symbols & position.keys())))
    w = inverse.T * x.T * rate * inverse
    return [(w[2, 1] - w[1, 2]) / 2, (w[0, 2] - w[2, 0]) / 2, (w[1, 0] - w[0, 1]) / 2]

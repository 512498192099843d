"""Spatial mechanism files (``dimension: 3``) → :class:`Mechanism`: unit vectors, bodies on
points and vectors, joints and spatial relative coordinates, with located errors."""

from __future__ import annotations

from typing import cast

import numpy as np
import sympy as sp

from mbgen.model.builder import MechanismBuilder
from mbgen.model.format import JOINT_TYPES
from mbgen.model.mechanism import Mechanism
from mbgen.model.spatial import (
    Direction,
    Element,
    Joint,
    JointKind,
    SpatialBody,
    SpatialCoordinate,
    Triple,
    Vector,
    spatial_inertia_problem,
)
from mbgen.model.yaml_nodes import Node

#: |v| may differ from 1 by this much in the file (the solver makes it exact at assembly).
UNIT_TOLERANCE = 1e-6
#: Three directions are independent when |det| ≥ this × the product of their lengths.
INDEPENDENCE = 1e-6
#: A direction whose sine off the span of the basis chosen before it is under this (0.6°)
#: is near-parallel: taken only where the body has no other independent one. Independent
#: as it is, every other element of the body would be tied to the basis by coefficients
#: of order 1/sine and Φq as ill-conditioned (tests/data/near-parallel.urdf: a sine of
#: 1e-5 made Φq's smallest singular value 2e-11 instead of 0.2).
NEAR_PARALLEL = 1e-2


class SpatialBuilder(MechanismBuilder):
    """A spatial file: vectors, bodies, joints and relative coordinates."""

    dimension = 3

    def read_geometry(self, name: str) -> Mechanism:
        self.vectors: list[Vector] = []
        self.vector_names: dict[str, int] = {}
        self.read_vectors()
        bodies = self.read_bodies()
        on_bodies = {k for body in bodies for k in body.vectors}
        for vector in self.vectors:
            if not vector.fixed and vector.index not in on_bodies:
                raise self.keys["vectors"].error(
                    f"vector {vector.name!r} is mobile but on no body: list it in a body's "
                    "vectors, or make it fixed")
        mechanism = Mechanism(name=name, source=self.root.file, parameters=self.parameters,
                              points=self.points, bodies=[], dimension=3,
                              gravity=(sp.Integer(0), sp.Integer(0), sp.Rational("-9.81")),
                              vectors=self.vectors, spatial_bodies=bodies)
        mechanism.spatial_coordinates = self.read_coordinates()
        mechanism.joints = self.read_joints(set(mechanism.coordinate_names),
                                            mechanism.length_scale(), bodies)
        return mechanism

    def body_points(self, mechanism: Mechanism) -> list[tuple[int, ...]]:
        return [tuple(body.points) for body in mechanism.spatial_bodies]

    # -- values in the file's configuration ---------------------------------------------
    def position(self, point: int) -> sp.Matrix:
        p = self.points[point]
        return sp.Matrix([p.x, p.y, p.z])

    def direction_vector(self, element: Element, origin: int) -> sp.Matrix:
        """The direction an element gives a body with origin ``origin``, as in the file."""
        if element.kind == "point":
            return self.position(element.index) - self.position(origin)
        v = self.vectors[element.index]
        return sp.Matrix([v.x, v.y, v.z])

    def direction_value(self, direction: Direction) -> sp.Matrix:
        if direction.vector is not None:
            return self.direction_vector(Element("vector", direction.vector), 0)
        assert direction.a is not None and direction.b is not None
        return self.position(direction.b) - self.position(direction.a)

    def number_vector(self, vector: sp.Matrix, node: Node) -> np.ndarray:
        return np.array([self.numeric(e, node) for e in vector])

    # -- references ----------------------------------------------------------------------
    def vector_ref(self, node: Node) -> int:
        return self.reference(node, self.vector_names, len(self.vectors), "vector")

    def vector_list(self, node: Node, count: int | None = None) -> list[int]:
        return self.references(node, self.vector_names, len(self.vectors), "vector", count,
                               0, True)

    def exact_keys(self, node: Node, keys: dict[str, Node], wanted: tuple[str, ...],
                   what: str) -> None:
        """A spatial entry whose keys depend on its type: every key of ``wanted`` present,
        no other besides type and name."""
        for key in wanted:
            if key not in keys:
                raise node.error(f"{what} needs the key {key!r}")
        for key in sorted(set(keys) - {*wanted, "type", "name"}):
            raise keys[key].error(f"{what} has no key {key!r}")

    def direction(self, node: Node) -> Direction:
        """A vector (index or name) or a point pair [a, b] meaning r_b − r_a."""
        if node.is_sequence():
            a, b = self.point_list(node, count=2)
            return Direction(a=a, b=b)
        return Direction(vector=self.vector_ref(node))

    # -- sections ------------------------------------------------------------------------
    def read_vectors(self) -> None:
        for i, node in enumerate(self.section("vectors")):
            keys = self.entry(node, "vector")
            components = [self.expression(keys[axis]) for axis in "xyz"]
            values = np.array([self.numeric(c, keys[a]) for c, a in zip(components, "xyz",
                                                                            strict=True)])
            norm = float(np.linalg.norm(values))
            if abs(norm - 1) > UNIT_TOLERANCE:
                raise node.error(f"a vector is a unit vector: |v| = {norm:.9g}, not 1")
            fixed = keys["fixed"].boolean() if "fixed" in keys else False
            name = self.name(keys.get("name"), f"u{i}",
                             set(self.vector_names) | set(self.point_names))
            if "name" in keys:
                self.vector_names[name] = i
            x, y, z = components
            self.vectors.append(Vector(i, name, x, y, z, fixed, node.line))

    def read_bodies(self) -> list[SpatialBody]:
        bodies: list[SpatialBody] = []
        for index, node in enumerate(self.section("bodies")):
            keys = self.entry(node, "spatial_body")
            points = self.point_list(keys["points"], minimum=1)
            vectors = self.vector_list(keys["vectors"]) if "vectors" in keys else []
            origin = points[0]
            elements = ([Element("point", p) for p in points[1:]]
                        + [Element("vector", v) for v in vectors])
            basis = self.choose_basis(origin, elements, node)
            extra = tuple(e for e in elements if e not in basis)
            scope = dict(self.scope)
            mass = self.expression(keys["mass"], scope)
            scope["mass"] = mass
            cog_items = list(keys["cog"].sequence())
            if len(cog_items) != 3:
                raise keys["cog"].error("cog must be a list [x, y, z]")
            cog = tuple(self.expression(item, scope) for item in cog_items)
            for item, value in zip(cog_items, cog, strict=True):  # real and finite, as
                self.numeric(value, item)  # the mass and the inertia are checked
            inertia = self.inertia(keys["inertia"], scope)
            tensor = np.array([[self.numeric(e, keys["inertia"]) for e in row]
                               for row in inertia])
            weight = self.numeric(mass, keys["mass"])
            problem = spatial_inertia_problem(weight, tensor)
            if problem is not None:
                raise (keys["mass"] if weight < 0 else keys["inertia"]).error(problem)
            visual = keys["visual"].plain() if "visual" in keys else None
            name = self.name(keys.get("name"), f"body{index}", {b.name for b in bodies})
            bodies.append(SpatialBody(index, name, tuple(points), tuple(vectors), origin,
                                      basis, extra, mass, (cog[0], cog[1], cog[2]), inertia,
                                      visual, node.line))
        return bodies

    def choose_basis(self, origin: int, elements: list[Element],
                     node: Node) -> tuple[Element, Element, Element]:
        """Three independent directions from ``origin``: the first three in the file's
        order that are not near-parallel (:data:`NEAR_PARALLEL`) to the span of those
        before, and where there are not three such, the ones farthest off that span."""
        directions: dict[Element, np.ndarray] = {}
        for element in elements:
            d = self.number_vector(self.direction_vector(element, origin), node)
            if np.linalg.norm(d) == 0:
                raise node.error(f"the body's points {origin} and {element.index} coincide")
            directions[element] = d / np.linalg.norm(d)
        chosen: list[Element] = []
        span: list[np.ndarray] = []  # orthonormal

        def take(element: Element) -> None:
            chosen.append(element)
            rest = off_span(element)
            span.append(rest / np.linalg.norm(rest))

        def off_span(element: Element) -> np.ndarray:
            d = directions[element]
            return d - sum((d.dot(c) * c for c in span), np.zeros(3))

        for element in elements:
            if len(chosen) < 3 and np.linalg.norm(off_span(element)) >= NEAR_PARALLEL:
                take(element)
        while len(chosen) < 3:
            left = [e for e in elements if e not in chosen and np.linalg.matrix_rank(
                np.array([*(directions[c] for c in chosen), directions[e]]),
                tol=INDEPENDENCE) == len(chosen) + 1]
            if not left:
                raise node.error(
                    "a body needs three independent directions from its first point: other "
                    f"points and unit vectors (found {len(chosen)}); add a point or a vector "
                    "off their plane")
            take(max(left, key=lambda e: float(np.linalg.norm(off_span(e)))))
        return chosen[0], chosen[1], chosen[2]

    def inertia(self, node: Node, scope: dict[str, sp.Expr]) -> tuple[Triple, Triple, Triple]:
        """[Ixx, Iyy, Izz] or [Ixx, Iyy, Izz, Ixy, Ixz, Iyz] → the symmetric tensor."""
        items = [self.expression(item, scope) for item in node.sequence()]
        if len(items) not in (3, 6):
            raise node.error("inertia is [Ixx, Iyy, Izz] or [Ixx, Iyy, Izz, Ixy, Ixz, Iyz]")
        xx, yy, zz = items[:3]
        xy, xz, yz = items[3:] if len(items) == 6 else (sp.Integer(0),) * 3
        return (xx, xy, xz), (xy, yy, yz), (xz, yz, zz)

    def read_coordinates(self) -> list[SpatialCoordinate]:
        found: list[SpatialCoordinate] = []
        for k, node in enumerate(self.section("relative_coordinates")):
            keys = self.entry(node, "relative_coordinate")
            kind = self.relative_type(keys["type"])
            wanted = ("axis", "from", "to") if kind == "Angle" else ("axis", "points")
            self.exact_keys(node, keys, wanted, f"an {kind}")
            axis = self.vector_ref(keys["axis"])
            u = self.direction_value(Direction(vector=axis))
            taken = {c.name for c in found}
            if kind == "Angle":
                start, end = self.direction(keys["from"]), self.direction(keys["to"])
                a, b = self.direction_value(start), self.direction_value(end)
                for key, d in (("from", a), ("to", b)):
                    across = d - d.dot(u) * u
                    if self.numeric(across.dot(across), keys[key]) < 1e-12 * self.numeric(
                            d.dot(d), keys[key]):
                        raise keys[key].error(f"the direction {key!r} lies along the axis: "
                                              "an angle about it is undefined")
                initial = sp.atan2(a.cross(b).dot(u), a.dot(b) - a.dot(u) * b.dot(u))
                name = self.name(keys.get("name"), f"theta{k}", taken)
                found.append(SpatialCoordinate(name, "angle", axis, start, end, initial,
                                               node.line))
            else:
                a_point, b_point = self.point_list(keys["points"], count=2)
                segment = Direction(a=a_point, b=b_point)
                initial = self.direction_value(segment).dot(u)
                name = self.name(keys.get("name"), f"s{k}", taken)
                found.append(SpatialCoordinate(name, "distance", axis, segment, segment,
                                               initial, node.line))
        return found

    def read_joints(self, coordinates: set[str], scale: float,
                    bodies: list[SpatialBody]) -> list[Joint]:
        """Joints; ``scale`` (the mechanism's size) tells coinciding points apart. An axis
        is what the two bodies share: it must be listed by two bodies, or be fixed (the
        ground's) and listed by one."""
        joints: list[Joint] = []
        for k, node in enumerate(self.section("joints")):
            keys = self.entry(node, "joint")
            kind = self.choice(keys["type"], list(JOINT_TYPES), "joint type")
            self.exact_keys(node, keys, JOINT_TYPES[kind], f"a {kind} joint")
            refs = self.point_list(keys["points"], minimum=1)
            if len(refs) > 2:
                raise keys["points"].error("a joint has one shared point or two, one per body")
            a, b = refs[0], refs[-1]
            axis = self.vector_ref(keys["axis"]) if "axis" in keys else None
            if axis is not None:
                holders = sum(axis in body.vectors for body in bodies)
                if holders + self.vectors[axis].fixed < 2:
                    raise keys["axis"].error(
                        f"a {kind} joint's axis is a vector both bodies share: list "
                        f"{self.vectors[axis].name!r} in the vectors of both (or make it "
                        "fixed, shared with the ground)")
            axes = None
            if "axes" in keys:
                u, v = self.vector_list(keys["axes"], count=2)
                axes = (u, v)
            gap = self.position(b) - self.position(a)
            slides = kind in ("cylindrical", "prismatic")
            initial = sp.Integer(0)
            if slides:
                assert axis is not None
                if a == b:
                    raise keys["points"].error(f"a {kind} joint has two points [a, b], one "
                                               "on each body, on its axis")
                w = self.direction_value(Direction(vector=axis))
                initial = gap.dot(w)
                gap = gap - initial * w
            if self.numeric(gap.dot(gap), keys["points"]) > 1e-12 * scale**2:
                where = "on the axis through the first" if slides else "at the same place"
                raise keys["points"].error(f"the joint's second point must be {where} in "
                                           "the file")
            taken = coordinates | {j.name for j in joints}
            name = self.name(keys.get("name"), f"joint{k}", taken)
            joints.append(Joint(name, cast(JointKind, kind), (a, b), axis, axes, node.line,
                                initial))  # kind: checked against JOINT_TYPES above
        return joints

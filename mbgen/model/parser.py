"""Mechanism file → :class:`Mechanism`, with located errors for every kind of bad input.

Planar files are read here; spatial ones (``dimension: 3``) by
:mod:`mbgen.model.spatial_parser`. What both share is in :mod:`mbgen.model.builder`.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import sympy as sp

from mbgen.errors import MechanismError
from mbgen.model.builder import MechanismBuilder, distance, file_dimension
from mbgen.model.mechanism import (
    Body,
    Mechanism,
    Point,
    RelativeAngle,
    Slider,
    rigid_body_problem,
)
from mbgen.model.spatial_parser import SpatialBuilder
from mbgen.model.urdf import including_text, located, read_urdf, urdf_mechanism_text
from mbgen.model.yaml_nodes import Node, read_document, read_yaml_file


def load_mechanism(path: str | Path) -> Mechanism:
    """Read and validate a mechanism file (read by the one YAML file reader, with its size
    limit and its refusal of a FIFO or a device: :func:`read_yaml_file`)."""
    path = Path(path)
    if path.suffix.lower() == ".urdf":
        return load_urdf(path)
    text = read_yaml_file(path, "a mechanism file")
    root = read_document(text, str(path))
    if root.is_mapping() and any(getattr(key, "value", None) == "urdf"
                                 for key, _ in root.raw.value):
        return load_urdf(path, text, root)
    return parse_mechanism(text, str(path), default_name=path.stem)


def load_urdf(path: Path, including: str | None = None, root: Node | None = None
              ) -> Mechanism:
    """A URDF robot as the spatial mechanism it is (:mod:`mbgen.model.urdf`), or a YAML
    file ``path`` (text ``including``, parsed ``root``) that includes one with ``urdf:``:
    an error the loader finds in the translation is named at the URDF element or the YAML
    line it comes from."""
    if including is None or root is None:
        robot = read_urdf(path)
        text, origin = urdf_mechanism_text(robot)
    else:
        text, origin, robot = including_text(path, including, root)
    try:
        mechanism = parse_mechanism(text, str(path), default_name=path.stem)
    except MechanismError as error:
        raise located(error, str(path), origin) from None
    mechanism.limits = robot.limits
    return mechanism


def parse_mechanism(text: str, file: str = "<string>",
                    default_name: str = "mechanism") -> Mechanism:
    root = read_document(text, file)
    builder = SpatialBuilder if file_dimension(root) == 3 else PlanarBuilder
    return builder(root, default_name).build()


class PlanarBuilder(MechanismBuilder):
    """A planar file: bodies on points, relative angles and sliders."""

    def read_geometry(self, name: str) -> Mechanism:
        mechanism = Mechanism(
            name=name, source=self.root.file, parameters=self.parameters, points=self.points,
            bodies=self.read_bodies(), relative_angles=self.read_relative_angles())
        mechanism.sliders = self.read_sliders()
        return mechanism

    def read_bodies(self) -> list[Body]:
        bodies: list[Body] = []
        for index, node in enumerate(self.section("planar_bodies")):
            keys = self.entry(node, "body")
            refs = self.point_list(keys["points"])
            pts = [self.points[r] for r in refs]
            scope = dict(self.scope)
            for (i, a), (j, b) in itertools.combinations(enumerate(pts, start=1), 2):
                d = distance(a, b)
                scope[f"length{i}{j}"] = scope[f"length{j}{i}"] = d
            length = scope["length12"]
            if len(refs) == 2 and "length" in keys and keys["length"].scalar() != "auto":
                length = self.expression(keys["length"], scope)
            scope["length"] = length
            mass = self.expression(keys["mass"], scope)
            scope["mass"] = mass
            inertia = (self.expression(keys["I0"], scope) if "I0" in keys
                       else mass * length**2 / 3)
            cog = (sp.Rational(1, 2) * length, sp.Integer(0))
            if "cog" in keys:
                items = list(keys["cog"].sequence())
                if len(items) != 2:
                    raise keys["cog"].error("cog must be a list [x, y] in the body frame")
                cog = (self.expression(items[0], scope), self.expression(items[1], scope))
            self.check_inertia(keys, mass, inertia, cog, length)
            distances = [(refs[0], refs[1], length)]
            aligned = []
            for j in range(2, len(refs)):
                alpha = self.aligned_fraction(pts[0], pts[1], pts[j], keys["points"])
                if alpha is not None:  # distances to points 1 and 2 would be dependent
                    aligned.append((refs[j], alpha))
                    continue
                for k in (0, 1):
                    distances.append((refs[k], refs[j], scope[f"length{k + 1}{j + 1}"]))
            visual = keys["visual"].plain() if "visual" in keys else None
            name = self.name(keys.get("name"), f"body{index}", {b.name for b in bodies})
            bodies.append(Body(index, name, tuple(refs), length, mass, inertia, cog,
                               tuple(distances), tuple(aligned), visual, node.line))
        return bodies

    def aligned_fraction(self, a: Point, b: Point, c: Point, node: Node) -> sp.Expr | None:
        """For c on the line a-b: the fraction α with c = a + α (b - a); else None."""
        ux, uy = a.x - b.x, a.y - b.y
        vx, vy = c.x - a.x, c.y - a.y
        cross = self.numeric(ux * vy - uy * vx, node)
        scale = self.numeric(ux**2 + uy**2, node) + self.numeric(vx**2 + vy**2, node)
        if abs(cross) > 1e-9 * scale:
            return None
        return (vx * (b.x - a.x) + vy * (b.y - a.y)) / ((b.x - a.x) ** 2 + (b.y - a.y) ** 2)

    def check_inertia(self, keys: dict[str, Node], mass: sp.Expr, inertia: sp.Expr,
                      cog: tuple[sp.Expr, sp.Expr], length: sp.Expr) -> None:
        m = self.numeric(mass, keys["mass"])
        where = keys.get("I0", keys["mass"])
        i0 = self.numeric(inertia, where)
        offset = sum(self.numeric(c, keys.get("cog", where)) ** 2 for c in cog)
        problem = rigid_body_problem(m, i0, offset)
        if problem is not None:
            raise (keys["mass"] if m < 0 else where).error(problem)
        if "length" in keys and keys["length"].scalar() != "auto" and len(
                keys["points"].raw.value) == 2:  # the length read_bodies took from the key
            value = self.numeric(length, keys["length"])
            if value <= 0:  # not "the points coincide": they need not
                raise keys["length"].error(f"length must be positive, got {value:g}")
        if self.numeric(length, keys["points"]) <= 0:
            raise keys["points"].error("the body's first two points coincide")

    def read_relative_angles(self) -> list[RelativeAngle]:
        angles: list[RelativeAngle] = []
        for k, node in enumerate(self.section("relative_coordinates")):
            keys = self.entry(node, "relative_coordinate")
            kind = self.relative_type(keys["type"])
            if "points" not in keys:
                raise node.error("missing required key 'points'")
            if kind == "RelativeAngleAbsoluteDOF":
                a, b = self.point_list(keys["points"], count=2)
                quad = (a, b, a, b)
            else:
                refs = self.point_list(keys["points"], minimum=3, distinct=False)
                if len(refs) == 4 and refs[0] != refs[1] and refs[2] != refs[3]:
                    quad = (refs[0], refs[1], refs[2], refs[3])  # the segments may share a point
                elif len(refs) == 3 and len(set(refs)) == 3:
                    quad = (refs[0], refs[1], refs[0], refs[2])
                else:
                    raise keys["points"].error(
                        f"RelativeAngle takes 3 distinct points [origin, a, b] or 4 points "
                        f"[a1, a2, b1, b2] with a1 != a2 and b1 != b2, got {refs}")
            p = [self.points[i] for i in quad]
            ux, uy = p[1].x - p[0].x, p[1].y - p[0].y
            if kind == "RelativeAngleAbsoluteDOF":
                initial = sp.atan2(uy, ux)
            else:
                vx, vy = p[3].x - p[2].x, p[3].y - p[2].y
                initial = sp.atan2(ux * vy - uy * vx, ux * vx + uy * vy)
            name = self.name(keys.get("name"), f"theta{k}", {a.name for a in angles})
            angles.append(RelativeAngle(name, "absolute" if kind == "RelativeAngleAbsoluteDOF"
                                        else "between_bodies", quad, initial, node.line))
        return angles

    def read_sliders(self) -> list[Slider]:
        sliders: list[Slider] = []
        for k, node in enumerate(self.section("sliders")):
            keys = self.entry(node, "slider")
            point = self.point_ref(keys["point"])
            a, b = self.point_list(keys["line"], count=2)
            if point in (a, b):
                raise keys["point"].error("a slider's point cannot be one of its line points")
            name = self.name(keys.get("name"), f"slider{k}", {s.name for s in sliders})
            sliders.append(Slider(name, point, (a, b), node.line))
        return sliders


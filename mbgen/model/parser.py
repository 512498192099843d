"""Mechanism file → :class:`Mechanism`, with located errors for every kind of bad input."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import cast

import sympy as sp

from mbgen.errors import MechanismError
from mbgen.model.expressions import ExpressionError, parse_expression
from mbgen.model.format import (
    IDENTIFIER,
    RELATIVE_TYPES,
    RESERVED_NAME,
    SECTIONS,
    SENSOR_TARGET,
)
from mbgen.model.mechanism import (
    Actuator,
    Body,
    Force,
    Friction,
    Mechanism,
    Parameter,
    Point,
    RelativeAngle,
    Sensor,
    SensorKind,
    Slider,
    Spring,
    rigid_body_problem,
)
from mbgen.model.yaml_nodes import Node, key_name, read_document


def _entry(node: Node, section: str) -> dict[str, Node]:
    """A mapping's children, checked against the format's keys for ``section``."""
    spec = SECTIONS[section]
    return node.mapping(spec.allowed, required=spec.required)

_IDENTIFIER = re.compile(IDENTIFIER.rstrip("$") + r"\Z")  # "$" would let "a\n" through
_RESERVED = re.compile(RESERVED_NAME)


MAX_FILE_BYTES = 16 * 2**20  # the largest mechanism file read (a 1000-bar chain: 0.12 MiB)


def load_mechanism(path: str | Path) -> Mechanism:
    """Read and validate a mechanism file."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise MechanismError(f"{size / 2**20:.1f} MiB: a mechanism file may have at most "
                                 f"{MAX_FILE_BYTES / 2**20:g} MiB", str(path))
        text = path.read_bytes().decode("utf-8-sig")  # a byte-order mark is fine
    except OSError as exc:
        raise MechanismError(f"cannot read file: {exc.strerror}", str(path)) from exc
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise MechanismError(f"not a UTF-8 text file (byte 0x{exc.object[exc.start]:02x} at "
                             f"offset {exc.start})", str(path), line) from None
    return parse_mechanism(text, str(path), default_name=path.stem)


def parse_mechanism(text: str, file: str = "<string>",
                    default_name: str = "mechanism") -> Mechanism:
    return _Builder(read_document(text, file), default_name).build()


def _distance(ax: sp.Expr, ay: sp.Expr, bx: sp.Expr, by: sp.Expr) -> sp.Expr:
    return sp.sqrt((bx - ax) ** 2 + (by - ay) ** 2)


class _Builder:
    def __init__(self, root: Node, default_name: str) -> None:
        self.root = root
        self.keys = _entry(root, "mechanism")
        self.default_name = default_name
        self.scope: dict[str, sp.Expr] = {}
        self.parameters: list[Parameter] = []
        self.points: list[Point] = []
        self.point_names: dict[str, int] = {}
        self.values: dict[sp.Symbol, float] = {}  # parameter values, for numeric()

    # -- helpers -------------------------------------------------------------------------
    def expression(self, node: Node, scope: Mapping[str, sp.Expr] | None = None) -> sp.Expr:
        value = node.scalar()
        if isinstance(value, float):  # a YAML number: parsed from its text, as written
            if not math.isfinite(value) and node.raw.value.lstrip("+-").startswith("."):
                raise node.error(f"{value} is not a finite number")
            value = node.raw.value
        try:
            return parse_expression(value, self.scope if scope is None else scope)
        except ExpressionError as exc:
            raise node.error(str(exc)) from None

    def numeric(self, expr: sp.Expr, node: Node) -> float:
        """The value at the parameters' values; only the symbols present are substituted
        (a substitution of every parameter made 5 000 parameters take minutes)."""
        for parameter in self.parameters[len(self.values):]:  # parameters only grow
            self.values[parameter.symbol] = parameter.value
        subs = {s: self.values[s] for s in expr.free_symbols if s in self.values}
        try:
            exact = expr.xreplace(subs)
            fast = isinstance(exact, float) or exact.is_Rational  # sp.N is 0.2 ms a call
            value = complex(float(exact) if fast else sp.N(exact))
        except (TypeError, ValueError, OverflowError):
            value = complex(math.nan)
        if value.imag != 0 or not math.isfinite(value.real):
            shown = str(expr)
            shown = shown if len(shown) <= 80 else shown[:80] + "…"
            kind = "real" if value.imag != 0 or value.real != value.real else "finite"
            raise node.error(f"expression does not evaluate to a {kind} number: {shown}")
        return value.real

    def point_ref(self, node: Node) -> int:
        value = node.scalar()
        if isinstance(value, str) and value in self.point_names:
            return self.point_names[value]
        if isinstance(value, bool) or not isinstance(value, int):
            raise node.error(f"expected a point index or point name, got {value!r}")
        if not 0 <= value < len(self.points):
            raise node.error(f"point {value} does not exist (there are {len(self.points)} points)")
        return value

    def point_list(self, node: Node, count: int | None = None, minimum: int = 2,
                   distinct: bool = True) -> list[int]:
        refs = [self.point_ref(item) for item in node.sequence()]
        if count is not None and len(refs) != count:
            raise node.error(f"expected exactly {count} points, got {len(refs)}")
        if len(refs) < minimum:
            raise node.error(f"expected at least {minimum} points, got {len(refs)}")
        if distinct and len(set(refs)) != len(refs):
            raise node.error(f"points must be distinct, got {refs}")
        return refs

    def name(self, node: Node | None, default: str, taken: set[str]) -> str:
        if node is None:
            return default
        text = node.string()
        if not _IDENTIFIER.match(text):
            raise node.error(f"names must be identifiers (letters, digits, _), got {text!r}")
        if text in taken:
            raise node.error(f"name {text!r} is already used")
        return text

    def section(self, key: str) -> list[Node]:
        node = self.keys.get(key)
        if node is None or node.is_null():
            return []
        return list(node.sequence())

    # -- sections ------------------------------------------------------------------------
    def build(self) -> Mechanism:
        name = self.keys["name"].string() if "name" in self.keys else self.default_name
        self.read_parameters()
        self.read_points()
        bodies = self.read_bodies()
        angles = self.read_relative_angles()
        mechanism = Mechanism(
            name=name, source=self.root.file, parameters=self.parameters, points=self.points,
            bodies=bodies, relative_angles=angles)
        coordinates = set(mechanism.coordinate_names)
        mechanism.sliders = self.read_sliders()
        mechanism.springs = self.read_springs()
        mechanism.forces, mechanism.actuators = self.read_forces(coordinates)
        mechanism.frictions = self.read_frictions(coordinates)
        mechanism.sensors = self.read_sensors(coordinates, len(bodies))
        if "gravity" in self.keys:
            node = self.keys["gravity"]
            items = list(node.sequence())
            if len(items) != 2:
                raise node.error("gravity must be a list [gx, gy]")
            mechanism.gravity = (self.expression(items[0]), self.expression(items[1]))
        if "independent_coordinates" in self.keys:
            node = self.keys["independent_coordinates"]
            chosen = [item.string() for item in node.sequence()]
            for item, value in zip(node.sequence(), chosen, strict=True):
                if value not in coordinates:
                    raise item.error(f"unknown coordinate {value!r}")
            mechanism.independent = chosen
        if not mechanism.coordinate_names:
            raise self.keys["points"].error("the mechanism has no mobile point or coordinate")
        return mechanism

    def read_parameters(self) -> None:
        node = self.keys.get("parameters")
        if node is None or node.is_null():
            return
        if not node.is_mapping():
            raise node.error("parameters must be a mapping name: value")
        for key_node, value_raw in node.raw.value:
            name = key_name(key_node, node.file, "parameters")
            value = Node(value_raw, node.file, f"parameters.{name}")
            if not _IDENTIFIER.match(name) or name in self.scope:
                raise value.error(f"invalid or repeated parameter name {name!r}")
            if _RESERVED.match(name):
                raise value.error(f"parameter name {name!r} is reserved (x<i>, y<i>, length, "
                                  "length<i><j>, mass, pi and t have fixed meanings)")
            expr = self.expression(value)
            if expr.free_symbols:
                self.scope[name] = expr  # derived: follows the parameters it uses
            else:
                number = self.numeric(expr, value)
                symbol = sp.Symbol(f"p_{name}", real=True)
                self.parameters.append(Parameter(name, symbol, number))
                self.scope[name] = symbol

    def read_points(self) -> None:
        for i, node in enumerate(self.keys["points"].sequence()):
            keys = _entry(node, "point")
            x = self.expression(keys["x"])
            y = self.expression(keys["y"])
            for axis, expr in (("x", x), ("y", y)):
                self.numeric(expr, keys[axis])
            fixed = keys["fixed"].boolean() if "fixed" in keys else False
            name = self.name(keys.get("name"), str(i), set(self.point_names))
            if "name" in keys:
                self.point_names[name] = i
            self.points.append(Point(i, name, x, y, fixed, node.line))
            self.scope[f"x{i}"] = x
            self.scope[f"y{i}"] = y
        if not self.points:
            raise self.keys["points"].error("the mechanism needs at least one point")

    def read_bodies(self) -> list[Body]:
        bodies: list[Body] = []
        for index, node in enumerate(self.section("planar_bodies")):
            keys = _entry(node, "body")
            refs = self.point_list(keys["points"])
            pts = [self.points[r] for r in refs]
            scope = dict(self.scope)
            for (i, a), (j, b) in itertools.combinations(enumerate(pts, start=1), 2):
                d = _distance(a.x, a.y, b.x, b.y)
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
            keys = _entry(node, "relative_coordinate")
            kind = keys["type"].string()
            if kind not in RELATIVE_TYPES:
                raise keys["type"].error(f"unknown relative coordinate type {kind!r} "
                                         f"(allowed: {', '.join(sorted(RELATIVE_TYPES))})")
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
            keys = _entry(node, "slider")
            point = self.point_ref(keys["point"])
            a, b = self.point_list(keys["line"], count=2)
            if point in (a, b):
                raise keys["point"].error("a slider's point cannot be one of its line points")
            name = self.name(keys.get("name"), f"slider{k}", {s.name for s in sliders})
            sliders.append(Slider(name, point, (a, b), node.line))
        return sliders

    def read_springs(self) -> list[Spring]:
        springs: list[Spring] = []
        for k, node in enumerate(self.section("springs")):
            keys = _entry(node, "spring")
            a, b = self.point_list(keys["points"], count=2)
            stiffness = self.expression(keys["k"]) if "k" in keys else sp.Integer(0)
            damping = self.expression(keys["c"]) if "c" in keys else sp.Integer(0)
            pa, pb = self.points[a], self.points[b]
            rest = _distance(pa.x, pa.y, pb.x, pb.y)
            if "length" in keys and keys["length"].scalar() != "auto":
                rest = self.expression(keys["length"])
            if self.numeric(_distance(pa.x, pa.y, pb.x, pb.y), keys["points"]) == 0:
                raise keys["points"].error("a spring's points must not start at the same place")
            name = self.name(keys.get("name"), f"spring{k}", {s.name for s in springs})
            springs.append(Spring(name, (a, b), stiffness, damping, rest, node.line))
        return springs

    def coordinate(self, node: Node, coordinates: set[str]) -> str:
        value = node.string()
        if value not in coordinates:
            raise node.error(f"unknown coordinate {value!r} (coordinates: "
                             f"{', '.join(sorted(coordinates))})")
        return value

    def read_forces(self, coordinates: set[str]) -> tuple[list[Force], list[Actuator]]:
        forces = []
        for node in self.section("forces"):
            keys = _entry(node, "force")
            forces.append(Force(self.coordinate(keys["coordinate"], coordinates),
                                self.expression(keys["value"]), node.line))
        actuators: list[Actuator] = []
        for k, node in enumerate(self.section("actuators")):
            keys = _entry(node, "actuator")
            name = self.name(keys.get("name"), f"actuator{k}", {a.name for a in actuators})
            gain = self.expression(keys["gain"]) if "gain" in keys else sp.Integer(1)
            if "gain" in keys:
                self.numeric(gain, keys["gain"])
            actuators.append(Actuator(name, self.coordinate(keys["coordinate"], coordinates),
                                      node.line, gain))
        return forces, actuators

    def read_frictions(self, coordinates: set[str]) -> list[Friction]:
        frictions: list[Friction] = []
        for k, node in enumerate(self.section("friction")):
            keys = _entry(node, "friction")
            coordinate = self.coordinate(keys["coordinate"], coordinates)
            if coordinate in {f.coordinate for f in frictions}:
                raise keys["coordinate"].error(f"coordinate {coordinate!r} already has "
                                               "friction")
            values = {}
            for key in ("viscous", "coulomb"):
                values[key] = sp.Integer(0)
                if key in keys:
                    values[key] = self.expression(keys[key])
                    if self.numeric(values[key], keys[key]) < 0:
                        raise keys[key].error(f"{key} friction must not be negative")
            stiction = 1e-3
            if "stiction_velocity" in keys:
                stiction = self.numeric(self.expression(keys["stiction_velocity"], {}),
                                        keys["stiction_velocity"])
                if not stiction > 0:
                    raise keys["stiction_velocity"].error("stiction_velocity must be a "
                                                          f"positive number, got {stiction}")
            name = self.name(keys.get("name"), f"friction{k}", {f.name for f in frictions})
            frictions.append(Friction(name, coordinate, values["viscous"], values["coulomb"],
                                      stiction, node.line))
        return frictions

    def read_sensors(self, coordinates: set[str], n_bodies: int) -> list[Sensor]:
        sensors: list[Sensor] = []
        for k, node in enumerate(self.section("sensors")):
            keys = _entry(node, "sensor")
            kind = keys["type"].string()
            if kind not in SENSOR_TARGET:
                raise keys["type"].error(f"unknown sensor type {kind!r} "
                                         f"(allowed: {', '.join(sorted(SENSOR_TARGET))})")
            target_key = SENSOR_TARGET[kind]
            if target_key not in keys:
                raise node.error(f"a {kind} sensor needs the key {target_key!r}")
            target_node = keys[target_key]
            target: int | str
            if target_key == "body":
                target = target_node.integer()
                if not 0 <= target < n_bodies:
                    raise target_node.error(f"body {target} does not exist")
            elif target_key == "point":
                target = self.point_ref(target_node)
                if self.points[target].fixed:
                    raise target_node.error(f"point {target} is fixed: nothing to measure")
            else:
                target = self.coordinate(target_node, coordinates)
            noise = None
            if "noise" in keys:
                noise = self.numeric(self.expression(keys["noise"]), keys["noise"])
            name = self.name(keys.get("name"), f"{kind}{k}", {s.name for s in sensors})
            offset = self.sensor_offset(keys.get("offset"), 2 if target_key == "point" else 1)
            sensors.append(Sensor(name, cast(SensorKind, kind), target, noise, node.line,
                                  offset))  # kind: checked against SENSOR_TARGET above
        return sensors

    def sensor_offset(self, node: Node | None, outputs: int) -> tuple[sp.Expr, ...]:
        """A sensor's additive offset: one expression, or [x, y] for point sensors."""
        if node is None:
            return (sp.Integer(0),) * outputs
        items = list(node.sequence()) if outputs == 2 and node.is_sequence() else [node]
        if len(items) != outputs:
            raise node.error("a point sensor's offset is a list [x, y]")
        offset = tuple(self.expression(item) for item in items)
        for item, expr in zip(items, offset, strict=True):
            self.numeric(expr, item)
        return offset

"""What planar and spatial mechanism files share: reading parameters, points, springs,
forces, friction, actuators and sensors, with located errors (the loader's base class)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import cast

import sympy as sp

from mbgen.model.expressions import ExpressionError, parse_expression
from mbgen.model.format import (
    DIMENSION_NAMES,
    DIMENSIONS,
    IDENTIFIER,
    RELATIVE_TYPES_BY_DIMENSION,
    RESERVED_NAME,
    SECTIONS,
    SENSOR_TARGET,
)
from mbgen.model.mechanism import (
    Actuator,
    Force,
    Friction,
    Mechanism,
    Parameter,
    Point,
    Sensor,
    SensorKind,
    Spring,
)
from mbgen.model.yaml_nodes import Node, key_name

_IDENTIFIER = re.compile(IDENTIFIER.rstrip("$") + r"\Z")  # "$" would let "a\n" through
_RESERVED = re.compile(RESERVED_NAME)


def file_dimension(root: Node) -> int:
    """The file's ``dimension`` (2 when absent), checked before anything else is read."""
    if not root.is_mapping():
        return 2
    for key_node, value_raw in root.raw.value:
        if key_name(key_node, root.file, "") == "dimension":
            node = Node(value_raw, root.file, "dimension")
            value = node.integer()
            if value not in DIMENSIONS:
                raise node.error(f"dimension must be 2 (planar) or 3 (spatial), got {value}")
            return value
    return 2


def distance(a: Point, b: Point) -> sp.Expr:
    """|r_b − r_a| in the file's positions (z is 0 in planar files)."""
    return sp.sqrt((b.x - a.x) ** 2 + (b.y - a.y) ** 2 + (b.z - a.z) ** 2)


class MechanismBuilder:
    """Reads one file; subclasses read the sections of their dimension (``read_geometry``)."""

    dimension = 2

    def __init__(self, root: Node, default_name: str) -> None:
        self.root = root
        self.keys = self.entry(root, "mechanism")
        self.default_name = default_name
        self.scope: dict[str, sp.Expr] = {}
        self.parameters: list[Parameter] = []
        self.points: list[Point] = []
        self.point_names: dict[str, int] = {}
        self.values: dict[sp.Symbol, float] = {}  # parameter values, for numeric()

    def entry(self, node: Node, section: str) -> dict[str, Node]:
        """A mapping's children, checked against the format's keys for ``section`` and this
        file's dimension (a planar key in a spatial file, or the reverse, is located)."""
        spec = SECTIONS[section]
        own = {name for name, key in spec.keys.items()
               if key.dimension in (None, self.dimension)}
        keys = node.mapping(spec.allowed, required=spec.required & own, listed=own)
        for name, child in keys.items():
            wanted = spec.keys[name].dimension
            if wanted is not None and wanted != self.dimension:
                kind = DIMENSION_NAMES
                raise child.error(f"{name!r} belongs to {kind[wanted]} mechanisms "
                                  f"(dimension: {wanted}); this file is {kind[self.dimension]}"
                                  f" (dimension: {self.dimension})")
        return keys

    def read_geometry(self, name: str) -> Mechanism:
        """Bodies, relative coordinates and what else the dimension has (subclasses)."""
        raise NotImplementedError

    def body_points(self, mechanism: Mechanism) -> list[tuple[int, ...]]:
        """Each body's points, by body index."""
        return [tuple(body.points) for body in mechanism.bodies]

    def build(self) -> Mechanism:
        name = self.keys["name"].string() if "name" in self.keys else self.default_name
        self.read_parameters()
        self.read_points()
        mechanism = self.read_geometry(name)
        coordinates = set(mechanism.coordinate_names)
        mechanism.springs = self.read_springs()
        mechanism.forces, mechanism.actuators = self.read_forces(coordinates)
        mechanism.frictions = self.read_frictions(coordinates)
        sensors = self.read_sensors(coordinates, self.body_points(mechanism),
                                    [body.name for body in mechanism.all_bodies])
        mechanism.sensors = [s for s in sensors if s.kind != "accelerometer"]
        mechanism.accelerometers = [s for s in sensors if s.kind == "accelerometer"]
        if "gravity" in self.keys:
            node = self.keys["gravity"]
            items = list(node.sequence())
            if len(items) != self.dimension:
                raise node.error("gravity must be a list " + ("[gx, gy]" if self.dimension == 2
                                                              else "[gx, gy, gz]"))
            mechanism.gravity = tuple(self.expression(item) for item in items)
            for item, value in zip(items, mechanism.gravity, strict=True):
                self.numeric(value, item)  # real and finite, as every other number
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

    def reference(self, node: Node, names: Mapping[str, int], count: int, what: str) -> int:
        """One of ``count`` numbered things (points, vectors): its index or its name."""
        value = node.scalar()
        if isinstance(value, str) and value in names:
            return names[value]
        if isinstance(value, bool) or not isinstance(value, int):
            raise node.error(f"expected a {what} index or {what} name, got {value!r}")
        if not 0 <= value < count:
            raise node.error(f"{what} {value} does not exist (there are {count} {what}s)")
        return value

    def references(self, node: Node, names: Mapping[str, int], total: int, what: str,
                   count: int | None, minimum: int, distinct: bool) -> list[int]:
        """A list of :meth:`reference`, checked for length and distinctness."""
        refs = [self.reference(item, names, total, what) for item in node.sequence()]
        if count is not None and len(refs) != count:
            raise node.error(f"expected exactly {count} {what}s, got {len(refs)}")
        if len(refs) < minimum:
            raise node.error(f"expected at least {minimum} {what}s, got {len(refs)}")
        if distinct and len(set(refs)) != len(refs):
            raise node.error(f"{what}s must be distinct, got {refs}")
        return refs

    def point_ref(self, node: Node) -> int:
        return self.reference(node, self.point_names, len(self.points), "point")

    def point_list(self, node: Node, count: int | None = None, minimum: int = 2,
                   distinct: bool = True) -> list[int]:
        return self.references(node, self.point_names, len(self.points), "point", count,
                               minimum, distinct)

    def name(self, node: Node | None, default: str, taken: set[str]) -> str:
        if node is None:
            return default
        text = node.string()
        if not _IDENTIFIER.match(text):
            raise node.error(f"names must be identifiers (letters, digits, _), got {text!r}")
        if text in taken:
            raise node.error(f"name {text!r} is already used")
        return text

    def choice(self, node: Node, allowed: Sequence[str], what: str) -> str:
        """A ``type:`` value among ``allowed``, or a located error listing them."""
        kind = node.string()
        if kind not in allowed:
            raise node.error(f"unknown {what} {kind!r} (allowed: {', '.join(allowed)})")
        return kind

    def relative_type(self, node: Node) -> str:
        """A relative coordinate's ``type:`` for this file's dimension; a type of the other
        dimension gets its own message."""
        kind = node.string()
        other = 5 - self.dimension
        if kind in RELATIVE_TYPES_BY_DIMENSION[other]:
            names = DIMENSION_NAMES
            raise node.error(f"{kind!r} is a {names[other]} relative coordinate (dimension: "
                             f"{other}); a {names[self.dimension]} file has "
                             f"{', '.join(RELATIVE_TYPES_BY_DIMENSION[self.dimension])}")
        return self.choice(node, RELATIVE_TYPES_BY_DIMENSION[self.dimension],
                           "relative coordinate type")

    def section(self, key: str) -> list[Node]:
        node = self.keys.get(key)
        if node is None or node.is_null():
            return []
        return list(node.sequence())

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
            keys = self.entry(node, "point")
            x, y = self.expression(keys["x"]), self.expression(keys["y"])
            z = self.expression(keys["z"]) if "z" in keys else sp.Integer(0)
            for axis, expr in (("x", x), ("y", y), ("z", z)):
                if axis in keys:
                    self.numeric(expr, keys[axis])
            fixed = keys["fixed"].boolean() if "fixed" in keys else False
            name = self.name(keys.get("name"), str(i), set(self.point_names))
            if "name" in keys:
                self.point_names[name] = i
            self.points.append(Point(i, name, x, y, fixed, node.line, z))
            self.scope[f"x{i}"] = x
            self.scope[f"y{i}"] = y
            if self.dimension == 3:
                self.scope[f"z{i}"] = z
        if not self.points:
            raise self.keys["points"].error("the mechanism needs at least one point")

    def read_springs(self) -> list[Spring]:
        springs: list[Spring] = []
        for k, node in enumerate(self.section("springs")):
            keys = self.entry(node, "spring")
            a, b = self.point_list(keys["points"], count=2)
            stiffness = self.expression(keys["k"]) if "k" in keys else sp.Integer(0)
            damping = self.expression(keys["c"]) if "c" in keys else sp.Integer(0)
            pa, pb = self.points[a], self.points[b]
            rest = distance(pa, pb)
            if "length" in keys and keys["length"].scalar() != "auto":
                rest = self.expression(keys["length"])
            for key, value in (("k", stiffness), ("c", damping), ("length", rest)):
                if key in keys:  # constants: real and finite
                    self.numeric(value, keys[key])
            if self.numeric(distance(pa, pb), keys["points"]) == 0:
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
            keys = self.entry(node, "force")
            value = self.expression(keys["value"])
            self.numeric(value, keys["value"])  # a constant: real and finite
            forces.append(Force(self.coordinate(keys["coordinate"], coordinates), value,
                                node.line))
        actuators: list[Actuator] = []
        for k, node in enumerate(self.section("actuators")):
            keys = self.entry(node, "actuator")
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
            keys = self.entry(node, "friction")
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

    def read_sensors(self, coordinates: set[str], body_points: list[tuple[int, ...]],
                     body_names: list[str]) -> list[Sensor]:
        sensors: list[Sensor] = []
        n_bodies = len(body_points)
        # a body by its index or its name (`body: lever`), as points are
        named_bodies = {name: k for k, name in enumerate(body_names)}
        for k, node in enumerate(self.section("sensors")):
            keys = self.entry(node, "sensor")
            kind = self.choice(keys["type"], sorted(SENSOR_TARGET), "sensor type")
            target_key = SENSOR_TARGET[kind]
            if target_key not in keys:
                article = "an" if kind[0] in "aeiou" else "a"
                raise node.error(f"{article} {kind} sensor needs the key {target_key!r}")
            target_node = keys[target_key]
            target: int | str
            point = None
            if target_key == "body":
                target = self.body_ref(target_node, named_bodies, n_bodies)
                if kind == "accelerometer":
                    point = self.accelerometer_point(keys.get("point"), body_points[target])
            elif target_key == "point":
                target = self.point_ref(target_node)
                if self.points[target].fixed:
                    raise target_node.error(f"point {target} is fixed: nothing to measure")
            else:
                target = self.coordinate(target_node, coordinates)
            noise = None
            if "noise" in keys:  # a standard deviation: 0 would weigh a reading infinitely
                noise = self.numeric(self.expression(keys["noise"]), keys["noise"])
                if not noise > 0:
                    raise keys["noise"].error(f"a sensor's noise is the standard deviation "
                                              f"of its readings, > 0; got {noise:g}")
            name = self.name(keys.get("name"), f"{kind}{k}", {s.name for s in sensors})
            outputs = self.sensor_outputs(kind)
            offset = self.sensor_offset(keys.get("offset"), outputs)
            sensors.append(Sensor(name, cast(SensorKind, kind), target, noise, node.line,
                                  offset, outputs, point))  # kind: checked by SENSOR_TARGET
        return sensors

    def body_ref(self, node: Node, names: Mapping[str, int], count: int) -> int:
        """A body by index or name; an unknown name lists the bodies' names."""
        value = node.scalar()
        if isinstance(value, str):
            if value not in names:
                raise node.error(f"no body is named {value!r} (bodies: "
                                 f"{', '.join(names) or 'none'}; or give its index)")
            return names[value]
        if isinstance(value, bool) or not isinstance(value, int):
            raise node.error(f"expected a body index or body name, got {value!r}")
        if not 0 <= value < count:
            raise node.error(f"body {value} does not exist (there are {count} bodies, "
                             f"0 to {count - 1})")
        return value

    def accelerometer_point(self, node: Node | None, points: tuple[int, ...]) -> int:
        """Where an accelerometer sits: one of its body's points (default the first)."""
        if node is None:
            return points[0]
        point = self.point_ref(node)
        if point not in points:
            names = ", ".join(next((name for name, index in self.point_names.items()
                                    if index == k), str(k)) for k in points)
            raise node.error(f"an accelerometer sits on one of its body's points ({names})")
        return point

    def sensor_outputs(self, kind: str) -> int:
        """How many readings a sensor gives: one per axis for points and accelerometers
        (and for a spatial body's gyroscope), else one."""
        if kind in ("position", "velocity", "accelerometer"):
            return self.dimension
        return 3 if kind == "gyroscope" and self.dimension == 3 else 1

    def sensor_offset(self, node: Node | None, outputs: int) -> tuple[sp.Expr, ...]:
        """A sensor's additive offset: one expression, or a list with one per output."""
        if node is None:
            return (sp.Integer(0),) * outputs
        items = list(node.sequence()) if outputs > 1 and node.is_sequence() else [node]
        if len(items) != outputs:
            raise node.error(f"this sensor's offset is a list of {outputs} values, "
                             "one per reading")
        offset = tuple(self.expression(item) for item in items)
        for item, expr in zip(items, offset, strict=True):
            self.numeric(expr, item)
        return offset

"""The mechanism file format, declared once.

The loader (:mod:`mbgen.model.parser`) takes every section's allowed and required keys and
every list of choices from here, and :mod:`mbgen.model.schema` turns the same declarations
into the JSON Schema that editors use, so the two can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

#: What a key's value is. ``expression`` is a number or an expression string; ``point`` an
#: index or a point name; ``section`` a list of entries described by ``Key.section``.
Kind = Literal["expression", "expression_or_auto", "expressions2", "offset", "point",
               "points", "point_pair", "body", "coordinate", "coordinates", "name", "text",
               "boolean", "choice", "parameters", "section", "any"]


@dataclass(frozen=True)
class Key:
    kind: Kind
    doc: str
    required: bool = False
    choices: tuple[str, ...] = ()  # kind "choice"
    section: str = ""  # kind "section": the name of the entries' Section in SECTIONS


@dataclass(frozen=True)
class Section:
    doc: str
    keys: dict[str, Key] = field(default_factory=dict)

    @property
    def allowed(self) -> set[str]:
        return set(self.keys)

    @property
    def required(self) -> set[str]:
        return {name for name, key in self.keys.items() if key.required}


#: Names of parameters, points, bodies, ...; and the names the format defines itself (point
#: coordinates, body-local names, constants), which a parameter may not take.
IDENTIFIER = r"^[A-Za-z_][A-Za-z_0-9]*$"
RESERVED_NAME = r"^(?:[xy][0-9]+|length(?:[0-9][0-9])?|mass|pi|t)$"
RELATIVE_TYPES = ("RelativeAngle", "RelativeAngleAbsoluteDOF")
#: The key that names what a sensor of each type measures.
SENSOR_TARGET = {"encoder": "coordinate", "gyroscope": "body", "position": "point",
                 "velocity": "point"}

_NAME = "an identifier (letters, digits, _) used in labels and to refer to it"

SECTIONS: dict[str, Section] = {
    "mechanism": Section("A planar mechanism (mbgen / MBSE reference format).", {
        "name": Key("text", "Mechanism name (default: the file name)."),
        "parameters": Key("parameters", "Named constants in file order; a plain value is an "
                          "identifiable runtime parameter, one using other names is derived."),
        "points": Key("section", "The points; point i is the i-th entry (from 0).",
                      required=True, section="point"),
        "planar_bodies": Key("section", "Rigid bodies.", section="body"),
        "relative_coordinates": Key("section", "Extra angle coordinates.",
                                    section="relative_coordinate"),
        "gravity": Key("expressions2", "Gravity vector [gx, gy] (default [0, -9.81])."),
        "sliders": Key("section", "Point-on-line constraints.", section="slider"),
        "springs": Key("section", "Linear springs and viscous dampers between points.",
                       section="spring"),
        "forces": Key("section", "Constant generalized forces.", section="force"),
        "friction": Key("section", "Viscous and dry friction on a coordinate's rate.",
                        section="friction"),
        "actuators": Key("section", "Named external inputs (generalized forces gain*u).",
                         section="actuator"),
        "sensors": Key("section", "The measurement model.", section="sensor"),
        "independent_coordinates": Key("coordinates", "Coordinates to use as independent "
                                       "ones (as many as the degrees of freedom)."),
    }),
    "point": Section("A point.", {
        "x": Key("expression", "x position: permanent if fixed, initial (q0) otherwise.",
                 required=True),
        "y": Key("expression", "y position: permanent if fixed, initial (q0) otherwise.",
                 required=True),
        "fixed": Key("boolean", "A fixed point has no coordinates (default false)."),
        "name": Key("name", f"Point name: {_NAME}."),
    }),
    "body": Section("A rigid planar body.", {
        "points": Key("points", "Two or more distinct points (index or name).",
                      required=True),
        "mass": Key("expression", "Mass, at least 0.", required=True),
        "length": Key("expression_or_auto", "Two-point bodies: distance point1-point2 "
                      "(default auto: from the positions)."),
        "I0": Key("expression", "Moment of inertia about the first point (default "
                  "mass*length^2/3)."),
        "cog": Key("expressions2", "Centre of mass [x, y] in the body frame (origin point 1, "
                   "+X toward point 2; default [length/2, 0])."),
        "visual": Key("any", "Display data, kept verbatim."),
        "name": Key("name", f"Body name: {_NAME}."),
    }),
    "relative_coordinate": Section("An angle coordinate tied to points.", {
        "type": Key("choice", "RelativeAngleAbsoluteDOF: angle of [a, b] from +x; "
                    "RelativeAngle: angle from o->a to o->b ([o, a, b]) or from a1->a2 to "
                    "b1->b2 ([a1, a2, b1, b2]).", required=True, choices=RELATIVE_TYPES),
        "points": Key("points", "The points defining the angle.", required=True),
        "name": Key("name", f"Coordinate name (default theta<k>): {_NAME}."),
    }),
    "slider": Section("Keeps a point on the line through two points.", {
        "point": Key("point", "The sliding point.", required=True),
        "line": Key("point_pair", "[a, b]: two distinct points on the line.", required=True),
        "name": Key("name", f"Constraint name: {_NAME}."),
    }),
    "spring": Section("A linear spring and/or viscous damper between two points.", {
        "points": Key("point_pair", "[a, b]: two distinct points.", required=True),
        "k": Key("expression", "Stiffness [N/m] (default 0)."),
        "c": Key("expression", "Damping [N s/m] (default 0)."),
        "length": Key("expression_or_auto", "Rest length (default auto: initial distance)."),
        "name": Key("name", f"Spring name: {_NAME}."),
    }),
    "force": Section("A constant generalized force on one coordinate.", {
        "coordinate": Key("coordinate", "Coordinate name (x<i>, y<i> or an angle).",
                          required=True),
        "value": Key("expression", "Force [N] or torque [N m].", required=True),
    }),
    "friction": Section("Viscous and dry friction on one coordinate's rate.", {
        "coordinate": Key("coordinate", "Coordinate name.", required=True),
        "viscous": Key("expression", "Viscous coefficient, at least 0 (default 0)."),
        "coulomb": Key("expression", "Dry friction bound, at least 0 (default 0)."),
        "stiction_velocity": Key("expression", "Rate under which dry friction is smoothed "
                                 "(a positive number, default 1e-3)."),
        "name": Key("name", f"Friction name: {_NAME}."),
    }),
    "actuator": Section("A named input u applying gain*u on one coordinate.", {
        "coordinate": Key("coordinate", "Coordinate name.", required=True),
        "name": Key("name", f"Actuator name (default actuator<k>): {_NAME}."),
        "gain": Key("expression", "Gain (default 1)."),
    }),
    "sensor": Section("A sensor of the measurement model.", {
        "type": Key("choice", "What it measures; the target key depends on it (encoder: "
                    "coordinate, gyroscope: body, position/velocity: point).", required=True,
                    choices=tuple(SENSOR_TARGET)),
        "coordinate": Key("coordinate", "encoder: the coordinate read."),
        "body": Key("body", "gyroscope: the body's index."),
        "point": Key("point", "position, velocity: the mobile point."),
        "name": Key("name", f"Sensor name (default <type><k>): {_NAME}."),
        "noise": Key("expression", "Standard deviation of a reading."),
        "offset": Key("offset", "Added to the reading ([x, y] for point sensors)."),
    }),
}

"""The mechanism file format, declared once.

The loader (:mod:`mbgen.model.parser`) takes every section's allowed and required keys and
every list of choices from here, and :mod:`mbgen.model.schema` turns the same declarations
into the JSON Schema that editors use, so the two can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

#: What a key's value is. ``expression`` is a number or an expression string; ``point`` an
#: index or a point name; ``body`` an index or a body name; ``section`` a list of entries
#: described by ``Key.section``.
Kind = Literal["expression", "expression_or_auto", "expressions2", "expressions3",
               "gravity", "inertia", "offset", "point", "points", "point_pair", "vector", "vectors",
               "direction", "body", "coordinate", "coordinates", "name", "text", "boolean",
               "choice", "dimension", "parameters", "section", "any"]


@dataclass(frozen=True)
class Key:
    kind: Kind
    doc: str
    required: bool = False
    choices: tuple[str, ...] = ()  # kind "choice"
    section: str = ""  # kind "section": the name of the entries' Section in SECTIONS
    dimension: int | None = None  # the key belongs to planar (2) or spatial (3) files only


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
RESERVED_NAME = r"^(?:[xyz][0-9]+|u[xyz][0-9]+|length(?:[0-9][0-9])?|mass|pi|t)$"
PLANAR_RELATIVE_TYPES = ("RelativeAngle", "RelativeAngleAbsoluteDOF")
SPATIAL_RELATIVE_TYPES = ("Angle", "Distance")
RELATIVE_TYPES = PLANAR_RELATIVE_TYPES + SPATIAL_RELATIVE_TYPES
RELATIVE_TYPES_BY_DIMENSION = {2: PLANAR_RELATIVE_TYPES, 3: SPATIAL_RELATIVE_TYPES}
#: Spatial joints and the keys each needs besides ``type`` (see docs/format.md).
JOINT_TYPES = {"spherical": ("points",), "revolute": ("points", "axis"),
               "universal": ("points", "axes"), "cylindrical": ("points", "axis"),
               "prismatic": ("points", "axis", "axes")}
#: The key that names what a sensor of each type measures.
SENSOR_TARGET = {"encoder": "coordinate", "gyroscope": "body", "position": "point",
                 "velocity": "point", "accelerometer": "body"}
DIMENSION_NAMES = {2: "planar", 3: "spatial"}
DIMENSIONS = tuple(DIMENSION_NAMES)

_NAME = "an identifier (letters, digits, _) used in labels and to refer to it"

SECTIONS: dict[str, Section] = {
    "mechanism": Section("A mechanism: planar (mbgen / MBSE reference format) or spatial.", {
        "name": Key("text", "Mechanism name (default: the file name)."),
        "dimension": Key("dimension", "2 (default): a planar mechanism; 3: a spatial one, "
                         "with z, vectors, bodies and joints."),
        "parameters": Key("parameters", "Named constants in file order; a plain value is an "
                          "identifiable runtime parameter, one using other names is derived."),
        "points": Key("section", "The points; point i is the i-th entry (from 0).",
                      required=True, section="point"),
        "planar_bodies": Key("section", "Rigid bodies.", section="body", dimension=2),
        "vectors": Key("section", "Unit vectors (spatial).", section="vector", dimension=3),
        "bodies": Key("section", "Rigid bodies (spatial).", section="spatial_body",
                      dimension=3),
        "joints": Key("section", "Joints that need equations (spatial).", section="joint",
                      dimension=3),
        "relative_coordinates": Key("section", "Extra angle coordinates.",
                                    section="relative_coordinate"),
        "gravity": Key("gravity", "Gravity vector [gx, gy] (default [0, -9.81]), "
                       "[gx, gy, gz] in 3-D (default [0, 0, -9.81])."),
        "sliders": Key("section", "Point-on-line constraints.", section="slider",
                       dimension=2),
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
        "z": Key("expression", "z position (spatial mechanisms).", required=True,
                 dimension=3),
        "fixed": Key("boolean", "A fixed point has no coordinates (default false)."),
        "name": Key("name", f"Point name: {_NAME}."),
    }),
    "vector": Section("A unit vector (spatial): a direction fixed to bodies.", {
        "x": Key("expression", "x component (|v| = 1).", required=True),
        "y": Key("expression", "y component.", required=True),
        "z": Key("expression", "z component.", required=True),
        "fixed": Key("boolean", "A fixed vector has no coordinates (default false)."),
        "name": Key("name", f"Vector name: {_NAME}."),
    }),
    "spatial_body": Section("A rigid body (spatial), on its points and unit vectors.", {
        "points": Key("points", "One or more distinct points (index or name); the first is "
                      "the body frame's origin.", required=True),
        "vectors": Key("vectors", "Unit vectors fixed to the body (name or index)."),
        "mass": Key("expression", "Mass, at least 0.", required=True),
        "cog": Key("expressions3", "Centre of mass [x, y, z] from the first point, along the "
                   "world axes as the file places the body.", required=True),
        "inertia": Key("inertia", "Inertia tensor about the centre of mass, along the same "
                       "axes: [Ixx, Iyy, Izz] or [Ixx, Iyy, Izz, Ixy, Ixz, Iyz] (Ixy = "
                       "-integral of x y dm).", required=True),
        "visual": Key("any", "Display data, kept verbatim."),
        "name": Key("name", f"Body name: {_NAME}."),
    }),
    "joint": Section("A joint between two bodies whose elements are not shared (spatial).", {
        "type": Key("choice", "spherical: points [a, b] coincide; revolute: also one shared "
                    "axis; universal: points coincide and axes [u, v] keep their angle; "
                    "cylindrical: point b slides on the line through a along the shared "
                    "axis; prismatic: cylindrical with axes [u, v] keeping their angle.",
                    required=True, choices=tuple(JOINT_TYPES)),
        "points": Key("points", "[a] shared, or [a, b]: a on one body, b on the other.",
                      required=True),
        "axis": Key("vector", "The shared axis vector (revolute, cylindrical, prismatic)."),
        "axes": Key("vectors", "[u, v]: one vector on each body (universal, prismatic)."),
        "name": Key("name", f"Joint name (default joint<k>): {_NAME}; a cylindrical or "
                    "prismatic joint's sliding distance is a coordinate of this name."),
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
                    "b1->b2 ([a1, a2, b1, b2]); spatial: Angle (about `axis`, from the "
                    "direction `from` to `to`) and Distance ((b - a) along `axis`).",
                    required=True, choices=RELATIVE_TYPES),
        "points": Key("points", "The points defining the angle (planar), [a, b] (Distance)."),
        "axis": Key("vector", "Angle: the unit vector it turns about; Distance: the unit "
                    "vector it is measured along.", dimension=3),
        "from": Key("direction", "Angle: where it is 0, a vector or a point pair [a, b].",
                    dimension=3),
        "to": Key("direction", "Angle: the direction it measures, a vector or [a, b].",
                  dimension=3),
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
                    "coordinate, gyroscope and accelerometer: body, position/velocity: "
                    "point).", required=True, choices=tuple(SENSOR_TARGET)),
        "coordinate": Key("coordinate", "encoder: the coordinate read."),
        "body": Key("body", "gyroscope: the body, by index or name (spatial: a 3-axis "
                    "gyroscope, "
                    "along the body's axes); accelerometer: the body it is fixed to (it "
                    "reads the specific force a − g along the body's axes: 3 axes, or 2 "
                    "in the plane, x from the body's first point to its second)."),
        "point": Key("point", "position, velocity: the mobile point; accelerometer: where "
                     "it sits, one of its body's points (default: the first)."),
        "name": Key("name", f"Sensor name (default <type><k>): {_NAME}."),
        "noise": Key("expression", "Standard deviation of a reading."),
        "offset": Key("offset", "Added to the reading (a list, one per output, for point "
                      "sensors and spatial gyroscopes)."),
    }),
}

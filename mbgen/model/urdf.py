"""A URDF robot → the spatial mechanism it is, in natural coordinates, with located errors.

Why a translation to the mechanism format rather than a second model: one loader checks
every mechanism (names, inertias, placements), so a URDF robot is a spatial file like any
other and every command, kernel and route (the joint-space dynamics of an open chain of
revolute joints) works on it unchanged. The translation is written as the YAML text of that
file (:func:`urdf_mechanism_text`), each line remembering the URDF element it came from,
so an error the loader finds still names the URDF file, its line and the element.

How a robot maps: the links joined by ``fixed`` joints are one body (their inertias
combined about the common centre of mass); the root link's body is the ground. A joint
with world position p and axis a at q = 0 (all joint coordinates zero, the URDF's zero)
becomes a point at p shared by the two bodies and a unit vector a both list (a revolute
joint, ``revolute`` and ``continuous``), with an angle named after the joint from a
direction on the parent to one on the child; or, ``prismatic``, a point on each body, the
shared axis, and a distance named after the joint. ``<dynamics damping friction>`` is the
coordinate's viscous and dry friction, ``<limit lower upper>`` is recorded
(:class:`UrdfRobot`), not enforced. Gravity is the format's spatial default, 9.81 m/s²
along −z, as in ROS. A ``<mimic>`` joint is an independent joint (as Pinocchio's
``buildModelFromUrdf`` reads it). Floating and planar joints are refused.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from mbgen.errors import MechanismError
from mbgen.model.format import IDENTIFIER, RESERVED_NAME, SECTIONS, Key, Section
from mbgen.model.spatial import spatial_inertia_problem
from mbgen.model.spatial_parser import NEAR_PARALLEL
from mbgen.model.xml_nodes import Element, read_xml_file
from mbgen.model.yaml_nodes import Node

MOVING = ("revolute", "continuous", "prismatic")
REFUSED = {"floating": "a floating base", "planar": "a planar joint"}
_IDENTIFIER = re.compile(IDENTIFIER.rstrip("$") + r"\Z")
_RESERVED = re.compile(RESERVED_NAME)
MIN_SINE = 0.3  # a basis vector at least 17° off the span of the directions before it


@dataclass
class Link:
    name: str
    element: Element
    mass: float = 0.0
    com: np.ndarray = field(default_factory=lambda: np.zeros(3))  # in the link's frame
    inertia: np.ndarray = field(default_factory=lambda: np.zeros((3, 3)))  # about com, link axes
    inertial: Element | None = None


@dataclass
class Joint:
    name: str
    kind: str
    parent: str
    child: str
    rotation: np.ndarray  # parent link frame → joint frame (3, 3)
    offset: np.ndarray  # the joint frame's origin in the parent's frame (3,)
    axis: np.ndarray  # unit, in the joint frame (3,)
    damping: float
    friction: float
    limits: tuple[float, float] | None
    element: Element


@dataclass
class UrdfRobot:
    """A URDF file's robot: its name, links and joints, and each moving joint's limits."""

    name: str
    links: dict[str, Link]
    joints: list[Joint]
    root: str
    limits: dict[str, tuple[float, float]]


def rpy_rotation(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """URDF's fixed-axis roll, pitch, yaw: R = Rz(yaw) Ry(pitch) Rx(roll) (3, 3)."""
    cr, sr, cp, sp_, cy, sy = (np.cos(roll), np.sin(roll), np.cos(pitch), np.sin(pitch),
                               np.cos(yaw), np.sin(yaw))
    return np.array([[cy * cp, cy * sp_ * sr - sy * cr, cy * sp_ * cr + sy * sr],
                     [sy * cp, sy * sp_ * sr + cy * cr, sy * sp_ * cr - cy * sr],
                     [-sp_, cp * sr, cp * cr]])


def _origin(element: Element) -> tuple[np.ndarray, np.ndarray]:
    origin = element.one("origin")
    if origin is None:
        return np.eye(3), np.zeros(3)
    return (rpy_rotation(*origin.numbers("rpy", 3, "0 0 0")),
            np.array(origin.numbers("xyz", 3, "0 0 0")))


def _name(element: Element, what: str) -> str:
    name = element.text("name")
    if not _IDENTIFIER.match(name) or _RESERVED.match(name):
        raise element.error(f"{what} name {name!r} is not usable as a coordinate or body "
                            "name: an identifier (letters, digits, _), not x1, ux1, mass, "
                            "pi, t or length")
    return name


def _link(element: Element) -> Link:
    link = Link(element.text("name"), element)
    inertial = element.one("inertial")
    if inertial is None:
        return link
    mass = inertial.one("mass", required=True)
    assert mass is not None
    link.mass = mass.numbers("value", 1)[0]
    tensor = inertial.one("inertia", required=True)
    assert tensor is not None
    xx, xy, xz, yy, yz, zz = (tensor.numbers(k, 1)[0]
                              for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz"))
    local = np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])
    problem = spatial_inertia_problem(link.mass, local)
    if problem is None and link.mass > 0 and np.linalg.eigvalsh(local)[0] <= 0:
        problem = "the inertia tensor is not positive definite"
    if problem is not None:
        raise (mass if link.mass < 0 else tensor).error(problem)
    rotation, link.com = _origin(inertial)
    link.inertia = rotation @ local @ rotation.T
    link.inertial = inertial
    return link


def _joint(element: Element, links: dict[str, Link]) -> Joint:
    name = element.text("name")
    kind = element.text("type")
    if kind in REFUSED:
        raise element.error(f"{REFUSED[kind]} (type={kind!r}) is not supported: mbgen reads "
                            "fixed-base robots; fix the base (remove the joint) and give the "
                            "base link as the root")
    if kind not in (*MOVING, "fixed"):
        raise element.error(f"unknown joint type {kind!r} (known: revolute, continuous, "
                            "prismatic, fixed)")
    if kind != "fixed":
        name = _name(element, "the joint's")
    ends = []
    for tag in ("parent", "child"):
        end = element.one(tag, required=True)
        assert end is not None
        link = end.text("link")
        if link not in links:
            raise end.error(f"the joint's {tag} link {link!r} is not a <link> of the file")
        ends.append(link)
    if ends[0] == ends[1]:
        raise element.error(f"the joint joins the link {ends[0]!r} to itself")
    rotation, offset = _origin(element)
    axis_element = element.one("axis")
    axis = np.array(axis_element.numbers("xyz", 3) if axis_element is not None
                    else [1.0, 0.0, 0.0])
    norm = float(np.linalg.norm(axis))
    if kind != "fixed" and norm < 1e-9:
        raise (axis_element or element).error("the joint's axis is zero")
    dynamics = element.one("dynamics")
    damping, friction = ((dynamics.numbers("damping", 1, "0")[0],
                          dynamics.numbers("friction", 1, "0")[0])
                         if dynamics is not None else (0.0, 0.0))
    if damping < 0 or friction < 0:
        assert dynamics is not None
        raise dynamics.error("damping and friction must not be negative")
    limit = element.one("limit")
    limits = None
    if limit is not None and kind in ("revolute", "prismatic"):
        lower, upper = limit.numbers("lower", 1, "0")[0], limit.numbers("upper", 1, "0")[0]
        if lower > upper:
            raise limit.error(f"lower limit {lower:g} is above the upper one {upper:g}")
        limits = (lower, upper)
    return Joint(name, kind, ends[0], ends[1], rotation, offset, axis / max(norm, 1e-300),
                 damping, friction, limits, element)


def read_urdf(path: Path) -> UrdfRobot:
    """Read and check a URDF file's robot: every fault a located error."""
    root = read_xml_file(path, "a URDF file")
    if root.tag != "robot":
        raise root.error(f"a URDF file's root element is <robot>, not <{root.tag}>")
    links: dict[str, Link] = {}
    for element in root.all("link"):
        link = _link(element)
        if link.name in links:
            raise element.error(f"a second link named {link.name!r}")
        links[link.name] = link
    if not links:
        raise root.error("the robot has no <link>")
    joints: list[Joint] = []
    parent_of: dict[str, Joint] = {}
    for element in root.all("joint"):
        joint = _joint(element, links)
        if any(j.name == joint.name for j in joints):
            raise element.error(f"a second joint named {joint.name!r}")
        if joint.child in parent_of:
            raise element.error(f"the link {joint.child!r} is already the child of joint "
                                f"{parent_of[joint.child].name!r} (line "
                                f"{parent_of[joint.child].element.line}): a URDF is a tree")
        parent_of[joint.child] = joint
        joints.append(joint)
    roots = [name for name in links if name not in parent_of]
    if len(roots) != 1:
        if not roots:
            raise root.error("every link is a child: the joints form a cycle")
        raise links[roots[1]].element.error(
            f"a second root link: {roots[0]!r} and {roots[1]!r} are joined to nothing above "
            "them (a robot is one tree)")
    reached = _depth_first(roots[0], joints)
    unreached = [j for j in joints if j not in reached]
    if unreached:
        raise unreached[0].element.error(
            f"the joint {unreached[0].name!r} is on a cycle: its links are not reached "
            f"from the root link {roots[0]!r}")
    limits = {j.name: j.limits for j in joints if j.limits is not None}
    return UrdfRobot(root.attributes.get("name", path.stem), links, reached, roots[0], limits)


def _depth_first(root: str, joints: list[Joint]) -> list[Joint]:
    """The joints in depth-first order from ``root``, children in file order (the order
    Pinocchio numbers them in)."""
    below: dict[str, list[Joint]] = {}
    for joint in joints:
        below.setdefault(joint.parent, []).append(joint)
    found: list[Joint] = []
    stack = list(reversed(below.get(root, [])))
    while stack:
        joint = stack.pop()
        found.append(joint)
        stack.extend(reversed(below.get(joint.child, [])))
    return found


# -- the mechanism file ----------------------------------------------------------------
@dataclass
class _Body:
    name: str
    entry: Joint | None  # None: the ground
    points: list[str] = field(default_factory=list)
    vectors: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)


class _Writer:
    """The mechanism file's lines, each with the URDF element it comes from."""

    def __init__(self, robot: UrdfRobot) -> None:
        self.robot = robot
        self.lines: list[str] = []
        self.origin: list[Source] = []
        self.position: dict[str, np.ndarray] = {}
        self.value: dict[str, np.ndarray] = {}
        self.points: list[tuple[str, bool, Source]] = []
        self.vectors: list[tuple[str, bool, Source]] = []
        self.angles: list[tuple[Joint, str, str, str]] = []
        self.sliders: list[tuple[Joint, str, str, str, str, str]] = []
        self.scale = 1.0

    def line(self, text: str, source: Source) -> None:
        self.lines.append(text)
        self.origin.append(source)

    def point(self, body: _Body, name: str, where: np.ndarray, source: Source) -> str:
        """A point of ``body`` at ``where``: one it has there already, or a new one."""
        for existing in body.points:
            if np.linalg.norm(self.position[existing] - where) <= 1e-9 * self.scale:
                return existing
        self.position[name] = where
        self.points.append((name, body.entry is None, source))
        body.points.append(name)
        return name

    def vector(self, bodies: list[_Body], name: str, value: np.ndarray,
               source: Source) -> str:
        self.value[name] = value
        self.vectors.append((name, any(b.entry is None for b in bodies), source))
        for body in bodies:
            if body.entry is not None:
                body.vectors.append(name)
        return name


def _across(axis: np.ndarray) -> np.ndarray:
    """A unit vector perpendicular to the unit ``axis``: the world axis least along it,
    with its part along ``axis`` taken out."""
    world = np.eye(3)[int(np.argmin(np.abs(axis)))]
    across = world - world.dot(axis) * axis
    return across / np.linalg.norm(across)


def _number(value: float) -> str:
    return repr(float(value) + 0.0)


def urdf_mechanism_text(robot: UrdfRobot, closures: list[Closure] | None = None,
                        given: frozenset[str] = frozenset()) -> tuple[str, list[Source]]:
    """The mechanism file of ``robot`` and, per line (0-based), where it comes from (a
    URDF element, a line of the including YAML file, or None). ``closures``: joints that
    close loops (from an including file); ``given``: the top-level keys the including file
    writes itself (``name``, ``independent_coordinates``), left out here."""
    links = robot.links
    placed: dict[str, tuple[np.ndarray, np.ndarray]] = {robot.root: (np.eye(3), np.zeros(3))}
    ground = _Body("ground", None, links=[robot.root])
    body_of = {robot.root: ground}
    bodies: list[_Body] = []
    for joint in robot.joints:  # depth first: a parent is placed before its children
        rotation, offset = placed[joint.parent]
        placed[joint.child] = (rotation @ joint.rotation, offset + rotation @ joint.offset)
        if joint.kind == "fixed":
            body_of[joint.child] = body_of[joint.parent]
        else:
            body = _Body(_name(links[joint.child].element, "the link's"), joint)
            bodies.append(body)
            body_of[joint.child] = body
        body_of[joint.child].links.append(joint.child)
    writer = _Writer(robot)
    extent = [np.abs(offset).max() for _, offset in placed.values()]
    writer.scale = max(1.0, *extent)
    for body in bodies:
        entry = body.entry
        assert entry is not None
        joint = entry
        parent = body_of[joint.parent]
        rotation, where = placed[joint.child]
        axis = rotation @ joint.axis
        across = _across(axis)
        source = joint.element
        if joint.kind == "prismatic":
            at = writer.point(parent, f"{joint.name}__at", where, source)
            slide = writer.point(body, f"{joint.name}__slide", where, source)
            writer.vector([parent, body], f"{joint.name}__axis", axis, source)
            writer.vector([parent], f"{joint.name}__from", across, source)
            writer.vector([body], f"{joint.name}__to", np.cross(axis, across), source)
            writer.sliders.append((joint, at, slide, f"{joint.name}__axis",
                                   f"{joint.name}__from", f"{joint.name}__to"))
        else:
            at = writer.point(parent, f"{joint.name}__at", where, source)
            body.points.append(at)
            writer.vector([parent, body], f"{joint.name}__axis", axis, source)
            writer.vector([parent], f"{joint.name}__from", across, source)
            writer.vector([body], f"{joint.name}__to", across, source)
            writer.angles.append((joint, f"{joint.name}__axis", f"{joint.name}__from",
                                  f"{joint.name}__to"))
    for closure in closures or []:
        _close(writer, closure, body_of)
    for body in bodies:
        _well_posed_basis(writer, body)
    _write(writer, robot, bodies, placed, closures or [], given)
    return "\n".join(writer.lines) + "\n", writer.origin


def _well_posed_basis(writer: _Writer, body: _Body) -> None:
    """Order the body's points and vectors so that the basis the loader takes (its first
    point and the first three directions not near-parallel to the span of those before,
    points before vectors, in file order: :meth:`SpatialBuilder.choose_basis`) is well
    conditioned, adding a unit vector where the body has no third direction, or only ones
    less than MIN_SINE off the span of those before.

    Why: a direction a few degrees off that span is independent to the loader, but every
    further element is then tied to the basis by coefficients of order 1/sin(angle) and Φq
    is ill-conditioned. arm.urdf's forearm took its child point and the elbow's zero
    direction, 2.3° apart (Φq's smallest singular value 2.4e-5); the KKT factorization's
    pivot fell under its tolerance 0.2 s into a simulation."""
    origin = writer.position[body.points[0]]
    span: list[np.ndarray] = []  # orthonormal: the span of the basis so far

    def off_span(direction: np.ndarray) -> np.ndarray:
        d = direction / np.linalg.norm(direction)
        return d - sum((d.dot(c) * c for c in span), np.zeros(3))

    # the points come first whatever their order: the one farthest off the span first
    left, ordered = list(body.points[1:]), []
    while left:
        best = max(left, key=lambda p: float(np.linalg.norm(off_span(
            writer.position[p] - origin))))
        rest = off_span(writer.position[best] - origin)
        if len(span) < 3 and np.linalg.norm(rest) >= NEAR_PARALLEL:
            span.append(rest / np.linalg.norm(rest))
        ordered.append(best)
        left.remove(best)
    body.points[1:] = ordered
    vectors, front = list(body.vectors), list[str]()
    assert body.entry is not None
    while len(span) < 3:
        best_vector = max(vectors, key=lambda v: float(np.linalg.norm(off_span(
            writer.value[v]))), default=None)
        if best_vector is not None and np.linalg.norm(off_span(
                writer.value[best_vector])) >= MIN_SINE:
            rest = off_span(writer.value[best_vector])
            vectors.remove(best_vector)
        else:
            rest = np.cross(span[0], span[1]) if len(span) == 2 else _across(span[0])
            count = sum(name.startswith(f"{body.entry.name}__normal") for name in front)
            best_vector = writer.vector([body], f"{body.entry.name}__normal"
                                        f"{count + 1 if count else ''}",
                                        rest / np.linalg.norm(rest), body.entry.element)
            body.vectors.remove(best_vector)
        front.append(best_vector)
        span.append(rest / np.linalg.norm(rest))
    body.vectors[:] = front + vectors


def _mass_properties(writer: _Writer, body: _Body,
                     placed: dict[str, tuple[np.ndarray, np.ndarray]]
                     ) -> tuple[float, np.ndarray, np.ndarray]:
    """The body's mass, centre of mass (world, at q = 0) and inertia about it (world axes),
    its links' combined."""
    links = [writer.robot.links[name] for name in body.links]
    mass = sum(link.mass for link in links)
    centres = [placed[link.name][1] + placed[link.name][0] @ link.com for link in links]
    com = (sum(link.mass * c for link, c in zip(links, centres, strict=True)) / mass
           if mass > 0 else writer.position[body.points[0]])
    inertia = np.zeros((3, 3))
    for link, centre in zip(links, centres, strict=True):
        rotation = placed[link.name][0]
        r = centre - com
        inertia += rotation @ link.inertia @ rotation.T + link.mass * (r.dot(r) * np.eye(3)
                                                                        - np.outer(r, r))
    return mass, com, inertia


def _write(writer: _Writer, robot: UrdfRobot, bodies: list[_Body],
           placed: dict[str, tuple[np.ndarray, np.ndarray]], closures: list[Closure],
           given: frozenset[str]) -> None:
    line, n = writer.line, _number
    line("%YAML 1.2", None)
    line("---", None)
    if "name" not in given:
        line(f"name: {json.dumps(robot.name)}", None)
    line("dimension: 3", None)
    line("points:", None)
    for name, fixed, source in writer.points:
        x, y, z = writer.position[name]
        line(f"  - {{name: {name}, x: {n(x)}, y: {n(y)}, z: {n(z)}"
             f"{', fixed: true' if fixed else ''}}}", source)
    line("vectors:", None)
    for name, fixed, source in writer.vectors:
        x, y, z = writer.value[name]
        line(f"  - {{name: {name}, x: {n(x)}, y: {n(y)}, z: {n(z)}"
             f"{', fixed: true' if fixed else ''}}}", source)
    line("bodies:", None)
    for body in bodies:
        assert body.entry is not None
        mass, com, inertia = _mass_properties(writer, body, placed)
        for name in body.links:
            link = robot.links[name]
            if link.inertial is None and (link.element.all("visual")
                                          or link.element.all("collision")):
                raise link.element.error(
                    f"the link {name!r} has a shape but no <inertial>: a moving link's "
                    "mass and inertia must be given")
        has_children = any(b.entry is not None and b.entry.parent in body.links
                           for b in bodies)
        if mass <= 0 and not has_children:
            raise body.entry.element.error(
                f"the joint {body.entry.name!r} moves only links without mass "
                f"({', '.join(body.links)}): give them an <inertial>")
        cog = com - writer.position[body.points[0]]
        xx, yy, zz, xy, xz, yz = (inertia[0, 0], inertia[1, 1], inertia[2, 2], inertia[0, 1],
                                  inertia[0, 2], inertia[1, 2])
        line(f"  - {{name: {body.name}, points: [{', '.join(body.points)}], "
             f"vectors: [{', '.join(body.vectors)}], mass: {n(mass)}, "
             f"cog: [{n(cog[0])}, {n(cog[1])}, {n(cog[2])}], inertia: [{n(xx)}, {n(yy)}, "
             f"{n(zz)}, {n(xy)}, {n(xz)}, {n(yz)}]}}",
             robot.links[body.links[0]].element)
    if writer.angles:
        line("relative_coordinates:", None)
        for joint, axis, start, end in writer.angles:
            line(f"  - {{type: Angle, name: {joint.name}, axis: {axis}, from: {start}, "
                 f"to: {end}}}", joint.element)
    if writer.sliders:
        line("joints:", None)
        for joint, at, slide, axis, u, v in writer.sliders:
            line(f"  - {{type: prismatic, name: {joint.name}, points: [{at}, {slide}], "
                 f"axis: {axis}, axes: [{u}, {v}]}}", joint.element)
    moving = [b.entry for b in bodies if b.entry is not None]
    rubbing = [j for j in moving if j.damping > 0 or j.friction > 0]
    if rubbing:
        line("friction:", None)
        for joint in rubbing:
            line(f"  - {{coordinate: {joint.name}, viscous: {n(joint.damping)}, "
                 f"coulomb: {n(joint.friction)}}}", joint.element.one("dynamics") or joint.element)
    if "independent_coordinates" not in given and not closures:  # a loop: mbgen chooses
        line(f"independent_coordinates: [{', '.join(j.name for j in moving)}]", None)


def located(error: MechanismError, file: str, origin: list[Source]) -> MechanismError:
    """An error the loader found in the translated text, named where the line comes from:
    the URDF element, or the line of the including YAML file (``file`` where neither)."""
    source = origin[error.line - 1] if error.line and error.line <= len(origin) else None
    if source is None:
        return MechanismError(error.message, file)
    if isinstance(source, YamlLine):
        return MechanismError(error.message, source.file, source.line, error.key)
    return MechanismError(error.message, source.file, source.line, source.where())


# -- a mechanism YAML that includes a URDF ----------------------------------------------
# The keys such a file may have, declared once for the loader and the JSON Schema
# (mbgen.model.schema): ``urdf`` names the robot's file, the rest is what URDF cannot say;
# the mechanism keys it shares mean what they mean in any spatial file.
CLOSURE_TYPES = ("spherical", "revolute")
INCLUDE = Section(
    "A spatial mechanism made of a URDF robot (fixed base) and what URDF cannot say: loops "
    "closed between links, sensors, gravity, parameters.", {
        "urdf": Key("text", "The robot's .urdf file, relative to this file.", required=True),
        **{name: SECTIONS["mechanism"].keys[name] for name in (
            "name", "gravity", "parameters", "sensors", "independent_coordinates")},
        "closures": Key("section", "Joints closing loops between two links of the robot.",
                        section="closure"),
        "locked": Key("parameters", "Joints held at a value (m or rad, within their "
                      "limits), their links merged as a fixed joint's: {joint: value}."),
    })
CLOSURE = Section("A joint closing a loop between two links, placed at the URDF's zero.", {
    "type": Key("choice", "spherical (default): the links share a point; revolute: also an "
                "axis.", choices=CLOSURE_TYPES),
    "links": Key("coordinates", "[a, b]: the two links' names in the URDF.", required=True),
    "xyz": Key("expressions3", "The shared point [x, y, z] (numbers), in the frame of "
               "`frame`.", required=True),
    "frame": Key("text", "The link whose frame xyz and axis are in (default: the root "
                 "link's, the world)."),
    "axis": Key("expressions3", "The shared axis [x, y, z] (numbers; revolute only), in the "
                "frame of `frame`."),
    "name": Key("name", "The closure's name (default closure<k>): an identifier."),
})


@dataclass(frozen=True)
class YamlLine:
    """A line of the including YAML file (1-based)."""

    file: str
    line: int


Source = Element | YamlLine | None


@dataclass
class Closure:
    """A joint closing a loop between two links: a point both share (spherical), and the
    axis too (revolute); ``at`` and ``axis`` in the world at the URDF's zero."""

    name: str
    links: tuple[str, str]
    at: np.ndarray
    axis: np.ndarray | None
    node: Node


def _close(writer: _Writer, closure: Closure, body_of: dict[str, _Body]) -> None:
    """``closure`` as a point (and a vector) both links' bodies list."""
    first, second = (body_of[link] for link in closure.links)
    if first is second:
        raise closure.node.error(f"the links {closure.links[0]!r} and {closure.links[1]!r} "
                                 "are one rigid body (joined by fixed joints): nothing to "
                                 "close")
    if second.entry is None:  # the ground's point is fixed: made by the ground
        first, second = second, first
    source = YamlLine(closure.node.file, closure.node.line)
    existing = [p for p in second.points
                if np.linalg.norm(writer.position[p] - closure.at) <= 1e-9 * writer.scale]
    at = existing[0] if existing else None
    if at is not None and at not in first.points:
        mine = [p for p in first.points if np.linalg.norm(
            writer.position[p] - closure.at) <= 1e-9 * writer.scale]
        if mine:
            raise closure.node.error("the two links already meet at that point")
        first.points.append(at)
    elif at is None:
        at = writer.point(first, f"{closure.name}__at", closure.at, source)
        second.points.append(at)
    if closure.axis is not None:
        writer.vector([first, second], f"{closure.name}__axis", closure.axis, source)


def read_closures(node: Node, robot: UrdfRobot) -> list[Closure]:
    """The ``closures`` list of an including file: ``{type: spherical | revolute, links:
    [a, b], xyz: [x, y, z], frame: link, axis: [x, y, z], name}``; ``xyz`` and ``axis``
    in the frame of the link ``frame`` (default the root link's: the world) at the URDF's
    zero."""
    frames = _frames(robot)
    found: list[Closure] = []
    for k, entry in enumerate(node.sequence()):
        keys = entry.mapping(CLOSURE.allowed, required=CLOSURE.required)
        kind = keys["type"].string() if "type" in keys else CLOSURE_TYPES[0]
        if kind not in CLOSURE_TYPES:
            raise keys["type"].error(f"a closure is spherical or revolute, not {kind!r}")
        if (kind == "revolute") != ("axis" in keys):
            raise entry.error("a revolute closure needs an axis, a spherical one has none")
        links = [item.string() for item in keys["links"].sequence()]
        if len(links) != 2:
            raise keys["links"].error("a closure joins two links: links: [a, b]")
        for link, item in zip(links, keys["links"].sequence(), strict=True):
            if link not in robot.links:
                raise item.error(f"{link!r} is not a link of the URDF (its links: "
                                 f"{', '.join(robot.links)})")
        frame = keys["frame"].string() if "frame" in keys else robot.root
        if frame not in frames:
            raise keys["frame"].error(f"{frame!r} is not a link of the URDF")
        rotation, offset = frames[frame]
        at = offset + rotation @ _triple(keys["xyz"])
        axis = None
        if "axis" in keys:
            axis = rotation @ _triple(keys["axis"])
            if np.linalg.norm(axis) < 1e-9:
                raise keys["axis"].error("the closure's axis is zero")
            axis = axis / np.linalg.norm(axis)
        name = keys["name"].string() if "name" in keys else f"closure{k}"
        if not _IDENTIFIER.match(name) or _RESERVED.match(name):
            raise keys["name"].error(f"the closure's name {name!r} is not an identifier")
        found.append(Closure(name, (links[0], links[1]), at, axis, entry))
    if len({c.name for c in found}) != len(found):
        raise node.error("two closures have the same name")
    return found


def _triple(node: Node) -> np.ndarray:
    items = [item.scalar() for item in node.sequence()]
    if len(items) != 3 or not all(isinstance(v, int | float) and not isinstance(v, bool)
                                  and np.isfinite(v) for v in items):
        raise node.error("expected three finite numbers [x, y, z]")
    return np.array(items, dtype=float)


def _frames(robot: UrdfRobot) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every link's frame in the world at the URDF's zero (rotation (3, 3), origin (3,))."""
    placed = {robot.root: (np.eye(3), np.zeros(3))}
    for joint in robot.joints:
        rotation, offset = placed[joint.parent]
        placed[joint.child] = (rotation @ joint.rotation, offset + rotation @ joint.offset)
    return placed


def lock_joints(robot: UrdfRobot, node: Node) -> UrdfRobot:
    """``robot`` with the joints of the ``locked`` mapping ``node`` ({joint: value}) fixed
    at their values: a revolute joint's origin turned about its axis, a prismatic one's
    moved along it (a gripper's fingers held, so an arm's joints alone move)."""
    moving = {j.name: j for j in robot.joints if j.kind in MOVING}
    held: dict[str, float] = {}
    for name, item in node.children().items():
        if name not in moving:
            raise item.error(f"{name!r} is not a moving joint of the URDF (its moving "
                             f"joints: {', '.join(moving)})")
        value = item.scalar()
        if not isinstance(value, int | float) or isinstance(value, bool) or not np.isfinite(
                value):
            raise item.error(f"a locked joint's value is a finite number, not {value!r}")
        limits = moving[name].limits
        if limits is not None and not limits[0] <= value <= limits[1]:
            raise item.error(f"{value:g} is outside the joint's limits [{limits[0]:g}, "
                             f"{limits[1]:g}]")
        held[name] = float(value)
    joints = []
    for joint in robot.joints:
        if joint.name in held:
            value = held[joint.name]
            rotation, offset = joint.rotation, joint.offset
            if joint.kind == "prismatic":
                offset = offset + rotation @ joint.axis * value
            else:
                k = np.array([[0, -joint.axis[2], joint.axis[1]],
                              [joint.axis[2], 0, -joint.axis[0]],
                              [-joint.axis[1], joint.axis[0], 0]])
                rotation = rotation @ (np.eye(3) + np.sin(value) * k
                                       + (1 - np.cos(value)) * k @ k)
            joint = replace(joint, kind="fixed", rotation=rotation, offset=offset)
        joints.append(joint)
    kept = {name: bounds for name, bounds in robot.limits.items() if name not in held}
    return replace(robot, joints=joints, limits=kept)


def including_text(path: Path, text: str, root: Node) -> tuple[str, list[Source], UrdfRobot]:
    """The mechanism text of a YAML file with ``urdf: robot.urdf`` (relative to the YAML
    file): the robot's translation, then the file's own sections as they are written
    (their lines remembered, so an error in them names the YAML file), and the robot."""
    keys = root.mapping(INCLUDE.allowed, required=INCLUDE.required)
    target = keys["urdf"].string()
    urdf_path = path.parent / target
    if urdf_path.suffix.lower() != ".urdf":
        raise keys["urdf"].error(f"urdf: names a .urdf file, not {target!r}")
    if not urdf_path.is_file():
        raise keys["urdf"].error(f"no URDF file {target!r} (looked for {urdf_path})")
    robot = read_urdf(urdf_path)
    if "locked" in keys:
        robot = lock_joints(robot, keys["locked"])
    closures = read_closures(keys["closures"], robot) if "closures" in keys else []
    translated, origin = urdf_mechanism_text(
        robot, closures, frozenset(keys) & {"name", "independent_coordinates"})
    lines = text.splitlines()
    starts = sorted((child.key_line, name) for name, child in keys.items())
    for (line, _), (after, name) in zip(starts, starts[1:], strict=False):
        if after == line:
            raise keys[name].error("write the file's top-level keys one to a line (block "
                                   "style)")
    combined = translated.splitlines()
    for (start, name), (end, _) in zip(starts, [*starts[1:], (len(lines) + 1, "")],
                                       strict=True):
        if name in ("urdf", "closures", "locked"):
            continue
        for number in range(start, end):
            if lines[number - 1].strip() in ("---", "..."):
                break
            combined.append(lines[number - 1])
            origin.append(YamlLine(str(path), number))
    return "\n".join(combined) + "\n", origin, robot

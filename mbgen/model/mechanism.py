"""The parsed mechanism: plain data, with every quantity a SymPy expression in parameters.

Nothing here knows about generalized coordinates' symbols or C; the symbolic layer turns
this description into equations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import sympy as sp

from mbgen.model.spatial import Joint, SpatialBody, SpatialCoordinate, Vector


def rigid_body_problem(mass: float, inertia: float, offset_squared: float) -> str | None:
    """Why a planar body's mass m and moment of inertia I0 about its first point are
    impossible, or None: m ≥ 0, and I0 ≥ m|cog|² (its inertia about the centre of mass
    is not negative). The one statement of the rule, for the loader and identification."""
    if mass < 0:
        return f"mass must not be negative, got {mass}"
    if inertia < mass * offset_squared * (1 - 1e-9):
        return (f"I0 = {inertia:g} is smaller than mass*|cog|^2 = {mass * offset_squared:g}, "
                "impossible for a rigid body (I0 is about the first point)")
    return None


@dataclass(frozen=True)
class Parameter:
    """A named model parameter: a runtime input with a default value (identifiable)."""

    name: str
    symbol: sp.Symbol
    value: float


@dataclass(frozen=True)
class Point:
    index: int
    name: str
    x: sp.Expr  # initial (or, if fixed, permanent) coordinates, in parameters
    y: sp.Expr
    fixed: bool
    line: int
    z: sp.Expr = sp.Integer(0)  # spatial mechanisms only


@dataclass(frozen=True)
class Body:
    """A rigid planar body; its inertia lives on its first two points (reference model)."""

    index: int
    name: str
    points: tuple[int, ...]
    length: sp.Expr  # distance between the first two points
    mass: sp.Expr
    inertia: sp.Expr  # I0: moment of inertia about the first point
    cog: tuple[sp.Expr, sp.Expr]  # body frame: origin at point 1, +X toward point 2
    distances: tuple[tuple[int, int, sp.Expr], ...]  # rigidity constraints (pa, pb, length)
    aligned: tuple[tuple[int, sp.Expr], ...]  # points on the line of points 1-2: (point, α)
    visual: Any
    line: int

    def problem(self, values: Mapping[sp.Symbol, float]) -> str | None:
        """:func:`rigid_body_problem` with the parameters at ``values``."""
        def number(expr: sp.Expr) -> float:
            return float(expr.subs(values))  # the parser's expressions, no text

        return rigid_body_problem(number(self.mass), number(self.inertia),
                                  sum(number(c) ** 2 for c in self.cog))

    def parallel_axis_term(self) -> sp.Expr:
        """m|cog|²: I0 minus the inertia about the centre of mass (Steiner), which
        :func:`rigid_body_problem` requires to be at most I0."""
        return self.mass * sum((c**2 for c in self.cog), sp.Integer(0))


@dataclass(frozen=True)
class RelativeAngle:
    """Absolute angle of segment points[0]→points[1], or angle from body A to body B."""

    name: str
    kind: Literal["absolute", "between_bodies"]
    points: tuple[int, int, int, int]  # absolute: (a, b, -, -); between: (a1, a2, b1, b2)
    initial: sp.Expr
    line: int


@dataclass(frozen=True)
class Slider:
    """Point ``point`` stays on the line through ``line_points`` (fixed or mobile)."""

    name: str
    point: int
    line_points: tuple[int, int]
    line: int


@dataclass(frozen=True)
class Spring:
    """Linear spring and/or viscous damper between two points."""

    name: str
    points: tuple[int, int]
    stiffness: sp.Expr
    damping: sp.Expr
    rest_length: sp.Expr
    line: int


@dataclass(frozen=True)
class Force:
    """A constant generalized force on one coordinate (expression in parameters)."""

    coordinate: str
    value: sp.Expr
    line: int


@dataclass(frozen=True)
class Friction:
    """Viscous and dry (Coulomb) friction on one coordinate's rate.

    Continuous-time integrators see the dry part smoothed, -coulomb·tanh(rate / stiction);
    the SPOOK stepper and identification treat it exactly, as a friction impulse bounded by
    dt·coulomb (a box complementarity condition, regularized by the same slope).
    """

    name: str
    coordinate: str
    viscous: sp.Expr  # generalized force per unit rate
    coulomb: sp.Expr  # bound of the dry friction force
    stiction: float  # rate under which dry friction acts as a stiff damper
    line: int


@dataclass(frozen=True)
class Actuator:
    """A named external input u acting as a generalized force gain·u on one coordinate."""

    name: str
    coordinate: str
    line: int
    gain: sp.Expr = sp.Integer(1)


SensorKind = Literal["gyroscope", "encoder", "position", "velocity", "accelerometer"]


@dataclass(frozen=True)
class Sensor:
    name: str
    kind: SensorKind
    target: int | str  # body index (gyroscope), coordinate name (encoder), point index
    noise: float | None
    line: int
    offset: tuple[sp.Expr, ...] = ()  # added to the reading (one per output), in parameters
    outputs: int = 1  # readings per sample: one per axis for points and spatial gyroscopes
    point: int | None = None  # accelerometer: the body's point where it sits


@dataclass
class Mechanism:
    name: str
    source: str
    parameters: list[Parameter]
    points: list[Point]
    bodies: list[Body]
    relative_angles: list[RelativeAngle] = field(default_factory=list)
    sliders: list[Slider] = field(default_factory=list)
    springs: list[Spring] = field(default_factory=list)
    forces: list[Force] = field(default_factory=list)
    frictions: list[Friction] = field(default_factory=list)
    actuators: list[Actuator] = field(default_factory=list)
    sensors: list[Sensor] = field(default_factory=list)
    # read with q̈ (the specific force on a body): apart from ``sensors``, whose readings
    # are functions of the state (q, q̇) that the estimators take
    accelerometers: list[Sensor] = field(default_factory=list)
    gravity: tuple[sp.Expr, ...] = (sp.Integer(0), sp.Rational("-9.81"))
    independent: list[str] | None = None  # coordinates the user asks to use as z
    dimension: int = 2
    # spatial mechanisms (dimension 3): their bodies are `spatial_bodies`, not `bodies`
    vectors: list[Vector] = field(default_factory=list)
    spatial_bodies: list[SpatialBody] = field(default_factory=list)
    joints: list[Joint] = field(default_factory=list)
    spatial_coordinates: list[SpatialCoordinate] = field(default_factory=list)
    # a joint coordinate's lower and upper limits where the file gives them (a URDF's
    # <limit>): recorded and reported, not enforced
    limits: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def axes(self) -> str:
        """The names of a point's coordinates: "xy" or "xyz"."""
        return "xyz"[:self.dimension]

    @property
    def mobile_points(self) -> list[Point]:
        return [p for p in self.points if not p.fixed]

    def nonnegative_parameters(self) -> list[str]:
        """Parameters that stand alone for a quantity no real mechanism has negative: a
        body's mass or I0 (a spatial body's mass or a moment of its inertia tensor), a
        spring's stiffness or damping, a viscous or dry friction."""
        quantities = ([q for b in self.bodies for q in (b.mass, b.inertia)]
                      + [q for b in self.spatial_bodies
                         for q in (b.mass, *(b.inertia[k][k] for k in range(3)))]
                      + [q for s in self.springs for q in (s.stiffness, s.damping)]
                      + [q for f in self.frictions for q in (f.viscous, f.coulomb)])
        symbols = {q for q in quantities if isinstance(q, sp.Symbol)}
        return [p.name for p in self.parameters if p.symbol in symbols]

    def centroidal_inertias(self) -> list[tuple[str, sp.Expr]]:
        """(I0's parameter, m|cog|² in the other parameters) for each body whose I0 is a
        parameter on its own that its mass and centre of mass do not involve: I0 minus
        that term is the inertia about the centre of mass, which a solver can keep at or
        above 0 with a plain bound."""
        names = {p.symbol: p.name for p in self.parameters}
        found = []
        for body in self.bodies:
            term = body.parallel_axis_term()
            if body.inertia in names and body.inertia not in term.free_symbols:
                found.append((names[body.inertia], term))
        return found

    def body_problems(self, values: Mapping[str, float]) -> list[str]:
        """"<body>: why" for each body that the parameters at ``values`` (by name; the
        file's value for the others) make impossible."""
        given = {p.symbol: float(values.get(p.name, p.value)) for p in self.parameters}
        return [f"{body.name}: {problem}" for body in self.all_bodies
                if (problem := body.problem(given)) is not None]

    @property
    def all_bodies(self) -> list[Body | SpatialBody]:
        """Planar and spatial bodies (a file has one kind), in file order."""
        return [*self.bodies, *self.spatial_bodies]

    @property
    def coordinate_names(self) -> list[str]:
        """Reference order: x, y (and z) of every non-fixed point, ux, uy, uz of every
        mobile vector, then relative coordinates (and sliding joints' distances)."""
        names: list[str] = []
        for point in self.mobile_points:
            names += [f"{axis}{point.index}" for axis in self.axes]
        for vector in self.vectors:
            if not vector.fixed:
                names += [f"u{axis}{vector.index}" for axis in "xyz"]
        return (names + [angle.name for angle in self.relative_angles]
                + [c.name for c in self.spatial_coordinates]
                + [joint.name for joint in self.joints if joint.slides])

    @property
    def coordinate_units(self) -> list[str]:
        """The SI unit of each coordinate, in ``coordinate_names`` order: m for points and
        distances, 1 for unit vectors' components, rad for angles."""
        units: list[str] = ["m"] * (self.dimension * len(self.mobile_points))
        units += ["1"] * (3 * sum(not v.fixed for v in self.vectors))
        units += ["rad"] * len(self.relative_angles)
        units += ["rad" if c.kind == "angle" else "m" for c in self.spatial_coordinates]
        return units + ["m" for joint in self.joints if joint.slides]

    @property
    def parameter_values(self) -> dict[sp.Symbol, float]:
        return {p.symbol: p.value for p in self.parameters}

    def length_scale(self) -> float:
        """The mechanism's size [m]: the largest |x| or |y| of its points in the file (fixed
        ones included), 1 when all are 0. Φ holds squared lengths (and lengths), computed
        from coordinates this large, so tolerances on Φ scale with its square: a mechanism a
        few centimetres across then converges as tightly as the same one in metres (with an
        absolute 1e-12 m², Andrews' squeezer lost 4e-8 rad of crank angle in 0.03 s)."""
        subs = self.parameter_values
        largest = max((abs(float(sp.N(c.subs(subs)))) for p in self.points
                       for c in (p.x, p.y, p.z)), default=0.0)
        return largest if largest > 0 else 1.0

    def initial_coordinates(self) -> list[float]:
        values: list[sp.Expr] = []
        for point in self.mobile_points:
            values += [point.x, point.y, point.z][:self.dimension]
        for vector in self.vectors:
            if not vector.fixed:
                values += [vector.x, vector.y, vector.z]
        values += [angle.initial for angle in self.relative_angles]
        values += [c.initial for c in self.spatial_coordinates]
        values += [joint.initial for joint in self.joints if joint.slides]
        subs = self.parameter_values
        return [float(sp.N(v.subs(subs))) for v in values]

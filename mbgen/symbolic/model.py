"""Mechanism → equations: constraints Φ(q), mass matrix M, potential V, forces Q, sensors h.

Natural coordinates (García de Jalón): the unknowns are the x, y of every mobile point,
plus relative coordinates. A planar body's inertia is expressed on its first two points
(exact for any centre of mass, on or off the bar axis); its other points are kept rigid by
distance constraints. The relative-angle constraint uses a smooth form (see docs/format.md)
instead of the reference's switching cos/sin form. A spatial mechanism's constraints,
mass matrix and gyroscopes come from :mod:`mbgen.symbolic.spatial`; springs, dampers,
forces, friction and the other sensors are written once for both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from mbgen.model.mechanism import Body, Mechanism
from mbgen.symbolic import spatial
from mbgen.symbolic.differentiate import derivative
from mbgen.symbolic.kinematics import Constraint, Kinematics, Vec, kinematics


@dataclass
class SymbolicModel:
    """The mechanism's equations in terms of q, q̇ and the parameter symbols."""

    mechanism: Mechanism
    q: list[sp.Symbol]
    qd: list[sp.Symbol]
    params: list[sp.Symbol]
    constraints: list[Constraint]
    mass: dict[tuple[int, int], sp.Expr]  # sparse, symmetric, both triangles stored
    potential_terms: list[sp.Expr]  # gravity, springs, constant generalized forces
    dissipative_forces: list[sp.Expr]  # Q from dampers and friction (depends on q̇)
    sensor_labels: list[str]
    sensors: list[sp.Expr]
    # dry-friction bounds (one per friction element), then actuator gains: what discrete
    # steppers and identification need besides Q
    coefficients: list[sp.Expr]
    # accelerometers' readings in q, q̈ (``qdd``) and the parameters, one per output
    qdd: list[sp.Symbol] = field(default_factory=list)
    accelerometer_labels: list[str] = field(default_factory=list)
    accelerometers: list[sp.Expr] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.q)

    @property
    def m(self) -> int:
        return len(self.constraints)

    @property
    def coordinate_names(self) -> list[str]:
        return self.mechanism.coordinate_names


def _planar_inertia(body: Body, i: int, j: int) -> list[tuple[int, int, sp.Expr]]:
    """Mass matrix of a body on the 4 coordinates (x_i, y_i, x_j, y_j) of its first points.

    With ρ(ξ, η) = (1 - ξ/L) r_i + ξ/L r_j + η/L J (r_j - r_i) and ∫ρ dm over the body:
    M_ii = (m - 2ma/L + I0/L²) I, M_ij = (ma/L - I0/L²) I + (mb/L) J, M_jj = I0/L² I.
    """
    m, inertia, length = body.mass, body.inertia, body.length
    a, b = body.cog
    d_ii = m - 2 * m * a / length + inertia / length**2
    d_ij = m * a / length - inertia / length**2
    d_jj = inertia / length**2
    s = m * b / length  # J = [[0, -1], [1, 0]]
    block = [
        (i, i, d_ii), (i + 1, i + 1, d_ii),
        (j, j, d_jj), (j + 1, j + 1, d_jj),
        (i, j, d_ij), (i + 1, j + 1, d_ij), (i, j + 1, -s), (i + 1, j, s),
    ]
    block += [(c, r, v) for r, c, v in block[4:]]
    return block


def _cog_position(body: Body, ri: Vec, rj: Vec) -> tuple[sp.Expr, sp.Expr]:
    """The centre of mass from the body's first two points (cog along and across them)."""
    a, b = body.cog
    ux, uy = (rj[0] - ri[0]) / body.length, (rj[1] - ri[1]) / body.length
    return ri[0] + a * ux - b * uy, ri[1] + a * uy + b * ux


def build_symbolic_model(mechanism: Mechanism) -> SymbolicModel:
    kin = kinematics(mechanism)
    if mechanism.dimension == 3:
        constraints = spatial.constraints(mechanism, kin)
        mass, gravity = spatial.inertia_and_gravity(mechanism, kin)
    else:
        constraints = _constraints(mechanism, kin)
        mass, gravity = _inertia_and_gravity(mechanism, kin)
    spring_energy, dissipative = _applied_forces(mechanism, kin)
    labels, sensors = _sensor_equations(mechanism, kin)
    qdd = [sp.Symbol(f"qdd_{k}", real=True) for k in range(len(kin.q))]
    accelerometer_labels, accelerometers = _accelerometer_equations(mechanism, kin, qdd)
    return SymbolicModel(mechanism, kin.q, kin.qd, [p.symbol for p in mechanism.parameters],
                         constraints, mass, gravity + spring_energy,
                         dissipative, labels, sensors,
                         [f.coulomb for f in mechanism.frictions]
                         + [a.gain for a in mechanism.actuators],
                         qdd, accelerometer_labels, accelerometers)


def _constraints(mechanism: Mechanism, kin: Kinematics) -> list[Constraint]:
    """Φ: rigid bodies (distances, aligned points), sliders, then relative angles."""
    delta = kin.delta
    constraints: list[Constraint] = []
    for body in mechanism.bodies:
        for a, b, length in body.distances:
            dx, dy = delta(a, b)
            constraints.append(Constraint(f"{body.name}: |p{a}-p{b}| = const", dx**2 + dy**2
                                          - length**2))
        first, second = body.points[0], body.points[1]
        for aligned, alpha in body.aligned:
            dx, dy = delta(first, aligned)
            lx, ly = delta(first, second)
            label = f"{body.name}: p{aligned} on line p{first}-p{second}"
            constraints += [Constraint(f"{label} (x)", dx - alpha * lx),
                            Constraint(f"{label} (y)", dy - alpha * ly)]
    for slider in mechanism.sliders:
        a, b = slider.line_points
        dx, dy = delta(a, slider.point)
        lx, ly = delta(a, b)
        constraints.append(Constraint(f"{slider.name}: p{slider.point} on line p{a}-p{b}",
                                      dx * ly - dy * lx))
    for angle in mechanism.relative_angles:
        theta = kin.q[kin.index[angle.name]]
        a1, a2, b1, b2 = angle.points
        ux, uy = delta(a1, a2)
        if angle.kind == "absolute":
            expr = ux * sp.sin(theta) - uy * sp.cos(theta)
        else:
            vx, vy = delta(b1, b2)
            expr = (ux * vy - uy * vx) * sp.cos(theta) - (ux * vx + uy * vy) * sp.sin(theta)
        constraints.append(Constraint(f"{angle.name}: relative angle", expr))
    return constraints


def _inertia_and_gravity(mechanism: Mechanism, kin: Kinematics,
                         ) -> tuple[dict[tuple[int, int], sp.Expr], list[sp.Expr]]:
    """The sparse mass matrix (both triangles, no zeros) and each body's potential energy
    in gravity."""
    mass: dict[tuple[int, int], sp.Expr] = {}
    potential: list[sp.Expr] = []
    gx, gy = mechanism.gravity
    slot = kin.slot
    for body in mechanism.bodies:
        pi, pj = body.points[0], body.points[1]
        cx, cy = _cog_position(body, kin.position[pi], kin.position[pj])
        potential.append(-body.mass * (gx * cx + gy * cy))
        # Fixed points carry no coordinates: map their block rows to None and drop them.
        local = {0: slot.get(pi), 1: None if pi not in slot else slot[pi] + 1,
                 2: slot.get(pj), 3: None if pj not in slot else slot[pj] + 1}
        for r, c, value in _planar_inertia(body, 0, 2):
            row, col = local[r], local[c]
            if row is not None and col is not None:
                mass[(row, col)] = mass.get((row, col), 0) + value
    return {k: v for k, v in mass.items() if v != 0}, potential


def _applied_forces(mechanism: Mechanism, kin: Kinematics,
                    ) -> tuple[list[sp.Expr], list[sp.Expr]]:
    """(potential terms of springs and constant generalized forces, dissipative Q of
    dampers and friction)."""
    q, qd, index = kin.q, kin.qd, kin.index
    potential: list[sp.Expr] = []
    dissipative = [sp.Integer(0)] * len(q)
    for spring in mechanism.springs:
        a, b = spring.points
        delta = kin.delta(a, b)
        length = sp.sqrt(sp.Add(*(d**2 for d in delta)))
        potential.append(spring.stiffness * (length - spring.rest_length) ** 2 / 2)
        if spring.damping != 0:
            rate = sp.Add(*(d * v for d, v in zip(delta, kin.relative_velocity(a, b),
                                                  strict=True))) / length
            for k in range(len(q)):
                grad = derivative(length, q[k])
                if grad != 0:
                    dissipative[k] -= spring.damping * rate * grad
    for force in mechanism.forces:
        potential.append(-force.value * q[index[force.coordinate]])
    for friction in mechanism.frictions:
        rate = qd[index[friction.coordinate]]
        dissipative[index[friction.coordinate]] -= (
            friction.viscous * rate + friction.coulomb * sp.tanh(rate / friction.stiction))
    return potential, dissipative


def _accelerometer_equations(mechanism: Mechanism, kin: Kinematics, qdd: list[sp.Symbol],
                             ) -> tuple[list[str], list[sp.Expr]]:
    """Each accelerometer's labels and readings Rᵀ (a − g): the specific force at its point
    along its body's axes (R: the body's rotation from the file's placement in 3-D; in the
    plane, x from the body's first point to its second). In natural coordinates a point's
    position is its own coordinates, linear in q, so a = (∂r/∂q) q̈ exactly."""
    labels: list[str] = []
    values: list[sp.Expr] = []
    gravity = sp.Matrix(mechanism.gravity)
    for sensor in mechanism.accelerometers:
        assert sensor.point is not None  # the parser places every accelerometer
        position = kin.position[sensor.point]
        acceleration = sp.Matrix([sp.Add(*(sp.diff(x, qk) * a for qk, a in zip(
            kin.q, qdd, strict=True))) for x in position])
        body = int(sensor.target)
        if mechanism.dimension == 3:
            rotation = spatial.rotation(mechanism, kin, body)
        else:
            first, second = mechanism.bodies[body].points[:2]
            ux, uy = (d / mechanism.bodies[body].length for d in kin.delta(first, second))
            rotation = sp.Matrix([[ux, -uy], [uy, ux]])
        reading = rotation.T * (acceleration - gravity)
        labels += [f"{sensor.name}.{axis}" for axis in mechanism.axes]
        values += [r + o for r, o in zip(reading, sensor.offset, strict=True)]
    return labels, values


def _sensor_equations(mechanism: Mechanism, kin: Kinematics,
                      ) -> tuple[list[str], list[sp.Expr]]:
    """Each sensor's output labels and equations h(q, q̇)."""
    labels: list[str] = []
    values: list[sp.Expr] = []
    for sensor in mechanism.sensors:
        if sensor.kind == "gyroscope" and mechanism.dimension == 3:
            labels += [f"{sensor.name}.{axis}" for axis in "xyz"]
            reading = spatial.angular_velocity(mechanism, kin, int(sensor.target))
        elif sensor.kind == "gyroscope":
            body = mechanism.bodies[int(sensor.target)]
            a, b = body.points[0], body.points[1]
            ux, uy = kin.delta(a, b)
            vx, vy = kin.relative_velocity(a, b)
            labels.append(sensor.name)
            reading = [(ux * vy - uy * vx) / (ux**2 + uy**2)]
        elif sensor.kind == "encoder":
            labels.append(sensor.name)
            reading = [kin.q[kin.index[str(sensor.target)]]]
        else:
            source = kin.position if sensor.kind == "position" else kin.velocity
            labels += [f"{sensor.name}.{axis}" for axis in mechanism.axes]
            reading = list(source[int(sensor.target)])
        offset = sensor.offset or (sp.Integer(0),) * len(reading)
        values += [r + o for r, o in zip(reading, offset, strict=True)]
    return labels, values

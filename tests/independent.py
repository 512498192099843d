"""Independent models that tests and benchmarks check mbgen against: written by hand from
their equations, using nothing of mbgen."""

from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares

#: The Furuta pendulum's dry-friction smoothing rate [rad/s], as mbgen's default
#: ``stiction_velocity`` (−c tanh(θ̇ / s) in continuous time).
FURUTA_STICTION = 1e-3


def furuta_acceleration(p: dict[str, float], theta: np.ndarray, rate: np.ndarray,
                        torque: float) -> np.ndarray:
    """θ̈ of the Furuta pendulum from its Lagrangian (Cazzolato & Prime 2011, with the arm's
    and the pendulum's inertias about their own long axes): M(θ2) θ̈ + h(θ2, θ̇) = τ, with
    gravity g (sin tilt, 0, −cos tilt), viscous and smoothed dry friction, and the motor's
    torque K·``torque`` on θ1 (parameters by the names of ``mechanisms/furuta.yaml``)."""
    s1, c1 = np.sin(theta[0]), np.cos(theta[0])
    s2, c2 = np.sin(theta[1]), np.cos(theta[1])
    arm = p["m1"] * p["l1"] ** 2 + p["J1p"] + p["m2"] * p["L1"] ** 2
    pendulum = p["m2"] * p["l2"] ** 2 + p["J2p"]
    coupling = p["m2"] * p["L1"] * p["l2"]
    mass = np.array([[arm + pendulum * s2 * s2 + p["J2a"] * c2 * c2, coupling * c2],
                     [coupling * c2, pendulum]])
    da = 2 * (pendulum - p["J2a"]) * s2 * c2  # dM11/dθ2
    h = np.array([da * rate[0] * rate[1] - coupling * s2 * rate[1] ** 2,
                  -da * rate[0] ** 2 / 2])
    # V = −g sin(tilt) (m1 l1 + m2 L1) cos θ1 + m2 g sin(tilt) l2 sin θ1 sin θ2
    #     − m2 g cos(tilt) l2 cos θ2
    g, st, ct = p["g"], np.sin(p["tilt"]), np.cos(p["tilt"])
    dv = np.array([g * st * ((p["m1"] * p["l1"] + p["m2"] * p["L1"]) * s1
                             + p["m2"] * p["l2"] * c1 * s2),
                   p["m2"] * g * p["l2"] * (st * s1 * c2 + ct * s2)])
    friction = (-np.array([p["b1"], p["b2"]]) * rate
                - np.array([p["c1"], p["c2"]]) * np.tanh(rate / FURUTA_STICTION))
    applied = np.array([p["K"] * torque, 0.0]) + friction - dv
    return np.linalg.solve(mass, applied - h)


class BricardChain:
    """An independent model of Bricard's linkage: five rods turned in turn about the six
    joint axes (products of exponentials of rotations), the loop closed by least squares
    on the last four joint angles, given the first. Nothing of mbgen is used."""

    POINTS = np.array([[0, 0, 0], [1, 0, 0], [1, -1, 0], [1, -1, 1], [0, -1, 1], [0, 0, 1]],
                      dtype=float)
    AXES = np.eye(3)[[1, 2, 0, 1, 2, 0]]  # y, z, x, y, z, x
    MASS, SIDE, G = 1.0, 0.1, 9.81

    def __init__(self) -> None:
        self.grid = np.linspace(0.0, np.pi, 400)
        self.table = [np.zeros(4)]
        for angle in self.grid[1:]:  # continuation along the motion: one assembly branch
            self.table.append(self.closed(angle, self.table[-1]))
        along, across = self.MASS * 2 * self.SIDE**2 / 12, self.MASS * (1 + self.SIDE**2) / 12
        self.inertia = []
        for k in range(5):
            d = self.POINTS[k + 1] - self.POINTS[k]
            self.inertia.append(across * np.eye(3) + (along - across) * np.outer(d, d))
        self.centres = (self.POINTS[:-1] + self.POINTS[1:]) / 2

    @staticmethod
    def rotation(axis: np.ndarray, angle: float) -> np.ndarray:
        k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
        return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * k @ k

    def poses(self, angles: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """(R, p) of each rod: a material point x of the file's placement is now R x + p."""
        rotation, shift, found = np.eye(3), np.zeros(3), []
        for k in range(5):
            turn = self.rotation(self.AXES[k], angles[k])
            shift = rotation @ (self.POINTS[k] - turn @ self.POINTS[k]) + shift
            rotation = rotation @ turn
            found.append((rotation, shift))
        return found

    def gap(self, rest: np.ndarray, first: float) -> np.ndarray:
        """How far rod EF is from turning about the ground's joint F (point and axis x)."""
        rotation, shift = self.poses(np.concatenate([[first], rest]))[-1]
        return np.concatenate([rotation @ self.POINTS[5] + shift - self.POINTS[5],
                               rotation @ self.AXES[5] - self.AXES[5]])

    def closed(self, first: float, guess: np.ndarray) -> np.ndarray:
        fit = least_squares(self.gap, guess, args=(first,), xtol=1e-15, ftol=1e-15,
                                 gtol=1e-15)
        assert np.abs(fit.fun).max() < 1e-12
        return fit.x

    def at(self, first: float) -> list[tuple[np.ndarray, np.ndarray]]:
        guess = self.table[int(np.abs(self.grid - first).argmin())]
        return self.poses(np.concatenate([[first], self.closed(first, guess)]))

    def point_c(self, first: float) -> np.ndarray:
        rotation, shift = self.at(first)[1]  # C ends rod BC
        return rotation @ self.POINTS[2] + shift

    def speed(self, first: float, energy: float, step: float = 1e-6) -> float:
        """θ̇A from T + V = energy, T = ½ m(θA) θ̇A² (m from central differences)."""
        now, ahead, behind = self.at(first), self.at(first + step), self.at(first - step)
        potential = inertia = 0.0
        for k in range(5):
            rotation, shift = now[k]
            centre = rotation @ self.centres[k] + shift
            potential += self.MASS * self.G * centre[1]
            velocity = ((ahead[k][0] - behind[k][0]) @ self.centres[k]
                        + ahead[k][1] - behind[k][1]) / (2 * step)
            spin = (ahead[k][0] - behind[k][0]) @ rotation.T / (2 * step)
            omega = np.array([spin[2, 1], spin[0, 2], spin[1, 0]])
            inertia += (self.MASS * velocity @ velocity
                        + omega @ rotation @ self.inertia[k] @ rotation.T @ omega)
        return float(np.sqrt(2 * (energy - potential) / inertia))


class FlyballGovernor:
    """The stiff flyball governor (IFToMM A05) in its four joint coordinates q = (φ, s,
    β1, β2): the spindle's angle about z, the slider's height, and each rod's angle about
    the spindle's y axis from the spindle's z (the rods' directions (sin β, 0, cos β) in the
    spindle's frame). Lagrange's equations of T and V written out with SymPy, the dampers
    by their dissipation function; integrated by SciPy's Radau (the problem is stiff).
    Geometry, masses and forces as ``tests/data/flyball-governor.yaml`` (from the OpenSim
    implementation of the benchmark library)."""

    def __init__(self, rho: float = 3000.0, ball: float = 5.0, stiffness: float = 8e5,
                 damping: float = 4e4, rest: float = 0.5, gravity: float = 9.81) -> None:
        import sympy as sp

        phi, s, b1, b2 = q = sp.symbols("phi s beta1 beta2", real=True)
        rates = sp.symbols("phi_d s_d beta1_d beta2_d", real=True)
        rod, slider = rho * 1e-4, rho * 1e-3
        lc = (rod * 0.5 + ball) / (rod + ball)
        across = rod * (0.005**2 + 0.25) / 3 + rod * (0.5 - lc) ** 2 + ball * (1 - lc) ** 2
        along = rod * 2 * 0.005**2 / 3
        spin = sp.Matrix([[sp.cos(phi), -sp.sin(phi), 0], [sp.sin(phi), sp.cos(phi), 0],
                          [0, 0, 1]])

        def tilt(b: sp.Symbol) -> sp.Matrix:
            return sp.Matrix([[sp.cos(b), 0, sp.sin(b)], [0, 1, 0], [-sp.sin(b), 0, sp.cos(b)]])

        def time_derivative(expr: sp.Expr) -> sp.Expr:
            return sum(sp.diff(expr, qi) * vi for qi, vi in zip(q, rates, strict=True))

        kinetic = (along * rates[0] ** 2 / 2  # the spindle about its axis
                   + slider * rates[1] ** 2 / 2 + slider * 2 * 0.05**2 / 3 * rates[0] ** 2 / 2)
        potential = gravity * slider * s
        springs = []
        for side, angle in ((1, b1), (-1, b2)):
            pivot = sp.Matrix([0.05 * side, 0, 1])
            direction = tilt(angle) * sp.Matrix([0, 0, 1])
            centre = spin * (pivot + lc * direction)
            velocity = centre.applyfunc(time_derivative)
            frame = spin * tilt(angle)
            omega = rates[0] * sp.Matrix([0, 0, 1]) + rates[2 if side > 0 else 3] * (
                spin * sp.Matrix([0, 1, 0]))
            inertia = frame * sp.diag(across, across, along) * frame.T
            kinetic += ((rod + ball) * velocity.dot(velocity) + (omega.T * inertia * omega)[0]) / 2
            potential += gravity * (rod + ball) * centre[2]
            gap = pivot + direction / 2 - sp.Matrix([0.05 * side, 0, s])
            length = sp.sqrt(gap.dot(gap))
            potential += stiffness * (length - rest) ** 2 / 2
            springs.append(length)
        dissipation = sum(damping * time_derivative(ell) ** 2 / 2 for ell in springs)
        velocities = sp.Matrix(rates)
        mass = sp.hessian(kinetic, rates)
        momentum = mass * velocities
        rhs = (sp.Matrix([sp.diff(kinetic - potential, qi) for qi in q])
               - momentum.jacobian(q) * velocities
               - sp.Matrix([sp.diff(dissipation, v) for v in rates]))
        args = (q, rates)
        self._mass = sp.lambdify(args, mass, "numpy")
        self._rhs = sp.lambdify(args, rhs, "numpy")
        self._energy = sp.lambdify(args, kinetic + potential, "numpy")
        self._spin_momentum = sp.lambdify(args, momentum[0], "numpy")
        #: the start: rods 30° below the horizontal, the slider at 0.5 m, 2π rad/s
        self.q0 = np.array([0.0, 0.5, 2 * np.pi / 3, -2 * np.pi / 3])
        self.qd0 = np.array([2 * np.pi, 0.0, 0.0, 0.0])

    def acceleration(self, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        return np.linalg.solve(np.asarray(self._mass(q, qd), dtype=float),
                               np.asarray(self._rhs(q, qd), dtype=float).ravel())

    def spin_momentum(self, q: np.ndarray, qd: np.ndarray) -> float:
        """The angular momentum about z, ∂T/∂φ̇: no torque about z acts."""
        return float(self._spin_momentum(q, qd))

    def energy(self, q: np.ndarray, qd: np.ndarray) -> float:
        return float(self._energy(q, qd))

    def run(self, times: np.ndarray, rtol: float = 1e-11) -> tuple[np.ndarray, np.ndarray]:
        """(q, q̇) at ``times`` (from 0), each (len(times), 4)."""
        from scipy.integrate import solve_ivp

        def f(_: float, x: np.ndarray) -> np.ndarray:
            return np.concatenate([x[4:], self.acceleration(x[:4], x[4:])])

        def jacobian(t: float, x: np.ndarray) -> np.ndarray:
            """Central differences of fixed step: SciPy's adaptive ones blow up on φ's
            column, which is zero (φ is cyclic)."""
            step = 1e-7 * np.maximum(1.0, np.abs(x))
            return np.column_stack([(f(t, x + e) - f(t, x - e)) / (2 * e[k]) for k, e in
                                    enumerate(np.diag(step))])

        solution = solve_ivp(f, (0.0, float(times[-1])), np.concatenate([self.q0, self.qd0]),
                             method="Radau", t_eval=times, rtol=rtol, atol=1e-12,
                             jac=jacobian)
        assert solution.success, solution.message
        return solution.y[:4].T, solution.y[4:].T

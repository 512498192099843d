"""Independent models that tests and benchmarks check mbgen against: written by hand from
their equations, using nothing of mbgen."""

from __future__ import annotations

import numpy as np

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

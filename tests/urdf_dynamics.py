"""An independent fixed-base robot dynamics for tests: a URDF read with ``xml.etree`` (not
mbgen's reader), the mass matrix from each body's Jacobians, M = Σ m Jvᵀ Jv + Jωᵀ I Jω,
and the velocity terms from the Lagrangian, h = Ṁ v − ½ ∂(vᵀ M v)/∂q + g(q), with ∂M/∂q by
complex steps (exact to rounding). Another algorithm than mbgen's natural coordinates and
than Pinocchio's recursive ones, so agreement checks both.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np

GRAVITY = np.array([0.0, 0.0, -9.81])
STICTION = 1e-3  # mbgen's default stiction velocity (docs/format.md, friction)


def _rpy(r: float, p: float, y: float) -> np.ndarray:
    rx = np.array([[1, 0, 0], [0, np.cos(r), -np.sin(r)], [0, np.sin(r), np.cos(r)]])
    ry = np.array([[np.cos(p), 0, np.sin(p)], [0, 1, 0], [-np.sin(p), 0, np.cos(p)]])
    rz = np.array([[np.cos(y), -np.sin(y), 0], [np.sin(y), np.cos(y), 0], [0, 0, 1]])
    return rz @ ry @ rx


def _origin(element: ET.Element) -> tuple[np.ndarray, np.ndarray]:
    origin = element.find("origin")
    if origin is None:
        return np.eye(3), np.zeros(3)
    xyz = [float(v) for v in origin.get("xyz", "0 0 0").split()]
    rpy = [float(v) for v in origin.get("rpy", "0 0 0").split()]
    return _rpy(*rpy), np.array(xyz)


def _rotation(axis: np.ndarray, angle: complex) -> np.ndarray:
    """Rodrigues' rotation about the unit ``axis`` (complex angles allowed)."""
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * k @ k


@dataclass
class _Joint:
    name: str
    kind: str
    parent: str
    child: str
    rotation: np.ndarray
    offset: np.ndarray
    axis: np.ndarray
    damping: float
    friction: float


class Robot:
    """A fixed-base robot: ``names`` its moving joints in the file's order."""

    def __init__(self, path: Path) -> None:
        root = ET.parse(path).getroot()
        self.inertial: dict[str, tuple[float, np.ndarray, np.ndarray]] = {}
        for link in root.findall("link"):
            inertial = link.find("inertial")
            if inertial is None:
                continue
            mass = float(inertial.find("mass").get("value"))  # type: ignore[union-attr]
            t = {k: float(inertial.find("inertia").get(k))  # type: ignore[union-attr]
                 for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")}
            tensor = np.array([[t["ixx"], t["ixy"], t["ixz"]], [t["ixy"], t["iyy"], t["iyz"]],
                               [t["ixz"], t["iyz"], t["izz"]]])
            rotation, com = _origin(inertial)
            self.inertial[link.get("name")] = (mass, com, rotation @ tensor @ rotation.T)
        self.joints: list[_Joint] = []
        for element in root.findall("joint"):
            rotation, offset = _origin(element)
            axis_element = element.find("axis")
            axis = np.array([float(v) for v in (axis_element.get("xyz").split()
                                                if axis_element is not None else [1, 0, 0])])
            dynamics = element.find("dynamics")
            self.joints.append(_Joint(
                element.get("name"), element.get("type"),
                element.find("parent").get("link"),  # type: ignore[union-attr]
                element.find("child").get("link"),  # type: ignore[union-attr]
                rotation, offset, axis / np.linalg.norm(axis),
                float(dynamics.get("damping", 0)) if dynamics is not None else 0.0,
                float(dynamics.get("friction", 0)) if dynamics is not None else 0.0))
        children = {j.child for j in self.joints}
        self.root = next(n for n in (li.get("name") for li in root.findall("link"))
                         if n not in children)
        self.moving = [j for j in self.joints if j.kind != "fixed"]
        self.names = [j.name for j in self.moving]

    def _frames(self, q: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray,
                                                          list[tuple[int, np.ndarray,
                                                                     np.ndarray]]]]:
        """Each link's world rotation, origin and the moving joints above it (index,
        world axis, world point of the joint)."""
        index = {j.name: k for k, j in enumerate(self.moving)}
        frames = {self.root: (np.eye(3, dtype=complex), np.zeros(3, dtype=complex), [])}
        pending = list(self.joints)
        while pending:
            for joint in list(pending):
                if joint.parent not in frames:
                    continue
                pending.remove(joint)
                rotation, origin, above = frames[joint.parent]
                r = rotation @ joint.rotation
                o = origin + rotation @ joint.offset
                if joint.kind == "fixed":
                    frames[joint.child] = (r, o, above)
                    continue
                k = index[joint.name]
                a = r @ joint.axis
                if joint.kind == "prismatic":
                    o = o + q[k] * a
                else:
                    r = r @ _rotation(joint.axis, q[k])
                frames[joint.child] = (r, o, [*above, (k, a, o)])
        return frames

    def mass_matrix(self, q: np.ndarray) -> np.ndarray:
        n = len(self.moving)
        m_matrix = np.zeros((n, n), dtype=complex)
        for link, (rotation, origin, above) in self._frames(q).items():
            if link not in self.inertial:
                continue
            mass, com, tensor = self.inertial[link]
            c = origin + rotation @ com
            jv, jw = np.zeros((3, n), dtype=complex), np.zeros((3, n), dtype=complex)
            for k, a, o in above:
                if self.moving[k].kind == "prismatic":
                    jv[:, k] = a
                else:
                    jw[:, k] = a
                    jv[:, k] = np.cross(a, c - o)
            world = rotation @ tensor @ rotation.T
            m_matrix += mass * jv.T @ jv + jw.T @ world @ jw
        return m_matrix

    def gravity(self, q: np.ndarray) -> np.ndarray:
        """g(q) = −Σ m Jvᵀ g: the torques that hold the robot still."""
        step = 1e-30
        return np.array([self.potential(q + 1j * step * e).imag / step
                         for e in np.eye(len(q))])

    def potential(self, q: np.ndarray) -> complex:
        total = 0j
        for link, (rotation, origin, _) in self._frames(q).items():
            if link in self.inertial:
                mass, com, _ = self.inertial[link]
                total -= mass * GRAVITY.dot(origin + rotation @ com)
        return total

    def bias(self, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """h(q, v) = Ṁ v − ½ ∂(vᵀ M v)/∂q + g(q) (n,)."""
        step = 1e-30
        dm = [self.mass_matrix(q + 1j * step * e).imag / step for e in np.eye(len(q))]
        mdot = sum(d * vk for d, vk in zip(dm, v, strict=True))
        return (mdot @ v - 0.5 * np.array([v @ d @ v for d in dm])
                + self.gravity(q)).real

    def friction(self, v: np.ndarray) -> np.ndarray:
        """The joints' friction force (mbgen's model: viscous, and dry smoothed by tanh)."""
        b = np.array([j.damping for j in self.moving])
        c = np.array([j.friction for j in self.moving])
        return -b * v - c * np.tanh(v / STICTION)

    def acceleration(self, q: np.ndarray, v: np.ndarray, tau: np.ndarray) -> np.ndarray:
        m_matrix = self.mass_matrix(q).real
        return np.linalg.solve(m_matrix, tau + self.friction(v) - self.bias(q, v))

    def inverse(self, q: np.ndarray, v: np.ndarray, a: np.ndarray) -> np.ndarray:
        """The joint forces that give q̈ = a (friction included)."""
        return self.mass_matrix(q).real @ a + self.bias(q, v) - self.friction(v)


def derivative(f, x: np.ndarray, step: float = 1e-3) -> np.ndarray:
    """∂f/∂x by the five-point central difference (error O(step⁴)): (len(f), len(x))."""
    columns = []
    for e in np.eye(len(x)) * step:
        columns.append((-f(x + 2 * e) + 8 * f(x + e) - 8 * f(x - e) + f(x - 2 * e))
                       / (12 * step))
    return np.array(columns).T

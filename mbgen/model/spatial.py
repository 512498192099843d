"""The parsed spatial mechanism's parts: unit vectors, bodies on points and vectors, joints
and relative coordinates (García de Jalón & Bayo, ch. 3). Plain data, like
:mod:`mbgen.model.mechanism`; the symbolic layer turns them into equations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import sympy as sp

Triple = tuple[sp.Expr, sp.Expr, sp.Expr]


@dataclass(frozen=True)
class Vector:
    """A unit vector: a direction fixed to the bodies that list it (3 coordinates if mobile)."""

    index: int
    name: str
    x: sp.Expr
    y: sp.Expr
    z: sp.Expr
    fixed: bool
    line: int


@dataclass(frozen=True)
class Element:
    """A point or a unit vector, by index: what a body's basis and a joint are made of."""

    kind: Literal["point", "vector"]
    index: int

    def __str__(self) -> str:
        return f"{'p' if self.kind == 'point' else 'u'}{self.index}"


@dataclass(frozen=True)
class Direction:
    """A direction in space: a unit vector, or the segment from point ``a`` to point ``b``."""

    vector: int | None = None
    a: int | None = None
    b: int | None = None


def spatial_inertia_problem(mass: float, tensor: np.ndarray) -> str | None:
    """Why a mass and an inertia tensor about the centre of mass (3×3) are impossible, or
    None: m ≥ 0, the tensor symmetric positive semi-definite, and each principal moment at
    most the sum of the other two (the triangle inequality: ∫ρρᵀ dm = ½ tr(I) 1 − I must
    not be negative). The one statement of the rule, for the loader and identification."""
    if mass < 0:
        return f"mass must not be negative, got {mass}"
    if not np.isfinite(tensor).all():  # eigvalsh does not converge on an infinity
        return "the inertia tensor is not a finite number (a value too large for a double)"
    moments = np.linalg.eigvalsh(tensor)
    scale = max(float(np.abs(moments).max()), 1e-300)
    if moments[0] < -1e-9 * scale:
        return (f"the inertia tensor is not positive semi-definite (principal moments "
                f"{', '.join(f'{m:.6g}' for m in moments)})")
    largest, others = moments[2], moments[0] + moments[1]
    if largest > others * (1 + 1e-9) + 1e-12 * scale:
        return (f"the principal moments {', '.join(f'{m:.6g}' for m in moments)} break the "
                f"triangle inequality ({largest:.6g} > {moments[0]:.6g} + {moments[1]:.6g}), "
                "impossible for a rigid body")
    return None


@dataclass(frozen=True)
class SpatialBody:
    """A rigid body on its points and unit vectors.

    Its basis is the origin point and three independent directions (other points, as
    r_j − r_origin, and vectors): every material point is r_origin + X c with X the three
    directions and c constant, so the mass matrix is constant. The body's other points and
    vectors are tied to the basis by three linear equations each.
    """

    index: int
    name: str
    points: tuple[int, ...]
    vectors: tuple[int, ...]
    origin: int  # a point index
    basis: tuple[Element, Element, Element]  # the three directions' far ends
    extra: tuple[Element, ...]  # further points and vectors of the body
    mass: sp.Expr
    cog: Triple  # centre of mass − origin, world axes in the file's configuration
    inertia: tuple[Triple, Triple, Triple]  # about the centre of mass, same axes
    visual: Any
    line: int

    def problem(self, values: Mapping[sp.Symbol, float]) -> str | None:
        """:func:`spatial_inertia_problem` with the parameters at ``values``."""
        tensor = np.array([[float(e.subs(values)) for e in row] for row in self.inertia])
        return spatial_inertia_problem(float(self.mass.subs(values)), tensor)


JointKind = Literal["spherical", "revolute", "universal", "cylindrical", "prismatic"]


@dataclass(frozen=True)
class Joint:
    """A joint's equations, for elements the two bodies do not share."""

    name: str
    kind: JointKind
    points: tuple[int, int]  # equal when shared
    axis: int | None  # the shared vector (revolute, cylindrical, prismatic)
    axes: tuple[int, int] | None  # one vector per body, at a constant angle
    line: int
    initial: sp.Expr = sp.Integer(0)  # a sliding joint's distance in the file

    @property
    def slides(self) -> bool:
        """Whether the joint has a sliding distance coordinate named after it."""
        return self.kind in ("cylindrical", "prismatic")


@dataclass(frozen=True)
class SpatialCoordinate:
    """A relative coordinate: an angle about ``axis`` from ``start`` to ``end``, or the
    distance (r_b − r_a)·axis."""

    name: str
    kind: Literal["angle", "distance"]
    axis: int  # a vector index
    start: Direction  # angle: where it is 0; distance: unused
    end: Direction  # angle: the direction it measures; distance: the points [a, b]
    initial: sp.Expr
    line: int

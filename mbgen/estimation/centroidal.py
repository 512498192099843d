"""Identification's unknowns with each identified I0 replaced by the inertia about the
body's centre of mass, Ic = I0 − m|cog|², bounded at 0.

A rigid body needs I0 ≥ m|cog|² (:func:`mbgen.model.mechanism.rigid_body_problem`), a
constraint between parameters that no box bound on I0 states when the mass or the centre
of mass is identified with it: left free, a fit of all three could end at a body that no
file can hold (the loader refuses it). Solved in (…, Ic, …) with Ic ≥ 0, every iterate is
a possible body, so the result always loads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import sympy as sp

from mbgen.model.mechanism import Mechanism

Array = np.ndarray


class CentroidalInertias:
    """θ (the identified parameters, P) ↔ φ (the same with Ic in place of each I0 of
    ``rows``). ``all_names``: every parameter of the mechanism, in the order of the full
    vector p that :meth:`to_theta` and :meth:`jacobian` read the fixed values from."""

    def __init__(self, model: Mechanism, names: Sequence[str], all_names: Sequence[str],
                 bounded: Mapping[str, object]) -> None:
        pairs = [(name, term) for name, term in model.centroidal_inertias()
                 if name in names and name not in bounded]
        shared = {name for name, _ in pairs if [n for n, _ in pairs].count(name) > 1}
        pairs = [(name, term) for name, term in pairs if name not in shared]
        symbols = {p.name: p.symbol for p in model.parameters}
        self.rows = np.array([list(names).index(name) for name, _ in pairs], dtype=int)
        self.terms = [term for _, term in pairs]
        self.names, self.all_names = list(names), list(all_names)
        self.symbols = [symbols[name] for name in all_names]
        # ∂(m|cog|²)/∂θ_j, per body and identified parameter
        self.slopes = [[sp.diff(term, symbols[name]) for name in names] for term in self.terms]

    def __bool__(self) -> bool:
        return bool(self.rows.size)

    def _values(self, p: Array) -> dict[sp.Symbol, float]:
        return dict(zip(self.symbols, p.tolist(), strict=True))

    def offsets(self, p: Array) -> Array:
        """m|cog|² (rows,) of each body at the full parameter vector p."""
        values = self._values(p)
        return np.array([float(term.subs(values)) for term in self.terms])

    def jacobian(self, p: Array) -> Array:
        """dθ/dφ (P, P): the identity, plus ∂(m|cog|²)/∂θ_j in each I0's row (the mass and
        centre of mass do not involve I0, so θ_j = φ_j there)."""
        values = self._values(p)
        matrix = np.eye(len(self.names))
        for row, slopes in zip(self.rows, self.slopes, strict=True):
            matrix[row] += [float(slope.subs(values)) for slope in slopes]
        return matrix

    def to_phi(self, theta: Array, p: Array) -> Array:
        """φ of θ; ``p``: the full parameter vector at θ."""
        phi = theta.copy()
        phi[self.rows] -= self.offsets(p)
        return phi

    def to_theta(self, phi: Array, p: Array) -> Array:
        """θ of φ; ``p``: a full parameter vector holding φ's mass and centre-of-mass
        parameters (its I0 entries are not read)."""
        theta = phi.copy()
        theta[self.rows] += self.offsets(p)
        return theta

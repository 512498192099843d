"""Whether identified values are possible for a real mechanism: masses, inertias about
the centres of mass, damping and dry friction of the right sign."""

from __future__ import annotations

import numpy as np

from mbgen.model.mechanism import Mechanism
from mbgen.runtime.compiled import CompiledMechanism

Array = np.ndarray


def physical_problems(mech: CompiledMechanism, p: Array, model: Mechanism | None = None,
                      ) -> list[str]:
    """What makes the parameter vector p (all of the mechanism's) impossible for a real
    mechanism: a body with a negative mass or a negative inertia about its centre of mass
    (I0 < m|cog|², from ``model``'s bodies; without it, only a mass matrix that is not
    positive definite on the coordinates that carry inertia, which misses a body on a
    fixed pivot and one whose neighbours' inertia hides it),
    damping that feeds energy in (a negative damper or viscous friction: −∂Q/∂q̇ at rest
    not positive semi-definite), a negative dry friction."""
    problems = []
    q0 = mech.q0
    if model is not None:
        problems += model.body_problems(dict(zip(mech.parameters, p.tolist(), strict=True)))
    elif not positive_definite_where_carried(mech.mass_matrix(q0, p)):
        problems.append("the mass matrix is not positive definite: a negative mass, or a "
                        "body whose inertia about its centre of mass is negative "
                        "(I0 < m|cog|^2)")
    # fast enough that every smoothed dry friction is flat (its slope c/s at rest would
    # hide a negative viscous coefficient; a negative c itself is caught below)
    friction = mech.meta.get("friction", [])
    fast = np.full(mech.n, 100.0 * max([float(f["stiction"]) for f in friction] + [1.0]))
    damping = -mech.generalized_forces_qd(q0, fast, p)
    if not np.isfinite(damping).all():
        return [*problems, "the damping is not a finite number at rest (a coefficient too "
                "large for a double)"]
    scale = max(float(np.abs(damping).max(initial=0.0)), 1e-300)
    symmetric = 0.5 * (damping / scale + (damping / scale).T)  # 1e308 + 1e308 is inf
    if symmetric.size and np.linalg.eigvalsh(symmetric).min() < -1e-12:
        problems.append("the damping feeds energy in: a negative damper or viscous "
                        "friction coefficient")
    bounds = mech.coefficients(p)[:len(friction)]
    problems += [f"negative dry friction on {f['coordinate']} ({bound:.3g})"
                 for f, bound in zip(friction, bounds, strict=True) if bound < 0]
    return problems


def positive_definite_where_carried(mass: Array) -> bool:
    """M (n, n) positive definite on the coordinates that carry inertia (a nonzero
    diagonal); coordinates without inertia (relative angles) are left out."""
    carried = np.flatnonzero(np.abs(np.diag(mass)) > 0)
    return not carried.size or bool(
        np.linalg.eigvalsh(mass[np.ix_(carried, carried)]).min() > 0)

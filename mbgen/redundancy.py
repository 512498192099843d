"""The constraints at a configuration: which rows are independent, and whether it is on them.

One rank rule: ``mbgen check`` (rank and degrees of freedom before compiling), ``mbgen
info``, the loader (the independent coordinates a file names, against the DOF) and the
runtime's dynamics (the rows they keep) use :func:`independent_rows`, and the compiler
unrolls the KKT factorization for the rows it keeps at q0, so all of them choose alike.
One threshold for "q0 is off its constraints" (:func:`off_constraints`), for ``check`` and
``info`` alike. It sits below every layer (NumPy only) because a shipped package has the
runtime without the compiler, and ``check`` has the model without the runtime.
"""

from __future__ import annotations

import numpy as np

#: A row whose part outside the span of the rows kept before it is at most this, relative
#: to Φq's largest entry (or 1), is their linear combination: round-off of Φq's entries
RANK_TOL = 1e-9
#: max |Φ(q)| above this times the mechanism's size² (Φ holds squared lengths) is off the
#: constraints: coordinates off by ~1e-9 of the size, past what round-off leaves, which is
#: where assembling moves them (simulation/assembly.py's tolerance on coordinates)
OFF_CONSTRAINTS_TOL = 1e-9


def independent_rows(jacobian: np.ndarray, tol: float = RANK_TOL,
                     ) -> tuple[list[int], list[int]]:
    """Split the rows of Φq (m, n) into (independent, redundant); the rank is the count of
    the first.

    Rows are taken in file order and a row is redundant when it is a linear combination of
    the rows kept before it (Gram-Schmidt, re-orthogonalized once), so a report names the
    later of two dependent rows.
    """
    scale = max(1.0, float(np.abs(jacobian).max(initial=0.0)))
    basis: list[np.ndarray] = []
    kept: list[int] = []
    redundant: list[int] = []
    for i, row in enumerate(np.asarray(jacobian, dtype=float)):
        residual = row.copy()
        for _ in range(2):
            for b in basis:
                residual -= (b @ residual) * b
        norm = float(np.linalg.norm(residual))
        if norm > tol * scale:
            basis.append(residual / norm)
            kept.append(i)
        else:
            redundant.append(i)
    return kept, redundant


def off_constraints(residual: np.ndarray, size: float) -> int | None:
    """The row of Φ(q) (m,) farthest from 0 when q is off the constraints of a mechanism
    ``size`` across (its length scale, m), else None."""
    off = np.abs(np.asarray(residual, dtype=float))
    if not off.size:
        return None
    worst = int(off.argmax())
    return worst if not off[worst] <= OFF_CONSTRAINTS_TOL * size**2 else None

"""Which constraint rows are independent at a configuration.

The runtime's dynamics use the rows independent at q0, and the compiler unrolls the KKT
factorization for the same rows: one function, so that both choose alike. It sits below
both layers (NumPy only) because a shipped package has the runtime without the compiler.
"""

from __future__ import annotations

import numpy as np


def independent_rows(jacobian: np.ndarray, tol: float = 1e-9) -> tuple[list[int], list[int]]:
    """Split the rows of Φq (m, n) into (independent, redundant).

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

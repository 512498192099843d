"""Marginal covariances of a factor graph's variables, by a dense QR of its linearization.

GTSAM's ``Marginals`` factors by Cholesky, which breaks down ("indeterminant linear
system") on the mechanism graphs, whose tight constraint factors make the normal
equations ill-conditioned: the smoothers solve them by QR for the same reason. A window
of a fixed-lag smoother has a few dozen unknowns, so its whitened Jacobian A is small;
with A = QR, the covariance is R⁻¹R⁻ᵀ, never forming AᵀA.
"""

from __future__ import annotations

from collections.abc import Sequence

import gtsam
import numpy as np
import scipy.linalg as linalg

Array = np.ndarray


def marginal_sigmas(graph: gtsam.NonlinearFactorGraph, values: gtsam.Values,
                    keys: Sequence[int]) -> list[Array]:
    """The standard deviations (dim,) of each vector variable of ``keys`` under ``graph``'s
    noise models, linearized at ``values`` (every variable of ``values`` is an unknown)."""
    variables = list(values.keys())
    ordering = gtsam.Ordering()
    for key in variables:
        ordering.push_back(key)
    whitened, _ = graph.linearize(values).jacobian(ordering)
    r = linalg.qr(whitened, mode="r")[0][:whitened.shape[1]]
    inverse = linalg.solve_triangular(r, np.eye(r.shape[0]))  # R⁻¹, upper triangular
    sizes = [values.atVector(key).size for key in variables]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    sigmas = []
    for key in keys:
        at = variables.index(key)
        rows = inverse[starts[at]:starts[at + 1]]
        sigmas.append(np.sqrt(np.einsum("ij,ij->i", rows, rows)))  # diag of R⁻¹R⁻ᵀ
    return sigmas

"""Default noise models: the paper's Table 2 (Blanco-Claraco et al., forward dynamics)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import gtsam
import numpy as np


@dataclass(frozen=True)
class NoiseDefaults:
    """Standard deviations of each factor type (the paper lists covariances; only their
    ratios matter). ``prior``: known initial values; ``prior_loose``: the dependent
    coordinates' rough initial guess in the independent formulation (its z entries get
    ``prior_z``).

    The journal's Table 2 gives the constraint factors the same 1e-3 covariance as the
    integrators; its arXiv version gives them 0 (exactly known). Equal weights let the
    least-squares compromise drift off the manifold (‖Φ‖ ≈ 2e-6 and 4.6 mm from RK4 after
    5 s of the four-bar), so the constraints get σ = 1e-4, far tighter than the other
    factors but finite (a zero-covariance model needs constrained elimination).
    """

    prior: float = math.sqrt(1e-10)
    prior_z: float = math.sqrt(1e-3)
    prior_loose: float = 1.0
    integrator: float = math.sqrt(1e-3)
    dynamics: float = math.sqrt(1e-3)
    constraints: float = 1e-4
    equality: float = math.sqrt(1e2)
    sensor: float = 1e-3  # for sensors whose file entry has no `noise`


@functools.lru_cache(maxsize=1024)
def isotropic(dim: int, sigma: float) -> gtsam.noiseModel.Base:
    """σ on each of ``dim`` rows; made once per (dim, σ) and shared (a noise model is
    immutable, and a graph of thousands of steps needs only a few)."""
    return gtsam.noiseModel.Isotropic.Sigma(dim, sigma)


@functools.lru_cache(maxsize=1024)
def diagonal(sigmas: tuple[float, ...]) -> gtsam.noiseModel.Base:
    """One σ per row, made once per tuple of σ and shared (as :func:`isotropic`)."""
    return gtsam.noiseModel.Diagonal.Sigmas(np.array(sigmas))


PAPER = NoiseDefaults()

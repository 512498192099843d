"""The factor library: GTSAM factors of a compiled mechanism (Blanco-Claraco et al.).

Built on GTSAM's Python API (the ``gtsam`` package). The solvers that use it live in
``mbgen.simulation.factor_graph`` and ``mbgen.inverse.factor_graph``.
"""

from mbgen.factors.linear import (
    equality_factor,
    euler_factor,
    linear_factor,
    prior_factor,
    trapezoidal_factor,
)
from mbgen.factors.mechanism import MechanismFactors
from mbgen.factors.noise import PAPER, NoiseDefaults

__all__ = ["PAPER", "MechanismFactors", "NoiseDefaults", "equality_factor", "euler_factor",
           "linear_factor", "prior_factor", "trapezoidal_factor"]

"""GTSAM factors of a compiled mechanism and forward dynamics by factor graph.

Built on GTSAM's Python API (the ``gtsam`` package).
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
from mbgen.factors.simulator import FactorGraphError, FactorGraphSimulator, StepKeys

__all__ = ["PAPER", "FactorGraphError", "FactorGraphSimulator", "MechanismFactors",
           "NoiseDefaults", "StepKeys", "equality_factor", "euler_factor", "linear_factor",
           "prior_factor", "trapezoidal_factor"]

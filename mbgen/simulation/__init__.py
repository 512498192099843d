"""Forward dynamics in time: the C integrators, initial-state assembly, the factor-graph
simulator (``mbgen.simulation.factor_graph``, which imports GTSAM) and the pictures."""

from mbgen.simulation.integrators import (
    INTEGRATORS,
    RunStopped,
    SimulationResult,
    simulate,
)

__all__ = ["INTEGRATORS", "RunStopped", "SimulationResult", "simulate"]

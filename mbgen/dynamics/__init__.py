"""Simulation on top of a compiled mechanism: integrators, results, CSV and plots."""

from mbgen.dynamics.simulation import INTEGRATORS, SimulationResult, simulate

__all__ = ["INTEGRATORS", "SimulationResult", "simulate"]

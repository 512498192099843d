"""Mechanism description: YAML → validated data with SymPy expressions in parameters."""

from mbgen.model.mechanism import Mechanism
from mbgen.model.parser import load_mechanism, parse_mechanism

__all__ = ["Mechanism", "load_mechanism", "parse_mechanism"]

"""Equations of a mechanism (SymPy): constraints, inertia, forces, and their derivatives."""

from mbgen.symbolic.derive import Kernel, KernelSet, derive_kernels
from mbgen.symbolic.model import SymbolicModel, build_symbolic_model

__all__ = ["Kernel", "KernelSet", "SymbolicModel", "build_symbolic_model", "derive_kernels"]

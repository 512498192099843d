"""Factors that are linear in their variables, with no Python in their linearization.

An integrator or an equality is an exact linear function of its variables. Where mbgen's
native factors are available (native.py), it is a ``CustomFactor`` with the native
``linear`` error function, which holds the blocks and returns them as its Jacobians.
Otherwise it is stored once as a GTSAM Gaussian factor inside a
``gtsam.LinearContainerFactor``: GTSAM re-linearizes it at any point in C++ (it only
shifts the right-hand side), where a Python callback would cost ~4 µs on every
linearization. GTSAM's Python API builds Jacobian factors on at most three variables; a
residual on more (the trapezoidal integrator has four) is then built as the equivalent
Hessian factor, summed from two-variable blocks, and turned into a Jacobian factor once
(GTSAM factors the Hessian; the result has as many rows as the residual). That costs
~80 µs of Python per factor, where the native factor costs a few.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Literal

import gtsam
import numpy as np

from mbgen.factors.native import chosen_module

Array = np.ndarray


def whitening(noise: gtsam.noiseModel.Base, rows: int) -> Array:
    """The noise model's square-root information as a matrix (rows x rows)."""
    return noise.Whiten(np.eye(rows))


def linear_factor(keys: Sequence[int], blocks: Sequence[Array], rhs: Array,
                  noise: gtsam.noiseModel.Base,
                  native: ModuleType | Literal[False] | None = None) -> gtsam.NonlinearFactor:
    """The factor of the residual ``Σ_i blocks[i] @ x[keys[i]] - rhs`` with ``noise``.

    ``blocks[i]``: (r, dim of key i); ``rhs``: (r,). Exact at every linearization point.
    ``native``: as for MechanismFactors (chosen_module).
    """
    rhs = np.asarray(rhs, dtype=float)
    rows = rhs.shape[0]
    if len(keys) != len(blocks) or len(set(keys)) != len(keys):
        raise ValueError("one block per key, and distinct keys")
    module = chosen_module(native)
    if module is not None:
        factor = gtsam.CustomFactor(noise, list(keys), module.linear)
        module.register_linear(factor, list(keys),
                               [np.asarray(block, dtype=float) for block in blocks], rhs)
        return factor
    white = whitening(noise, rows)
    a = [white @ np.asarray(block, dtype=float) for block in blocks]
    b = white @ rhs
    unit = gtsam.noiseModel.Unit.Create(rows)
    if len(keys) <= 3:
        arguments: list[object] = []
        for key, block in zip(keys, a, strict=True):
            arguments += [key, block]
        gaussian: gtsam.GaussianFactor = gtsam.JacobianFactor(  # type: ignore[call-overload]
            *arguments, b, unit)  # the stubs list (key, A) pairs one overload each, not *args
    else:  # converted once: elimination then never has to factor the Hessian again
        gaussian = gtsam.JacobianFactor(_hessian(list(keys), a, b))
    zero = gtsam.Values()
    for key, block in zip(keys, blocks, strict=True):
        zero.insert(key, np.zeros(np.shape(block)[1]))
    return gtsam.LinearContainerFactor(gaussian, zero)


def _hessian(keys: list[int], a: list[Array], b: Array) -> gtsam.HessianFactor:
    """½‖Σ a_i x_i − b‖² as one Hessian factor, from the pairs (0, j) and (i, j)."""
    graph = gtsam.GaussianFactorGraph()
    dims = [block.shape[1] for block in a]
    for i in range(len(keys)):
        for j in range(i + 1, len(keys)):
            first = i == 0 and j == 1
            g11 = a[i].T @ a[i] if first else np.zeros((dims[i], dims[i]))
            g1 = a[i].T @ b if first else np.zeros(dims[i])
            own_j = i == 0  # the diagonal block of key j comes with its pair (0, j)
            g22 = a[j].T @ a[j] if own_j else np.zeros((dims[j], dims[j]))
            g2 = a[j].T @ b if own_j else np.zeros(dims[j])
            f = float(b @ b) if first else 0.0
            graph.push_back(gtsam.HessianFactor(keys[i], keys[j], g11, a[i].T @ a[j], g1,
                                                g22, g2, f))
    return gtsam.HessianFactor(graph)


def euler_factor(x: int, x_next: int, rate: int, dt: float, dim: int,
                 noise: gtsam.noiseModel.Base) -> gtsam.NonlinearFactor:
    """x_{k+1} − x_k − dt ẋ_k (the paper's f_ei)."""
    eye = np.eye(dim)
    return linear_factor([x, x_next, rate], [-eye, eye, -dt * eye], np.zeros(dim), noise)


def trapezoidal_factor(x: int, x_next: int, rate: int, rate_next: int, dt: float, dim: int,
                       noise: gtsam.noiseModel.Base) -> gtsam.NonlinearFactor:
    """x_{k+1} − x_k − dt/2 (ẋ_k + ẋ_{k+1}) (the paper's f_ti)."""
    eye = np.eye(dim)
    return linear_factor([x, x_next, rate, rate_next],
                         [-eye, eye, -0.5 * dt * eye, -0.5 * dt * eye], np.zeros(dim), noise)


def prior_factor(key: int, value: Array, noise: gtsam.noiseModel.Base,
                 ) -> gtsam.PriorFactorVector:
    """x − x0 (the paper's f_prior): GTSAM's own prior on a vector."""
    return gtsam.PriorFactorVector(key, np.asarray(value, dtype=float), noise)


def equality_factor(x: int, x_next: int, dim: int, noise: gtsam.noiseModel.Base,
                    ) -> gtsam.BetweenFactorVector:
    """x_{k+1} − x_k, a soft tie between consecutive states (the paper's f_eq)."""
    return gtsam.BetweenFactorVector(x, x_next, np.zeros(dim), noise)

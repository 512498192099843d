"""The identified parameters' uncertainty: linearized standard deviations, correlations
and the combinations of parameters the data cannot see, from the fit's normal matrix."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mbgen.estimation.identification_inputs import IdentificationError
from mbgen.estimation.problem_layout import IMPULSES, ResidualGroups
from mbgen.estimation.verdict import combination
from mbgen.numerics.least_squares import BlockJacobian, BorderedMatrix, BorderedSystem

Array = np.ndarray


@dataclass(frozen=True)
class Uncertainty:
    """The parameters' linearized standard deviations (P,) (inf where not identifiable),
    their correlations (P, P) (NaN there), and the combinations the data cannot see."""

    std: Array
    identifiable: Array
    correlation: Array
    undetermined: list[str]


#: Relative shifts tried on the states' information when rounding leaves it not
#: positive definite (a very stiff compliance): far below what changes a σ's 3 digits.
INFORMATION_SHIFTS = (0.0, 1e-12, 1e-10, 1e-8)


def parameter_uncertainty(normal: BorderedMatrix, jacobian: BlockJacobian, residuals: Array,
                          names: Sequence[str]) -> Uncertainty:
    """Linearized standard deviations and correlations of the parameters: the sandwich
    covariance H⁻¹ M H⁻¹ of the fit (H = JᵀJ = ``normal`` over states and parameters)
    restricted to the parameters, the residual groups (:class:`ResidualGroups`) entering
    M as follows:

    - the impulses as the fit leaves them, step by step (Σ_k u_k u_kᵀ, u_k the step's
      residuals through J_k H⁻¹). The impulse noise is the method's choice, not a property
      of the data: stated at 2e-5 where synthetic data need far less, it made every σ 2-4
      times what the estimates scatter (benchmarks/identification_sigma.py);
    - the readings and the initial constraints by their stated noise, scaled up by their
      mean square when the fit is worse than it, never down;
    - the priors as stated (knowledge from outside the data).

    With every group at its stated noise, M = H and this is the inverse of the parameters'
    information after eliminating the states (the Schur complement S of H). Parameters
    that share a null direction of S are not identifiable (std = inf), and each null
    direction is named as a combination of the parameters (in units of S's diagonal)."""
    system = information_system(normal)
    scale = np.sqrt(np.maximum(np.diag(system.schur), 1e-300))
    values, vectors = np.linalg.eigh(system.schur / np.outer(scale, scale))
    null = values < 1e-10 * max(values.max(), 1e-300)
    identifiable = np.all(np.abs(vectors[:, null]) < 1e-3, axis=1)
    inverse = (vectors[:, ~null] / values[~null]) @ vectors[:, ~null].T / np.outer(scale, scale)
    columns = system.border_columns(inverse)
    mean_squares = ResidualGroups(*jacobian.mean_squares(residuals))
    variances = ResidualGroups(impulses=0.0, readings=max(1.0, mean_squares.readings),
                               initial=max(1.0, mean_squares.initial), priors=1.0)
    covariance = (jacobian.clustered_gram(columns, residuals, IMPULSES)
                  + jacobian.weighted_gram(columns, variances))
    std = np.sqrt(np.maximum(np.diag(covariance), 0.0))
    root = np.sqrt(np.maximum(np.diag(covariance), 1e-300))
    correlation = covariance / np.outer(root, root)
    correlation[~identifiable, :] = np.nan
    correlation[:, ~identifiable] = np.nan
    undetermined = [combination(vector, names) for vector in vectors[:, null].T]
    return Uncertainty(np.where(identifiable, std, np.inf), identifiable, correlation,
                       undetermined)


def information_system(normal: BorderedMatrix) -> BorderedSystem:
    """``normal`` factored for its Schur complement of the states; when rounding leaves
    the states' block not positive definite (a very stiff compliance), with the smallest
    shift of INFORMATION_SHIFTS that factors."""
    diagonal = normal.diagonal()[:normal.banded]
    for shift in INFORMATION_SHIFTS:
        try:
            return normal.factor(shift * np.concatenate([diagonal, np.zeros(
                len(normal.corner))]) if shift else None, factor_border=False)
        except np.linalg.LinAlgError:
            continue
    raise IdentificationError("the states' information is not positive definite even "
                              "with a shift of 1e-8 of its diagonal: the compliance is "
                              "too stiff for double precision (raise --compliance)")

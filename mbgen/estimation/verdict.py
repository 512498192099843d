"""Whether an identification that converged is to be trusted beyond convergence: its
residuals against the noise model it declares (the fit test) and how well the data
determine each parameter (the undetermined rule).

Why: convergence alone printed ✓ on a spring 9σ off (the compliance's bias on a force
the constraints carry; the final cost said so, nothing read it) and on a set whose
correlations were all +1.000 with σ larger than the values, because the exact-null test
depended on the compliance (issue 52)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# The fit test's level and χ² bound, shared with the filters' innovation tests: a group of
# normalized residuals whose mean square exceeds the χ² quantile it would exceed FIT_LEVEL
# of the time if the noise model held (Bonferroni over the groups tested) is inconsistent
# with that model.
from mbgen.estimation.consistency import FIT_LEVEL as FIT_LEVEL
from mbgen.estimation.consistency import chi2_bound

Array = np.ndarray
#: A parameter whose σ reaches this fraction of its size (the larger of its identified
#: and initial magnitudes) is not determined by the data.
RELATIVE_STD_LIMIT = 1.0
#: Parameters correlated at or above this magnitude are not told apart by the data.
CORRELATION_LIMIT = 0.999


@dataclass(frozen=True)
class FitTest:
    """One group of normalized residuals (``count`` of them, each divided by its stated
    standard deviation) against the χ² bound on their mean square."""

    what: str  # "readings of enc", "impulses"
    count: int
    mean_square: float
    bound: float

    @property
    def passed(self) -> bool:
        return bool(self.mean_square <= self.bound)  # NaN and inf fail

    def describe(self) -> str:
        return (f"{self.what}: RMS {np.sqrt(self.mean_square):.3g} σ of their stated noise "
                f"(at most {np.sqrt(self.bound):.3g} σ for {self.count} residuals)")


def fit_tests(labels: Sequence[str], output: Array, readings: Array,
              impulses: Array) -> list[FitTest]:
    """The fit test of each reading output (``labels``; ``output`` (obs,) the output of
    each normalized reading residual in ``readings`` (obs,)) and of the normalized impulse
    residuals (any shape). Why per output: one badly fitted sensor among many would hide in
    a pooled mean square."""
    groups = [(f"readings of {label}", readings[output == k]) for k, label in
              enumerate(labels)]
    groups.append(("impulses", np.ravel(impulses)))
    groups = [(what, values) for what, values in groups if values.size]
    return [FitTest(what, values.size, float(np.mean(values * values)),
                    chi2_bound(values.size, len(groups))) for what, values in groups]


def misfit_advice(failed: Sequence[FitTest], coordinates: str) -> str:
    """Why the fit is not trusted and what to try, the likely causes first."""
    causes = []
    if coordinates == "dependent":
        causes.append("the compliance's give, which biases every parameter whose forces "
                      "the constraints carry (try --coordinates independent, or a stiffer "
                      "--compliance such as 1e-7)")
    causes += ["an impulse noise too small for the step, so that the method's own "
               "discretization error is read as impulses (try --substeps 2 or 4, or a "
               "larger --noise-impulse)",
               "a model that cannot fit the data: a sensor noise stated smaller than it "
               "is, a parameter held that should be free (a friction, an offset, a gain), "
               "or readings of another mechanism or branch"]
    listed = "; ".join(test.describe() for test in failed)
    return (f"the fit is inconsistent with its noise model ({listed}); likely causes, in "
            "order: " + "; ".join(f"({k}) {cause}" for k, cause in enumerate(causes, 1)))


def weakly_determined(names: Sequence[str], values: Array, initial: Array, std: Array,
                      correlation: Array) -> list[str]:
    """The parameters and combinations the data do not determine although the information
    has no exact null direction: a σ of RELATIVE_STD_LIMIT of the parameter's size or
    more, and groups correlated at CORRELATION_LIMIT or more (named as the direction they
    move together along, in units of their σ)."""
    from scipy.sparse.csgraph import connected_components

    size = np.maximum(np.abs(values), np.abs(initial))
    weak = np.isfinite(std) & (size > 0) & (std >= RELATIVE_STD_LIMIT * size)
    rho = np.nan_to_num(correlation)
    strong = np.abs(rho) >= CORRELATION_LIMIT
    np.fill_diagonal(strong, False)
    count, label = connected_components(strong, directed=False)
    out = []
    grouped = np.zeros(len(names), dtype=bool)
    for group in range(count):
        members = np.flatnonzero(label == group)
        if len(members) < 2:
            continue
        grouped[members] = True
        block = rho[np.ix_(members, members)]
        _, vectors = np.linalg.eigh(block)
        largest = np.abs(block[~np.eye(len(members), dtype=bool)]).max()
        out.append(f"{combination(vectors[:, -1], [names[int(k)] for k in members])} "
                   f"(correlated at |ρ| up to {largest:.4f})")
    out += [f"{names[int(k)]} (σ {100 * std[k] / size[k]:.0f} % of its value)"
            for k in np.flatnonzero(weak & ~grouped)]
    return out


def combination(vector: Array, names: Sequence[str]) -> str:
    """A direction as "0.71 I1 - 0.70 a1" (components above 0.05, largest first, the
    first positive)."""
    order = [int(k) for k in np.argsort(-np.abs(vector)) if abs(vector[k]) > 0.05]
    sign = 1.0 if vector[order[0]] > 0 else -1.0
    text = f"{sign * vector[order[0]]:.2f} {names[order[0]]}"
    for k in order[1:]:
        c = sign * vector[k]
        text += f" {'-' if c < 0 else '+'} {abs(c):.2f} {names[k]}"
    return text

"""Whether a run's innovations are consistent with the noise model its intervals assume:
the χ² test of their normalized squares in every window of the run and over the run,
and the whiteness test of each output's residuals, at one Bonferroni level.

Why: a mean normalized innovation squared under 2 per reading let the Kalman filters print
✓ where their 95 % intervals held the truth 55 % (an unknown torque that changed faster
than its random walk allowed) and 39 % of the time (a model 5 % heavy read by a gyroscope
and an accelerometer) (benchmarks/estimators.py, issue 55). Over 10 000 readings a mean of
1.27 lies 19 of its standard deviations above 1; and with an accelerometer whose noise the
model overstates, the pooled mean was 0.76 while the model's error showed as residuals
correlated from one reading to the next (lag-1 autocorrelation 0.2, against 0.01 for a
white sequence of that length). Innovations of a filter whose model holds are white and
standard normal once divided by their σ; a model error is slow, so it shows as
correlation before it shows as size.

Also the home of the χ² bound the identification's fit test uses (estimation/verdict.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Array = np.ndarray

#: A test fails where its statistic exceeds what a consistent model would exceed this
#: rarely (Bonferroni over the tests of one run or one fit).
FIT_LEVEL = 1e-3
#: The windows of the χ² test [s]: an average over the run can hide a phase where the
#: intervals are too narrow.
WINDOW = 1.0
#: Fewer successive readings of an output than this: no whiteness test (the
#: autocorrelation's normal approximation needs some).
WHITENESS_READINGS = 30


def chi2_bound(count: int, tests: int) -> float:
    """The mean square of ``count`` standard normal residuals exceeded with probability
    FIT_LEVEL / ``tests``."""
    from scipy.stats import chi2

    return float(chi2.isf(FIT_LEVEL / tests, count) / count)


@dataclass(frozen=True)
class Inconsistency:
    """One failed test, said in words."""

    what: str  # "readings", "enc", ...
    message: str


def innovation_tests(normalized: Array, t: Array, labels: Sequence[str],
                     window: float = WINDOW, whiteness: bool = True) -> list[Inconsistency]:
    """The failed tests of normalized innovations (steps, outputs): each innovation
    divided by its σ, NaN where an output has no reading, at the step times t (steps,).
    Per output: the mean square in every ``window`` seconds and over the run against the
    χ² bound, and (``whiteness``) the lag-1 autocorrelation of its successive readings
    against a white sequence's; all at FIT_LEVEL, Bonferroni over every test made."""
    x = np.asarray(normalized, dtype=float)
    finite = np.isfinite(x)
    return run_tests(np.where(finite, x * x, 0.0), finite.astype(float), t, labels,
                     x if whiteness else None, labels, window)


def run_tests(squares: Array, counts: Array, t: Array, labels: Sequence[str],
              residuals: Array | None = None, residual_labels: Sequence[str] = (),
              window: float = WINDOW) -> list[Inconsistency]:
    """The failed tests of ``squares`` (steps, groups): per step and group the sum of
    ``counts`` (steps, groups) squared normalized innovations (a filter that reports one
    normalized innovation squared per step passes it as one group), χ²-tested per window
    and over the run; and of ``residuals`` (steps, outputs; NaN: no reading; any scale:
    the autocorrelation is scale-free), each output's whiteness, one-sided (a positive
    correlation is a model too slow for its readings; a negative one, a gain larger than
    needed, leaves the intervals wide, not narrow). Bonferroni over all of them."""
    t = np.asarray(t, dtype=float)
    squares = np.asarray(squares, dtype=float).reshape(len(t), -1)
    counts = np.asarray(counts, dtype=float).reshape(len(t), -1)
    cell = np.floor((t - t[0]) / window).astype(int) if len(t) else np.zeros(0, int)
    groups: list[tuple[str, str, float, float]] = []  # (label, where, sum, count)
    for j, label in enumerate(labels):
        total, count = float(squares[:, j].sum()), float(counts[:, j].sum())
        if count == 0:
            continue
        groups.append((label, "over the run", total, count))
        if cell.size and cell[-1] > 0:  # more than one window
            sums = np.bincount(cell, squares[:, j])
            numbers = np.bincount(cell, counts[:, j])
            groups += [(label, f"from t = {t[0] + w * window:g} s to "
                        f"{t[0] + (w + 1) * window:g} s", float(sums[w]), float(numbers[w]))
                       for w in np.flatnonzero(numbers)]
    series: list[tuple[str, Array]] = []
    if residuals is not None:
        r = np.asarray(residuals, dtype=float).reshape(len(t), -1)
        for j, label in enumerate(residual_labels):
            seen = r[np.isfinite(r[:, j]), j]
            if len(seen) >= WHITENESS_READINGS:
                series.append((label, seen))
    tests = len(groups) + len(series)
    failed = []
    for label, where, total, count in groups:
        bound = chi2_bound(int(round(count)), tests)
        mean = total / count
        if not mean <= bound:  # NaN fails
            failed.append(Inconsistency(label, (
                f"{label} {where}: normalized innovations squared {mean:.3g} per reading "
                f"(at most {bound:.3g} for {count:.0f} readings of a model that holds)")))
    if series:
        from scipy.stats import norm

        limit = float(norm.isf(FIT_LEVEL / tests))
        for label, seen in series:
            rho = lag_one_correlation(seen)
            bound = limit / np.sqrt(len(seen) - 1)
            if not rho <= bound:
                failed.append(Inconsistency(label, (
                    f"{label}: residuals correlated from one reading to the next "
                    f"(lag-1 autocorrelation {rho:.3g} over {len(seen)} readings, at most "
                    f"{bound:.2g} for white innovations)")))
    return failed


def lag_one_correlation(x: Array) -> float:
    """The lag-1 autocorrelation of a sequence (N,) about zero, not about its mean (a
    bias is a model error too): Σ x_k x_k+1 / √(Σ x_k² Σ x_k+1²)."""
    a, b = x[:-1], x[1:]
    scale = np.sqrt(float(a @ a) * float(b @ b))
    return float(a @ b) / scale if scale > 0 else 0.0


def describe(failed: Sequence[Inconsistency], most: int = 3) -> str:
    """The first ``most`` failed tests in words, with how many more."""
    text = "; ".join(f.message for f in failed[:most])
    return text + (f"; and {len(failed) - most} more" if len(failed) > most else "")

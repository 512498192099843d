"""The core's weighted quantiles (selection, O(N)) against sorting and cumulative sums."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import SHIPPED_DIR

from mbgen.runtime.compiled import CompiledMechanism

Compiled = Callable[[Path], CompiledMechanism]
LEVELS = (0.0, 0.025, 0.3, 0.5, 0.975, 1.0)


def by_sorting(values: np.ndarray, weights: np.ndarray, level: float) -> np.ndarray:
    """The definition: per column, the first value in ascending order whose cumulative
    weight reaches level times the total, leaving out zero weights and non-finite values."""
    out = []
    for column in values.T:
        keep = (weights > 0) & np.isfinite(column)
        order = np.argsort(column[keep], kind="stable")
        cumulative = np.cumsum(weights[keep][order])
        index = np.searchsorted(cumulative, level * cumulative[-1], side="left")
        out.append(column[keep][order][min(index, keep.sum() - 1)])
    return np.array(out)


@pytest.fixture(scope="module")
def mech(compiled: Compiled) -> CompiledMechanism:
    return compiled(SHIPPED_DIR / "fourbar.yaml")


@pytest.mark.parametrize("count", [1, 2, 7, 1000, 20001])
def test_selection_matches_sorting(mech: CompiledMechanism, count: int) -> None:
    rng = np.random.default_rng(count)
    values = rng.normal(size=(count, 3))
    values[:, 2] = np.round(values[:, 2], 1)  # many ties, as after resampling
    weights = rng.random(count) ** 4
    weights[rng.random(count) < 0.2] = 0.0
    weights[0] = 1.0  # at least one weight
    got = mech.weighted_quantiles(values, weights, LEVELS)
    for row, level in zip(got, LEVELS, strict=True):
        np.testing.assert_array_equal(row, by_sorting(values, weights, level))


def test_equal_weights_give_order_statistics(mech: CompiledMechanism) -> None:
    values = np.random.default_rng(1).permutation(np.arange(40.0))[:, None]
    got = mech.weighted_quantiles(values, np.ones(40), (0.025, 0.5, 0.975))
    # cumulative weight k/40 reaches 0.025 at the 1st value, 0.5 at the 20th, 0.975 at 39th
    np.testing.assert_array_equal(got[:, 0], [0.0, 19.0, 38.0])


def test_non_finite_values_and_weightless_columns(mech: CompiledMechanism) -> None:
    values = np.array([[1.0, np.nan], [np.inf, np.nan], [3.0, -np.inf]])
    got = mech.weighted_quantiles(values, np.array([1.0, 5.0, 1.0]), (0.5, 1.0))
    np.testing.assert_array_equal(got[:, 0], [1.0, 3.0])
    assert np.isnan(got[:, 1]).all()


def test_bad_arguments_are_refused(mech: CompiledMechanism) -> None:
    with pytest.raises(ValueError, match="levels"):
        mech.weighted_quantiles(np.zeros((3, 1)), np.ones(3), (1.5,))
    with pytest.raises(ValueError, match="weights"):
        mech.weighted_quantiles(np.zeros((3, 1)), np.ones(2), (0.5,))

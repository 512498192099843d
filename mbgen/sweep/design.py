"""The runs of a study: every run's value of every quantity the study sets, drawn once
from the seed before any run starts (so a chunk computed anywhere, in any order, gets the
same values, and a resumed study the same runs)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import mbgen.columns as columns
from mbgen.errors import MechanismError
from mbgen.sweep.study import Spec, Study, between

Array = np.ndarray


def column_name(spec: Spec) -> str:
    """A set quantity's column in the results: the parameter's name, ``x1_initial``,
    ``x1_dot_initial`` or ``force_x1``."""
    return {"parameters": spec.name, "initial": columns.initial(spec.name),
            "velocity": columns.initial(columns.velocity(spec.name)),
            "forces": columns.force(spec.name)}[spec.section]


@dataclass(frozen=True)
class Design:
    """``values[k]``: the values of ``specs[k]`` in every run, (runs,) each. Runs are
    numbered grid point by grid point (the first grid varies slowest), ``samples``
    consecutive runs per point."""

    specs: tuple[Spec, ...]
    values: tuple[Array, ...]

    @property
    def runs(self) -> int:
        return len(self.values[0]) if self.values else 0

    def columns(self, rows: slice | Array = slice(None)) -> dict[str, Array]:
        """The varied quantities' columns (fixed ones are the same in every run)."""
        return {column_name(spec): values[rows] for spec, values in zip(
            self.specs, self.values, strict=True) if spec.varied}

    def of(self, section: str) -> list[tuple[str, Array]]:
        """(name, values) of the quantities set in ``section``, in file order."""
        return [(spec.name, values) for spec, values in zip(self.specs, self.values,
                                                            strict=True)
                if spec.section == section]


def draw(study: Study, nominal: Callable[[Spec], float]) -> Design:
    """Every run's values. ``nominal(spec)``: the mechanism's own value of the quantity (the
    default mean of its distribution)."""
    runs, samples = study.runs, study.samples
    grids = [spec for spec in study.specs if spec.grid_size]
    points = np.stack(np.meshgrid(*(s.grid_values() for s in grids), indexing="ij"),
                      axis=-1).reshape(-1, len(grids)) if grids else np.zeros((1, 0))
    rng = np.random.default_rng(study.seed)
    values = []
    for spec in study.specs:
        if spec.value is not None:
            values.append(np.full(runs, spec.value))
        elif spec.grid_size:
            values.append(np.repeat(points[:, grids.index(spec)], samples))
        else:
            values.append(_sample(spec, nominal(spec), runs, rng, study.file))
        if not np.isfinite(values[-1]).all():  # a mean ± tolerance beyond ±1.8e308, say
            raise _error(spec, study.file, "its values are not all finite numbers (a mean, "
                         "tolerance or std too large?)")
    return Design(study.specs, tuple(values))


def _error(spec: Spec, file: str, message: str) -> MechanismError:
    return MechanismError(message, file, spec.line,
                          f"{spec.section}.{spec.name}")


def _sample(spec: Spec, nominal: float, count: int, rng: np.random.Generator,
            file: str) -> Array:
    mean = spec.key("mean")
    mean = nominal if mean is None else mean
    low, high = spec.key("low"), spec.key("high")
    if spec.distribution == "uniform":
        tolerance = spec.key("tolerance")
        if tolerance is not None:
            low, high = mean - tolerance, mean + tolerance
        assert low is not None and high is not None  # checked on reading
        if not (math.isfinite(low) and math.isfinite(high)):
            raise _error(spec, file, f"the interval {mean:g} ± {tolerance or 0:g} reaches "
                         "beyond the largest number")
        return between(low, high, rng.random(count))  # rng.uniform's draws, no overflow
    std = spec.key("std")
    assert std is not None  # checked on reading
    if low is None and high is None:
        return rng.normal(mean, std, count)
    from scipy.stats import truncnorm

    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        a = -np.inf if low is None else (low - mean) / std
        b = np.inf if high is None else (high - mean) / std
    drawn = None
    if a < b:  # not so when low - mean overflows, or std is so small that both are ±inf
        try:
            with np.errstate(all="ignore"):
                drawn = np.asarray(truncnorm(a, b, loc=mean, scale=std).rvs(
                    size=count, random_state=rng), dtype=float)
        except (ValueError, FloatingPointError, OverflowError):
            drawn = None
    lowest = -np.inf if low is None else low
    highest = np.inf if high is None else high
    if drawn is None or not (np.isfinite(drawn).all() and (drawn >= lowest).all()
                             and (drawn <= highest).all()):
        raise _error(spec, file, f"cannot be drawn: a normal distribution about {mean:g} "
                     f"with std {std:g}, truncated to [{lowest:g}, {highest:g}], puts no "
                     "computable probability there (a std too small or too large for its "
                     "bounds?)")
    return drawn

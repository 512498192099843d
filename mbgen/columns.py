"""The names of the columns of every table mbgen writes or reads (simulations, inverse
dynamics, estimates, study results) and of the variables of an FMI unit: one vocabulary,
so that a table one command writes is a table another reads (`animate` of an estimate,
`inverse --motion` of a simulation) and a name changes in one place.

It sits in the bottom layer because the unit's variables (`codegen`) take these names as
well as the tables (`io` and the solvers that lay out their results)."""

from __future__ import annotations

from collections.abc import Sequence

TIME = "t"
ENERGY = "energy"
CONSTRAINT_NORM = "phi_norm"  # ‖Φ(q)‖
VELOCITY_SUFFIX = "_dot"
ACCELERATION_SUFFIX = "_ddot"
SIGMA_SUFFIX = "_sigma"  # a column's standard deviation
LOW_SUFFIX, HIGH_SUFFIX = "_lo", "_hi"  # a column's 95 % interval
BRANCH_PREFIX = "p_branch"  # an estimate's probability of assembly branch <k>
FORCE_PREFIX = "force_"  # a coordinate's generalized force
MULTIPLIER_PREFIX = "lambda_"  # a constraint row's Lagrange multiplier
INITIAL_SUFFIX = "_initial"  # a study's initial value of a coordinate or velocity
# an estimate's per-step diagnostics: the Kalman filters' normalized innovation squared
# (0 on a step without a reading) and 1 where a reading lay beyond the lost limit; the
# particle filter's effective sample size and 1 where it started over
NIS, LOST = "nis", "lost"
ESS, RESTART = "ess", "restart"


def velocity(coordinate: str) -> str:
    """q̇'s column of ``coordinate``."""
    return coordinate + VELOCITY_SUFFIX


def acceleration(coordinate: str) -> str:
    """q̈'s column of ``coordinate``."""
    return coordinate + ACCELERATION_SUFFIX


def force(coordinate: str) -> str:
    """The generalized force at ``coordinate``."""
    return FORCE_PREFIX + coordinate


def sigma(column: str) -> str:
    """The standard deviation of ``column``."""
    return column + SIGMA_SUFFIX


def interval(column: str) -> tuple[str, str]:
    """The 95 % interval's low and high columns of ``column``."""
    return column + LOW_SUFFIX, column + HIGH_SUFFIX


def branch(index: int) -> str:
    """The probability of assembly branch ``index``."""
    return f"{BRANCH_PREFIX}{index}"


def multiplier(row: int) -> str:
    """The Lagrange multiplier of constraint row ``row``."""
    return f"{MULTIPLIER_PREFIX}{row}"


def initial(column: str) -> str:
    """A study's initial value of a coordinate (``x1``) or velocity (``x1_dot``)."""
    return column + INITIAL_SUFFIX


def state(coordinates: Sequence[str]) -> list[str]:
    """q, q̇, q̈ of every coordinate, in the tables' order."""
    return [*coordinates, *map(velocity, coordinates), *map(acceleration, coordinates)]


def velocity_of(column: str, coordinates: Sequence[str]) -> str | None:
    """The coordinate whose velocity ``column`` is, or None."""
    base = column.removesuffix(VELOCITY_SUFFIX)
    return base if base != column and base in coordinates else None


def branches(names: Sequence[str]) -> list[str]:
    """The branch-probability columns among ``names``."""
    return [name for name in names if name.startswith(BRANCH_PREFIX)]

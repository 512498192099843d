"""Prescribed motions: sampled trajectory files, expressions in t, and their smooth
derivatives.

A trajectory file (the reference implementation's format, ``config/trajectories/``) has
one sample per line: the time, then one column per imposed coordinate; lines starting
with ``%`` are comments. Velocities and accelerations come from the quintic interpolating
spline of the samples (SciPy's ``make_interp_spline``, not-a-knot ends): its second
derivative is continuous and, for samples of a smooth motion h apart, accurate to O(h⁴)
(O(h³) in the first and last intervals), where finite differences of the samples would
amplify their rounding (the files have 8 significant digits).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.interpolate import make_interp_spline

from mbgen.errors import TrajectoryError
from mbgen.io.datafile import read_data

Array = np.ndarray


@dataclass(frozen=True)
class Trajectory:
    """Samples of the imposed coordinates: ``t`` (N,), ``values`` (N, k)."""

    t: Array
    values: Array
    source: str

    def derivatives(self) -> tuple[Array, Array, Array]:
        """(values, first, second derivatives), each (N, k), from the quintic spline."""
        if len(self.t) < 6:
            raise TrajectoryError(f"{self.source}: a quintic spline needs at least 6 "
                                  f"samples, got {len(self.t)}")
        spline = make_interp_spline(self.t, self.values, k=5)
        return self.values, spline(self.t, 1), spline(self.t, 2)


def read_trajectory(path: Path, columns: int) -> Trajectory:
    """A trajectory file with ``columns`` imposed coordinates after the time column."""
    data = read_data(path, header=False, count=columns, what="imposed coordinate")
    return Trajectory(data.t, data.values, str(path))


def trajectory_from_expressions(expressions: Mapping[str, str], t_end: float, dt: float,
                                ) -> Trajectory:
    """Samples every ``dt`` on [0, t_end] of one expression in t per imposed coordinate
    (the whitelist parser: numbers, t, pi, + − * / ^ and the usual functions)."""
    from mbgen.model.expressions import ExpressionError, FunctionOfTime

    if not (t_end > 0 and dt > 0):
        raise TrajectoryError("t_end and dt must be positive")
    times = np.linspace(0.0, t_end, int(round(t_end / dt)) + 1)
    columns = []
    for name, text in expressions.items():
        try:
            columns.append(FunctionOfTime.parse(text, f"the motion of {name}")(times))
        except ExpressionError as exc:
            raise TrajectoryError(f"motion of {name}: {exc}") from None
    return Trajectory(times, np.column_stack(columns), "expressions")

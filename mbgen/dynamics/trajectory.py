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
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TrajectoryError(f"{path}: cannot read the trajectory: {exc}") from None
    rows: list[list[float]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("%"):
            continue
        cells = stripped.replace(",", " ").split()
        if len(cells) != columns + 1:
            raise TrajectoryError(f"{path}:{number}: expected {columns + 1} columns (t and "
                                  f"{columns} imposed coordinate{'s' * (columns > 1)}), got "
                                  f"{len(cells)}")
        try:
            values = [float(cell) for cell in cells]
        except ValueError:
            bad = next(c for c in cells if not _is_number(c))
            raise TrajectoryError(f"{path}:{number}: {bad!r} is not a number") from None
        if not all(np.isfinite(values)):
            raise TrajectoryError(f"{path}:{number}: values must be finite")
        if rows and values[0] <= rows[-1][0]:
            raise TrajectoryError(f"{path}:{number}: time {values[0]:g} does not increase "
                                  f"(previous sample: {rows[-1][0]:g})")
        rows.append(values)
    if not rows:
        raise TrajectoryError(f"{path}: no samples")
    data = np.array(rows)
    return Trajectory(data[:, 0], data[:, 1:], str(path))


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def trajectory_from_expressions(expressions: Mapping[str, str], t_end: float, dt: float,
                                ) -> Trajectory:
    """Samples every ``dt`` on [0, t_end] of one expression in t per imposed coordinate
    (the whitelist parser: numbers, t, pi, + − * / ^ and the usual functions)."""
    import sympy as sp

    from mbgen.model.expressions import ExpressionError, parse_expression

    if not (t_end > 0 and dt > 0):
        raise TrajectoryError("t_end and dt must be positive")
    t = sp.Symbol("t", real=True)
    times = np.linspace(0.0, t_end, int(round(t_end / dt)) + 1)
    columns = []
    for name, text in expressions.items():
        try:
            expr = parse_expression(text, {"t": t})
        except ExpressionError as exc:
            raise TrajectoryError(f"motion of {name}: {exc}") from None
        # lambdify prints the already-parsed SymPy expression; no user text reaches it
        values = np.broadcast_to(np.asarray(sp.lambdify(t, expr, "numpy")(times), float),
                                 times.shape)
        if not np.all(np.isfinite(values)):
            raise TrajectoryError(f"motion of {name}: {text!r} is not finite on [0, "
                                  f"{t_end:g}]")
        columns.append(values)
    return Trajectory(times, np.column_stack(columns), "expressions")

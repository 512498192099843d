"""Sensor readings files: a column ``t`` and one column per sensor output, named by its
label (``mbgen info`` lists them); an empty cell means no reading from that sensor then.
Every sensor has its column: a missing one is more likely a misspelt or stale header than
a sensor that never reads."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from mbgen.errors import TrajectoryError

Array = np.ndarray


def read_readings(path: Path, labels: list[str], what: str = "sensor") -> tuple[Array, Array]:
    """(t (N,), readings (N, columns) with NaN where a cell is empty); ``what`` names the
    columns in errors ("sensor", "actuator")."""
    try:
        with Path(path).open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError) as exc:
        raise TrajectoryError(f"{path}: cannot read the readings: {exc}") from None
    if not rows:
        raise TrajectoryError(f"{path}: empty file")
    header = [cell.strip() for cell in rows[0]]
    if "t" not in header:
        raise TrajectoryError(f"{path}:1: no column 't'")
    unknown = [h for h in header if h != "t" and h not in labels]
    if unknown:
        raise TrajectoryError(f"{path}:1: unknown {what} column(s) {', '.join(unknown)} "
                              f"({what}s: {', '.join(labels)})")
    missing = [label for label in labels if label not in header]
    if missing:
        raise TrajectoryError(f"{path}:1: missing {what} column(s) {', '.join(missing)}: "
                              f"every {what} needs a column (an empty cell: no reading then)")
    t = np.empty(len(rows) - 1)
    values = np.full((len(rows) - 1, len(labels)), np.nan)
    columns = {name: k for k, name in enumerate(header)}
    for r, row in enumerate(rows[1:]):
        line = r + 2
        if len(row) != len(header):
            raise TrajectoryError(f"{path}:{line}: {len(row)} cells, the header has "
                                  f"{len(header)}")
        for name, k in columns.items():
            cell = row[k].strip()
            if not cell and name != "t":
                continue
            try:
                value = float(cell)
            except ValueError:
                raise TrajectoryError(f"{path}:{line}: column {name}: {cell!r} is not a "
                                      "number") from None
            if not np.isfinite(value):
                raise TrajectoryError(f"{path}:{line}: column {name}: not finite")
            if name == "t":
                t[r] = value
            else:
                values[r, labels.index(name)] = value
        if r and t[r] <= t[r - 1]:
            raise TrajectoryError(f"{path}:{line}: time {t[r]:g} does not increase")
    if len(t) == 0:
        raise TrajectoryError(f"{path}: no readings")
    return t, values

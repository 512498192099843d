"""Sensor readings files: a column ``t`` and one column per sensor output, named by its
label (``mbgen info`` lists them); an empty cell means no reading from that sensor then.
Every sensor has its column: a missing one is more likely a misspelt or stale header than
a sensor that never reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mbgen.io.datafile import read_data

Array = np.ndarray


def read_readings(path: Path, labels: list[str], what: str = "sensor",
                  ignored: list[str] | None = None) -> tuple[Array, Array]:
    """(t (N,), readings (N, len(labels)) with NaN where a cell is empty), in ``labels``'
    order; ``what`` names the columns in errors ("sensor", "actuator"); ``ignored``:
    columns the file may also have, not read (the accelerometers', for identification)."""
    data = read_data(path, required=labels, allowed=[*labels, *(ignored or [])],
                     empty_cells=True, what=what)
    return data.t, np.column_stack([data.column(label) for label in labels]) if labels \
        else np.empty((len(data.t), 0))

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
                  optional: list[str] | None = None) -> tuple[Array, Array]:
    """(t (N,), readings (N, len(labels) + len(optional)) with NaN where a cell is empty),
    in ``labels``' then ``optional``'s order; ``what`` names the columns in errors
    ("sensor", "actuator"); ``optional``: columns the file may leave out, read as
    empty (the accelerometers', for identification)."""
    optional = optional or []
    data = read_data(path, required=labels, allowed=[*labels, *optional],
                     empty_cells=True, what=what)
    missing = np.full(len(data.t), np.nan)
    columns = [data.column(label) for label in labels] + [
        data.column(label) if label in data.names else missing for label in optional]
    return data.t, np.column_stack(columns) if columns else np.empty((len(data.t), 0))

"""Sensor readings files: a column ``t`` and one column per sensor output, named by its
label (``mbgen info`` lists them); an empty cell means no reading from that sensor then.
Every sensor has its column: a missing one is more likely a misspelt or stale header than
a sensor that never reads. Their reader and their writer (`simulate --sensors-out`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

import mbgen.columns as columns
from mbgen.io.datafile import read_data
from mbgen.io.tables import write_table

if TYPE_CHECKING:
    from mbgen.runtime.compiled import CompiledMechanism

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


def write_readings(path: Path, mech: CompiledMechanism, t: Array, q: Array, qd: Array,
                   qdd: Array, noise: Sequence[float], every: int, seed: int) -> Path:
    """A run's sensor outputs every ``every`` steps (``t`` (N,), ``q``, ``qd``, ``qdd``
    (N, n)) with Gaussian noise of σ ``noise`` (one per column, seeded by ``seed``), as a
    readings file that :func:`read_readings` reads back: ``t``, the sensors' columns,
    then the accelerometers' (read at the run's q̈)."""
    rows = np.arange(0, len(t), every)
    blocks = [np.asarray(t)[rows][:, None]]
    if mech.sensor_labels:
        blocks.append(mech.sensors(q[rows], qd[rows]).reshape(len(rows), -1))
    if mech.accelerometer_labels:
        blocks.append(mech.accelerometers(q[rows], qdd[rows]).reshape(len(rows), -1))
    values = np.column_stack(blocks)
    values[:, 1:] += np.asarray(noise) * np.random.default_rng(seed).standard_normal(
        values[:, 1:].shape)
    return write_table(path, [columns.TIME, *mech.sensor_labels, *mech.accelerometer_labels],
                       values)

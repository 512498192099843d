"""Writing tables: CSV with one header line, full precision, written whole."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from mbgen.files import atomic_write


class Tabular(Protocol):
    """A result that knows its CSV columns (a simulation's, an inverse dynamics')."""

    def columns(self, extras: tuple[str, ...] = (), every: int = 1,
                ) -> tuple[list[str], np.ndarray]: ...


def write_csv(result: Tabular, path: str | Path,
              extras: tuple[str, ...] = (), every: int = 1) -> Path:
    """The result's columns as CSV with a header line. Simulation: t, q (coordinate
    names), q̇ (<name>_dot), q̈ (<name>_ddot), energy, phi_norm, then ``extras``, every
    ``every``-th row. Inverse dynamics: t, q, q̇, q̈, force_<coordinate> per actuator."""
    return write_table(path, *result.columns(extras, every))


def write_table(path: str | Path, header: list[str], data: np.ndarray) -> Path:
    """A CSV with one header line and full-precision rows (``data`` (rows, columns), or
    (rows,) as one column), written atomically: the text of ``np.savetxt(fmt="%.12g")``."""
    path = Path(path)
    atomic_write(path, lambda tmp: _write_rows(tmp, ",".join(header), np.asarray(data)))
    return path


def _write_rows(path: Path, header: str, data: np.ndarray) -> None:
    """The header then the rows as '%.12g' cells: one % per block of rows, not one per row
    as np.savetxt (1.6x faster on 2M x 10, 5 s instead of 8.5 s; the same bytes)."""
    if data.ndim == 1:
        data = data[:, None]
    rows, columns = data.shape
    line = ",".join(["%.12g"] * columns) + "\n"
    step = max(1, 2**16 // max(columns, 1))
    with path.open("w", encoding="utf-8", newline="\n") as stream:
        stream.write(header + "\n")
        for start in range(0, rows, step):
            block = data[start:start + step]
            stream.write((line * len(block)) % tuple(block.ravel().tolist()))


def decimated_rows(count: int, every: int) -> np.ndarray:
    """Indices of every ``every``-th of ``count`` rows, the last one always included."""
    return np.unique(np.r_[np.arange(0, count, every), count - 1])

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
    """A CSV with one header line and full-precision rows, written atomically."""
    path = Path(path)
    atomic_write(path, lambda tmp: np.savetxt(tmp, data, delimiter=",", header=",".join(header),
                                              comments="", fmt="%.12g"))
    return path


def decimated_rows(count: int, every: int) -> np.ndarray:
    """Indices of every ``every``-th of ``count`` rows, the last one always included."""
    return np.unique(np.r_[np.arange(0, count, every), count - 1])

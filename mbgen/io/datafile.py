"""The one reader of data files: readings, trajectories, results to draw.

Every command that reads samples over time reads them here, so one set of rules holds:
UTF-8 (a byte-order mark is fine), one row per sample, a time column that strictly
increases (a repeated time made the trajectory's spline, and the torque, wrong), finite
numbers, no duplicated column names, the columns a command needs named in the error when
missing, and size limits checked before the work. Errors name the file, line and column.

Two layouts: a CSV with a header line (``t`` then named columns; mbgen's results and
readings), or the reference implementation's trajectories: no header, ``%`` comments,
the time then the values, separated by spaces or commas.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbgen.errors import TrajectoryError

Array = np.ndarray

MAX_FILE_BYTES = 512 * 2**20  # a bigger data file is refused before it is read
MAX_ROWS = 5_000_000  # samples
MAX_COLUMNS = 10_000
MAX_CELL = 64  # characters: a double needs at most 24


@dataclass(frozen=True)
class DataFile:
    """Samples read from ``path``: times ``t`` (N,), ``values`` (N, k) with NaN in empty
    cells, the ``names`` of the k columns, and the file's ``lines`` of the N rows."""

    path: Path
    names: list[str]
    t: Array
    values: Array
    lines: Array

    def column(self, name: str) -> Array:
        """One named column (N,)."""
        return self.values[:, self.names.index(name)]


def read_data(path: str | Path, *, header: bool = True, count: int | None = None,
              required: Sequence[str] = (), allowed: Sequence[str] | None = None,
              empty_cells: bool = False, what: str = "") -> DataFile:
    """Reads and checks a data file.

    ``header``: a CSV whose first line names the columns (``t`` and ``required`` must be
    there; with ``allowed``, no other); else ``count`` values after the time on every
    line. ``empty_cells``: an empty cell is a missing value (NaN), not an error. ``what``
    names the columns in messages ("sensor", "actuator", "coordinate").
    """
    path = Path(path)
    rows = _rows(path, header)
    time = 0  # the time's cell in a row
    if header:
        (line, cells), rows = rows[0], rows[1:]
        names = _header(path, line, cells, required, allowed, what)
        time = cells.index("t")
    else:
        names = [f"{what or 'value'} {k + 1}" for k in range(count or 0)]
    width = len(names) + 1
    t = np.empty(len(rows))
    values = np.empty((len(rows), len(names)))
    lines = np.empty(len(rows), dtype=np.int64)
    for r, (line, cells) in enumerate(rows):
        if len(cells) != width:
            expected = (f"the header has {width}" if header else
                        f"expected {width}: t and {width - 1} value{'s' * (width > 2)}")
            raise TrajectoryError(f"{path}:{line}: {len(cells)} cells, {expected}")
        lines[r] = line
        t[r] = _number(path, line, "t", cells.pop(time), False)
        for k, cell in enumerate(cells):
            values[r, k] = _number(path, line, names[k] if header else f"{k + 2}", cell,
                                   empty_cells)
        if r and not t[r] > t[r - 1]:
            same = "repeats the time of" if t[r] == t[r - 1] else "is before"
            raise TrajectoryError(f"{path}:{line}: time {t[r]:g} {same} line "
                                  f"{lines[r - 1]} ({t[r - 1]:g}): times must increase")
    if not len(rows):
        raise TrajectoryError(f"{path}: no samples")
    return DataFile(path, names, t, values, lines)


def _rows(path: Path, header: bool) -> list[tuple[int, list[str]]]:
    """(line number, cells) of every non-blank, non-comment line, within the limits."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise TrajectoryError(f"{path}: {size / 2**20:.0f} MiB, more than the "
                                  f"{MAX_FILE_BYTES / 2**20:.0f} MiB a data file may have")
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise TrajectoryError(f"{path}:{line}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise TrajectoryError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    rows = []
    lines = text.splitlines()
    if len(lines) > MAX_ROWS + 1:
        raise TrajectoryError(f"{path}: {len(lines)} lines, more than the {MAX_ROWS} samples "
                              "a data file may have")
    for number, text_line in enumerate(lines, start=1):
        stripped = text_line.strip()
        if not stripped or stripped[0] in "%#":
            continue
        if header:
            try:
                cells = next(csv.reader([text_line]))
            except csv.Error as exc:
                raise TrajectoryError(f"{path}:{number}: {exc}") from None
        else:
            cells = stripped.replace(",", " ").split()
        if len(cells) > MAX_COLUMNS:
            raise TrajectoryError(f"{path}:{number}: {len(cells)} cells, more than "
                                  f"{MAX_COLUMNS}")
        rows.append((number, [cell.strip() for cell in cells]))
    if header and not rows:
        raise TrajectoryError(f"{path}: empty file (expected a header line: t, ...)")
    return rows


def _header(path: Path, line: int, names: list[str], required: Sequence[str],
            allowed: Sequence[str] | None, what: str) -> list[str]:
    """The names of the columns other than ``t``, checked."""
    kind = f"{what} column(s)" if what else "column(s)"
    for name in names:
        if len(name) > MAX_CELL:
            raise TrajectoryError(f"{path}:{line}: a column name of {len(name)} characters")
    seen = set()
    for name in names:
        if name in seen:
            raise TrajectoryError(f"{path}:{line}: column {name!r} appears twice")
        seen.add(name)
    if "t" not in names:
        raise TrajectoryError(f"{path}:{line}: no column 't' (the time [s]) in the header")
    rest = [name for name in names if name != "t"]
    if allowed is not None:
        unknown = [name for name in rest if name not in allowed]
        if unknown:
            raise TrajectoryError(f"{path}:{line}: unknown {kind} {', '.join(unknown)} "
                                  f"(allowed: t, {', '.join(allowed)})")
    missing = [name for name in required if name not in rest]
    if missing:
        raise TrajectoryError(f"{path}:{line}: missing {kind} {', '.join(missing)} (needed: "
                              f"t, {', '.join(required)})")
    return rest


def _number(path: Path, line: int, column: str, cell: str, empty_ok: bool) -> float:
    if not cell:
        if empty_ok:
            return math.nan
        raise TrajectoryError(f"{path}:{line}: column {column}: empty cell")
    if len(cell) > MAX_CELL:
        raise TrajectoryError(f"{path}:{line}: column {column}: a cell of {len(cell)} "
                              f"characters, not a number")
    try:
        value = float(cell)
    except ValueError:
        raise TrajectoryError(f"{path}:{line}: column {column}: {cell!r} is not a "
                              "number") from None
    if not math.isfinite(value):
        raise TrajectoryError(f"{path}:{line}: column {column}: {cell!r} is not finite")
    return value

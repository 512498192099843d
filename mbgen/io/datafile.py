"""The one reader of data files: readings, trajectories, results to draw.

Every command that reads samples over time reads them here, so one set of rules holds:
UTF-8 (a byte-order mark is fine), one row per sample, a time column that strictly
increases (a repeated time made the trajectory's spline, and the torque, wrong), finite
numbers in decimal notation, no duplicated column names, the columns a command needs named
in the error when missing, and size limits checked before the work. Errors name the file,
line and column; when a file has several faults, the first one in the file.

Two layouts: a CSV with a header line (``t`` then named columns; mbgen's results and
readings), or the reference implementation's trajectories: no header, ``%`` comments,
the time then the values, separated by spaces or commas. Blank lines and lines starting
with ``%`` or ``#`` are skipped in both; lines end with LF, CR LF or CR.

The cells are split and converted by pyarrow (C++, on every core): a CSV as mbgen writes
it (no comment, blank or indented line, no quote) goes straight to ``pyarrow.csv``, whose
row r is then the file's line r + 2; any other file is cut into lines first, so that every
row keeps its line number. Either way every cell goes through the same checks.
"""

from __future__ import annotations

import csv
import math
import os
import stat
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mbgen.columns import TIME
from mbgen.errors import TrajectoryError

if TYPE_CHECKING:
    import pyarrow as pa

Array = np.ndarray

MAX_FILE_BYTES = 512 * 2**20  # a bigger data file is refused before it is read
MAX_ROWS = 5_000_000  # samples
MAX_COLUMNS = 10_000
MAX_CELL = 64  # characters: a double needs at most 24
#: pyarrow.csv's unit of work per thread: its default, 1 MiB, cuts a 300 MiB file into 300
#: chunks per column, each converted on its own
BLOCK_BYTES = 16 * 2**20
#: A number as the reader takes it, decimal notation (RE2 syntax, pyarrow's regexes):
#: what mbgen, NumPy and spreadsheets write; pyarrow's parser reads every such cell.
NUMBER = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"


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
    raw, count_lines = _load(path)
    if header:
        plain = _plain(path, raw, count_lines)
        if plain is None:
            grid = _split_rows(path, raw, _lines(raw), header=True)
            assert grid.header is not None
            cells = grid.header[1]
            names = _header(path, grid.header[0], cells, required, allowed, what)
        else:
            cells, rows = plain
            names = _header(path, 1, cells, required, allowed, what)
            block = _typed(raw, len(cells), rows, cells.index(TIME), empty_cells)
            if block is not None:  # every cell a number, the times increasing
                return DataFile(path, names, block[0], block[1:].T,
                                np.arange(2, rows + 2, dtype=np.int64))
            grid = _text_grid(path, raw, cells, rows)
        time = cells.index(TIME)
        labels = names
    else:
        names = [f"{what or 'value'} {k + 1}" for k in range(count or 0)]
        grid = _split_rows(path, raw, _lines(raw), header=False, width=len(names) + 1)
        time, labels = 0, [f"{k + 2}" for k in range(len(names))]
    faults = [] if grid.ragged is None else [(len(grid.lines), 0, grid.ragged)]
    columns = [grid.columns[time], *(c for k, c in enumerate(grid.columns) if k != time)]
    block = np.empty((len(columns), len(grid.lines)))  # a column's numbers side by side
    with ThreadPoolExecutor(min(len(columns), os.cpu_count() or 1)) as pool:
        firsts = list(pool.map(lambda k: _numbers(columns[k], k > 0 and empty_cells,
                                                  block[k]), range(len(columns))))
    t, values, first = block[0], block[1:].T, firsts[0]
    for k, (bad, label) in enumerate(zip(firsts, [TIME, *labels], strict=True)):
        if bad < len(t):
            faults.append((bad, 1 + k, _cell_error(path, int(grid.lines[bad]), label,
                                                   columns[k][bad].as_py())))
    order = np.flatnonzero(~(np.diff(t[:first]) > 0))
    if len(order):
        r = int(order[0]) + 1
        same = "repeats the time of" if t[r] == t[r - 1] else "is before"
        faults.append((r, 2 + len(names), f"{path}:{grid.lines[r]}: time {t[r]:g} {same} line "
                       f"{grid.lines[r - 1]} ({t[r - 1]:g}): times must increase"))
    if faults:
        raise TrajectoryError(min(faults)[2])
    if not len(t):
        raise TrajectoryError(f"{path}: no samples")
    return DataFile(path, names, t, values, grid.lines)


@dataclass(frozen=True)
class _Grid:
    """The cells of a data file: ``columns``, one array of text per column, of the rows
    up to the first with a wrong number of cells (``ragged``: its message, else None), the
    file's ``lines`` of those rows, and the ``header`` (line, names) if there is one."""

    columns: list[Any]
    lines: Array
    ragged: str | None
    header: tuple[int, list[str]] | None = None


def _load(path: Path) -> tuple[bytes, int]:
    """The file's bytes (UTF-8 checked, no byte-order mark, lines ending in LF), within
    the limits, and its number of lines (counted once: 0.1 s per 300 MiB)."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):  # a FIFO blocks, a device never ends
            kind = ("a directory" if stat.S_ISDIR(info.st_mode) else "a FIFO"
                    if stat.S_ISFIFO(info.st_mode) else "a device or socket")
            raise TrajectoryError(f"{path}: {kind}, not a regular file: a data file is read "
                                  "only from a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise TrajectoryError(f"{path}: {info.st_size / 2**20:.0f} MiB, more than the "
                                  f"{MAX_FILE_BYTES / 2**20:.0f} MiB a data file may have")
        with open(path, "rb") as stream:
            raw = stream.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise TrajectoryError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:  # it grew since
        raise TrajectoryError(f"{path}: more than the {MAX_FILE_BYTES / 2**20:.0f} MiB a data "
                              "file may have")
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    if not raw.isascii():
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw[:exc.start].count(b"\n") + 1
            raise TrajectoryError(f"{path}:{line}: not UTF-8 text ({exc.reason})") from None
    if b"\r" in raw:
        raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    lines = raw.count(b"\n") + (bool(raw) and not raw.endswith(b"\n"))
    if lines > MAX_ROWS + 1:
        raise TrajectoryError(f"{path}: {lines} lines, more than the {MAX_ROWS} samples "
                              "a data file may have")
    return raw, lines


def _plain(path: Path, raw: bytes, lines: int) -> tuple[list[str], int] | None:
    """The header's cells and the number of lines after it, if pyarrow.csv can read the
    rest straight: every line after the first a row cut at commas alone (no comment, no
    quote; a blank line, which pyarrow skips, shows in its count of rows), with a time and
    a value (a blank line would be an empty time); else None."""
    if not raw or raw.startswith((b"\n", b" ", b"\t", b"#", b"%")) or any(
            mark in raw for mark in (b"#", b"%", b'"')):
        return None
    end = raw.find(b"\n")
    cells = _header_cells(path, 1, raw[:end if end >= 0 else len(raw)].decode())
    if len(cells) < 2:
        return None
    return cells, lines - 1


def _csv(raw: bytes, width: int, kind: Any) -> Any:
    """pyarrow.csv's table of the rows after the first line, every column of ``kind``;
    None if a row's number of cells is not ``width``."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    names = [f"{k}" for k in range(width)]
    try:
        return pcsv.read_csv(
            pa.py_buffer(raw), read_options=pcsv.ReadOptions(
                column_names=names, skip_rows=1, block_size=BLOCK_BYTES),
            parse_options=pcsv.ParseOptions(quote_char=False),
            convert_options=pcsv.ConvertOptions(
                column_types=dict.fromkeys(names, kind), check_utf8=False,
                null_values=[""], strings_can_be_null=False))
    except pa.ArrowInvalid:
        return None


def _typed(raw: bytes, width: int, rows: int, time: int, empty_cells: bool) -> Array | None:
    """The columns (time first) as numbers (width, rows), read by pyarrow as doubles, if
    nothing is to be refused; None at the first doubt (then the cells are read as text,
    checked one by one and the first fault named)."""
    import pyarrow as pa

    if not rows or _long_cell(raw):
        return None
    table = _csv(raw, width, pa.float64())
    if table is None or table.num_rows != rows:
        return None
    order = [time, *(k for k in range(width) if k != time)]
    block = np.empty((width, rows))
    for k, column in enumerate(order):
        cells = table.column(column)
        if cells.null_count and not (k and empty_cells):
            return None
        start = 0
        for chunk in cells.chunks:  # straight into the block: no concatenated copy
            block[k, start:start + len(chunk)] = chunk.to_numpy(zero_copy_only=False)
            start += len(chunk)  # an empty cell (null) as NaN
        finite = np.isfinite(block[k])
        if cells.null_count:
            finite |= _numpy(cells.is_null()).astype(bool)
        if not finite.all():
            return None
    return block if (np.diff(block[0]) > 0).all() else None


def _long_cell(raw: bytes) -> bool:
    """Whether a cell after the first line may be longer than :data:`MAX_CELL`: a run of
    that many bytes without a comma or a line end holds a whole 32-byte block without
    one, or ends in the last bytes. Looked at 4 MiB at a time (the cache's size)."""
    size, step = 32, 1 << 22
    assert 2 * size - 1 <= MAX_CELL + 1
    start = raw.find(b"\n") + 1
    covered = (len(raw) - start) // size * size
    for offset in range(start, start + covered, step):
        chunk = np.frombuffer(raw, np.uint8, count=min(step, start + covered - offset),
                              offset=offset)
        mark = chunk == ord(",")
        mark |= chunk == ord("\n")
        words = mark.view(np.uint64).reshape(-1, size // 8)  # a block: 4 words
        if not (words[:, 0] | words[:, 1] | words[:, 2] | words[:, 3]).all():
            return True
    tail = raw[max(start, start + covered - MAX_CELL):].replace(b"\n", b",").split(b",")
    return max(map(len, tail)) > MAX_CELL


def _text_grid(path: Path, raw: bytes, cells: list[str], rows: int) -> _Grid:
    """The cells as text, by pyarrow.csv (row r on line r + 2), or line by line if a row's
    number of cells is wrong or a blank line was skipped."""
    import pyarrow as pa

    if not rows:
        columns = [pa.array([], pa.string()) for _ in cells]
    else:
        table = _csv(raw, len(cells), pa.string())
        if table is None or table.num_rows != rows:
            return _split_rows(path, raw, _lines(raw), header=True)
        columns = [table.column(k) for k in range(len(cells))]
    return _Grid(columns, np.arange(2, rows + 2, dtype=np.int64), None, (1, cells))


def _lines(raw: bytes) -> pa.Array:
    """Every line of the file (LF-ended, valid UTF-8) as text, without its end."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ends = np.flatnonzero(np.frombuffer(raw, np.uint8) == ord("\n"))
    offsets = np.concatenate(([0], ends + 1)).astype(np.int64)
    if offsets[-1] != len(raw):
        offsets = np.append(offsets, len(raw))
    lines = pa.LargeStringArray.from_buffers(len(offsets) - 1, pa.py_buffer(offsets),
                                             pa.py_buffer(raw))
    return pc.utf8_trim_whitespace(lines)


def _header_cells(path: Path, line: int, text: str) -> list[str]:
    """The cells of one CSV line (quotes as Python's csv module reads them), stripped."""
    try:
        cells = next(csv.reader([text]), [])
    except csv.Error as exc:
        raise TrajectoryError(f"{path}:{line}: {exc}") from None
    if len(cells) > MAX_COLUMNS:
        raise TrajectoryError(f"{path}:{line}: {len(cells)} cells, more than {MAX_COLUMNS}")
    return [cell.strip() for cell in cells]


def _split_rows(path: Path, raw: bytes, lines: pa.Array, header: bool,
                width: int = 0) -> _Grid:
    """The grid of a file cut into (stripped) ``lines``: blank and comment lines skipped,
    a CSV's cells at commas (or as the csv module reads a line with a quote), a headerless
    file's at runs of spaces and commas."""
    import pyarrow as pa
    import pyarrow.compute as pc

    skipped = pc.or_(pc.equal(pc.utf8_length(lines), 0),
                     pc.or_(pc.starts_with(lines, "%"), pc.starts_with(lines, "#")))
    kept = np.flatnonzero(~skipped.to_numpy(zero_copy_only=False))
    numbers = kept + 1
    rows = lines.take(pa.array(kept))
    head = None
    if header:
        if not len(kept):
            raise TrajectoryError(f"{path}: empty file (expected a header line: t, ...)")
        head = (int(numbers[0]), _header_cells(path, int(numbers[0]), rows[0].as_py()))
        width, rows, numbers = len(head[1]), rows[1:], numbers[1:]
        if pc.any(pc.match_substring(rows, '"')).as_py():
            split = pa.array([_header_cells(path, int(n), text)
                              for n, text in zip(numbers, rows.to_pylist(), strict=True)],
                             pa.list_(pa.large_string()))
        else:
            split = pc.split_pattern(rows, ",")
        counts = pc.list_value_length(split).to_numpy(zero_copy_only=False)
    else:
        spaced = pc.utf8_trim_whitespace(pc.replace_substring(rows, ",", " "))
        split = pc.utf8_split_whitespace(spaced)
        counts = np.where(pc.equal(pc.utf8_length(spaced), 0).to_numpy(zero_copy_only=False), 0,
                          pc.list_value_length(split).to_numpy(zero_copy_only=False))
    wrong = np.flatnonzero(counts != width)
    ragged = None
    if len(wrong):
        r = int(wrong[0])
        expected = (f"the header has {width}" if header else
                    f"expected {width}: t and {width - 1} value{'s' * (width > 2)}")
        ragged = f"{path}:{numbers[r]}: {counts[r]} cells, {expected}"
        split, numbers = split[:r], numbers[:r]
    cells = pc.list_flatten(split)
    index = np.arange(len(numbers), dtype=np.int64) * width
    return _Grid([cells.take(pa.array(index + k)) for k in range(width)],
                 numbers.astype(np.int64), ragged, head)


def _numbers(cells: Any, empty_ok: bool, out: Array) -> int:
    """A column of text as numbers into ``out`` (NaN where refused or empty); returns the
    index of its first refused cell (its length if none): empty (unless ``empty_ok``),
    longer than :data:`MAX_CELL`, not a number in decimal notation, not finite."""
    import pyarrow as pa
    import pyarrow.compute as pc

    count = len(cells)
    if not count:
        return 0
    try:  # the common case: every cell a number; pyarrow's parser takes nan and inf too
        start = 0
        for chunk in getattr(cells, "chunks", [cells]):
            if len(chunk) and pc.max(pc.binary_length(chunk)).as_py() > MAX_CELL:
                raise ValueError("a long cell")
            values = pc.cast(chunk, pa.float64()).to_numpy(zero_copy_only=False)
            out[start:start + len(values)] = values
            start += len(values)
        refused = ~np.isfinite(out)
    except (pa.ArrowInvalid, ValueError):  # spaces, empty cells, or a fault to find
        trimmed = pc.utf8_trim_whitespace(cells)
        length = pc.utf8_length(trimmed)
        number = pc.and_(pc.match_substring_regex(trimmed, NUMBER),
                         pc.less_equal(length, MAX_CELL))
        good = _numpy(number).astype(bool)
        out[:] = np.where(good, _numpy(pc.cast(pc.if_else(number, trimmed, pa.scalar(
            "0", trimmed.type)), pa.float64())), np.nan)
        refused = ~good | ~np.isfinite(out)
        if empty_ok:
            refused &= ~_numpy(pc.equal(length, 0)).astype(bool)
    return int(np.argmax(refused)) if refused.any() else count


def _numpy(array: Any) -> Array:
    """A pyarrow array or chunked array as one NumPy array."""
    return np.asarray(array.to_numpy() if hasattr(array, "num_chunks") else
                      array.to_numpy(zero_copy_only=False))


def _cell_error(path: Path, line: int, column: str, cell: str) -> str:
    """Why a cell is refused, by file, line and column."""
    cell = cell.strip()
    where = f"{path}:{line}: column {column}"
    if not cell:
        return f"{where}: empty cell"
    if len(cell) > MAX_CELL:
        return f"{where}: a cell of {len(cell)} characters, not a number"
    try:
        finite = math.isfinite(float(cell))
    except ValueError:
        finite = True
    return f"{where}: {cell!r} is {'not a number' if finite else 'not finite'}"


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
    if TIME not in names:
        raise TrajectoryError(f"{path}:{line}: no column '{TIME}' (the time [s]) in the header")
    rest = [name for name in names if name != TIME]
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

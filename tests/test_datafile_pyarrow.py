"""The data reader on pyarrow against the row-by-row reader it replaced (Python's csv
module, kept here as the reference): on any text built from the pieces of real files and
of their faults, both read the same samples from the same lines, or refuse with the same
message, file, line and column; and a 2-million-row file is read in seconds
(benchmarks/datafile.py measures it)."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mbgen.errors import TrajectoryError
from mbgen.io.datafile import MAX_CELL, MAX_COLUMNS, read_data

Read = tuple[list[str], list[float], list[list[float]], list[int]]
FAST = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def reference(path: Path, header: bool, count: int | None, empty_cells: bool,
              ) -> Read:
    """The reader before pyarrow (mbgen 6ce6e15), row by row: names, t, values, lines."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise TrajectoryError(f"{path}:{line}: not UTF-8 text ({exc.reason})") from None
    rows = []
    for at, text_line in enumerate(text.splitlines(), start=1):
        stripped = text_line.strip()
        if not stripped or stripped[0] in "%#":
            continue
        if header:
            try:
                cells = next(csv.reader([text_line]))
            except csv.Error as exc:
                raise TrajectoryError(f"{path}:{at}: {exc}") from None
        else:
            cells = stripped.replace(",", " ").split()
        if len(cells) > MAX_COLUMNS:
            raise TrajectoryError(f"{path}:{at}: {len(cells)} cells, more than "
                                  f"{MAX_COLUMNS}")
        rows.append((at, [cell.strip() for cell in cells]))
    if header and not rows:
        raise TrajectoryError(f"{path}: empty file (expected a header line: t, ...)")
    time = 0
    if header:
        (line, cells), rows = rows[0], rows[1:]
        for name in cells:
            if len(name) > MAX_CELL:
                raise TrajectoryError(f"{path}:{line}: a column name of {len(name)} "
                                      "characters")
        seen: set[str] = set()
        for name in cells:
            if name in seen:
                raise TrajectoryError(f"{path}:{line}: column {name!r} appears twice")
            seen.add(name)
        if "t" not in cells:
            raise TrajectoryError(f"{path}:{line}: no column 't' (the time [s]) in the header")
        names = [name for name in cells if name != "t"]
        time = cells.index("t")
    else:
        names = [f"value {k + 1}" for k in range(count or 0)]
    width = len(names) + 1
    t: list[float] = []
    values: list[list[float]] = []
    lines: list[int] = []

    def number(line: int, column: str, cell: str, empty_ok: bool) -> float:
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

    for line, cells in rows:
        if len(cells) != width:
            expected = (f"the header has {width}" if header else
                        f"expected {width}: t and {width - 1} value{'s' * (width > 2)}")
            raise TrajectoryError(f"{path}:{line}: {len(cells)} cells, {expected}")
        lines.append(line)
        t.append(number(line, "t", cells.pop(time), False))
        values.append([number(line, names[k] if header else f"{k + 2}", cell, empty_cells)
                       for k, cell in enumerate(cells)])
        if len(t) > 1 and not t[-1] > t[-2]:
            same = "repeats the time of" if t[-1] == t[-2] else "is before"
            raise TrajectoryError(f"{path}:{line}: time {t[-1]:g} {same} line "
                                  f"{lines[-2]} ({t[-2]:g}): times must increase")
    if not rows:
        raise TrajectoryError(f"{path}: no samples")
    return names, t, values, lines


PIECES = ["t", "a", "b", "t,a", "t,a,b", "0", "1", "2.5", "-3e2", "+.5", "1.", "nan", "inf",
          "-Infinity", "1e999", "x", "é", "²", "1" * (MAX_CELL + 1), "", " ", "\t", ",", ",",
          ",", '"', '"1"', "%", "#", "\n", "\n", "\n", "\r\n", "\r", "\ufeff"]


def outcome(read: Callable[[], Read]) -> Read | str:
    """What a reader gives: names, t, values, lines, or the message it refuses with."""
    try:
        return read()
    except TrajectoryError as exc:
        return str(exc)


def new_reader(path: Path, header: bool, count: int, empty_cells: bool) -> Read:
    data = read_data(path, header=header, count=count, empty_cells=empty_cells)
    return data.names, data.t.tolist(), data.values.tolist(), data.lines.tolist()


@FAST
@given(pieces=st.lists(st.sampled_from(PIECES), max_size=40), header=st.booleans(),
       empty_cells=st.booleans(), count=st.integers(0, 2), plain=st.booleans())
def test_it_reads_and_refuses_what_the_csv_reader_did(tmp_path: Path, pieces: list[str],
                                                      header: bool, empty_cells: bool,
                                                      count: int, plain: bool) -> None:
    """Same samples and lines, or the same message, on texts that go straight to
    pyarrow.csv (``plain``: a header line, then rows of numbers) and on any other."""
    text = "".join(pieces)
    if plain:
        text = "t,a\n" + "\n".join(f"{k},{piece}" for k, piece in enumerate(pieces))
    path = tmp_path / "data.csv"
    path.write_bytes(text.encode())
    old = outcome(lambda: reference(path, header, count, empty_cells))
    new = outcome(lambda: new_reader(path, header, count, empty_cells))
    if isinstance(old, str) or isinstance(new, str):
        assert new == old
        return
    assert new[0] == old[0] and new[3] == old[3]
    np.testing.assert_array_equal(new[1], old[1])
    np.testing.assert_array_equal(np.reshape(new[2], (len(new[1]), len(new[0]))),
                                  np.reshape(old[2], (len(old[1]), len(old[0]))))


@pytest.mark.parametrize(("text", "message"), [
    ("t,a\n# a comment\n\n0,1\n  \n1,2\n1,3\n", "data.csv:7: time 1 repeats the time of line 6"),
    ("% made by hand\nt,a\n0,1\n1,x\n", "data.csv:4: column a: 'x' is not a number"),
    ("t,a\r0,1\r1,2\r0.5,3\r", "data.csv:4: time 0.5 is before line 3"),
    ("t,a\n0,1\n1,2,3\n2,y\n", "data.csv:3: 3 cells, the header has 2"),
    ("t,a\n0,1\n1,z\n2,3,4\n", "data.csv:3: column a: 'z' is not a number"),
    ("t,a,b\n0,1,x\n1,y,2\n", "data.csv:2: column b: 'x' is not a number"),
    ("a,t\n1,0\nnan,1\n", "data.csv:3: column a: 'nan' is not finite"),
    ('t,a\n0,"1"\n1,"1,5"\n', "data.csv:3: column a: '1,5' is not a number"),
])
def test_faults_after_skipped_lines_keep_their_line(tmp_path: Path, text: str,
                                                    message: str) -> None:
    """pyarrow numbers rows, not lines: comments, blank lines, CR endings and quotes do
    not move the line an error names, and the first fault in the file is the one named."""
    path = tmp_path / "data.csv"
    path.write_text(text, newline="")
    with pytest.raises(TrajectoryError) as caught:
        read_data(path)
    assert message in str(caught.value)


def test_missing_readings_stay_empty(tmp_path: Path) -> None:
    path = tmp_path / "readings.csv"
    path.write_text("t,a,b\n0,1,\n0.5, ,2\n1,3,4\n")
    data = read_data(path, empty_cells=True)
    np.testing.assert_array_equal(data.values, [[1, np.nan], [np.nan, 2], [3, 4]])
    assert data.lines.tolist() == [2, 3, 4]

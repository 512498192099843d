"""The one data reader: what it accepts round-trips exactly, what it refuses is named by
file, line and column, and nothing makes it fail any other way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SHIPPED_DIR
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mbgen.cli.conventions import EXIT_BAD_INPUT
from mbgen.cli.main import cli
from mbgen.errors import TrajectoryError
from mbgen.io import datafile
from mbgen.io.datafile import read_data
from mbgen.io.tables import write_table

FAST = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def refusal(tmp_path: Path, text: str | bytes, **options: object) -> str:
    path = tmp_path / "data.csv"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(TrajectoryError) as caught:
        read_data(path, **options)  # type: ignore[arg-type]
    return str(caught.value)


@pytest.mark.parametrize(("text", "options", "message"), [
    ("t,a,a\n0,1,2\n", {}, "data.csv:1: column 'a' appears twice"),
    ("t,a\n0,1\n0.5,2\n0.5,3\n", {}, "data.csv:4: time 0.5 repeats the time of line 3"),
    ("t,a\n0,1\n1,nan\n", {}, "data.csv:3: column a: 'nan' is not finite"),
    ("t,a\n0,1\n1,inf\n", {}, "data.csv:3: column a: 'inf' is not finite"),
    ("t,a\n0,1\n1,\n", {}, "data.csv:3: column a: empty cell"),
    ("t,a\n0,²\n", {}, "data.csv:2: column a: '²' is not a number"),
    ("t,a\n0," + "1" * 200 + "\n", {}, "a cell of 200 characters"),
    ("t,a\n0,1\n", {"required": ["a", "b", "c"]}, "data.csv:1: missing column(s) b, c"),
    ("t,a,z\n0,1,2\n", {"allowed": ["a"]}, "data.csv:1: unknown column(s) z"),
    ("a,b\n0,1\n", {}, "data.csv:1: no column 't'"),
    ("t,a\n", {}, "no samples"),
    ("", {}, "empty file"),
    (b"t,a\n0,\xff\n", {}, "data.csv:2: not UTF-8 text"),
    ("0 1\n1 2 3\n", {"header": False, "count": 1}, "data.csv:2: 3 cells, expected 2"),
])
def test_refusals_name_the_file_line_and_column(tmp_path: Path, text: str | bytes,
                                                options: dict, message: str) -> None:
    assert message in refusal(tmp_path, text, **options)


def test_a_byte_order_mark_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufefft,a\r\n0,1\r\n1,2\r\n".encode())
    data = read_data(path)
    assert data.names == ["a"] and data.t.tolist() == [0, 1] and data.column("a").tolist() == [1, 2]


def test_size_limits_are_checked_before_reading(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datafile, "MAX_ROWS", 3)
    assert "more than the 3 samples" in refusal(tmp_path, "t\n0\n1\n2\n3\n4\n")
    monkeypatch.setattr(datafile, "MAX_FILE_BYTES", 10)
    assert "a data file may have" in refusal(tmp_path, "t,a\n0,1\n1,2\n2,3\n")


def test_a_repeated_time_in_a_trajectory_is_refused(tmp_path: Path, out_dir: Path) -> None:
    """A duplicated sample made the spline's acceleration, and the torque, wrong (247 N·m
    instead of 66): refused by file and line, exit code 1."""
    path = tmp_path / "path.txt"
    t = np.linspace(0, 1, 21)
    rows = [f"{a:.6f} {1.2 * (1 - np.cos(2 * a)):.8f}" for a in t]
    rows.insert(5, rows[4])
    path.write_text("\n".join(rows) + "\n")
    result = CliRunner().invoke(cli, ["inverse", str(SHIPPED_DIR / "slider-crank.yaml"),
                                      "--trajectory", str(path), "--imposed", "phi", "--out",
                                      str(tmp_path / "torque.csv"), "--build-dir",
                                      str(out_dir)])
    assert result.exit_code == EXIT_BAD_INPUT
    assert "path.txt:6: time 0.2 repeats the time of line 5" in result.output
    assert not (tmp_path / "torque.csv").exists()


names = st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda n: n != "t"), min_size=0, max_size=4, unique=True)
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@FAST
@given(columns=names, data=st.data())
def test_what_mbgen_writes_it_reads_back(tmp_path: Path, columns: list[str],
                                         data: st.DataObject) -> None:
    """write_table then read_data: the same names and numbers (to the 12 digits written)."""
    times = data.draw(st.lists(finite, min_size=1, max_size=20, unique=True).map(sorted))
    values = np.array([[data.draw(finite) for _ in columns] for _ in times]).reshape(
        len(times), len(columns))
    path = tmp_path / "table.csv"
    write_table(path, ["t", *columns], np.column_stack([times, values]))
    try:
        read = read_data(path)
    except TrajectoryError as exc:  # two times equal after rounding to 12 digits
        assert "repeats the time" in str(exc) or "times must increase" in str(exc)
        return
    assert read.names == columns
    np.testing.assert_allclose(read.t, times, rtol=1e-11, atol=0)
    np.testing.assert_allclose(read.values, values, rtol=1e-11, atol=0)


@FAST
@given(text=st.text(alphabet=st.sampled_from(list("t,ab0123456789.-e\n \"%#\ufeffxé²")),
                    max_size=80), header=st.booleans())
def test_any_text_is_read_or_refused_by_name(tmp_path: Path, text: str, header: bool) -> None:
    """Random text never fails other than with a located TrajectoryError."""
    path = tmp_path / "random.csv"
    path.write_text(text, encoding="utf-8")
    try:
        data = read_data(path, header=header, count=None if header else 1)
    except TrajectoryError as exc:
        assert str(exc).startswith(str(path))
    else:
        assert np.all(np.diff(data.t) > 0) and np.all(np.isfinite(data.t))
        assert np.all(np.isfinite(data.values))


@FAST
@given(shape=st.tuples(st.integers(0, 3000), st.integers(1, 12)), seed=st.integers(0, 99),
       flat=st.booleans())
def test_write_table_writes_what_savetxt_writes(tmp_path: Path, shape: tuple[int, int],
                                                seed: int, flat: bool) -> None:
    """write_table's bytes equal np.savetxt's ('%.12g', comma, header line) on any shape,
    over several blocks, with NaN, ±inf, -0, subnormal and huge cells."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal(shape) * 10.0 ** rng.integers(-320, 308, shape)
    data.flat[rng.integers(0, data.size + 1, 4) % max(data.size, 1)] = rng.choice(
        [np.nan, np.inf, -np.inf, -0.0, 5e-324], 4) if data.size else []
    data = data[:, 0] if flat else data
    header = [f"c{k}" for k in range(1 if flat else shape[1])]
    write_table(tmp_path / "new.csv", header, data)
    np.savetxt(tmp_path / "old.csv", data, delimiter=",", header=",".join(header),
               comments="", fmt="%.12g")
    assert (tmp_path / "new.csv").read_bytes() == (tmp_path / "old.csv").read_bytes()


def test_a_fifo_or_a_directory_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """`estimate --data fifo.csv` waited for ever on the FIFO's writer (found by
    benchmarks/fuzz_spatial.py): a data file that is not a regular file is refused by name
    before it is opened (the read runs in a thread, so that a regression fails, not hangs)."""
    import os
    import threading

    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a FIFO"), (tmp_path, "a directory")):
        caught: list[BaseException] = []

        def read(path: Path = path, caught: list[BaseException] = caught) -> None:
            try:
                read_data(path)
            except BaseException as exc:  # handed to the test's thread
                caught.append(exc)
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(10)
        if reader.is_alive():  # unblock it: open the FIFO for writing and close it
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            pytest.fail(f"read_data blocked on {kind}")
        assert len(caught) == 1 and isinstance(caught[0], TrajectoryError), caught
        assert str(caught[0]).startswith(f"{path}: {kind}, not a regular file")

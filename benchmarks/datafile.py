"""The one data reader (mbgen/io/datafile.py) on a result CSV of 2 000 000 rows × 10
columns, as mbgen writes it (12 significant digits): pyarrow.csv against the row-by-row
csv-module reader it replaced (kept as the reference in tests/test_datafile_pyarrow.py).

Why: `animate` of a 2-million-row CSV and `identify` on 2 million readings each ran past
60 s, nearly all of it in the reader. Target: 2M × 10 read and checked in ≤ 2 s. The old
reader is timed on the first 200 000 rows (it is linear) and compared with the new one on
the same file in the same run, as a ratio; wall and CPU times both, since the machine is
shared (its load average is in the JSON).

The writer is timed too: mbgen's write_table (one % per block of rows) on the same
2M × 10 table, against np.savetxt (one % per row, the same bytes) on 200 000 rows.

Run: ``.venv/bin/python benchmarks/datafile.py``. Writes ``benchmarks/results/datafile.json``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import REPO, Figure, print_table, write_results

sys.path.insert(0, str(REPO / "tests"))
from test_datafile_pyarrow import reference

from mbgen.io.datafile import read_data
from mbgen.io.tables import write_table

ROWS, COLUMNS, OLD_ROWS = 2_000_000, 10, 200_000


HEADER = ["t", *(f"c{k}" for k in range(COLUMNS - 1))]


def table(rows: int) -> np.ndarray:
    """t (µs steps) then 9 columns of noise (rows, 10)."""
    rng = np.random.default_rng(0)
    return np.column_stack([np.arange(rows) * 1e-6, rng.standard_normal((rows, COLUMNS - 1))])


def timed(function: object, repeat: int) -> tuple[float, float]:
    """Best wall and CPU seconds over ``repeat`` calls."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        function()  # type: ignore[operator]
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
    return wall, cpu


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="mbgen-bench-datafile-"))
    big, small = work / "big.csv", work / "small.csv"
    data_big, data_small = table(ROWS), table(OLD_ROWS)
    write_wall, write_cpu = timed(lambda: write_table(big, HEADER, data_big), 1)
    write_table(small, HEADER, data_small)
    savetxt_wall, _ = timed(lambda: np.savetxt(work / "savetxt.csv", data_small, delimiter=",",
                                               header=",".join(HEADER), comments="",
                                               fmt="%.12g"), 1)
    assert (work / "savetxt.csv").read_bytes() == small.read_bytes()
    small_write, _ = timed(lambda: write_table(small, HEADER, data_small), 1)
    data = read_data(big)
    assert data.values.shape == (ROWS, COLUMNS - 1)
    new_wall, new_cpu = timed(lambda: read_data(big), 3)
    small_wall, small_cpu = timed(lambda: read_data(small), 3)
    old_wall, old_cpu = timed(lambda: reference(small, True, None, False), 1)
    size = big.stat().st_size / 2**20
    figures = [
        Figure(f"read {ROWS:,} × {COLUMNS}, pyarrow (wall)", new_wall, "s", 2.0,
               f"{size:.0f} MiB; best of 3"),
        Figure(f"read {ROWS:,} × {COLUMNS}, pyarrow (CPU, both cores)", new_cpu, "s"),
        Figure(f"read {OLD_ROWS:,} × {COLUMNS}, pyarrow (wall)", small_wall, "s"),
        Figure(f"read {OLD_ROWS:,} × {COLUMNS}, csv module row by row (wall)", old_wall, "s",
               note=f"CPU {old_cpu:.2f} s; {ROWS:,} rows ≈ {old_wall * ROWS / OLD_ROWS:.0f} s"),
        Figure("old / new, same file", old_wall / small_wall, "×"),
        Figure(f"write {ROWS:,} × {COLUMNS}, write_table (wall)", write_wall, "s",
               note=f"CPU {write_cpu:.2f} s"),
        Figure(f"write {OLD_ROWS:,} × {COLUMNS}, write_table (wall)", small_write, "s"),
        Figure(f"write {OLD_ROWS:,} × {COLUMNS}, np.savetxt (wall)", savetxt_wall, "s",
               note="the same bytes"),
    ]
    print_table("the data reader", figures)
    path = write_results("datafile", figures)
    print(f"wrote {path}")
    for file in (big, small, work / "savetxt.csv"):
        file.unlink()
    work.rmdir()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

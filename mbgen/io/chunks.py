"""A long result written chunk by chunk, so that an interrupted run resumes.

Each finished chunk is one Parquet file (pyarrow) in a work directory beside the result,
``<out>.partial/``, written whole or not at all (:func:`mbgen.files.atomic_write`). The
directory carries a manifest with the key of the work it belongs to: a second run of
the same work takes the chunks that are there and computes the others; another work's
directory is refused, never mixed in or overwritten. At the end the chunks are merged,
in order, into the result files, and the work directory, which mbgen made, is removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mbgen.errors import MbgenError
from mbgen.files import atomic_write, atomic_write_text, temporary_target

MANIFEST = "mbgen-chunks.json"
TABLES = ("runs", "trajectories")
PART = re.compile(rf"(?:{'|'.join(TABLES)})-\d{{6}}\.parquet")  # see ChunkStore.part


def parquet_table(columns: Mapping[str, np.ndarray]) -> Any:
    """A pyarrow table of NumPy columns (object arrays as text)."""
    import pyarrow as pa

    return pa.table({name: pa.array(list(values), pa.string()) if values.dtype == object
                     else pa.array(values) for name, values in columns.items()})


def read_parquet_columns(path: Path) -> dict[str, np.ndarray]:
    """A Parquet file's columns as NumPy arrays (text as object arrays)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return {name: table[name].to_numpy(zero_copy_only=False) for name in table.column_names}


def write_parquet(path: Path, table: Any) -> None:
    import pyarrow.parquet as pq

    atomic_write(path, lambda tmp: pq.write_table(table, tmp))


class ChunkStore:
    """The work directory of a result ``out`` made of ``count`` chunks, for the work
    identified by ``key``."""

    def __init__(self, out: Path, key: str, count: int) -> None:
        self.out, self.key, self.count = Path(out), key, count
        self.directory = self.out.with_name(self.out.name + ".partial")

    def part(self, table: str, index: int) -> Path:
        return self.directory / f"{table}-{index:06d}.parquet"

    def open(self) -> set[int]:
        """Make the directory, or take up the one a run of the same work left: the chunks
        already done."""
        manifest = self.directory / MANIFEST
        if self.directory.is_symlink():  # its chunks would land, and be removed, elsewhere
            raise MbgenError(f"{self.directory} is a symlink: mbgen keeps a study's chunks "
                             "only in a directory of its own")
        if self.directory.exists():
            try:
                found = json.loads(manifest.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                raise MbgenError(f"{self.directory} exists and was not made by mbgen for "
                                 "this result: move it away, or choose another --out"
                                 ) from None
            if found.get("key") != self.key or found.get("chunks") != self.count:
                raise MbgenError(f"{self.directory} holds the chunks of another study (or of "
                                 "this one before it changed): remove it to start over, or "
                                 "choose another --out")
            self._remove_temporaries()
            return {index for index in range(self.count) if self.part("runs", index).is_file()}
        self.directory.mkdir(parents=True)
        atomic_write_text(manifest, json.dumps({"key": self.key, "chunks": self.count}))
        return set()

    def write(self, index: int, tables: Mapping[str, Mapping[str, np.ndarray] | None]) -> None:
        """Chunk ``index``'s tables; the runs table last, so that its file marks the chunk
        done."""
        for name in sorted(tables, key=lambda t: t == "runs"):
            columns = tables[name]
            if columns is not None:
                write_parquet(self.part(name, index), parquet_table(columns))

    def merge(self, targets: Mapping[str, Path]) -> None:
        """Every chunk's tables, in order, into one Parquet file per table."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        for name, target in targets.items():
            parts = [pq.read_table(self.part(name, index)) for index in range(self.count)]
            write_parquet(target, pa.concat_tables(parts))

    def _remove_temporaries(self) -> None:
        """The temporaries of chunks a killed run was writing (atomic_write's names for
        this store's parts; a kill -9 leaves them, nothing else can)."""
        for path in self.directory.iterdir():
            target = temporary_target(path.name)
            if target is not None and PART.fullmatch(target):
                path.unlink(missing_ok=True)

    def remove(self) -> None:
        """Remove the chunks and the manifest this store wrote, then the directory if that
        leaves it empty (anything else in it is not mbgen's to delete)."""
        for index in range(self.count):
            for name in TABLES:
                self.part(name, index).unlink(missing_ok=True)
        (self.directory / MANIFEST).unlink(missing_ok=True)
        self._remove_temporaries()
        with contextlib.suppress(OSError):  # not empty: what is left is not ours
            os.rmdir(self.directory)

"""A long result written chunk by chunk, so that an interrupted run resumes.

Each finished chunk is one Parquet file (pyarrow) in a work directory beside the result,
``<out>.partial/``, written whole or not at all (:func:`mbgen.files.atomic_write`). The
directory carries a manifest with the key of the work it belongs to: a second run of
the same work takes the chunks that are there and computes the others; another work's
directory is refused, never mixed in or overwritten. At the end the chunks are merged,
in order, into the result files, and the work directory, which mbgen made, is removed.

While a run writes a result, it holds the result's lock (:func:`locked`), a file
``<out>.lock`` that mbgen makes and removes: a second run on the same result is refused
with a clear message instead of mixing its chunks in. A chunk left damaged (a file cut
short by a full disk, or by hand) is computed again, never merged.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mbgen.errors import MbgenError
from mbgen.files import atomic_write, atomic_write_text, check_writable, temporary_target

MANIFEST = "mbgen-chunks.json"
LOCK_TEXT = "mbgen: a run is writing this result; process "
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


def work_directory(out: Path) -> Path:
    """Where the chunks of result ``out`` are kept until they are merged."""
    return out.with_name(out.name + ".partial")


def lock_path(out: Path) -> Path:
    """The lock file held while a run writes result ``out``."""
    return out.with_name(out.name + ".lock")


@contextlib.contextmanager
def locked(out: Path) -> Iterator[None]:
    """Holds the lock of result ``out`` (an advisory ``flock`` on :func:`lock_path`, made
    here and removed on the way out, however the run ends); another run holding it is a
    clear error. A lock file a killed run left is taken over (its lock died with it); a
    file of that name mbgen did not make is refused, never replaced."""
    path = lock_path(out)
    busy = MbgenError(f"another run is writing {out} (it holds {path.name}): wait for it to "
                      "finish, or choose another --out")
    check_writable(path)
    try:
        fd, made = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                           0o644), True
    except FileExistsError:
        fd, made = os.open(path, os.O_RDWR | os.O_NOFOLLOW), False
    ours = False  # the file is mbgen's and locked by this process: to remove at the end
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy from None
        try:  # the holder may have removed it between our open and our lock
            if os.stat(path, follow_symlinks=False).st_ino != os.fstat(fd).st_ino:
                raise busy
        except FileNotFoundError:
            raise busy from None
        if not made and not os.read(fd, len(LOCK_TEXT)).decode(
                "utf-8", "replace").startswith(LOCK_TEXT):
            raise MbgenError(f"{path} exists and was not made by mbgen: move it away, or "
                             "choose another --out")
        ours = True
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{LOCK_TEXT}{os.getpid()}\n".encode(), 0)
    except BaseException:
        if ours:
            path.unlink(missing_ok=True)
        os.close(fd)
        raise
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # ours: made or taken over under the lock
        os.close(fd)


class ChunkStore:
    """The work directory of a result ``out`` made of ``count`` chunks, for the work
    identified by ``key``; ``sizes``: each chunk's rows in its runs table, when known (a
    part found with other rows is damaged)."""

    def __init__(self, out: Path, key: str, count: int,
                 sizes: Sequence[int] | None = None) -> None:
        self.out, self.key, self.count = Path(out), key, count
        self.sizes = sizes
        self.directory = work_directory(self.out)
        self.damaged: list[int] = []  # chunks found damaged on open, computed again

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
            found = [index for index in range(self.count) if self.part("runs", index).is_file()]
            self.damaged = [index for index in found if not self._whole(index)]
            return set(found) - set(self.damaged)
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

    def _whole(self, index: int) -> bool:
        """Whether chunk ``index``'s files read back: its runs table whole, with its rows,
        and the footer of its trajectories (a file cut short loses its footer)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            runs = pq.read_table(self.part("runs", index))
            if self.sizes is not None and runs.num_rows != self.sizes[index]:
                return False
            for name in TABLES[1:]:
                if self.part(name, index).exists():
                    pq.read_metadata(self.part(name, index))
        except (OSError, ValueError, pa.ArrowException):
            return False
        return True

    def merge(self, targets: Mapping[str, Path]) -> None:
        """Every chunk's tables, in order, into one Parquet file per table. A part that
        does not read back is removed (it is this store's) so that the same command
        computes it again, and the merge is refused saying so."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        for name, target in targets.items():
            parts = []
            for index in range(self.count):
                path = self.part(name, index)
                try:
                    parts.append(pq.read_table(path))
                except (OSError, ValueError, pa.ArrowException) as exc:
                    self.part("runs", index).unlink(missing_ok=True)  # marks it not done
                    raise MbgenError(f"{path} does not read back ({str(exc)[:200]}): the same "
                                     "command computes that chunk again") from None
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

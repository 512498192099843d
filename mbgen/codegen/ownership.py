"""What mbgen made, so that it replaces only that.

A directory mbgen writes for the user (a Python package, an exported C library) holds a
marker file naming what made it and the files it wrote. A later run replaces such a
directory (or, for an export, exactly the files listed); anything else at the target is
refused unless the user passes ``--force``, and even then no input of the run is touched.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from mbgen.errors import MbgenError
from mbgen.version import __version__

MARKER = ".mbgen-made"


def write_marker(directory: Path, kind: str, files: list[str]) -> None:
    """Records in ``directory`` that mbgen made it (``kind``) and which ``files``."""
    (directory / MARKER).write_text(json.dumps(
        {"made_by": f"mbgen {__version__}", "kind": kind, "files": sorted(files)}, indent=1))


def marker_files(directory: Path, kind: str) -> list[str] | None:
    """The files mbgen wrote in ``directory`` as ``kind``; None when it did not make it."""
    try:
        record = json.loads((directory / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("kind") != kind:
        return None
    files = record.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) and "/" not in f
                                              and f not in ("", ".", "..") for f in files):
        return None
    return files


def _inside(path: Path, directory: Path) -> bool:
    path, directory = path.resolve(), directory.resolve()
    return path == directory or directory in path.parents


def check_target(target: Path, kind: str, force: bool, protected: Iterable[Path],
                 option: str) -> None:
    """Refuses to write the directory ``target`` when it holds one of the ``protected``
    paths (the run's inputs, the working directory), when it is a symlink or not a
    directory, or, without ``force``, when it holds anything mbgen did not make."""
    for item in protected:
        if _inside(item, target):
            raise MbgenError(f"{option}: {target} holds {item}, which mbgen must not "
                             "replace: choose another directory")
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise MbgenError(f"{option}: {target} exists and is not a directory: choose another "
                         "path")
    if (target.is_dir() and marker_files(target, kind) is None and any(target.iterdir())
            and not force):
        raise MbgenError(f"{option}: {target} exists and was not made by mbgen (it has no "
                         f"{MARKER} {kind} marker): choose another path, or add --force to "
                         "replace what it holds")


def replace_directory(staging: Path, target: Path) -> None:
    """Moves the finished ``staging`` directory to ``target``, the old one (checked by
    :func:`check_target`) moved aside under a fresh name first, so a reader never sees
    half a package and nothing else beside it is touched."""
    if not target.exists():
        os.rename(staging, target)
        return
    aside = staging.with_name(staging.name + ".old")
    os.rename(target, aside)
    try:
        os.rename(staging, target)
    except BaseException:
        os.rename(aside, target)
        raise
    shutil.rmtree(aside, ignore_errors=True)

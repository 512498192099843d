"""Writing the user's files safely: whole or not at all, and only over a regular file.

Every file mbgen writes for the user (CSV, pictures, packages' files, exported C) goes
through :func:`atomic_write`: it is written under a temporary name beside the target and
renamed into place, so readers never see half a file and an interrupted run leaves the
old file as it was. Renaming replaces whatever stands at the path, so anything there that
is not a regular file (a directory, a symlink, a FIFO, a device) is refused first.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from mbgen.errors import MbgenError


def check_writable(path: Path) -> None:
    """Refuses a target that exists and is not a regular file (its rename would replace a
    directory entry the user may rely on: a symlink, a FIFO, a device)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        kind = ("a symlink" if stat.S_ISLNK(mode) else "a directory" if stat.S_ISDIR(mode)
                else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket")
        raise MbgenError(f"{path} is {kind}, not a regular file: mbgen writes its results "
                         "only to new or regular files")


def same_file(a: Path, b: Path) -> bool:
    """``a`` and ``b`` name the same file: by inode when both exist (links included), else
    by resolved path."""
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


TEMPORARY_BYTES = 6  # random bytes in a temporary's name, written as hex
_TEMPORARY = re.compile(rf"\.(.+)\.[0-9a-f]{{{2 * TEMPORARY_BYTES}}}")


def temporary_target(name: str) -> str | None:
    """The name of the file that a temporary of :func:`atomic_write` named ``name`` was to
    become (what a killed process leaves behind), else None."""
    match = _TEMPORARY.fullmatch(name)
    return match.group(1) if match else None


def atomic_write(path: Path, write: Callable[[Path], object], parents: bool = True) -> None:
    """Run ``write(tmp_path)`` then rename over ``path``: readers never see half a file.
    The temporary's name is fixed before it is created, so a signal at any moment (SIGTERM
    right after the file appears) still finds it to remove. ``parents``: make the
    directory when missing (else that is an OSError naming ``path``)."""
    path = Path(path)
    check_writable(path)
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(TEMPORARY_BYTES)}"
    try:
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except OSError as exc:  # name the file asked for, not the temporary
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # made 0600; results are the user's files
        check_writable(path)  # it may have appeared meanwhile
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str, parents: bool = True) -> None:
    """:func:`atomic_write` of UTF-8 text."""
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), parents)

"""Compiler runs and atomic installs, shared by every build of mbgen (no SymPy here).

A build runs in a staging directory beside its target that names its owner
(``.tmp-<digest>-p<pid>@<host>-<random>``) and is installed by a rename, so no reader
sees half a build; the staging directories of killed builds are recognized and removed.
Compilers get SIGKILL when mbgen dies.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

STALE_STAGING = 3600.0  # seconds: a staging directory this old is a killed compile's


# A staging directory names its owner: .tmp-<digest>-p<pid>@<host>-<random>
_OWNER = re.compile(r"^\.tmp-[0-9a-f]+-p(\d+)@(.*)-[^-]+$")
_STAGING = re.compile(r"^\.tmp-[0-9a-f]+-")  # any staging directory's name


def staging_prefix(digest: str) -> str:
    return f".tmp-{digest}-p{os.getpid()}@{socket.gethostname()}-"


def _owner_is_dead(name: str) -> bool:
    """The compile that made this staging directory ran on this machine and is gone."""
    match = _OWNER.match(name)
    if match is None or match.group(2) != socket.gethostname():
        return False
    try:
        os.kill(int(match.group(1)), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False


def stale_staging(parent: Path) -> list[Path]:
    """Staging directories left by compiles that were killed (SIGKILL leaves no chance to
    clean up): those whose owner process is gone, and any older than a build takes. A
    running compile's staging directory is its lock: it is never among them."""
    now = time.time()
    found = []
    for stale in parent.glob(".tmp-*"):
        try:
            if (_STAGING.match(stale.name) and stale.is_dir() and not stale.is_symlink()
                    and (_owner_is_dead(stale.name)
                         or now - stale.stat().st_mtime > STALE_STAGING)):
                found.append(stale)
        except OSError:
            continue  # removed meanwhile by a concurrent compile
    return found


def remove_stale_staging(parent: Path) -> None:
    for stale in stale_staging(parent):
        shutil.rmtree(stale, ignore_errors=True)


def _child_options() -> dict[str, Any]:
    """Linux: the compilers get SIGKILL when mbgen dies (after a SIGKILL of mbgen, the
    ones it started kept writing into a staging directory nobody would install). prctl is
    looked up here, so the child only calls it between fork and exec."""
    if not sys.platform.startswith("linux"):
        return {}
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def die_with_parent() -> None:  # pragma: no cover - runs in the child
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

    return {"preexec_fn": die_with_parent}


CHILD_OPTIONS = _child_options()


def compiler_identity(compiler: str) -> str:
    """The compiler as the file it runs (path, size, time): an upgrade gives a new key."""
    found = shutil.which(compiler)
    if found is None:
        return compiler
    path = Path(found).resolve()
    stat = path.stat()
    return f"{path}|{stat.st_size}|{stat.st_mtime_ns}"


def install_build(staging: Path, target: Path, replace: bool) -> None:
    """Move the finished build into place by renames, so no reader sees half a build.

    With ``replace`` an existing build of the same hash is moved aside first; otherwise
    a build that a concurrent twin installed first is kept (ours is identical).
    """
    if replace and target.exists():
        aside = target.with_name(f".tmp-old-{target.name}-{os.getpid()}")
        with contextlib.suppress(OSError):
            os.rename(target, aside)
            shutil.rmtree(aside, ignore_errors=True)
    try:
        os.rename(staging, target)
    except OSError:
        if not (target / "meta.json").exists():
            raise

"""The build cache's rules for listing and cleaning: what the cache made (and only that)
may be listed and removed; a directory holding none of it is not a cache."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mbgen.codegen.build import CORE_ARCHIVE
from mbgen.codegen.cache import is_build
from mbgen.codegen.staging import stale_staging
from mbgen.errors import MbgenError
from mbgen.version import __version__


def finished_builds(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """(directory, meta) of every finished build under root that the cache made (a user's
    directory holding a meta.json is not one)."""
    return [(meta.parent, json.loads(meta.read_text()))
            for meta in sorted(root.glob("*/*/meta.json")) if is_build(meta.parent)]


def tree_size(path: Path) -> int:
    """Bytes of the files under ``path``."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@dataclass(frozen=True)
class Cleaning:
    """What a clean removes: build and staging directories, and core archives."""

    directories: list[Path]
    archives: list[Path]

    def run(self) -> int:
        """Removes them; returns the bytes freed."""
        freed = 0
        for directory in self.directories:
            freed += tree_size(directory)
            shutil.rmtree(directory, ignore_errors=True)
        for archive in self.archives:
            freed += archive.stat().st_size
            archive.unlink(missing_ok=True)
        return freed


def plan_cleaning(root: Path, everything: bool) -> Cleaning:
    """Builds of other mbgen versions and staging directories of compiles that are gone
    (a running compile's is its lock); with ``everything``, every build and the C core's
    archives that earlier versions kept there too. Refuses a directory that holds none of
    what the cache makes, so a mistyped --build-dir removes nothing."""
    if not root.is_dir():
        raise MbgenError(f"{root}: no such build directory")
    builds = finished_builds(root)
    staging = [p for stem in root.iterdir() if stem.is_dir() and not stem.is_symlink()
               for p in stale_staging(stem)]
    archives = [p for p in (root / "_core").glob("*.a") if CORE_ARCHIVE.fullmatch(p.name)
                and p.is_file() and not p.is_symlink()]
    if not builds and not staging and not archives and any(root.iterdir()):
        raise MbgenError(f"{root} is not an mbgen build cache (no build, staging directory "
                         "or core archive that mbgen made): nothing removed")
    removed = [d for d, meta in builds if everything or meta.get("mbgen_version") != __version__]
    return Cleaning(removed + staging, archives if everything else [])

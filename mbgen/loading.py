"""``load()``: compile when stale, otherwise import the cached module (fast path, no SymPy).

Above the compiler and the runtime, which it joins: the one place that decides between a
cached build and a fresh compile.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from mbgen.codegen.cache import build_dir, content_hash, mechanism_bytes
from mbgen.errors import MechanismError
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.runtime.package import load_build

DEFAULT_OUT = "generated"


def default_out_dir() -> Path:
    return Path(os.environ.get("MBGEN_OUT", DEFAULT_OUT))


def cached_build(path: Path, out_dir: Path) -> Path | None:
    directory = build_dir(out_dir, path.stem, content_hash(mechanism_bytes(path)))
    return directory if (directory / "meta.json").exists() else None


def load(path: str | Path, out_dir: str | Path | None = None, force: bool = False,
         progress: Callable[[str], None] | None = None) -> CompiledMechanism:
    path = Path(path)
    if not path.is_file():
        raise MechanismError("no such mechanism file", str(path))
    out = Path(out_dir) if out_dir is not None else default_out_dir()
    directory = None if force else cached_build(path, out)
    if directory is not None:
        try:
            return _checked(load_build(directory), path)
        except (ImportError, OSError, ValueError, KeyError):
            force = True  # damaged cache entry: rebuild and replace it
    from mbgen.codegen.build import compile_mechanism

    return _checked(load_build(compile_mechanism(path, out, progress=progress,
                                                 replace=force)), path)


def _checked(mech: CompiledMechanism, path: Path) -> CompiledMechanism:
    """The file's independent_coordinates must be as many as the degrees of freedom (at
    q0): said here, with the file and key, not at the first dynamics call."""
    named = mech.meta.get("independent")
    if named and len(named) != mech.dof:
        raise MechanismError(f"independent_coordinates names {len(named)} coordinate(s) but "
                             f"the mechanism has {mech.dof} degree(s) of freedom at q0",
                             str(path), key="independent_coordinates")
    return mech

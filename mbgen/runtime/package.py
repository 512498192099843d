"""Importing a built mechanism from its directory: the compiled extension and meta.json.

Used both by ``mbgen.load`` (on a cache hit) and by the packages that ``mbgen compile
--package`` writes, so it imports nothing of the compiler: no SymPy, no C compiler, no
mechanism file.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

from mbgen.cpu import LEVELS, runs
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.version import __version__


def load_build(directory: Path) -> CompiledMechanism:
    """The mechanism built into ``directory`` (its ``meta.json`` names the module)."""
    meta = json.loads((Path(directory) / "meta.json").read_text())
    return CompiledMechanism(_import_module(Path(directory), meta["module"]), meta,
                             Path(directory))


def load_package(directory: Path | str, package: str) -> CompiledMechanism:
    """The mechanism of a package written by ``mbgen compile --package``; refuses one
    built by another mbgen version (the module's C interface may differ)."""
    directory = Path(directory)
    meta = json.loads((directory / "meta.json").read_text())
    built_by = meta.get("mbgen_version")
    if built_by != __version__:
        raise ImportError(f"package {package!r} was built by mbgen {built_by} (content hash "
                          f"{meta.get('content_hash')}) and this is mbgen {__version__}: "
                          f"rebuild it with `mbgen compile {meta.get('source')} --package "
                          f"DIR`")
    level = meta.get("vector_level")
    if level and not runs(level):
        features = f" ({LEVELS[level]})" if level in LEVELS else ""
        raise ImportError(f"package {package!r} was compiled for {level} CPUs{features}, "
                          f"which this machine is not: rebuild it here with `mbgen compile "
                          f"{meta.get('source')} --package DIR`")
    return load_build(directory)


def _import_module(directory: Path, name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    spec = importlib.util.spec_from_file_location(name, directory / f"{name}{suffix}")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import compiled mechanism from {directory}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module

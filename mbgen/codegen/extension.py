"""mbgen's own C++ extensions (pybind11), compiled once per installation into the cache.

The generic C core is C and reached through each mechanism's cffi module. Two paths are
faster through pybind11: the one-state calls from Python (runtime/single.py) and GTSAM's
factors (factors/native.py). Their sources are in mbgen/csrc (``*.cpp``); each is
compiled on first use into ``<cache>/native/<name>-<key>/`` (cache.user_cache_dir),
keyed by what it is built from, in a staging directory installed by a rename. Without a
C++ compiler or pybind11 the callers keep their slower paths.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from mbgen.codegen.cache import csrc_dir, user_cache_dir
from mbgen.codegen.staging import (
    CHILD_OPTIONS,
    compiler_identity,
    install_build,
    remove_stale_staging,
    staging_prefix,
)

# no -march: the module runs wherever Python does. NDEBUG: no assertions in headers
FLAGS = ["-O2", "-shared", "-fPIC", "-std=c++17", "-fvisibility=hidden", "-DNDEBUG", "-w"]


class ExtensionUnavailable(Exception):
    """Why an extension cannot be built or loaded here (the caller falls back)."""


def compiler() -> str:
    return os.environ.get("CXX", "c++")


def pybind11_include() -> Path:
    try:
        import pybind11
    except ImportError:
        raise ExtensionUnavailable("pybind11 is not installed") from None
    return Path(pybind11.get_include())


def extension_key(source: str, flags: Sequence[str], parts: Sequence[str]) -> str:
    """A build's key: its source and mbgen.h, the compiler and flags, pybind11, Python and
    the caller's ``parts`` (what else the module depends on)."""
    digest = hashlib.sha256()
    for part in (str(pybind11_include()), compiler_identity(compiler()), *FLAGS, *flags,
                 sys.version, str(sysconfig.get_config_var("EXT_SUFFIX")), *parts):
        digest.update(part.encode() + b"|")
    digest.update((csrc_dir() / source).read_bytes())
    digest.update((csrc_dir() / "mbgen.h").read_bytes())
    return digest.hexdigest()[:16]


def extension_dir(name: str, key: str) -> Path:
    return user_cache_dir() / "native" / f"{name}-{key}"


def module_file(directory: Path, module: str) -> Path:
    return directory / f"{module}{sysconfig.get_config_var('EXT_SUFFIX')}"


def build_extension(source: str, module: str, target: Path, flags: Sequence[str] = (),
                    includes: Sequence[Path] = ()) -> None:
    """Compile mbgen/csrc/``source`` as the Python module ``module`` into ``target``
    (defined as MBGEN_MODULE_NAME for PYBIND11_MODULE)."""
    cxx = compiler()
    if shutil.which(cxx) is None:
        raise ExtensionUnavailable(f"no C++ compiler ({cxx}; set CXX)")
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(target.parent)
    staging = Path(tempfile.mkdtemp(prefix=staging_prefix(target.name.rsplit("-", 1)[-1]),
                                    dir=target.parent))
    try:
        command = [cxx, *FLAGS, *flags, f"-DMBGEN_MODULE_NAME={module}",
                   f"-I{pybind11_include()}", *(f"-I{path}" for path in includes),
                   f"-I{csrc_dir()}", f"-I{sysconfig.get_paths()['include']}",
                   str(csrc_dir() / source), "-o", module_file(staging, module).name]
        result = subprocess.run(command, capture_output=True, text=True, cwd=staging,
                                **CHILD_OPTIONS)
        if result.returncode != 0:
            raise ExtensionUnavailable(f"compiling {source} failed (exit status "
                                       f"{result.returncode}): {result.stderr.strip()[-2000:]}")
        (staging / "meta.json").write_text(json.dumps({"source": source, "module": module}))
        install_build(staging, target, replace=False)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def load_extension(path: Path, module: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module, path)
    if spec is None or spec.loader is None:
        raise ExtensionUnavailable(f"cannot import {path}")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded

"""Native error functions for the mechanism factors: built once, checked once, else Python.

A ``gtsam.CustomFactor`` whose error function is a Python callback pays ≥ 6 µs per
linearization before mbgen does anything. mbgen/csrc/gtsam_factors.cpp holds the same
error functions in C++; handed to ``gtsam.CustomFactor``, pybind11 stores their raw
pointers, so GTSAM calls them with no Python (≈ 1 µs for the four-bar's dynamics).

The module is compiled against the GTSAM the user has, not against GTSAM's headers (the
wheel ships none): it names the types of the error function's signature itself and takes
one symbol from the loaded libgtsam. That is only right for the exact library it was built
for, so a build is keyed by GTSAM's version and its library's bytes, and before any use a
**self-check in a subprocess** (a crash there cannot take down the user's process)
compares every kind of factor with the Python path (mbgen/factors/self_check.py). The
verdict is cached with the build. Without a compiler, pybind11 or Eigen's headers, on a
failed check, or with ``MBGEN_NATIVE_FACTORS=0``, the Python callbacks are used (one
warning, except when asked for).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import warnings
from importlib import metadata
from pathlib import Path
from types import ModuleType

import gtsam  # noqa: F401  (loads libgtsam, which gtsam_library finds)

from mbgen.codegen.build import (
    CHILD_OPTIONS,
    compiler_identity,
    install_build,
    remove_stale_staging,
    staging_prefix,
)
from mbgen.codegen.cache import csrc_dir, user_cache_dir
from mbgen.errors import MbgenWarning

ENVIRONMENT = "MBGEN_NATIVE_FACTORS"  # "0": always the Python callbacks
SOURCE = "gtsam_factors.cpp"
MODULE = "_mbgen_gtsam_factors"
# the wheel's C++ string ABI (GCC 10, old ABI) and no -march: the module must run wherever
# the wheel runs. NDEBUG: no Eigen assertions (sizes are checked where a factor is made and
# where it reads its variables)
FLAGS = ["-O2", "-shared", "-fPIC", "-std=c++17", "-fvisibility=hidden", "-DNDEBUG",
         "-D_GLIBCXX_USE_CXX11_ABI=0", f"-DMBGEN_MODULE_NAME={MODULE}", "-w"]
SELF_CHECK_TIMEOUT = 300.0  # seconds: the check compiles its small mechanism once
# the self-check's command; tests replace it to force a failure
SELF_CHECK = [sys.executable, "-m", "mbgen.factors.self_check"]


class NativeUnavailable(Exception):
    """Why the native factors cannot be used here (said once, then Python is used)."""


def gtsam_version() -> str:
    """The installed gtsam distribution's version (the module has no __version__)."""
    try:
        return metadata.version("gtsam")
    except metadata.PackageNotFoundError:
        return "unknown"


def gtsam_library() -> Path:
    """The libgtsam this process has loaded (the wheel's ``gtsam.libs/libgtsam-<hash>``
    or a system one), from the process's memory map."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        raise NativeUnavailable("the loaded GTSAM library cannot be found on this "
                                "platform (no /proc/self/maps)") from None
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[-1]
        if Path(path).name.startswith("libgtsam") and "unstable" not in path:
            return Path(path)
    raise NativeUnavailable("no libgtsam is loaded by the gtsam package")


def _headers() -> tuple[Path, Path]:
    """pybind11's and Eigen's include directories (both from PyPI packages)."""
    try:
        import pybind11
    except ImportError:
        raise NativeUnavailable("pybind11 is not installed") from None
    try:
        eigen = Path(str(metadata.distribution("cmeel-eigen").locate_file(
            "cmeel.prefix/include/eigen3")))
    except metadata.PackageNotFoundError:
        raise NativeUnavailable("Eigen's headers (the cmeel-eigen package) are not "
                                "installed") from None
    return Path(pybind11.get_include()), eigen


def _compiler() -> str:
    return os.environ.get("CXX", "c++")


@functools.cache
def build_key() -> str:
    """What the build depends on: GTSAM (version and library bytes), the source, pybind11,
    Eigen, the compiler and its flags, and Python."""
    library = gtsam_library()
    digest = hashlib.sha256()
    with library.open("rb") as file:
        digest.update(hashlib.file_digest(file, "sha256").digest())
    pybind, eigen = _headers()
    source = csrc_dir() / SOURCE
    for part in (gtsam_version(), str(pybind), str(eigen), compiler_identity(_compiler()),
                 *FLAGS, sys.version, str(sysconfig.get_config_var("EXT_SUFFIX"))):
        digest.update(part.encode() + b"|")
    digest.update(source.read_bytes())
    digest.update((csrc_dir() / "mbgen.h").read_bytes())
    return digest.hexdigest()[:16]


def build_dir() -> Path:
    return user_cache_dir() / "native" / f"gtsam-{gtsam_version()}-{build_key()}"


def module_file(directory: Path) -> Path:
    return directory / f"{MODULE}{sysconfig.get_config_var('EXT_SUFFIX')}"


def build(target: Path) -> None:
    """Compile the module into ``target`` (a staging directory installed by a rename)."""
    pybind, eigen = _headers()
    compiler = _compiler()
    if shutil.which(compiler) is None:
        raise NativeUnavailable(f"no C++ compiler ({compiler}; set CXX)")
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(target.parent)
    staging = Path(tempfile.mkdtemp(prefix=staging_prefix(build_key()), dir=target.parent))
    try:
        command = [compiler, *FLAGS, f"-I{pybind}", f"-I{eigen}", f"-I{csrc_dir()}",
                   f"-I{sysconfig.get_paths()['include']}", str(csrc_dir() / SOURCE),
                   "-o", module_file(staging).name]
        result = subprocess.run(command, capture_output=True, text=True, cwd=staging,
                                **CHILD_OPTIONS)
        if result.returncode != 0:
            raise NativeUnavailable(f"compiling {SOURCE} failed (exit status "
                                    f"{result.returncode}): {result.stderr.strip()[-2000:]}")
        (staging / "meta.json").write_text(json.dumps(
            {"gtsam": gtsam_version(), "library": str(gtsam_library()),
             "key": build_key()}))
        install_build(staging, target, replace=False)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def load_module(path: Path) -> ModuleType:
    """Import a built module, with libgtsam's symbols made global first (the wheel loads
    it privately; the module takes ``Values::at`` from it)."""
    ctypes.CDLL(str(gtsam_library()), mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
    spec = importlib.util.spec_from_file_location(MODULE, path)
    if spec is None or spec.loader is None:
        raise NativeUnavailable(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_key() -> str:
    """What the self-check's verdict depends on besides the build: the check and the
    Python path it compares with."""
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for name in ("self_check.py", "self_check.yaml", "mechanism.py", "linear.py"):
        digest.update((here / name).read_bytes())
    return digest.hexdigest()[:16]


def verdict(directory: Path) -> tuple[bool, str]:
    """The self-check's verdict on a build, run (in a subprocess) and cached once."""
    path = directory / f"verdict-{check_key()}.json"
    try:
        cached = json.loads(path.read_text())
        return bool(cached["ok"]), str(cached["detail"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        result = subprocess.run([*SELF_CHECK, str(module_file(directory))],
                                capture_output=True, text=True, timeout=SELF_CHECK_TIMEOUT,
                                env={**os.environ, ENVIRONMENT: "0"})
        ok = result.returncode == 0
        lines = (result.stdout + result.stderr).strip().splitlines()
        detail = lines[-1] if lines else f"exit status {result.returncode}"
        if result.returncode < 0:
            detail = f"the check crashed (signal {-result.returncode})"
    except subprocess.TimeoutExpired:
        ok, detail = False, f"the check did not finish in {SELF_CHECK_TIMEOUT:.0f} s"
    staged = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    staged.write_text(json.dumps({"ok": ok, "detail": detail}))
    os.replace(staged, path)
    return ok, detail


def unavailable() -> str | None:
    """Why the native module is not used in this process (None: it is, or not yet asked)."""
    return _UNAVAILABLE[0]


_UNAVAILABLE: list[str | None] = [None]


@functools.cache
def native_module() -> ModuleType | None:
    """The checked native module, or None (then the Python callbacks are used)."""
    _UNAVAILABLE[0] = None
    if os.environ.get(ENVIRONMENT, "1") == "0":
        _UNAVAILABLE[0] = f"{ENVIRONMENT}=0"
        return None
    try:
        directory = build_dir()
        if not module_file(directory).exists():
            build(directory)
        ok, detail = verdict(directory)
        if not ok:
            raise NativeUnavailable(f"its self-check failed ({detail})")
        return load_module(module_file(directory))
    except (NativeUnavailable, OSError, ImportError) as exc:
        _UNAVAILABLE[0] = str(exc)
        warnings.warn(f"mbgen's native GTSAM factors are not used, so factor graphs run "
                      f"slower: {exc}. {ENVIRONMENT}=0 silences this.", MbgenWarning,
                      stacklevel=3)
        return None

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
import json
import os
import subprocess
import sys
import warnings
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Literal

import gtsam  # noqa: F401  (loads libgtsam, which gtsam_library finds)

from mbgen.codegen.extension import (
    ExtensionUnavailable,
    build_extension,
    extension_dir,
    extension_key,
    load_extension,
)
from mbgen.codegen.extension import module_file as extension_file
from mbgen.errors import MbgenWarning

ENVIRONMENT = "MBGEN_NATIVE_FACTORS"  # "0": always the Python callbacks
SOURCE = "gtsam_factors.cpp"
MODULE = "_mbgen_gtsam_factors"
# the wheel's C++ string ABI (GCC 10, old ABI); sizes are checked where a factor is made
# and where it reads its variables (the build has no Eigen assertions)
FLAGS = ["-D_GLIBCXX_USE_CXX11_ABI=0"]
SELF_CHECK_TIMEOUT = 300.0  # seconds: the check compiles its small mechanism once
# the self-check's command; tests replace it to force a failure
SELF_CHECK = [sys.executable, "-m", "mbgen.factors.self_check"]


class NativeUnavailable(ExtensionUnavailable):
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


def eigen_include() -> Path:
    """Eigen's headers (the cmeel-eigen package from PyPI)."""
    try:
        return Path(str(metadata.distribution("cmeel-eigen").locate_file(
            "cmeel.prefix/include/eigen3")))
    except metadata.PackageNotFoundError:
        raise NativeUnavailable("Eigen's headers (the cmeel-eigen package) are not "
                                "installed") from None


@functools.cache
def build_key() -> str:
    """What the build depends on besides its source and compiler (extension_key): GTSAM,
    its version and its library's bytes, and Eigen."""
    with gtsam_library().open("rb") as file:
        library = hashlib.file_digest(file, "sha256").hexdigest()
    return extension_key(SOURCE, FLAGS, [gtsam_version(), library, str(eigen_include())])


def build_dir() -> Path:
    return extension_dir(f"gtsam-{gtsam_version()}", build_key())


def module_file(directory: Path) -> Path:
    return extension_file(directory, MODULE)


def build(target: Path) -> None:
    """Compile the module into ``target``."""
    build_extension(SOURCE, MODULE, target, FLAGS, [eigen_include()])


def load_module(path: Path) -> ModuleType:
    """Import a built module, with libgtsam's symbols made global first (the wheel loads
    it privately; the module takes ``Values::at`` from it)."""
    ctypes.CDLL(str(gtsam_library()), mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
    return load_extension(path, MODULE)


def check_key() -> str:
    """What the self-check's verdict depends on besides the build: the check and the
    Python path it compares with."""
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for name in ("self_check.py", "self_check.yaml", "mechanism.py", "linear.py"):
        digest.update((here / name).read_bytes())
    return digest.hexdigest()[:16]


def verdict_file(directory: Path) -> Path:
    """Where the self-check's verdict on the build in ``directory`` is cached."""
    return directory / f"verdict-{check_key()}.json"


def verdict(directory: Path) -> tuple[bool, str]:
    """The self-check's verdict on a build, run (in a subprocess) and cached once."""
    path = verdict_file(directory)
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


def pending() -> str | None:
    """What this process's first :func:`native_module` will do that takes a while (up to a
    minute on a loaded machine), for a status line before it: compile the module, or run
    its self-check; None when both are done, or the native factors are not used."""
    if native_module.cache_info().currsize or os.environ.get(ENVIRONMENT, "1") == "0":
        return None
    try:
        directory = build_dir()
    except (ExtensionUnavailable, OSError):
        return None
    if not module_file(directory).exists():
        return "compiling mbgen's native GTSAM factors (C++, once per GTSAM library)"
    if not verdict_file(directory).exists():
        return ("checking mbgen's native GTSAM factors against the Python ones (once per "
                "build)")
    return None


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
    except (ExtensionUnavailable, OSError, ImportError) as exc:
        _UNAVAILABLE[0] = str(exc)
        warnings.warn(f"mbgen's native GTSAM factors are not used, so factor graphs run "
                      f"slower: {exc}. {ENVIRONMENT}=0 silences this.", MbgenWarning,
                      stacklevel=3)
        return None


def chosen_module(native: ModuleType | Literal[False] | None) -> ModuleType | None:
    """The native module a factor maker uses: ``None`` the checked one where available,
    ``False`` none (the Python callbacks), or the given module (the self-check's)."""
    if native is None:
        return native_module()
    return native or None

"""Where a compiled mechanism lives and when it is stale (no SymPy needed here).

A module is reused until its content hash changes: the mechanism file's bytes, the
templates, the C core (mbgen/csrc), mbgen's version, the source of every module that
shapes the generated C (the build and what it imports, found in their import statements:
:func:`deriving_sources`) and the vector instructions it is compiled for (mbgen/cpu.py).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import sys
import sysconfig
from collections.abc import Iterable
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from mbgen.cpu import vector_level
from mbgen.errors import MechanismError
from mbgen.model.yaml_nodes import read_document, read_yaml_file
from mbgen.version import __version__

PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # mbgen/

#: The module that turns a mechanism file into a build (compile_mechanism): it and every
#: mbgen module it imports, directly or not, shape the generated C.
BUILD_MODULE = "mbgen.codegen.build"
#: mbgen import statements, at any indentation (function-level imports count too), the
#: names of a ``from`` import up to its closing parenthesis
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(mbgen(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)"
                     r"|import[ \t]+(mbgen[^\n]*))", re.MULTILINE)
#: a block only type checkers read (its imports never run)
_TYPE_CHECKING = re.compile(r"^([ \t]*)if TYPE_CHECKING:[^\n]*\n(?:(?:\1[ \t]+[^\n]*)?\n)*",
                            re.MULTILINE)


def templates_dir() -> Traversable:
    """The C templates: ``mbgen.templates`` when installed, else the checkout's templates/.

    The fallback serves a source checkout whose ``mbgen`` shadows the installed package
    (e.g. ``python -m pytest`` from the repository root).
    """
    try:
        return resources.files("mbgen.templates")
    except ModuleNotFoundError:
        return resources.files("mbgen").joinpath("..", "templates")


def user_cache_dir() -> Path:
    """What mbgen compiles once per installation and user (the C core, see build.py):
    ``$MBGEN_CACHE``, else ``$XDG_CACHE_HOME/mbgen``, else ``~/.cache/mbgen``. Apart from
    the modules' out dir, so a fresh out dir does not recompile the core."""
    configured = os.environ.get("MBGEN_CACHE")
    if configured:
        return Path(configured).resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache") / "mbgen"


def csrc_dir() -> Path:
    """The C core's sources and its public header (shipped inside the package)."""
    return PACKAGE_ROOT / "csrc"


def core_sources() -> list[Path]:
    return sorted(p for p in csrc_dir().iterdir() if p.suffix in (".c", ".h"))


@functools.cache
def _read(paths: tuple[Path, ...]) -> tuple[tuple[str, bytes], ...]:
    """The files' names and contents, read once per process and set of paths (a cold load
    hashed them five times, ~10 ms). Once per process is also right: the process builds
    with the code it imported, whatever is edited on disk after; other paths (a copy of
    the core, as the tests make) are read anew."""
    return tuple((path.name, path.read_bytes()) for path in paths)


def _update(digest: Any, paths: Iterable[Path]) -> None:
    """Each file's name and contents into ``digest``."""
    for name, contents in _read(tuple(paths)):
        digest.update(name.encode())
        digest.update(contents)


def core_digest() -> str:
    """Hash of the C core and of how it is compiled (its cached build is keyed by it)."""
    digest = hashlib.sha256(
        f"{sys.version}|{os.environ.get('CC', 'cc')}|{vector_level()}".encode())
    _update(digest, core_sources())
    return digest.hexdigest()[:16]


def _module_file(root: Path, module: str) -> Path | None:
    """The source of ``module`` (dotted, from mbgen) under ``root`` (the mbgen package)."""
    path = root.joinpath(*module.split(".")[1:])
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imported(root: Path, path: Path) -> set[str]:
    """The mbgen modules ``path`` imports: each ``from X import a, b`` gives X, and X.a,
    X.b where those are modules; a package's parents below mbgen run first, so they
    count too (mbgen's own face only hands mbgen.load on and is left out)."""
    text = _TYPE_CHECKING.sub("", path.read_text())
    found: set[str] = set()
    for origin, names, plain in _IMPORT.findall(text):
        names, plain = re.sub(r"#[^\n]*", "", names), re.sub(r"#[^\n]*", "", plain)
        if origin:
            found.add(origin)
            found.update(f"{origin}.{word}" for word in re.findall(r"\w+", names)
                         if _module_file(root, f"{origin}.{word}") is not None)
        else:
            found.update(re.findall(r"\bmbgen(?:\.\w+)*", plain))
    parents = {".".join(name.split(".")[:k]) for name in found
               for k in range(2, name.count(".") + 1)}
    return {name for name in found | parents if name != "mbgen"}


@functools.cache
def deriving_sources(root: Path = PACKAGE_ROOT) -> tuple[Path, ...]:
    """The sources of BUILD_MODULE and of every mbgen module it imports, directly or
    through others (under ``root``, the mbgen package), sorted: what a build's C
    depends on in Python. Read from the import statements (a few ms), so a module that
    starts to shape the C is hashed without being listed anywhere."""
    seen: dict[str, Path] = {}
    todo = [BUILD_MODULE]
    while todo:
        module = todo.pop()
        path = _module_file(root, module)
        if module in seen or path is None:
            continue
        seen[module] = path
        todo.extend(_imported(root, path) - seen.keys())
    return tuple(sorted(seen.values()))


def _source_fingerprint(root: Path = PACKAGE_ROOT) -> bytes:
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    build_env = f"{sys.version}|{suffix}|{os.environ.get('CC', 'cc')}|{vector_level()}"
    digest = hashlib.sha256(f"{__version__}|{build_env}".encode())
    for path in deriving_sources(root):  # its place in the package, and its text
        digest.update(path.relative_to(root).as_posix().encode())
        _update(digest, [path])
    digest.update(core_digest().encode())
    _update(digest, (Path(str(entry)) for entry in sorted(templates_dir().iterdir(),
                                                          key=lambda e: e.name)
                     if entry.name.endswith(".j2")))
    return digest.digest()


def mechanism_bytes(path: Path) -> bytes:
    """What a build of the mechanism file ``path`` is made from: its bytes and, for a YAML
    file that includes a robot (``urdf: robot.urdf``, docs/robots.md), the robot's after
    them, so that a changed URDF is a new build. Both are read by the model's one file
    reader (regular files, bounded, UTF-8: its refusal is the loader's) and the YAML by
    its one parser (nesting bounded); a file that does not parse, or an include that
    cannot be read, is the file's bytes alone (the loader names the fault)."""
    text = read_yaml_file(path, "a mechanism file")
    data = text.encode("utf-8")
    if path.suffix.lower() == ".urdf" or "urdf" not in text:
        return data
    try:
        children = read_document(text, str(path)).children()
        target = path.parent / children["urdf"].string() if "urdf" in children else None
        robot = read_yaml_file(target, "a URDF file") if target is not None else None
    except MechanismError:
        return data
    return data if robot is None else data + b"\0urdf\0" + robot.encode("utf-8")


def content_hash(yaml_bytes: bytes) -> str:
    digest = hashlib.sha256(_source_fingerprint())
    digest.update(yaml_bytes)
    return digest.hexdigest()[:16]


def safe_name(stem: str) -> str:
    """A C/Python-safe identifier derived from a file name (never used verbatim)."""
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", stem).strip("_") or "mechanism"
    return cleaned if not cleaned[0].isdigit() else f"m_{cleaned}"


def module_name(stem: str, digest: str) -> str:
    return f"_mbgen_{safe_name(stem)}_{digest}"


def build_dir(out_dir: Path, stem: str, digest: str) -> Path:
    return out_dir / safe_name(stem) / digest


_DIGEST = re.compile(r"[0-9a-f]{16}")


def is_build(directory: Path) -> bool:
    """``directory`` is a finished build this cache made: ``<root>/<stem>/<digest>/`` whose
    meta.json names that digest and the module built from them. A user's directory that
    merely holds a meta.json is not one (cache clean deleted such a directory)."""
    if not _DIGEST.fullmatch(directory.name) or directory.is_symlink():
        return False
    try:
        meta = json.loads((directory / "meta.json").read_text())
    except (OSError, ValueError):
        return False
    return (isinstance(meta, dict) and meta.get("hash") == directory.name
            and meta.get("module") == module_name(directory.parent.name, directory.name))

"""Taking the generated code away: an importable Python package, and a standalone C
library.

Both are made from a finished build directory (the compiled extension, its generated
``mechanism.c`` and ``meta.json``), so they carry exactly the code ``mbgen.load`` runs.
The C library is the core's own sources and the generated kernels, unchanged, in one
translation unit (templates/export.c.j2) after a list of ``#define mb_x name_x`` that gives
every ``mb_`` / ``MB_`` name the mechanism's prefix, so several exported mechanisms link
into one program; its header (export.h.j2) is mbgen.h's text between the same renames.
The C preprocessor renames; no text is rewritten.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from mbgen.codegen.cache import csrc_dir, safe_name, templates_dir
from mbgen.codegen.ownership import check_target, marker_files, replace_directory, write_marker
from mbgen.codegen.templates import render
from mbgen.errors import MbgenError
from mbgen.escaping import python_literal
from mbgen.files import atomic_write_text, same_file

# the core's sources in dependency order (headers first); the generated kernels follow
CORE_ORDER = ("mbgen.h", "mb_model.h", "core.h", "model.c", "sparse.c", "dense.c",
              "joint_space.c",
              "lanes.c", "dynamics.c", "inverse.c", "simulate.c", "variational.c",
              "particles.c", "kalman.c", "sweep.c", "stats.c")
# Names the prefix applies to, read (not rewritten) from the C texts: identifiers
# beginning mb_ or MB_, but those the texts #define themselves (a macro cannot rename
# another macro's definition; they stay inside the library's one translation unit)
PREFIXED_NAME = re.compile(r"\b(?:mb|MB)_\w+")
DEFINED_NAME = re.compile(r"^\s*#\s*define\s+(\w+)", re.MULTILINE)


def package_name(name: str | None, stem: str) -> str:
    """A valid Python/C identifier for the package or library (default: from the stem)."""
    chosen = safe_name(stem) if name is None else name
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", chosen) or chosen.startswith("mb_"):
        raise MbgenError(f"--name {chosen!r}: use letters, digits and _ (not starting with a "
                         "digit or mb_), at most 64 characters")
    return chosen


def write_package(build: Path, out_dir: Path, name: str, force: bool = False,
                  protected: Iterable[Path] = ()) -> Path:
    """``out_dir/name/``: ``import name`` gives the mechanism as ``name.mechanism``.

    An existing ``out_dir/name`` is replaced only when mbgen made it, or with ``force``;
    never when it holds a ``protected`` path (see :func:`check_target`)."""
    target = out_dir / name
    check_target(target, "package", force, [*protected, build, Path.cwd()], "--package")
    meta = json.loads((build / "meta.json").read_text())
    module = meta["module"]
    extension = next(build.glob(f"{module}.*.so"), None) or next(build.glob(f"{module}.so"))
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out_dir))
    try:
        shutil.copy2(extension, staging / extension.name)
        meta["content_hash"] = build.name
        (staging / "meta.json").write_text(json.dumps(meta, indent=1))
        (staging / "__init__.py").write_text(PACKAGE_INIT.format(
            name=python_literal(meta["name"]), version=python_literal(meta["mbgen_version"]),
            digest=python_literal(build.name)))
        write_marker(staging, "package", [extension.name, "meta.json", "__init__.py"])
        staging.chmod(0o755)  # mkdtemp makes it private
        replace_directory(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


PACKAGE_INIT = '''"""A compiled mechanism: ``mechanism`` is its
``mbgen.runtime.compiled.CompiledMechanism`` (kernels, dynamics, kinematics,
``evaluator()``). Importing needs NumPy, cffi and mbgen's runtime only.
"""

from pathlib import Path

from mbgen.runtime.package import load_package

MECHANISM_NAME = {name}
MBGEN_VERSION = {version}
CONTENT_HASH = {digest}

mechanism = load_package(Path(__file__).parent, __name__)
'''


def prefixed_names(texts: Iterable[str]) -> list[str]:
    """The mb_ / MB_ names that the texts use and do not #define, sorted."""
    texts = list(texts)
    defined = {name for text in texts for name in DEFINED_NAME.findall(text)}
    return sorted({name for text in texts for name in PREFIXED_NAME.findall(text)} - defined)


#: The example program beside the library: its source, a real C file the same for every
#: mechanism (templates/export_example.c, given the library's names by the template), and
#: the program make builds. A '-' is in no library name, so the source cannot be the
#: library's NAME.c (`--name example` wrote both as example.c).
EXAMPLE_SOURCE = "example-main.c"
EXAMPLE_PROGRAM = "example"


def library_files(name: str) -> list[str]:
    """Every file an export writes or its Makefile makes, for library ``name``."""
    return [f"{name}.h", f"{name}.c", f"{name}.o", f"lib{name}.a", EXAMPLE_SOURCE,
            EXAMPLE_PROGRAM, "Makefile", "README.md"]


def export_files(build: Path, name: str, active_rows: list[int]) -> dict[str, str]:
    """The exported library's files (name.h, name.c, the example program's source,
    Makefile, README.md)."""
    meta = json.loads((build / "meta.json").read_text())
    core = csrc_dir()
    sources = [{"name": source, "text": (core / source).read_text()}
               for source in CORE_ORDER[1:]]
    kernels = (build / "mechanism.c").read_text()
    header = (core / CORE_ORDER[0]).read_text()
    context = {
        "name": name, "upper": name.upper(), "version": meta["mbgen_version"],
        "mechanism": meta["name"], "digest": build.name, "n": meta["n"], "m": meta["m"],
        "coordinate_names": meta["coordinate_names"], "q0": meta["q0"],
        "parameters": list(meta["parameters"].values()), "active_rows": active_rows,
    }
    all_names = prefixed_names([header, *(s["text"] for s in sources), kernels])
    files = library_files(name)
    if len({file.lower() for file in files}) < len(files):  # case-insensitive disks too
        raise AssertionError(f"an exported file's name is another's: {files}")
    program = templates_dir().joinpath("export_example.c").read_text()
    context.update(program=EXAMPLE_PROGRAM, program_source=EXAMPLE_SOURCE)
    return {
        f"{name}.h": render("export.h.j2", **context, mbgen_h=header,
                            names=prefixed_names([header])),
        f"{name}.c": render("export.c.j2", **context, sources=sources, kernels=kernels,
                            names=all_names),
        EXAMPLE_SOURCE: render("export_example.c.j2", **context, program_text=program,
                               names=prefixed_names([program])),
        "Makefile": render("export_Makefile.j2", **context),
        "README.md": render("export_README.md.j2", **context,
                            mechanism_literal=python_literal(meta["name"])),
    }


def export_c(build: Path, out_dir: Path, name: str, active_rows: list[int],
             force: bool = False, protected: Iterable[Path] = ()) -> Path:
    """``out_dir/``: name.h, name.c, example-main.c, Makefile, README.md (see docs), and the
    marker listing them. Into a directory mbgen did not make only with ``force``, and
    never over a ``protected`` path."""
    files = export_files(build, name, active_rows)
    check_target(out_dir, "c-library", force, [], "--c")
    for item in protected:
        if any(same_file(out_dir / file, item) for file in files):
            raise MbgenError(f"--c: {out_dir} would replace the input {item}: choose another "
                             "directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    earlier = marker_files(out_dir, "c-library") or []
    for file, text in files.items():
        atomic_write_text(out_dir / file, text)
    # an earlier export's files under another --name stay (the user may have made them
    # their own since) and stay listed, so a later run still knows the directory
    write_marker(out_dir, "c-library", sorted(set(earlier) | set(files)))
    return out_dir

"""Taking the generated code away: an importable Python package, and a standalone C
library.

Both are made from a finished build directory (the compiled extension, its generated
``mechanism.c`` and ``meta.json``), so they carry exactly the code ``mbgen.load`` runs.
The C library is the core's own sources and the generated kernels with every ``mb_`` /
``MB_`` name given the mechanism's prefix (a mechanical rename, so several exported
mechanisms link into one program), in one translation unit; nothing is rewritten by hand.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from mbgen.codegen.cache import csrc_dir, safe_name
from mbgen.codegen.ownership import check_target, marker_files, replace_directory, write_marker
from mbgen.errors import MbgenError
from mbgen.escaping import c_comment, c_string, python_literal
from mbgen.files import atomic_write_text, same_file

# the core's sources in dependency order (headers first); the generated kernels follow
CORE_ORDER = ("mbgen.h", "mb_model.h", "core.h", "model.c", "sparse.c", "dense.c",
              "dynamics.c", "inverse.c", "simulate.c", "variational.c", "particles.c",
              "stats.c")
INCLUDE = re.compile(r'^#include "[^"]+"\n', re.MULTILINE)


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


def prefixed(text: str, name: str) -> str:
    """The core's C with every mb_/MB_ identifier renamed to name_/NAME_."""
    text = re.sub(r"\bmb_", f"{name}_", text)
    return re.sub(r"\bMB_", f"{name.upper()}_", text)


def export_c(build: Path, out_dir: Path, name: str, active_rows: list[int],
             force: bool = False, protected: Iterable[Path] = ()) -> Path:
    """``out_dir/``: name.h, name.c, example.c, Makefile, README.md (see docs), and the
    marker listing them. Into a directory mbgen did not make only with ``force``, and
    never over a ``protected`` path."""
    meta = json.loads((build / "meta.json").read_text())
    core = csrc_dir()
    upper = name.upper()
    header = prefixed((core / "mbgen.h").read_text(), name).replace("MBGEN_H", f"{upper}_H")
    extras = _header_extras(meta, name, active_rows)
    header = header.replace("/* cdef:end */", f"/* cdef:end */\n{extras}", 1)
    parts = [f'/* {name}: mbgen {meta["mbgen_version"]} core and the kernels of mechanism '
             f'"{c_comment(meta["name"])}" (content hash {build.name}), in one translation '
             'unit. */\n'
             f'#include "{name}.h"\n']
    for source in CORE_ORDER[1:]:
        parts.append(f"\n/* ---- {source} " + "-" * (70 - len(source)) + " */\n")
        parts.append(INCLUDE.sub("", prefixed((core / source).read_text(), name)))
    parts.append("\n/* ---- the mechanism's kernels " + "-" * 46 + " */\n")
    parts.append(INCLUDE.sub("", prefixed((build / "mechanism.c").read_text(), name)))
    parts.append(_source_extras(meta, name, active_rows))
    files = {f"{name}.h": header, f"{name}.c": "".join(parts),
             "example.c": EXAMPLE.replace("NAME", name).replace("UPPER", upper),
             "Makefile": MAKEFILE.replace("NAME", name),
             "README.md": README.format(name=name, upper=upper,
                                        mechanism=python_literal(meta["name"]))}
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


def _c_array(values: Sequence[Any], kind: str) -> str:
    if not values:
        return "{0}"
    if kind == "double":
        return "{" + ", ".join(repr(float(v)) for v in values) + "}"
    if kind == "string":
        return "{" + ", ".join(c_string(v) for v in values) + "}"
    return "{" + ", ".join(str(int(v)) for v in values) + "}"


def _header_extras(meta: dict, name: str, active_rows: list[int]) -> str:
    upper = name.upper()
    return f"""
/* The mechanism: {c_comment(meta['name'])}. Coordinates q = [{
    c_comment(', '.join(meta['coordinate_names']))}]. */
#define {upper}_N {meta['n']}
#define {upper}_M {meta['m']}
#define {upper}_PARAMETERS {len(meta['parameters'])}
#define {upper}_ACTIVE_ROWS {len(active_rows)}
#define {upper}_DOF {meta['n'] - len(active_rows)}
/* The constraint rows the dynamics use (independent at q0), for {name}_plan_new. */
extern const int {name}_active_rows[{max(len(active_rows), 1)}];
extern const double {name}_default_parameters[{max(len(meta['parameters']), 1)}];
extern const double {name}_q0[{meta['n']}];
extern const char* const {name}_coordinate_names[{meta['n']}];
"""


def _source_extras(meta: dict, name: str, active_rows: list[int]) -> str:
    return f"""
/* ---- the mechanism's data ------------------------------------------------- */
const int {name}_active_rows[{max(len(active_rows), 1)}] = {_c_array(active_rows, "int")};
const double {name}_default_parameters[{max(len(meta['parameters']), 1)}] = {
    _c_array(list(meta['parameters'].values()), "double")};
const double {name}_q0[{meta['n']}] = {_c_array(meta['q0'], "double")};
const char* const {name}_coordinate_names[{meta['n']}] = {
    _c_array(meta['coordinate_names'], "string")};
"""


EXAMPLE = r"""/* q̈ and its Jacobians of NAME for states read from stdin (n values of q, then n of
 * q̇, per line; none: q0 at rest), printed as "qdd ... Jq ... Jqd ... JQ ..." lines. */
#include <stdio.h>
#include <stdlib.h>

#include "NAME.h"

int main(void)
{
    enum { N = UPPER_N };
    double q[N], qd[N], qdd[N], Jq[N * N], Jqd[N * N], JQ[N * N];
    int status = 0, states = 0;
    NAME_options options;
    NAME_default_options(&options);
    NAME_plan* plan = NAME_plan_new(NAME_model_get(), NAME_active_rows, UPPER_ACTIVE_ROWS);
    if (!plan) return 1;
    for (;;) {
        int got = 0;
        for (int i = 0; i < 2 * N; ++i) got += scanf("%lf", i < N ? &q[i] : &qd[i - N]) == 1;
        if (got != 2 * N) {
            if (states > 0) break;
            for (int i = 0; i < N; ++i) { q[i] = NAME_q0[i]; qd[i] = 0.0; }
        }
        int failed = NAME_forward_dynamics(plan, &options, 1, q, 0, qd, 0, NULL, 0,
                                           NAME_default_parameters, 0, qdd, NULL, Jq, Jqd,
                                           JQ, &status);
        if (failed) {
            fprintf(stderr, "state %d: %s\n", states, NAME_status_text(status));
            NAME_plan_free(plan);
            return 2;
        }
        printf("qdd");
        for (int i = 0; i < N; ++i) printf(" %.17g", qdd[i]);
        printf("\nJq");
        for (int i = 0; i < N * N; ++i) printf(" %.17g", Jq[i]);
        printf("\nJqd");
        for (int i = 0; i < N * N; ++i) printf(" %.17g", Jqd[i]);
        printf("\nJQ");
        for (int i = 0; i < N * N; ++i) printf(" %.17g", JQ[i]);
        printf("\n");
        ++states;
        if (got != 2 * N) break;
    }
    NAME_plan_free(plan);
    return 0;
}
"""

MAKEFILE = """CC ?= cc
CFLAGS ?= -std=c99 -O2 -Wall -Wextra

all: libNAME.a example

NAME.o: NAME.c NAME.h
\t$(CC) $(CFLAGS) -c NAME.c -o NAME.o

libNAME.a: NAME.o
\tar rcs libNAME.a NAME.o

example: example.c libNAME.a
\t$(CC) $(CFLAGS) example.c libNAME.a -lm -o example

clean:
\trm -f NAME.o libNAME.a example

.PHONY: all clean
"""

README = """# {name}: the mechanism {mechanism} as a C library

Generated by mbgen: the C core (factorizations, forward dynamics with exact Jacobians,
kinematic problems, inverse dynamics, integrators) and this mechanism's kernels, with
every name prefixed `{name}_` (`{upper}_` for constants). C99 and libm only; no hidden
global state, so threads may share a plan (`{name}_plan`) and each call allocates its own
scratch memory, or keep one `{name}_workspace` each for calls without allocation.

    make            # libNAME.a and ./example
    ./example       # q̈ and its Jacobians at q0, at rest

The API is `{name}.h` (the same functions as mbgen's `mbgen.h`, documented there); the
mechanism's sizes, q0, default parameters and the constraint rows the dynamics use are
`{upper}_N`, `{name}_q0`, `{name}_default_parameters`, `{name}_active_rows`. The header
works from C++ (`extern "C"`).
""".replace("libNAME.a", "lib{name}.a")

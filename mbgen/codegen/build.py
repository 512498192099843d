"""Compile a mechanism file into an importable cffi extension, atomically.

The compiler is called directly (no setuptools run): the generated kernels (optimized,
symbols hidden), then one link step with the installation's prebuilt core. The core (the C
of mbgen/csrc) and cffi's Python glue (which only forwards calls, so it is built without
optimization: most of its compile time is Python.h) are the same for every mechanism, so
they are compiled once per installation, core hash, flags and compiler into one object in
the user's cache (cache.user_cache_dir), not once per out dir: a user who edits a mechanism
waits for its kernels only. The glue is compiled under its own module name; each module's
``PyInit_<name>`` is a linker alias of the glue's. The cffi declarations are cut from the
core's public header and the glue includes that header, so declarations and definitions
cannot disagree.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cffi

from mbgen.codegen.cache import (
    build_dir,
    content_hash,
    core_digest,
    core_sources,
    csrc_dir,
    is_build,
    mechanism_bytes,
    module_name,
    user_cache_dir,
)
from mbgen.codegen.emit import generate
from mbgen.codegen.staging import (
    CHILD_OPTIONS,
    compiler_identity,
    install_build,
    remove_stale_staging,
    staging_prefix,
)
from mbgen.cpu import march_flags, usable_cpus, vector_level
from mbgen.errors import MbgenError
from mbgen.model import load_mechanism
from mbgen.symbolic import build_symbolic_model, derive_kernels

# -ffp-contract=off: no fused multiply-adds where the source has none, so a module gives the
# same numbers with or without the vector level of mbgen/cpu.py, and as its exported C
# -fno-trapping-math: the lane functions' selects (x > m ? x : m) become blends instead of
# branches, so their loops vectorize (nothing reads the floating-point exception flags;
# the values are the same)
# -O1 -ftree-loop-vectorize: the kernels are straight-line code, where -O2's further passes
# gained nothing measurable (benchmarks/peers.py: the double pendulum's and the four-bar's
# q̈ and q̈ + J within noise) but cost the four-bar's gcc 0.20 → 0.16 s of a cold build;
# the lane functions' loops still vectorize
# -pipe: no temporary assembly file between the compiler and the assembler (a few ms)
# -fno-math-errno: sqrt is the instruction (the same number; nothing reads errno), so a
# lane loop with a square root vectorizes (c_printer.py hoists only real calls)
KERNEL_FLAGS = ["-O1", "-ftree-loop-vectorize", "-pipe", "-fPIC", "-std=gnu99",
                "-fno-strict-aliasing", "-fvisibility=hidden", "-ffp-contract=off",
                "-fno-trapping-math", "-fno-math-errno", "-w"]
# -fno-tree-loop-distribute-patterns: core.h's mb_copy/mb_zero stay inline loops;
# -fno-trapping-math, -fno-math-errno as above (the lane partition's pivot search, the
# joint-space finish's square roots in lanes)
CORE_FLAGS = ["-O3", "-fPIC", "-std=c99", "-fvisibility=hidden", "-ffp-contract=off",
              "-fno-tree-loop-distribute-patterns", "-fno-trapping-math", "-fno-math-errno",
              "-Wall",
              "-Werror=implicit", "-Werror=incompatible-pointer-types",
              "-Werror=int-conversion"]
GLUE_FLAGS = ["-O0", "-fPIC", "-w", "-Werror=incompatible-pointer-types",
              "-Werror=int-conversion"]
CDEF_BEGIN, CDEF_END = "/* cdef:begin */", "/* cdef:end */"
# the cffi glue's own module name; each mechanism's module is this glue under an alias
GLUE_MODULE = "_mbgen_glue"
EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")


def public_cdef() -> str:
    """The declarations cffi is built from: the cdef section of mbgen.h."""
    text = (csrc_dir() / "mbgen.h").read_text()
    return text[text.index(CDEF_BEGIN) + len(CDEF_BEGIN):text.index(CDEF_END)]


class CompileError(MbgenError):
    """The C compiler rejected the generated code (a bug in mbgen: please report)."""


def compile_mechanism(path: str | Path, out_dir: str | Path,
                      progress: Callable[[str], None] | None = None,
                      replace: bool = False) -> Path:
    """Derive, generate and build ``path``; returns the directory holding the module.

    ``replace``: an existing build of the same digest is replaced (forced or broken);
    otherwise an existing one, e.g. from a concurrent twin, is kept.
    """
    path = Path(path)
    out_dir = Path(out_dir)
    digest = content_hash(mechanism_bytes(path))
    target = build_dir(out_dir, path.stem, digest)
    name = module_name(path.stem, digest)
    say = progress or (lambda _msg: None)

    timings: dict[str, float] = {}
    start = time.perf_counter()
    say("parsing")
    mechanism = load_mechanism(path)
    say("deriving equations")
    kernels = derive_kernels(build_symbolic_model(mechanism))
    timings["derive"] = time.perf_counter() - start
    start = time.perf_counter()
    source = generate(kernels, progress=lambda k: say(f"generating C: {k}"))
    timings["codegen"] = time.perf_counter() - start

    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(target.parent)
    staging = Path(tempfile.mkdtemp(prefix=staging_prefix(digest), dir=target.parent))
    try:
        start = time.perf_counter()
        say("compiling C")
        kernels_c = staging / "mechanism.c"
        kernels_c.write_text(source.c_source)
        _compile_c(kernels_c, source.parts, staging / f"{name}{EXT_SUFFIX}", name)
        timings["compile"] = time.perf_counter() - start
        meta = dict(source.meta, module=name, hash=digest, timings=timings,
                    source_path=str(path.resolve()), vector_level=vector_level(),
                    parts=source.parts)
        (staging / "meta.json").write_text(json.dumps(meta, indent=1))
        staging.chmod(0o755)  # mkdtemp makes it private; builds may be shared
        install_build(staging, target, replace)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _remove_stale_builds(target, path)
    return target


def _compile_c(kernels_c: Path, parts: int, output: Path, module: str) -> None:
    """The generated file's translation units (``-DMBGEN_PART=k``, see mechanism.c.j2) in
    parallel, with the core if it is not cached yet; then one link with the core."""
    compiler = os.environ.get("CC", "cc")
    march = march_flags(vector_level())
    kernels_c = kernels_c.resolve()  # its jobs may run beside the core's, in its directory
    objects = [kernels_c.with_name(f"{kernels_c.stem}_{k}.o") for k in range(parts)]
    jobs = [[compiler, *KERNEL_FLAGS, *march, f"-I{csrc_dir()}",
             *([f"-DMBGEN_PART={k}"] if parts > 1 else []), "-c", str(kernels_c), "-o", str(obj)]
            for k, obj in enumerate(objects)]
    core = core_object(compiler)
    if is_core_object(core):
        _run_parallel(jobs)
    else:
        if not _writable(core.parent):  # compiled for this module alone, into its build
            core = kernels_c.with_name(core.name)
        _build_core(compiler, core, jobs)
    link = [compiler, "-shared", *map(str, objects), str(core), "-o", str(output), "-lm",
            *_init_alias(module)]
    result = subprocess.run(link, capture_output=True, text=True, **CHILD_OPTIONS)
    if result.returncode != 0:
        raise CompileError(f"linking failed ({' '.join(link)}):\n{result.stderr[-4000:]}")


def _init_alias(module: str) -> list[str]:
    """Linker flags that export the glue's module init also as ``PyInit_<module>``, the
    name Python's import looks for."""
    if sys.platform == "darwin":
        return [f"-Wl,-alias,_PyInit_{GLUE_MODULE},_PyInit_{module}"]
    return [f"-Wl,--defsym=PyInit_{module}=PyInit_{GLUE_MODULE}"]


# archives of the C core that earlier versions kept in <out_dir>/_core (cache clean)
CORE_ARCHIVE = re.compile(r"libmbcore-[0-9a-f]{16}-[0-9a-f]{8}\.a")


def core_object(compiler: str) -> Path:
    """The C core and cffi's glue, compiled once into one object that every module links,
    in the user's cache: keyed by the core's sources, both sets of flags, the compiler,
    cffi and Python (the glue includes Python.h)."""
    key = "|".join([core_digest(), *CORE_FLAGS, *GLUE_FLAGS, *march_flags(vector_level()),
                    compiler_identity(compiler), cffi.__version__, GLUE_MODULE,
                    sysconfig.get_paths()["include"]])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return user_cache_dir() / "core" / f"mbcore-{digest}.o"


def _writable(directory: Path) -> bool:
    """``directory`` exists or can be made, and can be written (a read-only home, or a
    $MBGEN_CACHE that is not a directory, must not stop a build)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(directory, os.W_OK)


def _checksum_file(core: Path) -> Path:
    return core.with_name(f"{core.name}.sha256")


def is_core_object(core: Path) -> bool:
    """``core`` is whole: its bytes hash to what its checksum file (written after it, by
    the same build) says. A damaged, truncated or foreign file is not used, but rebuilt."""
    try:
        expected = _checksum_file(core).read_text().strip()
        return hashlib.sha256(core.read_bytes()).hexdigest() == expected
    except OSError:
        return False


def _build_core(compiler: str, core: Path, jobs: list[list[str]]) -> None:
    """Compile the core and the glue (alongside ``jobs``) in a staging directory beside
    ``core``, link them into one relocatable object and install it and its checksum by
    renames (a concurrent twin's copy is equivalent)."""
    remove_stale_staging(core.parent)
    key = core.stem.removeprefix("mbcore-")
    staging = Path(tempfile.mkdtemp(prefix=staging_prefix(key), dir=core.parent))
    try:
        ffi = cffi.FFI()
        ffi.cdef(public_cdef())
        ffi.set_source(GLUE_MODULE, '#include "mbgen.h"')
        with contextlib.redirect_stdout(io.StringIO()):
            ffi.emit_c_code(str(staging / f"{GLUE_MODULE}.c"))
        march = march_flags(vector_level())
        core_jobs = [[compiler, *CORE_FLAGS, *march, "-c", str(source), "-o", f"{source.stem}.o"]
                     for source in core_sources() if source.suffix == ".c"]
        core_jobs.append([compiler, *GLUE_FLAGS, f"-I{csrc_dir()}",
                          f"-I{sysconfig.get_paths()['include']}", "-c", f"{GLUE_MODULE}.c",
                          "-o", f"{GLUE_MODULE}.o"])
        _run_parallel(jobs + core_jobs, cwd=staging)  # relative names: the same bytes
        linked = staging / "core.o"
        partial = [compiler, "-r", "-nostdlib", *(job[-1] for job in core_jobs), "-o",
                   linked.name]
        result = subprocess.run(partial, capture_output=True, text=True, cwd=staging,
                                **CHILD_OPTIONS)
        if result.returncode != 0:
            raise CompileError(f"linking the C core failed:\n{result.stderr[-4000:]}")
        checksum = staging / "core.sha256"
        checksum.write_text(hashlib.sha256(linked.read_bytes()).hexdigest())
        os.replace(linked, core)
        os.replace(checksum, _checksum_file(core))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _run_parallel(jobs: list[list[str]], cwd: Path | None = None) -> None:
    """Run the compiler jobs, as many at once as this process has CPUs (more would only
    add their memory), starting the next as soon as any ends."""
    waiting = list(reversed(jobs))
    running: list[tuple[list[str], subprocess.Popen[bytes], Any]] = []
    failures = []
    with contextlib.ExitStack() as files:
        while waiting or running:
            while waiting and len(running) < usable_cpus():
                job = waiting.pop()
                # stderr to a file: a pipe could fill up and stop the compiler
                errors = files.enter_context(tempfile.TemporaryFile())
                running.append((job, subprocess.Popen(job, stderr=errors, cwd=cwd, **CHILD_OPTIONS),
                                errors))
            finished = [entry for entry in running if entry[1].poll() is not None]
            if not finished:
                time.sleep(0.002)
            for job, process, errors in finished:
                running.remove((job, process, errors))
                if process.returncode != 0:
                    errors.seek(0)
                    text = errors.read().decode(errors="replace")
                    failures.append(f"C compilation failed ({' '.join(job)}):\n{text[-4000:]}")
    if failures:
        raise CompileError("\n".join(failures))


def _remove_stale_builds(target: Path, source: Path) -> None:
    """Delete older builds of the same source file (same-named files elsewhere stay)."""
    for sibling in target.parent.iterdir():
        if sibling == target or not is_build(sibling):
            continue
        try:
            built_from = json.loads((sibling / "meta.json").read_text()).get("source_path")
        except (OSError, ValueError):
            continue
        if built_from == str(source.resolve()):
            shutil.rmtree(sibling, ignore_errors=True)

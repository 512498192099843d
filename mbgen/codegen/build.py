"""Compile a mechanism file into an importable cffi extension, atomically.

The compiler is called directly (no setuptools run), in parallel jobs: the generated
kernels (optimized, symbols hidden), cffi's Python glue (which only forwards calls, so it
is built without optimization: most of its compile time is Python.h) and, once per
machine and core version, the C core of mbgen/csrc (cached as an archive next to the
modules). Then one link step. The cffi declarations are cut from the core's public header
and the glue includes that header, so declarations and definitions cannot disagree.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import io
import json
import os
import re
import shutil
import signal
import socket
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
    module_name,
)
from mbgen.codegen.emit import generate
from mbgen.cpu import march_flags, vector_level
from mbgen.errors import MbgenError
from mbgen.model import load_mechanism
from mbgen.symbolic import build_symbolic_model, derive_kernels

# -ffp-contract=off: no fused multiply-adds where the source has none, so a module gives the
# same numbers with or without the vector level of mbgen/cpu.py, and as its exported C
# -fno-trapping-math: the lane functions' selects (x > m ? x : m) become blends instead of
# branches, so their loops vectorize (nothing reads the floating-point exception flags;
# the values are the same)
KERNEL_FLAGS = ["-O2", "-fPIC", "-std=gnu99", "-fno-strict-aliasing", "-fvisibility=hidden",
                "-ffp-contract=off", "-fno-trapping-math", "-w"]
# -fno-tree-loop-distribute-patterns: core.h's mb_copy/mb_zero stay inline loops;
# -fno-trapping-math as above (the lane partition's pivot search)
CORE_FLAGS = ["-O3", "-fPIC", "-std=c99", "-fvisibility=hidden", "-ffp-contract=off",
              "-fno-tree-loop-distribute-patterns", "-fno-trapping-math", "-Wall",
              "-Werror=implicit", "-Werror=incompatible-pointer-types",
              "-Werror=int-conversion"]
GLUE_FLAGS = ["-O0", "-fPIC", "-w", "-Werror=incompatible-pointer-types",
              "-Werror=int-conversion"]
CDEF_BEGIN, CDEF_END = "/* cdef:begin */", "/* cdef:end */"


def public_cdef() -> str:
    """The declarations cffi is built from: the cdef section of mbgen.h."""
    text = (csrc_dir() / "mbgen.h").read_text()
    return text[text.index(CDEF_BEGIN) + len(CDEF_BEGIN):text.index(CDEF_END)]


class CompileError(MbgenError):
    """The C compiler rejected the generated code (a bug in mbgen: please report)."""


STALE_STAGING = 3600.0  # seconds: a staging directory this old is a killed compile's


# A staging directory names its owner: .tmp-<digest>-p<pid>@<host>-<random>
_OWNER = re.compile(r"^\.tmp-[0-9a-f]+-p(\d+)@(.*)-[^-]+$")
_STAGING = re.compile(r"^\.tmp-[0-9a-f]+-")  # any staging directory's name


def _staging_prefix(digest: str) -> str:
    return f".tmp-{digest}-p{os.getpid()}@{socket.gethostname()}-"


def _owner_is_dead(name: str) -> bool:
    """The compile that made this staging directory ran on this machine and is gone."""
    match = _OWNER.match(name)
    if match is None or match.group(2) != socket.gethostname():
        return False
    try:
        os.kill(int(match.group(1)), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False


def stale_staging(parent: Path) -> list[Path]:
    """Staging directories left by compiles that were killed (SIGKILL leaves no chance to
    clean up): those whose owner process is gone, and any older than a build takes. A
    running compile's staging directory is its lock: it is never among them."""
    now = time.time()
    found = []
    for stale in parent.glob(".tmp-*"):
        try:
            if (_STAGING.match(stale.name) and stale.is_dir() and not stale.is_symlink()
                    and (_owner_is_dead(stale.name)
                         or now - stale.stat().st_mtime > STALE_STAGING)):
                found.append(stale)
        except OSError:
            continue  # removed meanwhile by a concurrent compile
    return found


def _remove_stale_staging(parent: Path) -> None:
    for stale in stale_staging(parent):
        shutil.rmtree(stale, ignore_errors=True)


def _child_options() -> dict[str, Any]:
    """Linux: the compilers get SIGKILL when mbgen dies (after a SIGKILL of mbgen, the
    ones it started kept writing into a staging directory nobody would install). prctl is
    looked up here, so the child only calls it between fork and exec."""
    if not sys.platform.startswith("linux"):
        return {}
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def die_with_parent() -> None:  # pragma: no cover - runs in the child
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

    return {"preexec_fn": die_with_parent}


_CHILD = _child_options()


def compile_mechanism(path: str | Path, out_dir: str | Path,
                      progress: Callable[[str], None] | None = None,
                      replace: bool = False) -> Path:
    """Derive, generate and build ``path``; returns the directory holding the module.

    ``replace``: an existing build of the same digest is replaced (forced or broken);
    otherwise an existing one, e.g. from a concurrent twin, is kept.
    """
    path = Path(path)
    out_dir = Path(out_dir)
    yaml_bytes = path.read_bytes()
    digest = content_hash(yaml_bytes)
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
    _remove_stale_staging(target.parent)
    staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(digest), dir=target.parent))
    try:
        start = time.perf_counter()
        say("compiling C")
        ffi = cffi.FFI()
        ffi.cdef(public_cdef())
        ffi.set_source(name, '#include "mbgen.h"')
        glue = staging / f"{name}.c"
        with contextlib.redirect_stdout(io.StringIO()):
            ffi.emit_c_code(str(glue))
        kernels_c = staging / "mechanism.c"
        kernels_c.write_text(source.c_source)
        _compile_c(kernels_c, glue, staging / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}",
                   out_dir)
        timings["compile"] = time.perf_counter() - start
        meta = dict(source.meta, module=name, hash=digest, timings=timings,
                    source_path=str(path.resolve()), vector_level=vector_level())
        (staging / "meta.json").write_text(json.dumps(meta, indent=1))
        staging.chmod(0o755)  # mkdtemp makes it private; builds may be shared
        _install(staging, target, replace)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _remove_stale_builds(target, path)
    return target


def _compile_c(kernels_c: Path, glue_c: Path, output: Path, out_dir: Path) -> None:
    compiler = os.environ.get("CC", "cc")
    include = sysconfig.get_paths()["include"]
    core = f"-I{csrc_dir()}"
    kernels_o, glue_o = kernels_c.with_suffix(".o"), glue_c.with_suffix(".o")
    march = march_flags(vector_level())
    jobs = [[compiler, *KERNEL_FLAGS, *march, core, "-c", str(kernels_c), "-o", str(kernels_o)],
            [compiler, *GLUE_FLAGS, core, f"-I{include}", "-c", str(glue_c), "-o", str(glue_o)]]
    archive = core_archive(out_dir)
    core_jobs = [] if archive.exists() else _core_jobs(compiler, kernels_c.parent)
    _run_parallel(jobs + core_jobs)
    if core_jobs:
        _archive_core([Path(job[-1]) for job in core_jobs], archive)
    link = [compiler, "-shared", str(kernels_o), str(glue_o), str(archive), "-o", str(output),
            "-lm"]
    result = subprocess.run(link, capture_output=True, text=True, **_CHILD)
    if result.returncode != 0:
        raise CompileError(f"linking failed ({' '.join(link)}):\n{result.stderr[-4000:]}")


CORE_ARCHIVE = re.compile(r"libmbcore-[0-9a-f]{16}-[0-9a-f]{8}\.a")


def core_archive(out_dir: Path) -> Path:
    """The compiled C core shared by every module of ``out_dir`` (keyed by its hash and
    its compiler flags)."""
    flags = " ".join(CORE_FLAGS + march_flags(vector_level()))
    flags = hashlib.sha256(flags.encode()).hexdigest()[:8]
    return out_dir / "_core" / f"libmbcore-{core_digest()}-{flags}.a"


def _core_jobs(compiler: str, workdir: Path) -> list[list[str]]:
    march = march_flags(vector_level())
    return [[compiler, *CORE_FLAGS, *march, "-c", str(source),
             "-o", str(workdir / f"core_{source.stem}.o")]
            for source in core_sources() if source.suffix == ".c"]


def _run_parallel(jobs: list[list[str]]) -> None:
    running = [subprocess.Popen(job, stderr=subprocess.PIPE, text=True, **_CHILD)
               for job in jobs]
    failures = []
    for job, process in zip(jobs, running, strict=True):
        _, errors = process.communicate()
        if process.returncode != 0:
            failures.append(f"C compilation failed ({' '.join(job)}):\n{errors[-4000:]}")
    if failures:
        raise CompileError("\n".join(failures))


def _archive_core(objects: list[Path], archive: Path) -> None:
    """ar the core's objects into place by rename (a concurrent twin's copy is identical)."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".a", dir=archive.parent)
    os.close(handle)
    os.unlink(tmp)
    result = subprocess.run([os.environ.get("AR", "ar"), "rcs", tmp, *map(str, objects)],
                            capture_output=True, text=True, **_CHILD)
    if result.returncode != 0:
        raise CompileError(f"archiving the C core failed:\n{result.stderr[-4000:]}")
    os.replace(tmp, archive)


def _install(staging: Path, target: Path, replace: bool) -> None:
    """Move the finished build into place by renames, so no reader sees half a build.

    With ``replace`` an existing build of the same hash is moved aside first; otherwise
    a build that a concurrent twin installed first is kept (ours is identical).
    """
    if replace and target.exists():
        aside = target.with_name(f".tmp-old-{target.name}-{os.getpid()}")
        with contextlib.suppress(OSError):
            os.rename(target, aside)
            shutil.rmtree(aside, ignore_errors=True)
    try:
        os.rename(staging, target)
    except OSError:
        if not (target / "meta.json").exists():
            raise


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

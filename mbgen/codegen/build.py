"""Compile a mechanism file into an importable cffi extension, atomically.

The compiler is called directly (no setuptools run), in two parallel jobs: the generated
kernels and dynamics (optimized, symbols hidden) and cffi's Python glue (which only
forwards calls, so it is built without optimization: most of its compile time is
Python.h). Then one link step.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import cffi

from mbgen.codegen.cache import build_dir, content_hash, module_name
from mbgen.codegen.emit import generate, template_text
from mbgen.errors import MbgenError
from mbgen.model import load_mechanism
from mbgen.symbolic import build_symbolic_model, derive_kernels

KERNEL_FLAGS = ["-O2", "-fPIC", "-std=gnu99", "-fno-strict-aliasing", "-fvisibility=hidden",
                "-w"]
GLUE_FLAGS = ["-O0", "-fPIC", "-w"]


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
    runtime_cdef = template_text("dynamics.h.j2")
    source = generate(kernels, extra_cdef=runtime_cdef,
                      progress=lambda k: say(f"generating C: {k}"))
    timings["codegen"] = time.perf_counter() - start

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-{digest}-", dir=target.parent))
    try:
        start = time.perf_counter()
        say("compiling C")
        ffi = cffi.FFI()
        ffi.cdef(source.cdef)
        ffi.set_source(name, source.cdef)  # the glue needs only the prototypes
        glue = staging / f"{name}.c"
        with contextlib.redirect_stdout(io.StringIO()):
            ffi.emit_c_code(str(glue))
        kernels_c = staging / "mechanism.c"
        kernels_c.write_text(source.c_source)
        _compile_c(kernels_c, glue, staging / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}")
        timings["compile"] = time.perf_counter() - start
        meta = dict(source.meta, module=name, hash=digest, timings=timings,
                    source_path=str(path.resolve()))
        (staging / "meta.json").write_text(json.dumps(meta, indent=1))
        staging.chmod(0o755)  # mkdtemp makes it private; builds may be shared
        _install(staging, target, replace)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _remove_stale_builds(target, path)
    return target


def _compile_c(kernels_c: Path, glue_c: Path, output: Path) -> None:
    compiler = os.environ.get("CC", "cc")
    include = sysconfig.get_paths()["include"]
    kernels_o, glue_o = kernels_c.with_suffix(".o"), glue_c.with_suffix(".o")
    jobs = [[compiler, *KERNEL_FLAGS, "-c", str(kernels_c), "-o", str(kernels_o)],
            [compiler, *GLUE_FLAGS, f"-I{include}", "-c", str(glue_c), "-o", str(glue_o)]]
    running = [subprocess.Popen(job, stderr=subprocess.PIPE, text=True) for job in jobs]
    for job, process in zip(jobs, running, strict=True):
        _, errors = process.communicate()
        if process.returncode != 0:
            raise CompileError(f"C compilation failed ({' '.join(job)}):\n{errors[-4000:]}")
    link = [compiler, "-shared", str(kernels_o), str(glue_o), "-o", str(output), "-lm"]
    result = subprocess.run(link, capture_output=True, text=True)
    if result.returncode != 0:
        raise CompileError(f"linking failed ({' '.join(link)}):\n{result.stderr[-4000:]}")


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
        if sibling == target or sibling.name.startswith(".tmp-") or not sibling.is_dir():
            continue
        try:
            built_from = json.loads((sibling / "meta.json").read_text()).get("source_path")
        except (OSError, ValueError):
            continue
        if built_from == str(source.resolve()):
            shutil.rmtree(sibling, ignore_errors=True)

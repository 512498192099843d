"""Compile-side benchmarks: cold/warm load of the four-bar, chain codegen scaling, Φq speed.

Why these figures: a user who edits a mechanism file waits for ``mbgen.load`` to import
SymPy, derive, generate C and run gcc on the mechanism's kernels, linking the C core that
was compiled once per installation (``$MBGEN_CACHE``): that cold build, with the
installation's core already there, is the target case (≤ 0.5 s), measured in a fresh
interpreter and a fresh out dir, with mbgen's own modules in bytecode as an installed
package has them (installed_bytecode). The fully cold figure (no core either: the first build
ever) is context. The warm figure guards the cached fast path (no SymPy import at all);
the chain figures show how derivation/codegen/gcc scale with model size (``--chain1000``
adds the 1 000-bar chain, with its peak memory; a few minutes); and the batched Φq
figure is the cost floor of every kernel call. Both caches are scratch directories:
nothing is read from or written to the user's own.

Run: ``.venv/bin/python benchmarks/compile.py [--chain1000]`` (any cwd). Writes
``benchmarks/results/compile.json``.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    MECHANISMS,
    Figure,
    best_time,
    fresh_dir,
    print_table,
    remove_dir,
    write_results,
)

FOURBAR = MECHANISMS / "fourbar.yaml"
COLD_RUNS = 5
FULLY_COLD_RUNS = 2
WARM_RUNS = 3
CHAIN_SIZES = (10, 50, 100)
CHAIN_TARGETS = {100: 10.0, 1000: 120.0}  # s, YAML to loaded module
CHAIN_MEMORY_TARGET = 2048.0  # MB, the 1 000-bar chain
PHI_Q_STATES = 100_000
PHI_Q_REPEAT = 5

COLD_CODE = """
import time
t = time.perf_counter()
import mbgen
m = mbgen.load({path!r}, out_dir={out!r})
elapsed = time.perf_counter() - t
import json
print(json.dumps({{"elapsed": elapsed, "timings": m.meta["timings"]}}))
"""

NUMPY_CODE = """
import time
t = time.perf_counter()
import numpy
elapsed = time.perf_counter() - t
import json
print(json.dumps({"elapsed": elapsed}))
"""

WARM_CODE = """
import sys, time
import numpy  # the user's own session has NumPy already; its import is reported apart
t0 = time.perf_counter()
import mbgen
t1 = time.perf_counter()
m = mbgen.load({path!r}, out_dir={out!r})
t2 = time.perf_counter()
import json
print(json.dumps({{"import": t1 - t0, "load": t2 - t1, "total": t2 - t0,
                  "sympy_imported": "sympy" in sys.modules}}))
"""

CHAIN_CODE = """
import resource, time
from pathlib import Path
from mbgen.model.chain import chain_yaml
yaml_path = Path({tmp!r}) / "chain{n}.yaml"
yaml_path.write_text(chain_yaml({n}))
import mbgen
t = time.perf_counter()
m = mbgen.load(str(yaml_path), out_dir=str(Path({tmp!r}) / "gen"))
elapsed = time.perf_counter() - t
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
import json
print(json.dumps({{"elapsed": elapsed, "timings": m.meta["timings"], "n": m.n, "m": m.m,
                  "parts": m.meta["parts"], "python_mb": own, "compiler_mb": child}}))
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_python(code: str, cwd: Path, cache: Path) -> tuple[dict[str, Any], float]:
    """Run ``code`` in a fresh interpreter; return its JSON output and the process wall time.

    A fresh process is the only honest way to include import costs (SymPy, NumPy, cffi)
    that a user's first command pays. ``cwd`` is a scratch directory so nothing in the
    caller's working directory can shadow a module; ``cache`` is its ``$MBGEN_CACHE``.
    The child's CPU time (including the gcc it runs) is added to the output as ``cpu``:
    on a busy host it is a steadier figure than wall time.
    """
    cpu_before = _children_cpu()
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                            text=True, timeout=1800, env={**os.environ, "MBGEN_CACHE": str(cache)})
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"benchmark subprocess failed:\n{result.stderr[-4000:]}")
    output = json.loads(result.stdout.strip().splitlines()[-1])
    output["cpu"] = _children_cpu() - cpu_before
    return output, wall


def cold_and_warm(scratch: Path) -> tuple[list[Figure], Path, dict[str, Any]]:
    """Four-bar builds in fresh out dirs: fully cold (a fresh core cache each time, best of
    FULLY_COLD_RUNS), then cold with that core cache warm (best of COLD_RUNS); then warm
    loads of the last build (best of WARM_RUNS). Returns the warm core cache's build root
    as well."""
    fully: list[tuple[dict[str, Any], float]] = []
    for i in range(FULLY_COLD_RUNS):
        out, cache = scratch / f"fully{i}", scratch / f"cache{i}"
        fully.append(run_python(COLD_CODE.format(path=str(FOURBAR), out=str(out)), scratch,
                                cache))
    cache = scratch / f"cache{FULLY_COLD_RUNS - 1}"  # warm from here on
    cold: list[tuple[dict[str, Any], float]] = []
    out = scratch
    for i in range(COLD_RUNS):
        out = scratch / f"cold{i}"  # fresh, empty: a really cold build of the mechanism
        cold.append(run_python(COLD_CODE.format(path=str(FOURBAR), out=str(out)), scratch,
                               cache))
    best_in, best_inner_timings = min((r["elapsed"], r["timings"]) for r, _ in cold)
    best_wall = min(wall for _, wall in cold)
    fully_in = min(r["elapsed"] for r, _ in fully)

    warm = [run_python(WARM_CODE.format(path=str(FOURBAR), out=str(out)), scratch, cache)
            for _ in range(WARM_RUNS)]
    sympy_loaded = any(r["sympy_imported"] for r, _ in warm)
    numpy_import = min(run_python(NUMPY_CODE, scratch, cache)[0]["elapsed"]
                       for _ in range(WARM_RUNS))
    stages = sum(best_inner_timings.values())
    figures = [
        Figure("four-bar cold: import mbgen + load()", best_in, "s", 0.5,
               f"best of {COLD_RUNS}, fresh subprocess + out dir, installed core cached"),
        Figure("four-bar cold: whole subprocess", best_wall, "s",
               note=f"incl. interpreter start-up; CPU {min(r['cpu'] for r, _ in cold):.2f} s"),
        Figure("  derive (meta)", best_inner_timings["derive"], "s",
               note="stages of the best cold run"),
        Figure("  codegen (meta)", best_inner_timings["codegen"], "s"),
        Figure("  compile/gcc + link (meta)", best_inner_timings["compile"], "s"),
        Figure("  imports + rest (in-process − stages)", best_in - stages, "s",
               note="mostly importing SymPy / NumPy / Jinja"),
        Figure("four-bar fully cold: import mbgen + load()", fully_in, "s",
               note=f"best of {FULLY_COLD_RUNS}; the first build ever: compiles the core "
                    f"too; CPU {min(r['cpu'] for r, _ in fully):.2f} s"),
        Figure("four-bar warm: load() alone", min(r["load"] for r, _ in warm), "s", 0.1,
               f"best of {WARM_RUNS}; NumPy already imported"),
        Figure("four-bar warm: import mbgen + load()", min(r["total"] for r, _ in warm), "s",
               0.1, ("SymPy imported!" if sympy_loaded else "SymPy not imported (fast path)")
               + "; NumPy already imported"),
        Figure("four-bar warm: whole subprocess", min(wall for _, wall in warm), "s",
               note="incl. interpreter start-up"),
        Figure("baseline: `import numpy` alone", numpy_import, "s",
               note="fresh subprocess; a floor under any warm load()"),
    ]
    raw = {"fully_cold_runs": [{"in_process": r["elapsed"], "subprocess_wall": w,
                                "subprocess_cpu": r["cpu"], "timings": r["timings"]}
                               for r, w in fully],
           "cold_runs": [{"in_process": r["elapsed"], "subprocess_wall": w,
                          "subprocess_cpu": r["cpu"], "timings": r["timings"]}
                         for r, w in cold],
           "warm_runs": [{**r, "subprocess_wall": w} for r, w in warm]}
    return figures, out, raw


def chains(scratch: Path, cache: Path, sizes: tuple[int, ...],
           ) -> tuple[list[Figure], dict[str, Any]]:
    """Chain of N bodies, each N in its own process so SymPy caches from a smaller chain
    cannot flatter a larger one, each into a fresh build directory (the installed core
    cached, as for the four-bar)."""
    rows: dict[int, dict[str, Any]] = {}
    for n in sizes:
        tmp = scratch / f"chain{n}"
        tmp.mkdir()
        result, wall = run_python(CHAIN_CODE.format(tmp=str(tmp), n=n), scratch, cache)
        stages = result["timings"]
        rows[n] = {**stages, "total": sum(stages.values()), "load_wall": result["elapsed"],
                   "subprocess_wall": wall, "subprocess_cpu": result["cpu"],
                   "coordinates": result["n"], "constraints": result["m"],
                   "parts": result["parts"], "python_mb": result["python_mb"],
                   "compiler_mb": result["compiler_mb"]}
        remove_dir(tmp)

    figures: list[Figure] = []
    for n in sizes:
        r = rows[n]
        figures += [
            Figure(f"chain{n}: derive", r["derive"], "s"),
            Figure(f"chain{n}: codegen (C generation)", r["codegen"], "s"),
            Figure(f"chain{n}: compile (gcc, {r['parts']} parts)", r["compile"], "s"),
            Figure(f"chain{n}: load() wall", r["load_wall"], "s", CHAIN_TARGETS.get(n),
                   f"{r['total'] / n * 1e3:.1f} ms/body in the stages; process CPU "
                   f"{r['subprocess_cpu']:.2f} s"),
        ]
        if n in CHAIN_TARGETS and n >= 1000:
            peak = r["python_mb"] + min(os.cpu_count() or 1, r["parts"]) * r["compiler_mb"]
            figures.append(Figure(f"chain{n}: peak memory (bound)", peak, "MB",
                                  CHAIN_MEMORY_TARGET,
                                  f"Python {r['python_mb']:.0f} MB + compilers at once × "
                                  f"the largest, {r['compiler_mb']:.0f} MB"))

    def per_body_ratio(stage: str, big: int, small: int) -> float:
        return (rows[big][stage] / big) / (rows[small][stage] / small)

    # 1.0 = linear; for 100 vs 50 quadratic growth would give 2.0, for 50 vs 10 it gives 5.0.
    figures += [
        Figure("per-body total time ratio 100/50", per_body_ratio("total", 100, 50), "×", 1.5,
               "(t100/100)/(t50/50); 1 = linear, 2 = quadratic"),
        Figure("per-body total time ratio 50/10", per_body_ratio("total", 50, 10), "×", 1.5,
               "(t50/50)/(t10/10); 1 = linear, 5 = quadratic"),
    ]
    if 1000 in rows:
        figures.append(Figure("per-body total time ratio 1000/100",
                              per_body_ratio("total", 1000, 100), "×", 1.5,
                              "(t1000/1000)/(t100/100); 1 = linear, 10 = quadratic"))
    for stage in ("derive", "codegen", "compile"):
        figures.append(Figure(f"  {stage}: per-body ratio 100/50",
                              per_body_ratio(stage, 100, 50), "×"))
        figures.append(Figure(f"  {stage}: per-body ratio 50/10",
                              per_body_ratio(stage, 50, 10), "×"))
    return figures, {"chains": {str(n): rows[n] for n in sizes}}


def phi_q_speed(build_root: Path) -> list[Figure]:
    """Batched Φq of the four-bar: the full method (with dense scatter) and the raw kernel."""
    import mbgen

    mech = mbgen.load(str(FOURBAR), out_dir=str(build_root))  # already built: warm
    rng = np.random.default_rng(0)
    states = np.ascontiguousarray(mech.q0 + 0.05 * rng.standard_normal((PHI_Q_STATES, mech.n)))
    mech.phi_q(states[:10])  # warm up (first-call cffi lookups)
    dense = best_time(lambda: mech.phi_q(states), PHI_Q_REPEAT)
    raw = best_time(lambda: mech.evaluate("phi_q", q=states), PHI_Q_REPEAT)
    note = f"N = {PHI_Q_STATES}, best of {PHI_Q_REPEAT}"
    return [
        Figure("four-bar Φq, mech.phi_q (dense)", dense / PHI_Q_STATES * 1e9, "ns/state",
               100.0, note),
        Figure("four-bar Φq, evaluate (raw sparse)", raw / PHI_Q_STATES * 1e9, "ns/state",
               100.0, f"{note}; nnz = {mech.kernels['phi_q'].nnz}"),
    ]


def installed_bytecode() -> None:
    """mbgen's modules compiled to bytecode, as an installed package has them (pip
    compiles them at install time). Under PYTHONDONTWRITEBYTECODE (set on this machine) an
    editable install never keeps bytecode, and every fresh interpreter compiled each mbgen
    module from source: ~40 ms of the cold figure that no user of an installed mbgen
    pays. The child processes read the bytecode whatever that variable says."""
    import mbgen

    compileall.compile_dir(Path(mbgen.__file__).parent, quiet=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chain1000", action="store_true",
                        help="also build the 1 000-bar chain (minutes; peak memory too)")
    args = parser.parse_args(argv)
    sizes = CHAIN_SIZES + ((1000,) if args.chain1000 else ())
    scratch = fresh_dir("compile")
    installed_bytecode()
    try:
        start = time.perf_counter()
        load_figs, warm_root, raw_load = cold_and_warm(scratch)
        os.environ["MBGEN_CACHE"] = str(scratch / f"cache{FULLY_COLD_RUNS - 1}")
        phi_figs = phi_q_speed(warm_root)
        chain_figs, raw_chains = chains(scratch, Path(os.environ["MBGEN_CACHE"]), sizes)
        elapsed = time.perf_counter() - start
    finally:
        remove_dir(scratch)
    print_table("mbgen compile benchmarks: four-bar load", load_figs)
    print_table("batched Φq evaluation (four-bar)", phi_figs)
    print_table("pendulum chain: compile stages and scaling", chain_figs)
    figures = load_figs + phi_figs + chain_figs
    path = write_results("compile", figures,
                         {"raw": {**raw_load, **raw_chains}, "benchmark_seconds": elapsed})
    missed = [f.name for f in figures if f.met is False]
    print(f"wrote {path} ({elapsed:.1f} s); "
          + (f"targets missed: {', '.join(missed)}" if missed else "all targets met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

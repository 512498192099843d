"""Generated code that ships: an importable package without the compiler, and a standalone
C library that gives the Python face's numbers, from C and C++, from several threads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SHIPPED_DIR, one_worker_at_a_time, reference, session_dir

import mbgen
from mbgen.cli.main import cli
from mbgen.codegen.ship import EXAMPLE_SOURCE
from mbgen.runtime.compiled import CompiledMechanism

Compiled = Callable[[Path], CompiledMechanism]
STRICT = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror"]


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def states(mech: CompiledMechanism, count: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    q = mech.solve_position(mech.q0 + 0.02 * rng.standard_normal((count, mech.n)),
                            minimum_norm=True)
    return q, mech.project_velocity(q, rng.standard_normal((count, mech.n)))


def test_package_imports_without_sympy_and_gives_the_same_numbers(
        compiled: Compiled, tmp_path: Path, out_dir: Path) -> None:
    path = SHIPPED_DIR / "fourbar.yaml"
    mech = compiled(path)
    invoke("compile", str(path), "--build-dir", str(out_dir), "--package", str(tmp_path),
           "--name", "my_fourbar")
    q, qd = states(mech)
    script = (
        "import sys, json, numpy as np\n"
        "sys.modules['sympy'] = None  # any import of SymPy now fails\n"
        "import my_fourbar\n"
        "m = my_fourbar.mechanism\n"
        f"q, qd = np.array({q.tolist()}), np.array({qd.tolist()})\n"
        "print(json.dumps([a.tolist() for a in m.forward_dynamics_jacobians(q, qd)]))\n"
        "print(json.dumps(sorted(k for k in sys.modules if k.startswith('mbgen.'))))\n")
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(
                             Path(__file__).resolve().parents[1])})
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    for got, expected in zip(json.loads(lines[0]), mech.forward_dynamics_jacobians(q, qd),
                             strict=True):
        np.testing.assert_array_equal(np.array(got), expected)
    assert not [m for m in json.loads(lines[1]) if m.startswith(("mbgen.codegen.",
                                                                 "mbgen.symbolic", "mbgen.model"))]
    # a package from another mbgen version is refused by name
    meta_path = tmp_path / "my_fourbar" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["mbgen_version"] = "0.0.1"
    meta_path.write_text(json.dumps(meta))
    run = subprocess.run([sys.executable, "-c", "import my_fourbar"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "built by mbgen 0.0.1" in run.stderr
    # and so is one compiled for vector instructions this CPU may lack
    meta["mbgen_version"], meta["vector_level"] = mbgen.__version__, "x86-64-v9"
    meta_path.write_text(json.dumps(meta))
    run = subprocess.run([sys.executable, "-c", "import my_fourbar"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "compiled for x86-64-v9 CPUs" in run.stderr


def export(path: Path, target: Path, out_dir: Path, name: str) -> Path:
    invoke("export", str(path), "--c", str(target), "--name", name, "--build-dir", str(out_dir))
    subprocess.run(["make", "-s", f"CFLAGS={' '.join(STRICT)}"], cwd=target, check=True,
                   capture_output=True, timeout=300)
    return target


@pytest.fixture(scope="session")
def exported(tmp_path_factory: pytest.TempPathFactory,
             out_dir: Path) -> Callable[[Path, str], Path]:
    """``exported(path, name)``: :func:`export` done once a session, by one pytest-xdist
    worker, into a directory every worker shares (the same export and make for each test
    that links the library; its make compiles the whole core with STRICT)."""
    root = session_dir(tmp_path_factory, "exported")

    def get(path: Path, name: str) -> Path:
        target = root / name
        with one_worker_at_a_time(tmp_path_factory, f"export-{name}"):
            if not (target / f"lib{name}.a").is_file():
                export(path, target, out_dir, name)
        return target

    return get


def read_example(output: str, n: int) -> list[list[np.ndarray]]:
    """Per state: [q̈, Jq, Jqd, JQ] from the example program's lines."""
    values = [np.array(line.split()[1:], dtype=float) for line in output.splitlines()]
    shapes = [(n,), (n, n), (n, n), (n, n)]
    return [[v.reshape(s) for v, s in zip(values[k:k + 4], shapes, strict=True)]
            for k in range(0, len(values), 4)]


@pytest.mark.skipif(shutil.which("c++") is None or shutil.which("make") is None,
                    reason="needs make and a C++ compiler")
@pytest.mark.parametrize(("path", "name"), [(SHIPPED_DIR / "fourbar.yaml", "fourbar"),
                                            (reference("pick-and-place-robot"), "robot")])
def test_exported_library_matches_python_from_c_and_cpp(compiled: Compiled,
                                                        exported: Callable[[Path, str], Path],
                                                        path: Path, name: str) -> None:
    mech = compiled(path)
    target = exported(path, name)
    subprocess.run(["c++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-x", "c++",
                    EXAMPLE_SOURCE, "-x", "none", f"lib{name}.a", "-o", "example_cpp"],
                   cwd=target, check=True, capture_output=True, timeout=300)
    q, qd = states(mech)
    stdin = "\n".join(" ".join(repr(float(v)) for v in np.r_[a, b])
                      for a, b in zip(q, qd, strict=True))
    (target / "states.txt").write_text(stdin + "\n")
    for program in ("./example", "./example_cpp"):
        for args, given in ((["states.txt"], None), (["-"], stdin)):  # a file, or stdin
            run = subprocess.run([program, *args], cwd=target, input=given,
                                 capture_output=True, text=True, timeout=60)
            assert run.returncode == 0, run.stderr
            results = read_example(run.stdout, mech.n)
            assert len(results) == len(q)
            for k, result in enumerate(results):
                for got, expected in zip(result, mech.forward_dynamics_jacobians(q[k], qd[k]),
                                         strict=True):
                    scale = max(1.0, float(np.abs(expected).max()))
                    assert np.abs(got - expected).max() <= 1e-14 * scale


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_a_library_named_example_builds_beside_its_example_program(
        compiled: Compiled, tmp_path: Path, out_dir: Path) -> None:
    """example.yaml's library is example.c: the example program's source was example.c
    too and overwrote it (make failed). Run without arguments, the program prints q̈ at q0
    and reads nothing: it waited for stdin without a prompt."""
    path = tmp_path / "example.yaml"
    path.write_text((SHIPPED_DIR / "fourbar.yaml").read_text())
    mech = compiled(path)
    target = tmp_path / "lib"
    invoke("export", str(path), "--c", str(target), "--build-dir", str(out_dir))
    subprocess.run(["make", "-s", f"CFLAGS={' '.join(STRICT)}"], cwd=target, check=True,
                   capture_output=True, timeout=300)
    assert (target / "libexample.a").is_file() and (target / "example").is_file()
    read, write = os.pipe()  # a standard input that never ends, as a terminal's
    try:
        program = subprocess.Popen(["./example"], cwd=target, stdin=read,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            output, errors = program.communicate(timeout=60)
        finally:
            program.kill()
    finally:
        os.close(read)
        os.close(write)
    assert program.returncode == 0, errors
    [result] = read_example(output, mech.n)
    for got, expected in zip(result, mech.forward_dynamics_jacobians(mech.q0,
                                                                     np.zeros(mech.n)),
                             strict=True):
        assert np.abs(got - expected).max() <= 1e-14 * max(1.0, float(np.abs(expected).max()))
    help_text = subprocess.run(["./example", "-h"], cwd=target, capture_output=True,
                               text=True, timeout=60)
    assert help_text.returncode == 0 and "FILE" in help_text.stdout
    assert "./example states.txt" in (target / "README.md").read_text()
    # a partial state is refused with where it ends, a missing file by its name
    partial = subprocess.run(["./example", "-"], cwd=target, input="1 2 3", text=True,
                             capture_output=True, timeout=60)
    assert partial.returncode == 1 and "state 1" in partial.stderr and not partial.stdout
    missing = subprocess.run(["./example", "nope.txt"], cwd=target, capture_output=True,
                             text=True, timeout=60)
    assert missing.returncode == 1 and "nope.txt" in missing.stderr


@pytest.mark.parametrize("name", ["example", "Example", "EXAMPLE", "libexample", "Makefile",
                                  "README", "example_main", "main", "lib"])
def test_no_library_name_gives_a_file_of_the_example_program(name: str) -> None:
    """Whatever --name, the library's files and the example program's differ (also on a
    case-insensitive disk): '-' is in no name."""
    from mbgen.codegen.ship import library_files, package_name

    files = library_files(package_name(name, "x"))
    assert len({file.lower() for file in files}) == len(files)


THREADS = r"""
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "fourbar.h"
#include "robot.h"

enum { STATES = 2000, N = FOURBAR_N };
static fourbar_plan* plan;
static fourbar_options options;
static double out[3][STATES * N * N];

static void* work(void* arg) {
    double* jq = out[*(int*)arg];
    double q[N], qd[N], qdd[N];
    int status;
    for (int s = 0; s < STATES; ++s) {
        for (int i = 0; i < N; ++i) { q[i] = fourbar_q0[i]; qd[i] = 0.001 * (s + i); }
        fourbar_forward_dynamics(plan, &options, 1, q, 0, qd, 0, NULL, 0,
            fourbar_default_parameters, 0, qdd, NULL, jq + s * N * N, NULL, NULL, &status);
    }
    return NULL;
}

int main(void) {
    int ids[3] = {0, 1, 2};
    pthread_t threads[2];
    fourbar_default_options(&options);
    plan = fourbar_plan_new(fourbar_model_get(), fourbar_active_rows, FOURBAR_ACTIVE_ROWS);
    work(&ids[0]);  /* alone, then two at once */
    for (int k = 0; k < 2; ++k) pthread_create(&threads[k], NULL, work, &ids[k + 1]);
    for (int k = 0; k < 2; ++k) pthread_join(threads[k], NULL);
    int same = !memcmp(out[0], out[1], sizeof out[0]) && !memcmp(out[0], out[2], sizeof out[0]);
    /* a second exported mechanism links beside the first: prefixes keep them apart */
    robot_plan* other = robot_plan_new(robot_model_get(), robot_active_rows, ROBOT_ACTIVE_ROWS);
    printf("%s %d\n", same ? "same" : "DIFFERENT", robot_plan_factor_size(other) > 0);
    robot_plan_free(other);
    fourbar_plan_free(plan);
    return same ? 0 : 1;
}
"""


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_two_threads_and_two_libraries_in_one_program(
        tmp_path: Path, exported: Callable[[Path, str], Path]) -> None:
    fourbar = exported(SHIPPED_DIR / "fourbar.yaml", "fourbar")
    robot = exported(reference("pick-and-place-robot"), "robot")
    (tmp_path / "threads.c").write_text(THREADS)
    subprocess.run(["cc", *STRICT, "-pthread", f"-I{fourbar}", f"-I{robot}", "threads.c",
                    str(fourbar / "libfourbar.a"), str(robot / "librobot.a"), "-lm", "-o",
                    "threads"], cwd=tmp_path, check=True, capture_output=True, timeout=300)
    run = subprocess.run(["./threads"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0 and run.stdout.split() == ["same", "1"], run.stdout


def test_the_exported_library_holds_every_core_source() -> None:
    """A core file left out of the export would leave its header's functions undefined."""
    from mbgen.codegen.cache import core_sources
    from mbgen.codegen.ship import CORE_ORDER

    assert sorted(CORE_ORDER) == sorted(path.name for path in core_sources())


def test_the_exported_library_is_the_core_and_kernels_verbatim(tmp_path: Path) -> None:
    """The prefix comes from #defines the preprocessor applies (templates/export.*.j2):
    the core's sources and the build's mechanism.c are in the library unchanged, and the
    header is mbgen.h's text between the renames and their #undefs."""
    from mbgen.codegen.cache import csrc_dir
    from mbgen.codegen.ship import CORE_ORDER, export_files

    build = tmp_path / "0123456789abcdef"
    build.mkdir()
    kernels = ('#include "mb_model.h"\nconst mb_model* mb_model_get(void) { return 0; }\n'
               "static int k(void) { return MB_LANES + MB_OK; }\n")
    (build / "mechanism.c").write_text(kernels)
    (build / "meta.json").write_text(json.dumps({
        "name": "a */ b", "mbgen_version": mbgen.__version__, "n": 1, "m": 0,
        "coordinate_names": ["x"], "q0": [0.5], "parameters": {"g": 9.81}}))
    files = export_files(build, "demo", [])
    for source in CORE_ORDER[1:]:
        assert (csrc_dir() / source).read_text() in files["demo.c"]
    assert kernels in files["demo.c"]
    assert (csrc_dir() / "mbgen.h").read_text() in files["demo.h"]
    assert "#define mb_model_get demo_model_get\n" in files["demo.c"]
    assert "#define MB_OK DEMO_OK\n" in files["demo.h"] and "#undef MB_OK\n" in files["demo.h"]
    # a macro the core defines keeps its name (inside demo.c only), and user text stays
    # in comments
    assert "#define MB_LANES " not in files["demo.c"].split("#define MBGEN_SINGLE_FILE")[0]
    assert "a * / b" in files["demo.h"] and "a */ b" not in files["demo.h"]


def test_the_vector_level_is_the_highest_the_cpu_has_and_a_package_runs_on_any_above(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc/cpuinfo's flags give x86-64-v4 with AVX-512, v3 with AVX2 and FMA, else none;
    a package built for a level loads where the CPU has that level or a higher one."""
    from mbgen import cpu

    v3 = {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave", "sse2"}
    v4 = v3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
    assert cpu.level_of(v4) == cpu.X86_64_V4
    assert cpu.level_of(v4 - {"avx512vl"}) == cpu.X86_64_V3
    assert cpu.level_of(v3) == cpu.X86_64_V3
    assert cpu.level_of(v3 - {"fma"}) is None
    for here, runs in ((cpu.X86_64_V4, [True, True]), (cpu.X86_64_V3, [True, False]),
                       (None, [False, False])):
        monkeypatch.setattr(cpu, "vector_level", lambda here=here: here)
        assert [cpu.runs(cpu.X86_64_V3), cpu.runs(cpu.X86_64_V4)] == runs
        assert not cpu.runs("x86-64-v9")


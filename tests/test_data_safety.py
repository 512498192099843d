"""Whatever the input, nothing a user owns is lost and nothing they wrote runs: outputs
never land on inputs or on what mbgen did not make, and a mechanism's free text reaches
generated code only escaped."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import SHIPPED_DIR

from mbgen.cli.conventions import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNTRUSTED, EXIT_USAGE
from mbgen.cli.main import cli
from mbgen.errors import MechanismError
from mbgen.model.parser import load_mechanism

FOURBAR = SHIPPED_DIR / "fourbar.yaml"


def invoke(*args: object, cwd: Path | None = None) -> tuple[int, str]:
    old = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    finally:
        os.chdir(old)
    return result.exit_code, " ".join(result.output.split())


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` by relative path, with its bytes."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file()}


# -- text from a file never becomes code ---------------------------------------------------

SENTINEL = "mbgen-sentinel-ran"
HOSTILE = ('evil """ \n */ #include <stdio.h> ?? $x^2$ '
           f"__import__('os').system('touch {SENTINEL}')")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The four-bar named with docstring, comment and preprocessor breakers and a payload,
    in a file whose own name holds a comment's end."""
    path = tmp_path_factory.mktemp("hostile") / "four*_bar.yaml"
    text = FOURBAR.read_text().replace("name: fourbar", f"name: {json.dumps(HOSTILE)}")
    path.write_text(text)
    assert load_mechanism(path).name == HOSTILE
    return path


def test_a_hostile_name_runs_nowhere(hostile: Path, tmp_path: Path, out_dir: Path) -> None:
    """The package imports (the name only as a string literal), the exported C compiles
    with -Werror, the picture draws the name literally; the payload never ran."""
    code, output = invoke("compile", hostile, "--build-dir", out_dir, "--package",
                          tmp_path / "dist", "--name", "hostile")
    assert code == EXIT_OK, output
    init = (tmp_path / "dist" / "hostile" / "__init__.py").read_text()
    ast.parse(init)
    environment = {**os.environ, "PYTHONPATH": str(tmp_path / "dist")}
    shown = subprocess.run([sys.executable, "-c", "import hostile; print(repr("
                            "hostile.mechanism.name)); print(hostile.MECHANISM_NAME == "
                            "hostile.mechanism.name)"], cwd=tmp_path, env=environment,
                           capture_output=True, text=True, check=True).stdout
    assert shown.splitlines() == [repr(HOSTILE), "True"]
    code, output = invoke("export", hostile, "--c", tmp_path / "c", "--name", "hostile",
                          "--build-dir", out_dir)
    assert code == EXIT_OK, output
    subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                    "hostile.c"], cwd=tmp_path / "c", check=True)
    build = next(out_dir.glob("four*bar/*/mechanism.c"))
    head = build.read_text().split("*/", 1)[0]  # the name's */ did not end the comment
    assert "include <stdio.h>" in head and "the numerics are in mbgen/csrc" in head
    code, output = invoke("draw", hostile, "--out", tmp_path / "hostile.png", "--build-dir",
                          out_dir)
    assert code == EXIT_OK, output
    assert not list(tmp_path.rglob(SENTINEL)) and not Path(SENTINEL).exists()


@pytest.mark.parametrize(("directive", "mass"), [("%YAML 1.2\n---\n", 10), ("", 10),
                                                  ("%YAML 1.1\n---\n", 8)])
def test_numbers_follow_the_declared_yaml_version(tmp_path: Path, directive: str,
                                                  mass: int) -> None:
    """In YAML 1.2 (declared, or by default as the reference's yaml-cpp) 010 is ten; only a
    file that declares 1.1 gets PyYAML's octal eight."""
    path = tmp_path / "pendulum.yaml"
    path.write_text(f"{directive}points:\n  - {{x: 0, y: 0, fixed: true}}\n  - {{x: 1, y: 0}}\n"
                    "planar_bodies:\n  - {name: bar, points: [0, 1], length: 1, mass: 010}\n")
    assert float(load_mechanism(path).bodies[0].mass) == mass


# -- outputs never destroy inputs or what mbgen did not make -----------------------------

def test_a_package_never_replaces_what_mbgen_did_not_make(tmp_path: Path,
                                                          out_dir: Path) -> None:
    """`--package . --name mechanisms` would have replaced the folder holding the input:
    refused even with --force. A user's folder of that name is refused without --force;
    files beside it are never touched; a package mbgen made is replaced in place."""
    project = tmp_path / "project"
    shutil.copytree(SHIPPED_DIR, project / "mechanisms")
    (project / ".hostile.old").mkdir()  # the fixed name the old replacement used
    (project / ".hostile.old" / "keep.txt").write_text("mine")
    (project / "hostile").mkdir()
    (project / "hostile" / "notes.txt").write_text("mine too")
    before = snapshot(project)
    for extra in ([], ["--force"]):
        code, output = invoke("compile", "mechanisms/fourbar.yaml", "--package", ".", "--name",
                              "mechanisms", "--build-dir", out_dir, *extra, cwd=project)
        assert code == EXIT_BAD_INPUT and "mbgen must not replace" in output, output
    code, output = invoke("compile", "mechanisms/fourbar.yaml", "--package", ".", "--name",
                          "hostile", "--build-dir", out_dir, cwd=project)
    assert code == EXIT_BAD_INPUT and "not made by mbgen" in output and "--force" in output
    assert snapshot(project) == before
    code, output = invoke("compile", "mechanisms/fourbar.yaml", "--package", ".", "--name",
                          "fourbar", "--build-dir", out_dir, cwd=project)
    assert code == EXIT_OK, output
    first = snapshot(project / "fourbar")
    code, output = invoke("compile", "mechanisms/fourbar.yaml", "--package", ".", "--name",
                          "fourbar", "--build-dir", out_dir, cwd=project)
    assert code == EXIT_OK, output
    assert snapshot(project / "fourbar").keys() == first.keys()
    after = snapshot(project)
    assert {k: v for k, v in after.items() if not k.startswith("fourbar/")} == before


def test_export_never_overwrites_a_users_files(tmp_path: Path, out_dir: Path) -> None:
    """A folder with the user's own README.md and Makefile is refused without --force; with
    it, only the export's five files are written, and never over an input."""
    folder = tmp_path / "work"
    folder.mkdir()
    for name in ("README.md", "Makefile", "data.csv"):
        (folder / name).write_text(f"the user's {name}")
    code, output = invoke("export", FOURBAR, "--c", folder, "--build-dir", out_dir)
    assert code == EXIT_BAD_INPUT and "not made by mbgen" in output
    assert (folder / "README.md").read_text() == "the user's README.md"
    code, output = invoke("export", FOURBAR, "--c", folder, "--force", "--build-dir", out_dir)
    assert code == EXIT_OK, output
    assert (folder / "data.csv").read_text() == "the user's data.csv"
    assert "fourbar_plan_new" in (folder / "fourbar.h").read_text()
    mechanism = folder / "Makefile.yaml"
    shutil.copy(FOURBAR, mechanism)
    (folder / "mechanism.c").symlink_to(mechanism)
    code, output = invoke("export", mechanism, "--c", folder, "--name", "mechanism",
                          "--build-dir", out_dir)
    assert code == EXIT_BAD_INPUT and "would replace the input" in output
    assert mechanism.read_text() == FOURBAR.read_text()


def _readings(tmp_path: Path, out_dir: Path) -> Path:
    path = tmp_path / "readings.csv"
    code, output = invoke("simulate", FOURBAR, "--t-end", "0.05", "--dt", "0.01", "--out",
                          tmp_path / "truth.csv", "--sensors-out", path, "--build-dir", out_dir)
    assert code == EXIT_OK, output
    return path


@pytest.mark.parametrize("case", ["simulate", "sensors-out", "estimate", "inverse", "draw",
                                  "animate", "identify", "plot"])
def test_an_output_never_lands_on_an_input(tmp_path: Path, out_dir: Path, case: str) -> None:
    """Each command refuses, before any work, an output that is one of its inputs (by
    another name too: a symlink) or another of its outputs; the input stays as it was."""
    mechanism = tmp_path / "fourbar.png"  # a mechanism file a picture could overwrite
    shutil.copy(FOURBAR, mechanism)
    readings = _readings(tmp_path, out_dir)
    (tmp_path / "link.csv").symlink_to(readings)
    trajectory = tmp_path / "path.txt"
    trajectory.write_text("0 0\n0.1 0.1\n0.2 0.2\n0.3 0.3\n")
    build = ["--build-dir", str(out_dir)]
    args, victim, option = {
        "simulate": (["simulate", mechanism, "--t-end", "1", "--dt", "0.1", "--out",
                      tmp_path / "." / "fourbar.png"], mechanism, "--out"),
        "sensors-out": (["simulate", FOURBAR, "--t-end", "1", "--dt", "0.1", "--out",
                         readings, "--sensors-out", tmp_path / "link.csv"], readings,
                        "--sensors-out"),
        "estimate": (["estimate", FOURBAR, "--data", readings, "--out",
                      tmp_path / "link.csv"], readings, "--out"),
        "inverse": (["inverse", FOURBAR, "--trajectory", trajectory, "--imposed", "x1",
                     "--out", trajectory], trajectory, "--out"),
        "draw": (["draw", mechanism, "--out", mechanism], mechanism, "--out"),
        "animate": (["animate", readings, "--mechanism", FOURBAR, "--out",
                     tmp_path / "readings.gif", "--truth", tmp_path / "readings.gif"],
                    None, "--out"),
        "identify": (["identify", FOURBAR, "--data", readings, "--params", "L", "--out",
                      readings], readings, "--out"),
        "plot": (["simulate", FOURBAR, "--t-end", "1", "--dt", "0.1", "--out",
                  tmp_path / "fourbar.csv", "--plot", "--sensors-out",
                  tmp_path / "fourbar_energy.png"], None, "--plot"),
    }[case]
    if case == "animate":
        (tmp_path / "readings.gif").write_bytes(b"GIF89a")
        victim = tmp_path / "readings.gif"
    before = None if victim is None else victim.read_bytes()
    code, output = invoke(*args, *build)
    assert code == EXIT_USAGE, output
    assert f"Invalid value for {option}" in output or f"for {option}" in output, output
    assert "never writes an output over an input" in output or "overwrite the other" in output
    if victim is not None:
        assert victim.read_bytes() == before


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_results_are_written_only_over_regular_files(tmp_path: Path, out_dir: Path,
                                                     kind: str) -> None:
    """Renaming into place would replace a symlink (to the user's file), a FIFO or a
    directory: refused before the run, and what stood there is unchanged."""
    target = tmp_path / "run.csv"
    precious = tmp_path / "precious.txt"
    precious.write_text("mine")
    if kind == "symlink":
        target.symlink_to(precious)
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()
    code, output = invoke("simulate", FOURBAR, "--t-end", "0.1", "--dt", "0.01", "--out",
                          target, "--build-dir", out_dir)
    assert code == EXIT_USAGE, output
    assert "not a regular file" in output or "is a directory" in output, output
    assert precious.read_text() == "mine"
    assert target.is_symlink() if kind == "symlink" else (
        target.is_fifo() if kind == "fifo" else target.is_dir())


# -- bounded work, and no result taken for what it is not -------------------------------

EXAMPLE_READINGS = SHIPPED_DIR.parent / "examples" / "fourbar-readings.csv"


@pytest.mark.parametrize(("args", "message"), [
    (["simulate", FOURBAR, "--t-end", "1e9", "--dt", "1e-3"],
     "this would run 1e+12 time steps (1e+09 s every 0.001 s), more than the 10,000,000 "
     "of --max-steps"),
    (["simulate", FOURBAR, "--t-end", "2", "--dt", "1e-3", "--max-steps", "1000"],
     "2000 time steps"),
    (["inverse", SHIPPED_DIR / "slider-crank.yaml", "--motion", "phi=t", "--t-end", "1e6",
      "--dt", "1e-4"], "1e+10 samples"),
    (["animate", SHIPPED_DIR.parent / "examples" / "fourbar-run.csv", "--mechanism", FOURBAR,
      "--fps", "120", "--max-frames", "100"], "241 frames (2 s at 120 fps)"),
    (["estimate", FOURBAR, "--data", EXAMPLE_READINGS, "--dt", "1e-308"],
     "inf filter steps of 1e-308 s from t = 0 to 2 s: the step is too small"),
])
def test_work_beyond_its_limit_is_refused_before_it_starts(tmp_path: Path, out_dir: Path,
                                                           args: list, message: str) -> None:
    suffix = ".gif" if args[0] == "animate" else ".csv"
    code, output = invoke(*args, "--out", tmp_path / f"out{suffix}", "--build-dir", out_dir)
    assert code == EXIT_USAGE and message in output, output
    assert not list(tmp_path.iterdir())


def test_an_outlier_time_cannot_make_the_filter_run_for_ever(tmp_path: Path,
                                                             out_dir: Path) -> None:
    """One reading at t = 1e9 s among 2 s of readings planned 1e12 filter steps."""
    readings = tmp_path / "readings.csv"
    readings.write_text(EXAMPLE_READINGS.read_text() + "1e9,0.1\n")
    code, output = invoke("estimate", FOURBAR, "--data", readings, "--out",
                          tmp_path / "e.csv", "--build-dir", out_dir)
    assert code == EXIT_USAGE and "filter steps (t = 0 to 1e+09 s every 0.001 s)" in output
    assert not (tmp_path / "e.csv").exists()


def test_a_diverged_estimate_is_not_written(tmp_path: Path, out_dir: Path) -> None:
    """--dt 1 s over readings every millisecond: the readings left out are said, the
    particles' prediction diverges (every one of 100: RK4 over 1 s), exit code 4 and no
    CSV (it was NaN under ✓)."""
    target = tmp_path / "e.csv"
    code, output = invoke("estimate", FOURBAR, "--data", EXAMPLE_READINGS, "--dt", "1",
                          "--particles", "100", "--noise-sensor", "0.0175", "--out", target,
                          "--build-dir", out_dir)
    assert code == EXIT_UNTRUSTED and "✓" not in output, output
    assert "readings fall between filter steps of 1 s and are not used" in output
    assert "the estimate is not finite" in output and not target.exists()


@pytest.mark.parametrize(("args", "message"), [
    (["animate", SHIPPED_DIR.parent / "examples" / "fourbar-run.csv", "--mechanism", FOURBAR,
      "--trace", "²"], "unknown point '²'"),
    (["animate", SHIPPED_DIR.parent / "examples" / "fourbar-run.csv", "--mechanism", FOURBAR,
      "--trace", "9" * 6000], "unknown point"),
    (["inverse", SHIPPED_DIR / "slider-crank.yaml", "--motion", "²=t", "--t-end", "1",
      "--dt", "0.1"], "unknown coordinate '²'"),
])
def test_unicode_and_huge_digits_are_names_not_numbers(tmp_path: Path, out_dir: Path,
                                                       args: list, message: str) -> None:
    """'²'.isdigit() is true and int('²') raises; a 6000-digit int() raises too: both were
    internal errors."""
    suffix = ".gif" if args[0] == "animate" else ".csv"
    code, output = invoke(*args, "--out", tmp_path / f"out{suffix}", "--build-dir", out_dir)
    assert code in (EXIT_BAD_INPUT, EXIT_USAGE) and message in output, output


def test_a_byte_order_mark_and_a_size_limit_for_mechanism_files(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               ) -> None:
    """A file saved with a UTF-8 BOM reads as without it (it was refused with a misleading
    message); a file beyond the size limit is refused before it is read."""
    from mbgen.model import yaml_nodes

    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + FOURBAR.read_bytes())
    assert load_mechanism(path).name == "fourbar"
    monkeypatch.setattr(yaml_nodes, "MAX_FILE_BYTES", 100)
    with pytest.raises(MechanismError, match="a mechanism file may have at most"):
        load_mechanism(path)


def test_identification_refuses_what_memory_cannot_hold(tmp_path: Path, out_dir: Path) -> None:
    """A million rows tried to allocate ~21 GB: the Jacobian's size is estimated before the
    work (here 2e10 steps, about 170 TB) and refused with the figure."""
    code, output = invoke("identify", FOURBAR, "--data", EXAMPLE_READINGS, "--params", "L",
                          "--substeps", "10000000", "--max-steps", "100000000000", "--out",
                          tmp_path / "id.yaml", "--build-dir", out_dir)
    assert code == EXIT_USAGE and "GiB of memory, more than half of this machine's" in output
    assert not list(tmp_path.iterdir())


def test_a_mechanism_nested_2000_levels_deep_is_a_located_error(tmp_path: Path) -> None:
    """PyYAML composes recursively: 2 000 levels were a RecursionError (exit 3) in
    `mbgen check` as in a study; the shared YAML reader bounds the nesting."""
    path = tmp_path / "deep.yaml"
    path.write_text(FOURBAR.read_text() + f"visual: {'[' * 2000}{']' * 2000}\n")
    code, output = invoke("check", path)
    lines = FOURBAR.read_text().count("\n") + 1
    assert code == EXIT_BAD_INPUT, output
    assert f"{path}:{lines}: invalid YAML: values nested more than 64 levels deep" in output


@pytest.mark.parametrize(("command", "out", "extra"), [
    ("simulate", "run.csv", ["--t-end", "0.01", "--dt", "0.001"]),
    ("estimate", "run.csv", ["--data", str(EXAMPLE_READINGS)]),
    ("identify", "run.yaml", ["--data", str(EXAMPLE_READINGS), "--params", "L"]),
])
def test_the_name_an_untrusted_result_would_take_is_checked_before_the_work(
        tmp_path: Path, command: str, out: str, extra: list[str]) -> None:
    """The mechanism file is named as the untrusted result of --out would be: refused
    before anything is loaded or run (it was checked only once the run had failed), the
    file kept as it was."""
    target = tmp_path / out
    source = tmp_path / f"{target.stem}.untrusted{target.suffix}"
    shutil.copy(FOURBAR, source)
    before = source.read_bytes()
    code, output = invoke(command, source, *extra, "--out", target)
    assert code == EXIT_USAGE and "never writes an output over an input" in output, output
    assert source.read_bytes() == before and not target.exists()

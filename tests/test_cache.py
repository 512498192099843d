"""The compile cache: content-hashed build directories, reuse, invalidation, concurrency."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import quick_core_flags, reference

import mbgen
import mbgen.codegen.build
from mbgen.errors import MechanismError
from mbgen.runtime.compiled import CompiledMechanism

Compiled = Callable[[Path], CompiledMechanism]


def _stem_dir(out: Path, stem: str) -> Path:
    return out / stem


def _builds(out: Path, stem: str) -> list[Path]:
    return sorted(p for p in _stem_dir(out, stem).iterdir() if p.is_dir())


def _leftovers(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob(".tmp-*"))


@pytest.fixture
def pendulum(tmp_path: Path) -> Path:
    path = tmp_path / "src" / "pendulum1.yaml"
    path.parent.mkdir()
    shutil.copy(reference("pendulum1"), path)
    return path


def test_second_load_is_a_cache_hit(pendulum: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    first = mbgen.load(str(pendulum), out_dir=str(out))
    assert first.directory.parent.parent == out
    meta_file = first.directory / "meta.json"
    meta = json.loads(meta_file.read_text())
    assert set(meta["timings"]) >= {"derive", "codegen", "compile"}
    stamps = {p.name: p.stat().st_mtime_ns for p in first.directory.iterdir()}

    def no_compile(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cache hit must not recompile")

    monkeypatch.setattr(mbgen.codegen.build, "compile_mechanism", no_compile)
    time.sleep(0.01)
    second = mbgen.load(str(pendulum), out_dir=str(out))
    assert second.directory == first.directory
    assert {p.name: p.stat().st_mtime_ns for p in second.directory.iterdir()} == stamps
    assert json.loads(meta_file.read_text()) == meta
    assert _builds(out, "pendulum1") == [first.directory]
    np.testing.assert_array_equal(second.mass_matrix(second.q0), first.mass_matrix(first.q0))


def test_force_rebuilds_a_damaged_build(pendulum: Path, tmp_path: Path) -> None:
    """``force=True`` must replace a cached build, e.g. one whose module got corrupted.

    Built without importing it here, and loaded in a child process, so that this process
    never maps the shared object that the test damages.
    """
    out = tmp_path / "out"
    directory = mbgen.codegen.build.compile_mechanism(pendulum, out)
    (module,) = directory.glob("_mbgen_*.so")
    module.write_bytes(b"not an ELF file")
    script = ("import sys, mbgen; m = mbgen.load(sys.argv[1], out_dir=sys.argv[2], force=True);"
              " print(m.directory, abs(m.phi(m.q0)).max())")
    result = subprocess.run([sys.executable, "-c", script, str(pendulum), str(out)],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[0] == str(directory)
    assert float(result.stdout.split()[1]) < 1e-9
    assert module.stat().st_size > 1000
    assert _leftovers(out) == []


def test_editing_the_file_changes_the_hash_and_recompiles(pendulum: Path,
                                                          tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = mbgen.load(str(pendulum), out_dir=str(out))
    old_hash = json.loads((first.directory / "meta.json").read_text())["hash"]
    assert first.directory.name == old_hash
    assert first.mass_matrix(first.q0)[0, 0] == pytest.approx(5.0 * 4.0 / 3 / 4.0)

    pendulum.write_text(pendulum.read_text().replace("mass: 5.0", "mass: 8.0"))
    second = mbgen.load(str(pendulum), out_dir=str(out))
    new_hash = json.loads((second.directory / "meta.json").read_text())["hash"]
    assert new_hash != old_hash
    assert second.directory != first.directory
    assert second.mass_matrix(second.q0)[0, 0] == pytest.approx(8.0 * 4.0 / 3 / 4.0)
    # The stale build is gone: one directory per mechanism name.
    assert _builds(out, "pendulum1") == [second.directory]
    assert _leftovers(out) == []
    # The hash covers the file's bytes: even a comment recompiles.
    pendulum.write_text(pendulum.read_text() + "# a comment\n")
    third = mbgen.load(str(pendulum), out_dir=str(out))
    assert third.directory not in (first.directory, second.directory)
    assert _builds(out, "pendulum1") == [third.directory]


def test_same_content_elsewhere_reuses_build(tmp_path: Path, out_dir: Path,
                                             compiled: Compiled) -> None:
    original = compiled(reference("pendulum1"))
    other = tmp_path / "elsewhere" / "pendulum1.yaml"
    other.parent.mkdir()
    shutil.copy(reference("pendulum1"), other)
    assert mbgen.load(str(other), out_dir=str(out_dir)).directory == original.directory


def test_out_dir_defaults_to_mbgen_out(tmp_path: Path, out_dir: Path, compiled: Compiled,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    original = compiled(reference("pendulum1"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MBGEN_OUT", str(out_dir))
    assert mbgen.load(str(reference("pendulum1"))).directory == original.directory
    assert list(tmp_path.iterdir()) == []  # nothing written to ./generated


CHILD = textwrap.dedent("""\
    import json, sys, time
    from pathlib import Path
    import mbgen
    import mbgen.codegen.build
    path, out, ready, go, how, core_flags = sys.argv[1:]
    mbgen.codegen.build.CORE_FLAGS = json.loads(core_flags)  # the parent's (quick_core)
    Path(ready).touch()
    deadline = time.monotonic() + 60
    while not Path(go).exists():
        if time.monotonic() > deadline:
            sys.exit("never told to go")
        time.sleep(0.005)
    if how == "cli":  # `mbgen compile`, as a user starts it
        from mbgen.cli.main import cli
        cli.main(["compile", path, "--build-dir", out], standalone_mode=False)
    mech = mbgen.load(path, out_dir=out)
    assert abs(mech.phi(mech.q0)).max() < 1e-9
    print(mech.directory)
    """)


def test_concurrent_compiles_into_same_out_dir(tmp_path: Path, quick_core: list[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Three processes at once, two of them `mbgen compile`, with no core compiled yet:
    one build, one core, no left-overs."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    monkeypatch.setenv("MBGEN_CACHE", str(cache))  # the children's too
    source = tmp_path / "fourbars1.yaml"
    shutil.copy(reference("fourbars1"), source)
    children = []
    for k, how in enumerate(["load", "cli", "cli"]):
        ready, go = tmp_path / f"ready{k}", tmp_path / "go"
        children.append((ready, subprocess.Popen(
            [sys.executable, "-c", CHILD, str(source), str(out), str(ready), str(go), how,
             json.dumps(quick_core)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)))
    deadline = time.monotonic() + 60
    while not all(ready.exists() for ready, _ in children):  # both imported mbgen
        assert time.monotonic() < deadline, "children did not start"
        assert all(child.poll() is None for _, child in children), "a child died early"
        time.sleep(0.01)
    (tmp_path / "go").touch()  # release both at once
    directories = []
    for _, child in children:
        stdout, stderr = child.communicate(timeout=120)
        assert child.returncode == 0, stderr
        directories.append(stdout.strip().splitlines()[-1])
    assert directories[0] == directories[1] == directories[2]
    builds = _builds(out, "fourbars1")
    assert [str(b) for b in builds] == [directories[0]]
    assert _leftovers(out) == []
    assert sorted(p.name for p in out.iterdir()) == ["fourbars1"]
    # the C core, compiled once for every module of every out dir, and its checksum
    core = mbgen.codegen.build.core_object(os.environ.get("CC", "cc"))
    assert core.parent == cache / "core"
    assert sorted(p.name for p in core.parent.iterdir()) == [core.name, f"{core.name}.sha256"]
    assert mbgen.codegen.build.is_core_object(core)
    mech = mbgen.load(str(source), out_dir=str(out))
    assert str(mech.directory) == directories[0]
    assert (mech.n, mech.m) == (4, 3)


def _core(cache: Path) -> Path:
    core = mbgen.codegen.build.core_object(os.environ.get("CC", "cc"))
    assert core.parent == cache / "core"
    return core


def test_a_fresh_out_dir_links_the_installed_core(pendulum: Path, tmp_path: Path,
                                                  core_cache: Path, compiled: Compiled,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The C core is compiled once per installation, not per out dir: a build into a new
    out dir compiles the kernels only and links the same core file; and two mechanisms
    linked with it live side by side in one process."""
    fourbar = compiled(reference("fourbars1"))  # the core exists from here on
    core = _core(core_cache)
    before = core.stat()

    def no_core_build(*args: object) -> None:
        raise AssertionError("the installed core must not be compiled again")

    monkeypatch.setattr(mbgen.codegen.build, "_build_core", no_core_build)
    mech = mbgen.load(str(pendulum), out_dir=str(tmp_path / "fresh"))
    after = core.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert not (tmp_path / "fresh" / "_core").exists()
    assert (mech.n, fourbar.n) == (2, 4)
    assert abs(mech.phi(mech.q0)).max() < 1e-9 and abs(fourbar.phi(fourbar.q0)).max() < 1e-9
    assert mech.lib is not fourbar.lib


def test_the_core_key_follows_flags_compiler_and_sources(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    build = mbgen.codegen.build
    monkeypatch.setenv("MBGEN_CACHE", str(tmp_path))
    keys = {build.core_object("cc")}
    monkeypatch.setattr(build, "CORE_FLAGS", [*build.CORE_FLAGS, "-DMB_OTHER"])
    keys.add(build.core_object("cc"))
    monkeypatch.setattr(build, "GLUE_FLAGS", [*build.GLUE_FLAGS, "-DMB_OTHER"])
    keys.add(build.core_object("cc"))
    compiler = tmp_path / "cc"  # another compiler of the same name
    compiler.write_text("#!/bin/sh\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    keys.add(build.core_object("cc"))
    monkeypatch.setattr(build, "core_digest", lambda: "0" * 16)  # other core sources
    keys.add(build.core_object("cc"))
    assert len(keys) == 5 and all(k.parent == tmp_path / "core" for k in keys)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "no checksum"])
def test_a_damaged_core_is_not_used_but_rebuilt(pendulum: Path, tmp_path: Path,
                                                core_cache: Path, damage: str,
                                                compiled: Compiled,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A core file that is not whole (a disk error, a user's edit, a copy cut short) is
    compiled anew, never linked."""
    compiled(reference("pendulum1"))  # the session's core exists
    whole = _core(core_cache)
    cache = tmp_path / "cache"
    monkeypatch.setenv("MBGEN_CACHE", str(cache))
    monkeypatch.setattr(mbgen.codegen.build, "CORE_FLAGS", quick_core_flags())  # rebuilt at -O0
    core = _core(cache)
    core.parent.mkdir(parents=True)
    # the session's whole core under this key (copied file by file: another pytest-xdist
    # worker may be staging a compile in the session's cache meanwhile)
    shutil.copy(whole, core)
    shutil.copy(whole.with_name(f"{whole.name}.sha256"), core.with_name(f"{core.name}.sha256"))
    assert mbgen.codegen.build.is_core_object(core)
    if damage == "garbage":
        core.write_bytes(b"\x7fELF" + b"\0" * 100)
    elif damage == "truncated":
        core.write_bytes(core.read_bytes()[:-1000])
    else:
        core.with_name(f"{core.name}.sha256").unlink()
    assert not mbgen.codegen.build.is_core_object(core)
    mech = mbgen.load(str(pendulum), out_dir=str(tmp_path / "out"))
    assert mbgen.codegen.build.is_core_object(core)
    assert abs(mech.phi(mech.q0)).max() < 1e-9
    assert [p.name for p in core.parent.glob(".tmp-*")] == []


def test_a_cache_that_cannot_be_written_still_builds(pendulum: Path, tmp_path: Path,
                                                     quick_core: list[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """$MBGEN_CACHE naming a file (as a read-only home would): the core is compiled for
    the module alone, the templates uncached, and the build works."""
    cache = tmp_path / "not-a-directory"
    cache.write_text("a user's file\n")
    monkeypatch.setenv("MBGEN_CACHE", str(cache))
    mech = mbgen.load(str(pendulum), out_dir=str(tmp_path / "out"))
    assert abs(mech.phi(mech.q0)).max() < 1e-9
    assert cache.read_text() == "a user's file\n"
    assert _leftovers(tmp_path / "out") == []


def _command_lines_naming(path: Path) -> list[str]:
    """Command lines of the running processes that mention ``path`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # not a process, or it ended meanwhile
            continue
        if str(path) in line:
            found.append(line)
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_compile_killed_midway_leaves_nothing_behind(tmp_path: Path, out_dir: Path) -> None:
    """SIGKILL while the C compiler runs: its compilers die with it, and the next load
    removes the staging directory (its owner is gone) and builds normally."""
    import os
    import signal

    source = tmp_path / "killed.yaml"
    source.write_text(reference("pendulum1").read_text() + f"# {time.time()}\n")  # new hash
    script = ("import sys; from mbgen.cli.main import cli; "
              "cli.main(['compile', sys.argv[1], '--build-dir', sys.argv[2]])")
    child = subprocess.Popen([sys.executable, "-c", script, str(source), str(out_dir)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (started := list((out_dir / "killed").glob(".tmp-*/mechanism.c"))):
        assert time.monotonic() < deadline and child.poll() is None, "no compile seen"
        time.sleep(0.005)
    staging = started[0].parent
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    deadline = time.monotonic() + 5
    while _command_lines_naming(staging):
        assert time.monotonic() < deadline, "a compiler outlived mbgen"
        time.sleep(0.05)
    assert staging.exists()  # nobody could clean up ...
    mech = mbgen.load(str(source), out_dir=str(out_dir))  # ... until the next compile
    assert not staging.exists() and _leftovers(out_dir / "killed") == []
    shutil.rmtree(out_dir / "killed")  # the session's cache: no build per run
    assert abs(mech.phi(mech.q0)).max() < 1e-9


def test_missing_file_raises_mechanism_error(tmp_path: Path) -> None:
    missing = tmp_path / "does-not-exist.yaml"
    with pytest.raises(MechanismError) as info:
        mbgen.load(str(missing), out_dir=str(tmp_path / "out"))
    assert info.value.file == str(missing)
    assert "no such mechanism file" in str(info.value)
    assert not (tmp_path / "out").exists()


def test_directory_is_not_a_mechanism_file(tmp_path: Path) -> None:
    with pytest.raises(MechanismError):
        mbgen.load(str(tmp_path), out_dir=str(tmp_path / "out"))


def _ast_imports(path: Path) -> set[str]:
    """The oracle: every mbgen module ``path`` imports, read by Python's own parser (not
    cache.py's scan of the text), outside TYPE_CHECKING blocks."""
    import ast

    tree = ast.parse(path.read_text())
    skipped = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
               and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
               for inner in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "mbgen":
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "mbgen"}
    return found


def test_the_hash_reads_every_module_the_build_imports() -> None:
    """The modules hashed are the build's own imports, followed to the end: the same set
    as Python's parser finds from codegen/build.py, every module a compile has loaded
    (in a fresh process), and among them those the old hand list left out."""
    from mbgen.codegen.cache import PACKAGE_ROOT, deriving_sources

    def source(module: str) -> Path | None:
        path = PACKAGE_ROOT.joinpath(*module.split(".")[1:])
        return next((p for p in (path / "__init__.py", path.with_suffix(".py"))
                     if p.is_file()), None)

    closure: dict[str, Path] = {}
    todo = ["mbgen.codegen.build"]
    while todo:
        module = todo.pop()
        path = source(module)
        if module in closure or path is None:
            continue
        closure[module] = path
        for name in _ast_imports(path):
            todo += [".".join(name.split(".")[:k]) for k in range(2, name.count(".") + 2)]
    hashed = set(deriving_sources())
    assert hashed == set(closure.values())
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, mbgen.codegen.build as b; from mbgen.codegen import "
         "emit; print(*sorted(m for m in sys.modules if m.startswith('mbgen.')))"],
        capture_output=True, text=True, check=True).stdout.split()
    assert {closure[m] for m in loaded} <= hashed  # KeyError: loaded but not hashed
    assert {PACKAGE_ROOT / "redundancy.py", PACKAGE_ROOT / "escaping.py"} <= hashed
    assert PACKAGE_ROOT / "cli" / "main.py" not in hashed  # not everything either


def test_touching_any_module_that_shapes_the_c_changes_the_hash(tmp_path: Path) -> None:
    """Each module the build imports, touched by one comment line in a copy of the
    package, gives another fingerprint; so does a new import that brings a module in."""
    from mbgen.codegen.cache import PACKAGE_ROOT, _source_fingerprint, deriving_sources

    sources = [path.relative_to(PACKAGE_ROOT) for path in deriving_sources()]

    def copy(name: str, touched: Path | None = None, line: str = "# touched") -> Path:
        root = tmp_path / name / "mbgen"  # a new path each: the sources are read once a path
        for relative in [*sources, Path("runtime", "__init__.py"), Path("runtime", "options.py")]:
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(PACKAGE_ROOT / relative, root / relative)
        if touched is not None:
            with (root / touched).open("a") as file:
                file.write(f"\n{line}\n")
        return root

    base = _source_fingerprint(copy("base"))
    assert _source_fingerprint(copy("again")) == base
    changed = [relative for k, relative in enumerate(sources)
               if _source_fingerprint(copy(f"touched{k}", relative)) == base]
    assert not changed and len(sources) > 30
    grown = copy("grown", Path("redundancy.py"), "from mbgen.runtime.options import *")
    assert grown / "runtime" / "options.py" in deriving_sources(grown)
    assert _source_fingerprint(copy("inert", Path("runtime", "options.py"))) == base


def test_what_a_build_is_made_of_is_read_by_the_one_reader(tmp_path: Path) -> None:
    """A file naming a robot (``urdf:``) is hashed with the robot's text, both read by the
    model's bounded reader and parser: a value nested 3 000 levels deep is the loader's
    located error, not a RecursionError of a second, unbounded parse."""
    from mbgen.codegen.cache import mechanism_bytes

    robot = tmp_path / "robot.urdf"
    robot.write_text("<robot name='r'/>\n")
    including = tmp_path / "arm.yaml"
    including.write_text("urdf: robot.urdf\n")
    first = mechanism_bytes(including)
    assert first.startswith(b"urdf: robot.urdf\n") and b"<robot name='r'/>" in first
    robot.write_text("<robot name='s'/>\n")
    assert mechanism_bytes(including) != first  # a changed robot is a new build
    deep = tmp_path / "deep.yaml"
    deep.write_text("urdf: robot.urdf\nname: " + "[" * 3000 + "]" * 3000 + "\n")
    assert mechanism_bytes(deep) == deep.read_bytes()
    with pytest.raises(MechanismError, match="nested more than"):
        mbgen.load(str(deep), out_dir=str(tmp_path / "out"))

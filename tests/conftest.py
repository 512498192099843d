"""Shared fixtures: mechanism paths, a session-wide compile cache, numerical helpers.

Every compile of the suite goes to a session temporary directory (or to ``$MBGEN_OUT`` when
the caller set it), never into the repository's ``generated/``; the C core compiled once
per installation likewise goes to a session directory (or ``$MBGEN_CACHE``), never into
the user's ``~/.cache``.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

import mbgen
from mbgen.runtime.compiled import CompiledMechanism

REPO = Path(__file__).resolve().parents[1]
SHIPPED_DIR = REPO / "mechanisms"

# Copies of the reference implementation's data files, kept in the repository (see the README
# there): every test that needs a reference mechanism uses these.
REFERENCE_DATA = REPO / "tests" / "data" / "reference"
REFERENCE_DIR = REFERENCE_DATA / "config" / "mechanisms"

# The shared directory beside the repository, the originals' home: only
# test_shared_reference.py reads it, and it is skipped when the directory is absent.
# $MBGEN_SHARED overrides the location (``MBGEN_SHARED=/nonexistent`` hides it).
SHARED_DIR = Path(os.environ.get("MBGEN_SHARED") or REPO.parent / "shared")
SHARED_REFERENCE = SHARED_DIR / "reference" / "mbse"

REFERENCE_MECHANISMS: list[Path] = sorted(REFERENCE_DIR.glob("*.yaml"))
# Globbed at collection time: the shipped set is still growing and may be sparse or empty.
SHIPPED: list[Path] = sorted(SHIPPED_DIR.glob("*.yaml"))
ALL_MECHANISMS: list[Path] = REFERENCE_MECHANISMS + SHIPPED


def mechanism_id(path: Path) -> str:
    """Readable test id: ``reference/pendulum1`` or ``shipped/fourbar``."""
    group = "shipped" if path.parent.resolve() == SHIPPED_DIR.resolve() else "reference"
    return f"{group}/{path.stem}"


def reference(name: str) -> Path:
    """Path of one reference mechanism (the copy in tests/data), e.g. ``reference("pendulum1")``."""
    path = REFERENCE_DIR / f"{name}.yaml"
    if not path.is_file():
        pytest.fail(f"reference mechanism {path} is missing")
    return path


def numerical_jacobian(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray,
                       h: float = 1e-6) -> np.ndarray:
    """Central differences of ``f`` at ``x``; the last axis of the result indexes ``x``.

    The step of each component is ``h * max(1, |x_k|)``.
    """
    x = np.asarray(x, dtype=float)
    base = np.asarray(f(x), dtype=float)
    out = np.zeros((*base.shape, x.size))
    for k in range(x.size):
        step = h * max(1.0, abs(float(x[k])))
        xp, xm = x.copy(), x.copy()
        xp[k] += step
        xm[k] -= step
        out[..., k] = (np.asarray(f(xp), dtype=float) - np.asarray(f(xm), dtype=float)) / (
            2 * step)
    return out


def entrywise_error(actual: np.ndarray, expected: np.ndarray, floor: float = 1e-4) -> float:
    """Largest error of any single entry, relative to that entry's own size.

    Entries that should be (near) zero are measured against ``floor`` × the largest entry
    (at least ``floor``), the level of finite-difference round-off. Unlike a norm over the
    whole matrix, a wrong small entry cannot hide behind the large ones.
    """
    actual = np.asarray(actual, dtype=float)
    expected = np.asarray(expected, dtype=float)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    if expected.size == 0:
        return 0.0
    scale = floor * max(float(np.abs(expected).max()), 1.0)
    return float(np.max(np.abs(actual - expected) / (np.abs(expected) + scale)))


def finite_difference_error(analytic: np.ndarray, numeric: Callable[[float], np.ndarray],
                            step: float, floor: float = 1e-4) -> float:
    """:func:`entrywise_error` of ``analytic`` against ``numeric(h)`` (central differences
    with step h) at ``step`` and 10 × ``step``, the better of the two. Round-off grows as
    the step shrinks, the more so for an ill-conditioned mechanism (the Furuta pendulum's
    inertias span 5 decades, Bricard's Jacobian is one rank short); truncation grows as
    it widens. A wrong Jacobian fails at both."""
    return min(entrywise_error(analytic, numeric(h), floor) for h in (step, 10 * step))


def random_configurations(mech: CompiledMechanism, count: int = 3, seed: int = 0,
                          scale: float = 0.05) -> Iterator[dict[str, np.ndarray]]:
    """Random states near q0: ``q`` (q0 + perturbation), ``qd``, ``v`` (n) and ``lam`` (m)."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        yield {
            "q": mech.q0 + scale * rng.standard_normal(mech.n) * np.maximum(1.0,
                                                                            np.abs(mech.q0)),
            "qd": rng.standard_normal(mech.n),
            "v": rng.standard_normal(mech.n),
            "lam": rng.standard_normal(mech.m),
        }


def yardstick() -> float:
    """Seconds this machine takes right now for a fixed piece of Python work (about 10 ms
    when quiet): the unit of the bounded-time tests, so that they measure the work, not
    the machine's load (a wall-clock limit failed on a busy machine)."""
    start = time.perf_counter()
    sum(i * i for i in range(200_000))
    return time.perf_counter() - start


@contextmanager
def bounded_time(units: float) -> Iterator[None]:
    """Asserts that the block takes at most ``units`` yardsticks (the larger of one
    measured before and one after it, so that load arriving meanwhile counts too). The
    hangs these tests guard against took minutes: hundreds of thousands of yardsticks."""
    before = yardstick()
    start = time.perf_counter()
    yield
    elapsed = time.perf_counter() - start
    unit = max(before, yardstick())
    assert elapsed <= units * unit, f"took {elapsed:.3g} s = {elapsed / unit:.0f} yardsticks"


def session_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A temp dir for the whole run: with pytest-xdist (``-n 2``), one that every worker
    shares (its base temp's parent), so a mechanism is compiled once, not once per worker;
    mbgen's cache takes concurrent compiles of the same file (tests/test_cache.py)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = tmp_path_factory.getbasetemp().parent / name
        shared.mkdir(exist_ok=True)
        return shared
    return tmp_path_factory.mktemp(name)


@pytest.fixture(scope="session")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session's compiled modules go: ``$MBGEN_OUT`` if set, else a temp dir."""
    configured = os.environ.get("MBGEN_OUT")
    return Path(configured) if configured else session_dir(tmp_path_factory, "generated")


@pytest.fixture(scope="session")
def core_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session's C core is compiled once: ``$MBGEN_CACHE`` if set, else a temp
    dir (child processes inherit it)."""
    configured = os.environ.get("MBGEN_CACHE")
    return Path(configured) if configured else session_dir(tmp_path_factory, "cache")


@contextmanager
def one_worker_at_a_time(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[None]:
    """Under pytest-xdist, holds the session's lock ``name`` (an flock shared by every
    worker): a compile the other worker is doing meanwhile is waited for and then found in
    the cache, not done twice (mbgen's cache takes concurrent twins, each compiling); on
    its own, a no-op."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    import fcntl

    with (session_dir(tmp_path_factory, "locks") / f"{name}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        yield


@pytest.fixture(scope="session", autouse=True)
def _default_out_dir(out_dir: Path, core_cache: Path,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Code that calls ``mbgen.load`` without ``out_dir`` must not write into the repo, nor
    the compiled core into the user's home. Under pytest-xdist the first worker compiles
    the C core (with the smallest mechanism) while the other waits: both would otherwise
    compile it at once as their first tests start."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MBGEN_OUT", str(out_dir))
        patch.setenv("MBGEN_CACHE", str(core_cache))
        if os.environ.get("PYTEST_XDIST_WORKER"):
            with one_worker_at_a_time(tmp_path_factory, "core"):
                mbgen.load(str(REFERENCE_DIR / "pendulum1.yaml"), out_dir=str(out_dir))
        yield


def quick_core_flags() -> list[str]:
    """The C core's flags with -O0 for -O3, for a test that compiles a core of its own (an
    empty, damaged or unwritable cache, a changed header) to test the build's rules, not
    the core's speed: that compile is about 8x cheaper (15 s -> 2 s of CPU). The core's
    key follows its flags, so such a core and the session's never stand for each other."""
    import mbgen.codegen.build as build

    flags = ["-O0" if flag == "-O3" else flag for flag in build.CORE_FLAGS]
    assert flags != build.CORE_FLAGS, "the core is no longer compiled with -O3"
    return flags


@pytest.fixture
def quick_core(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The test's core compiles with :func:`quick_core_flags`; returns them (a child
    process is given them, to set the same)."""
    import mbgen.codegen.build as build

    flags = quick_core_flags()
    monkeypatch.setattr(build, "CORE_FLAGS", flags)
    return flags


@pytest.fixture
def run(out_dir: Path) -> Callable[..., tuple[int, str]]:
    """``run(*args)``: the CLI in this process, its (exit code, output)."""
    from click.testing import CliRunner

    from mbgen.cli.main import cli

    runner = CliRunner()

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(cli, list(args), catch_exceptions=False)
        return result.exit_code, result.output

    return invoke


@pytest.fixture(scope="session")
def compiled(out_dir: Path,
             tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], CompiledMechanism]:
    """``compiled(path)``: the mechanism compiled once per session (then memoized), by one
    pytest-xdist worker while the other waits for the same file's bytes."""
    cache: dict[Path, CompiledMechanism] = {}

    def get(path: Path) -> CompiledMechanism:
        key = Path(path).resolve()
        if key not in cache:
            content = hashlib.sha256(key.read_bytes() if key.is_file() else b"").hexdigest()[:16]
            with one_worker_at_a_time(tmp_path_factory, f"{key.stem}-{content}"):
                cache[key] = mbgen.load(str(key), out_dir=str(out_dir))
        return cache[key]

    return get

"""Native GTSAM factors (mbgen/factors/native.py): the same numbers as the Python path on
every mechanism and in whole factor graphs, a self-check whose failure (a mismatch or a
crash) falls back to the Python path with one warning, and factors that outlive their
maker. The Jacobians themselves are checked against finite differences in test_factors.py
(on whichever path is in use: the native one wherever it builds).

Where the native module cannot be used (no compiler, another GTSAM that fails the
self-check), the tests that need it are skipped with the reason, and the rest of the
suite runs on the Python path: that is a supported installation."""

from __future__ import annotations

import gc
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import gtsam
import numpy as np
import pytest
from click.testing import CliRunner
from conftest import ALL_MECHANISMS, SHIPPED_DIR, mechanism_id

from mbgen.cli.main import cli
from mbgen.errors import MbgenWarning
from mbgen.factors import MechanismFactors, native, self_check
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.simulation.factor_graph import FactorGraphSimulator

Compiled = Callable[[Path], CompiledMechanism]
X = gtsam.symbol


@pytest.fixture()
def available() -> None:
    """Skips a test that needs the native module where it cannot be used."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MbgenWarning)
        if native.native_module() is None:
            pytest.skip(f"mbgen's native factors are not available here: "
                        f"{native.unavailable()}")


@pytest.fixture()
def fresh_native(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """native_module() decided anew in the test, and again after it."""
    native.native_module.cache_clear()
    yield
    monkeypatch.undo()
    native.native_module.cache_clear()


def test_the_native_factors_pass_their_self_check(available: None) -> None:
    assert native.verdict(native.build_dir()) == (True, "ok")


@pytest.mark.parametrize("path", ALL_MECHANISMS, ids=mechanism_id)
def test_both_paths_give_the_same_linearization(path: Path, compiled: Compiled,
                                                available: None) -> None:
    """Every factor kind of every mechanism, native against Python, off the manifold."""
    mech = compiled(path)
    fast = MechanismFactors(mech)
    slow = MechanismFactors(mech, native=False)
    assert fast.native and not slow.native
    rng = np.random.default_rng(7)
    n, d = mech.n, fast.d
    values = gtsam.Values()
    for key, size in ((X("q", 0), n), (X("v", 0), n), (X("a", 0), n), (X("f", 0), n),
                      (X("u", 0), 1), (X("z", 0), d), (X("y", 0), d), (X("x", 0), d)):
        values.insert(key, rng.standard_normal(size))
    values.update(X("q", 0), mech.q0 + 1e-3 * rng.standard_normal(n))
    checked = 0
    for name, made_fast, made_slow in self_check.pairs(fast, slow, values):
        if mech.m == 0 and ("position" in name or "velocity" in name
                            or "acceleration" in name):
            continue  # no constraint rows: nothing to compare
        assert self_check.mismatch(made_fast, made_slow, values) <= 1e-13, name
        checked += 1
    assert checked >= 6


def test_a_mismatch_is_seen(compiled: Compiled, available: None) -> None:
    """The self-check's comparison sees a measurement off by 1e-9."""
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    fast, slow = MechanismFactors(mech), MechanismFactors(mech, native=False)
    values = gtsam.Values()
    values.insert(X("q", 0), mech.q0)
    values.insert(X("v", 0), np.ones(mech.n))
    same = self_check.mismatch(fast.observation(X("q", 0), X("v", 0), 0, 0.5),
                               slow.observation(X("q", 0), X("v", 0), 0, 0.5), values)
    off = self_check.mismatch(fast.observation(X("q", 0), X("v", 0), 0, 0.5),
                              slow.observation(X("q", 0), X("v", 0), 0, 0.5 + 1e-9), values)
    assert same <= self_check.TOLERANCE < off


@pytest.mark.parametrize("coords", ["dependent", "independent"])
def test_a_factor_graph_runs_the_same_on_both_paths(coords: str, compiled: Compiled,
                                                     available: None, fresh_native: None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    fast = FactorGraphSimulator(mech, 1e-3, window=3, coords=coords)
    assert fast.factors.native
    fast_run = fast.run(0.1)
    monkeypatch.setenv(native.ENVIRONMENT, "0")
    native.native_module.cache_clear()
    slow = FactorGraphSimulator(mech, 1e-3, window=3, coords=coords)
    assert not slow.factors.native
    slow_run = slow.run(0.1)
    assert np.abs(fast_run.q - slow_run.q).max() <= 1e-12
    assert fast.iterations == slow.iterations


def _copy_of_the_build(tmp_path: Path) -> Path:
    """The built module in a directory of its own, without a verdict."""
    directory = tmp_path / "build"
    directory.mkdir()
    shutil.copy(native.module_file(native.build_dir()), native.module_file(directory))
    return directory


@pytest.mark.parametrize(("command", "reason"), [
    ("print('position differs by 0.1'); raise SystemExit(1)", "position differs by 0.1"),
    ("import os; os.abort()", "the check crashed (signal 6)"),
])
def test_a_failed_self_check_falls_back_with_one_warning(
        command: str, reason: str, tmp_path: Path, compiled: Compiled, available: None,
        fresh_native: None, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = _copy_of_the_build(tmp_path)
    monkeypatch.setattr(native, "SELF_CHECK", [sys.executable, "-c", command])
    monkeypatch.setattr(native, "build_dir", lambda: directory)
    with pytest.warns(MbgenWarning, match="not used") as caught:
        assert native.native_module() is None
    assert len(caught) == 1 and reason in str(caught[0].message)
    assert native.verdict(directory) == (False, reason)  # cached: the check is not rerun
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per process
        factors = MechanismFactors(mech)
    assert not factors.native
    run = FactorGraphSimulator(mech, 1e-3, window=2).run(0.05)  # the Python path works
    assert np.isfinite(run.q).all()


def test_switched_off_without_a_warning(fresh_native: None, compiled: Compiled,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.ENVIRONMENT, "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not MechanismFactors(compiled(SHIPPED_DIR / "fourbar.yaml")).native


def test_the_cli_says_it_in_one_line(tmp_path: Path, fresh_native: None,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> Path:
        raise native.NativeUnavailable("its self-check failed (position differs by 0.1)")

    monkeypatch.setattr(native, "build_dir", broken)
    out = tmp_path / "fg.csv"
    result = CliRunner().invoke(cli, ["simulate", str(SHIPPED_DIR / "fourbar.yaml"),
                                      "--t-end", "0.02", "--dt", "1e-3", "--solver",
                                      "factor-graph", "--out", str(out), "--build-dir",
                                      str(tmp_path / "gen")])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "native GTSAM factors" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: ")
    assert "position differs by 0.1" in result.output and out.is_file()


def test_a_factor_outlives_its_maker(compiled: Compiled, available: None) -> None:
    """As a Python callback's closure keeps its evaluator, a native factor keeps its
    mechanism's C state: a factor made by a MechanismFactors that is gone still works."""
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    factor = MechanismFactors(mech).forward_dynamics(X("q", 0), X("v", 0), X("a", 0))
    expected = MechanismFactors(mech, native=False).forward_dynamics(
        X("q", 0), X("v", 0), X("a", 0))
    gc.collect()
    values = gtsam.Values()
    for key in (X("q", 0), X("v", 0), X("a", 0)):
        values.insert(key, mech.q0 if key == X("q", 0) else np.full(mech.n, 0.1))
    assert self_check.mismatch(factor, expected, values) <= 1e-13


def test_the_registry_forgets_factors_that_are_gone(compiled: Compiled,
                                                    available: None) -> None:
    """The registry sweeps lazily (when it has doubled since its last sweep), and other
    tests in this process may have left entries: without forgetting it would grow by
    every factor made, with it it stays within twice the most ever alive plus 64."""
    module = native.native_module()
    assert module is not None
    factors = MechanismFactors(compiled(SHIPPED_DIR / "fourbar.yaml"))
    gc.collect()
    before = module.registered()
    made = [factors.position_constraints(X("q", k)) for k in range(500)]
    del made
    gc.collect()
    bound = 2 * (before + 500 + 1) + 64
    for k in range(bound + 600):
        factors.position_constraints(X("q", k))  # each one gone at once
    assert module.registered() <= bound


@pytest.mark.parametrize("bad", ["short", "pose"])
def test_a_variable_of_the_wrong_kind_is_an_error_not_a_crash(
        bad: str, compiled: Compiled, available: None) -> None:
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    factor = MechanismFactors(mech).forward_dynamics(X("q", 0), X("v", 0), X("a", 0))
    values = gtsam.Values()
    values.insert(X("q", 0), mech.q0)
    values.insert(X("v", 0), np.zeros(mech.n))
    if bad == "short":
        values.insert(X("a", 0), np.zeros(mech.n - 1))
    else:
        values.insert(X("a", 0), gtsam.Pose2(0.0, 0.0, 0.0))
    with pytest.raises((ValueError, RuntimeError), match="variable"):
        factor.linearize(values)

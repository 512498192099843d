"""The C core: its three linear-algebra paths, Baumgarte terms, multipliers, per-state status,
caller-supplied outputs, solver options, and declarations checked by the C compiler."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    ALL_MECHANISMS,
    entrywise_error,
    finite_difference_error,
    mechanism_id,
    numerical_jacobian,
)

import mbgen
from mbgen.codegen import build, cache
from mbgen.codegen.build import CompileError
from mbgen.errors import SingularConfigurationError
from mbgen.model.chain import chain_yaml
from mbgen.runtime.compiled import CompiledMechanism

Compiled = Callable[[Path], CompiledMechanism]
FD_STEP = 1e-5
METHODS = ("dense", "sparse", "unrolled")


@pytest.fixture
def method_of(compiled: Compiled) -> Iterator[Callable[[Path, str], CompiledMechanism]]:
    """``method_of(path, method)``: the shared compiled mechanism on one path; restored."""
    touched: list[CompiledMechanism] = []

    def get(path: Path, method: str) -> CompiledMechanism:
        mech = compiled(path)
        mech.options.method = method
        touched.append(mech)
        return mech

    yield get
    for mech in touched:
        mech.options.method = "auto"
        mech.baumgarte = (0.0, 0.0)


@pytest.fixture(scope="module")
def chains(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    folder = tmp_path_factory.mktemp("chains")
    paths = {}
    for bodies in (3, 20, 100):
        paths[bodies] = folder / f"chain{bodies}.yaml"
        paths[bodies].write_text(chain_yaml(bodies))
    return paths


def manifold_state(mech: CompiledMechanism, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q = mech.solve_position(mech.q0 + 0.03 * rng.standard_normal(mech.n), minimum_norm=True)
    qd = mech.project_velocity(q, rng.standard_normal(mech.n))
    return q, qd


# -- Baumgarte terms in every dynamics Jacobian --------------------------------------------

@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("path", ALL_MECHANISMS, ids=mechanism_id)
def test_jacobians_with_baumgarte_terms_match_finite_differences(method_of, path: Path,
                                                                 method: str) -> None:
    """α, β ≠ 0 and a state off the manifold (Φ ≠ 0, Φq q̇ ≠ 0), so every Baumgarte term
    of ∂q̈/∂q and ∂q̈/∂q̇ is exercised."""
    mech = method_of(path, method)
    mech.baumgarte = (3.0, 5.0)
    rng = np.random.default_rng(4)
    q, qd = manifold_state(mech, 2)
    q = q + 1e-3 * rng.standard_normal(mech.n)
    qd = qd + 0.1 * rng.standard_normal(mech.n)
    Q = rng.standard_normal(mech.n)
    assert np.abs(mech.phi(q)).max() > 1e-5
    _, jq, jqd, jQ = mech.forward_dynamics_jacobians(q, qd, Q)
    for jacobian, k in ((jq, 0), (jqd, 1), (jQ, 2)):
        def vary(x: np.ndarray, k: int = k) -> np.ndarray:
            args = [q, qd, Q]
            args[k] = x
            return mech.forward_dynamics(*args)

        error = finite_difference_error(
            jacobian, lambda h, x=[q, qd, Q][k]: numerical_jacobian(vary, x, h), FD_STEP)
        assert error <= 1e-5, f"∂q̈/∂{['q', 'q̇', 'Q'][k]}: entry error {error:.2e}"


def test_baumgarte_terms_change_the_jacobians(compiled: Compiled) -> None:
    """The FD test above would be vacuous if α, β did not reach the Jacobians."""
    mech = compiled(ALL_MECHANISMS[0])
    q, qd = manifold_state(mech, 1)
    q = q + 1e-3
    plain = mech.forward_dynamics_jacobians(q, qd)
    mech.baumgarte = (3.0, 5.0)
    try:
        stabilized = mech.forward_dynamics_jacobians(q, qd)
    finally:
        mech.baumgarte = (0.0, 0.0)
    assert np.abs(plain[1] - stabilized[1]).max() > 1e-3
    assert np.abs(plain[2] - stabilized[2]).max() > 1e-3


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("path", ALL_MECHANISMS, ids=mechanism_id)
def test_independent_jacobians_match_finite_differences(method_of, path: Path,
                                                        method: str) -> None:
    """∂z̈/∂z, ∂z̈/∂ż (moving along the manifold) and ∂z̈/∂Q, with Baumgarte terms on."""
    mech = method_of(path, method)
    mech.baumgarte = (2.0, 3.0)
    q, qd = manifold_state(mech, 11)
    ind, _, _ = mech.partition(q)
    Q = np.random.default_rng(3).standard_normal(mech.n)

    def zdd_at(z: np.ndarray, zd: np.ndarray, force: np.ndarray = Q) -> np.ndarray:
        guess = q.copy()
        guess[ind] = z
        q_new = mech.solve_position(guess, z=ind, tol=1e-14)
        qd_new = mech.solve_velocity(q_new, zd, z=ind)
        return mech.forward_dynamics(q_new, qd_new, force)[ind]

    zdd, jz, jzd, jzQ = mech.independent_dynamics(q, qd, Q, z=ind)
    z, zd = q[ind], qd[ind]
    np.testing.assert_allclose(zdd, zdd_at(z, zd), rtol=1e-10, atol=1e-10)
    assert entrywise_error(jz, numerical_jacobian(lambda x: zdd_at(x, zd), z, FD_STEP)) <= 1e-5
    assert entrywise_error(jzd, numerical_jacobian(lambda x: zdd_at(z, x), zd, FD_STEP)) <= 1e-5
    assert entrywise_error(jzQ, numerical_jacobian(lambda x: zdd_at(z, zd, x), Q, FD_STEP)) <= 1e-5
    only = mech.independent_dynamics(q, qd, Q, z=ind, jacobians=False)
    np.testing.assert_allclose(only, zdd, rtol=1e-13, atol=1e-13)


# -- the linear-algebra paths agree -----------------------------------------------------------

def _every_path(mech: CompiledMechanism, call: Callable[[], object]) -> list[object]:
    """call() on each of METHODS; the first (dense) is the reference of the comparisons."""
    results = []
    for method in METHODS:
        mech.options.method = method
        results.append(call())
    mech.options.method = "auto"
    return results


def _assert_agree(results: list, what: str, tol: float = 1e-12) -> None:
    reference = np.asarray(results[0])
    scale = max(float(np.abs(reference).max()), 1e-300)
    for method, result in zip(METHODS[1:], results[1:], strict=True):
        error = float(np.abs(np.asarray(result) - reference).max()) / scale
        assert error <= tol, f"{what}: {method} and dense differ by {error:.2e} (relative)"


def _check_paths_agree(mech: CompiledMechanism, states: int) -> None:
    rng = np.random.default_rng(9)
    q, qd = (np.array(x) for x in zip(*(manifold_state(mech, s) for s in range(states)),
                                      strict=True))
    Q = rng.standard_normal((states, mech.n))
    results = _every_path(mech, lambda: mech.forward_dynamics_jacobians(q, qd, Q))
    for k, name in enumerate(("q̈", "∂q̈/∂q", "∂q̈/∂q̇", "∂q̈/∂Q")):
        _assert_agree([r[k] for r in results], name, 1e-11 if k else 1e-12)
    _assert_agree(_every_path(mech, lambda: mech.lagrange_multipliers(q, qd, Q)), "λ")
    guess = q + 1e-3 * rng.standard_normal(q.shape)
    for minimum_norm in (True, False):
        _assert_agree(_every_path(mech, lambda mn=minimum_norm: mech.solve_position(
            guess, z=mech.partition(q[0])[0], minimum_norm=mn)),
            f"position (minimum_norm={minimum_norm})")
    _assert_agree(_every_path(mech, lambda: mech.project_velocity(q, qd + 0.1)),
                  "velocity projection")
    ind = mech.partition(q[0])[0]
    results = _every_path(mech, lambda: mech.independent_dynamics(q, qd, Q, z=ind))
    for k, name in enumerate(("z̈", "∂z̈/∂z", "∂z̈/∂ż", "∂z̈/∂Q")):
        _assert_agree([r[k] for r in results], name, 1e-10)


@pytest.mark.parametrize("path", ALL_MECHANISMS, ids=mechanism_id)
def test_linear_algebra_paths_agree(compiled: Compiled, path: Path) -> None:
    _check_paths_agree(compiled(path), states=2)


@pytest.mark.parametrize("bodies", [3, 20, 100])
def test_linear_algebra_paths_agree_on_chains(compiled: Compiled, chains: dict[int, Path],
                                              bodies: int) -> None:
    mech = compiled(chains[bodies])
    assert mech.n == 2 * bodies
    _check_paths_agree(mech, states=1)


def test_unrolled_code_where_small(compiled: Compiled, chains: dict[int, Path]) -> None:
    """auto takes the compiler's unrolled KKT code, also for the rows left after dropping
    redundant ones (the robot) and on 100 bodies (whose inverse is too long to unroll:
    the generic inverse reads the unrolled factor there, which the path agreement tests
    cover); refinement needs the assembled matrix, so it takes the generic code."""
    robot = compiled(next(p for p in ALL_MECHANISMS if "pick-and-place" in p.name))
    assert len(robot.active_rows) < robot.m
    for mech in (compiled(ALL_MECHANISMS[1]), compiled(chains[3]), robot,
                 compiled(chains[100])):
        assert mech.linear_algebra == "unrolled"
    mech = compiled(ALL_MECHANISMS[1])
    mech.options.refine = 1
    try:
        assert mech.linear_algebra == "sparse"
    finally:
        mech.options.refine = 0


def test_sparse_factor_grows_linearly_on_chains(compiled: Compiled,
                                                chains: dict[int, Path]) -> None:
    """The compile-time order keeps the factor O(n) on a chain (no dense fill)."""
    sizes = {b: compiled(chains[b]).lib.mb_plan_factor_size(compiled(chains[b]).plan)
             for b in (20, 100)}
    assert sizes[100] <= 5.5 * sizes[20]


# -- multipliers against an independent computation -------------------------------------------

@pytest.mark.parametrize("path", ALL_MECHANISMS, ids=mechanism_id)
def test_multipliers_solve_the_kkt_system(compiled: Compiled, path: Path) -> None:
    """λ from the core against NumPy's least-squares solution of the full KKT system
    [M Aᵀ; A 0][q̈; λ] = [Q; c] (redundant rows carry λ = 0 in mbgen)."""
    mech = compiled(path)
    q, qd = manifold_state(mech, 6)
    Q = np.random.default_rng(2).standard_normal(mech.n)
    rows = mech.active_rows
    A = mech.phi_q(q)[rows]
    M = mech.mass_matrix(q)
    c = -mech.dphiq_qd(q, qd)[rows]
    kkt = np.block([[M, A.T], [A, np.zeros((len(rows), len(rows)))]])
    rhs = np.concatenate([mech.generalized_forces(q, qd) + Q, c])
    solution = np.linalg.solve(kkt, rhs)
    lam = mech.lagrange_multipliers(q, qd, Q)
    scale = max(1.0, float(np.abs(solution).max()))
    np.testing.assert_allclose(lam[rows], solution[mech.n:], atol=1e-9 * scale)
    np.testing.assert_allclose(np.delete(lam, rows), 0.0)
    np.testing.assert_allclose(mech.forward_dynamics(q, qd, Q), solution[:mech.n],
                               atol=1e-9 * scale)


# -- per-state status, errors, outputs, options -----------------------------------------------

@pytest.mark.parametrize("method", METHODS)
def test_one_bad_state_does_not_spoil_the_batch(method_of, method: str) -> None:
    mech = method_of(ALL_MECHANISMS[1], method)
    states = [manifold_state(mech, s) for s in range(4)]
    q = np.array([s[0] for s in states])
    qd = np.array([s[1] for s in states])
    q[2, 0] = np.nan
    qdd, jq, jqd, jQ, status = mech.forward_dynamics_jacobians(q, qd, errors="status")
    assert status.tolist() == [0, 0, mech.lib.MB_NOT_FINITE, 0]
    assert np.isnan(qdd[2]).all() and np.isnan(jq[2]).all()
    for k in (0, 1, 3):
        single = mech.forward_dynamics_jacobians(q[k], qd[k])
        for batched, value in zip((qdd, jq, jqd, jQ), single, strict=True):
            np.testing.assert_allclose(batched[k], value, rtol=1e-13, atol=1e-13)
    with pytest.raises(SingularConfigurationError, match=r"at state 2 \(1 of 4 failed\).*not "
                                                          "finite"):
        mech.forward_dynamics(q, qd)
    positions, status = mech.solve_position(q + 1e-3, minimum_norm=True, errors="status")
    assert status.tolist() == [0, 0, mech.lib.MB_NOT_FINITE, 0]
    assert np.abs(mech.phi(positions[[0, 1, 3]])).max() < 1e-10


def test_single_state_status_mode_and_out_arrays(compiled: Compiled) -> None:
    mech = compiled(ALL_MECHANISMS[0])
    q, qd = manifold_state(mech, 0)
    n = mech.n
    out = (np.empty(n), np.empty((n, n)), np.empty((n, n)), np.empty((n, n)))
    returned = mech.forward_dynamics_jacobians(q, qd, out=out)
    assert all(r is o for r, o in zip(returned, out, strict=True))
    expected = mech.forward_dynamics_jacobians(q, qd)
    for r, e in zip(returned, expected, strict=True):
        np.testing.assert_array_equal(r, e)
    qdd, status = mech.forward_dynamics(q, qd, errors="status")
    assert status.tolist() == [0]
    np.testing.assert_array_equal(qdd, expected[0])
    with pytest.raises(ValueError, match="C-contiguous float64"):
        mech.forward_dynamics_jacobians(q, qd, out=(np.empty(n + 1), *out[1:]))
    with pytest.raises(ValueError, match="errors must be one of"):
        mech.forward_dynamics(q, qd, errors="ignore")
    phi, jac = mech.constraints(q)
    np.testing.assert_array_equal(phi, mech.phi(q))
    np.testing.assert_array_equal(jac, mech.phi_q(q))
    buffer = np.empty((mech.m, n))
    assert mech.phi_q(q, out=buffer) is buffer


def test_solver_options_reach_the_core(compiled: Compiled) -> None:
    mech = compiled(ALL_MECHANISMS[1])
    guess = mech.q0 + 0.05
    mech.options.max_iter = 25
    one_step, status = mech.solve_position(guess, minimum_norm=True, max_iter=1,
                                           errors="status")
    assert status.tolist() == [mech.lib.MB_NO_CONVERGENCE]
    assert np.isnan(one_step).sum() == 0
    with pytest.raises(ValueError, match="newton_tol must be positive"):
        mech.options.newton_tol = 0.0
    with pytest.raises(ValueError, match="method must be one of"):
        mech.options.method = "magic"
    with pytest.raises(AttributeError, match="unknown solver option"):
        mech.options.tolerance = 1.0
    assert "pivot_tol" in repr(mech.options)


@pytest.mark.parametrize("method", METHODS)
def test_dead_point_and_massless_detected_on_every_path(tmp_path: Path, method: str) -> None:
    parallelogram = tmp_path / "parallelogram.yaml"
    parallelogram.write_text(
        "points:\n  - {x: 0, y: 0, fixed: true}\n  - {x: cos(pi/3), y: sin(pi/3)}\n"
        "  - {x: 2 + cos(pi/3), y: sin(pi/3)}\n  - {x: 2, y: 0, fixed: true}\n"
        "planar_bodies:\n  - {points: [0, 1], mass: 1}\n  - {points: [1, 2], mass: 2}\n"
        "  - {points: [2, 3], mass: 1}\n")
    mech = mbgen.load(str(parallelogram), out_dir=str(tmp_path / "gen"))
    mech.options.method = method
    flat = np.array([1.0, 0.0, 3.0, 0.0])
    _, status = mech.forward_dynamics(flat, np.zeros(4), errors="status")
    assert status.tolist() == [mech.lib.MB_SINGULAR_PHIQ]
    massless = tmp_path / "massless.yaml"
    massless.write_text("points:\n  - {x: 0, y: 0, fixed: true}\n  - {x: 1, y: 0}\n"
                        "planar_bodies:\n  - {points: [0, 1], mass: 0, I0: 0}\n")
    mech = mbgen.load(str(massless), out_dir=str(tmp_path / "gen"))
    mech.options.method = method
    with pytest.raises(SingularConfigurationError, match="mass matrix is singular"):
        mech.forward_dynamics(mech.q0, np.zeros(2))


@pytest.mark.parametrize("method", METHODS)
def test_kinematic_problems_keep_the_given_z(method_of, method: str) -> None:
    """Any valid z is honoured, not only the one full pivoting would choose."""
    mech = method_of(ALL_MECHANISMS[1], method)  # fourbars1: one DOF, n = 4
    q, qd = manifold_state(mech, 8)
    for j in range(mech.n):
        qdd, status = mech.solve_acceleration(q, qd, [0.7], z=[j], errors="status")
        if status[0]:
            continue  # this coordinate cannot parametrize the mechanism here
        assert qdd[j] == pytest.approx(0.7, abs=1e-12), f"z = {mech.coordinate_names[j]}"
        np.testing.assert_allclose(mech.phi_q(q) @ qdd, -mech.dphiq_qd(q, qd), atol=1e-10)
        velocity = mech.solve_velocity(q, [1.3], z=[j])
        assert velocity[j] == pytest.approx(1.3, abs=1e-12)


# -- the header is what cffi and the C compiler both see ----------------------------------------

def test_declaration_that_does_not_match_the_core_fails_to_compile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiled: Compiled,
        quick_core: list[str]) -> None:
    """The bug class of the old template: a changed prototype used to build silently."""
    sources = tmp_path / "csrc"
    shutil.copytree(cache.csrc_dir(), sources)
    header = sources / "mbgen.h"
    text = header.read_text()
    changed = text.replace("int mb_eval(const mb_model* model, int kernel, long count,",
                           "int mb_eval(const mb_model* model, int kernel, float count,")
    assert changed != text
    header.write_text(changed)
    monkeypatch.setattr(cache, "csrc_dir", lambda: sources)
    monkeypatch.setattr(build, "csrc_dir", lambda: sources)
    path = tmp_path / "pendulum.yaml"
    shutil.copy(ALL_MECHANISMS[0], path)
    with pytest.raises(CompileError, match="mb_eval"):
        mbgen.load(str(path), out_dir=str(tmp_path / "gen"))

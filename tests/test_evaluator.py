"""mech.evaluator(): the cheap one-state path gives what the batched API gives, sees
parameter, option and Baumgarte changes, and raises named errors: through the pybind11
extension (runtime/single.py) and through cffi alike."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import ALL_MECHANISMS, SHIPPED_DIR, mechanism_id

from mbgen.errors import SingularConfigurationError
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.runtime.single import fast_module

Compiled = Callable[[Path], CompiledMechanism]


@pytest.fixture(params=[True, False], ids=["extension", "cffi"])
def fast(request: pytest.FixtureRequest) -> bool:
    """Both paths of the evaluator's dynamics (the extension's skipped where it cannot be
    built: no C++ compiler or pybind11)."""
    if request.param and fast_module() is None:
        pytest.skip("the one-state extension cannot be built here")
    return bool(request.param)


def states(mech: CompiledMechanism, count: int = 3) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    result = []
    for _ in range(count):
        q = mech.solve_position(mech.q0 + 0.02 * rng.standard_normal(mech.n),
                                minimum_norm=True)
        result.append((q, mech.project_velocity(q, rng.standard_normal(mech.n))))
    return result


@pytest.mark.parametrize("method", ["dense", "sparse", "unrolled"])
@pytest.mark.parametrize("path", ALL_MECHANISMS, ids=mechanism_id)
def test_evaluator_matches_the_batched_api(compiled: Compiled, path: Path, method: str,
                                           fast: bool) -> None:
    mech = compiled(path)
    evaluator = mech.evaluator(fast)
    assert evaluator.fast == fast
    mech.options.method = method
    try:
        rng = np.random.default_rng(1)
        for q, qd in states(mech):
            Q = rng.standard_normal(mech.n)
            expected = mech.forward_dynamics_jacobians(q, qd, Q)
            got = evaluator.forward_dynamics_jacobians(q, qd, Q)
            for e, g in zip(expected, got, strict=True):
                np.testing.assert_allclose(g, e, rtol=1e-13, atol=1e-13)
            np.testing.assert_allclose(evaluator.forward_dynamics(q, qd),
                                       mech.forward_dynamics(q, qd), rtol=1e-13, atol=1e-13)
            qdd, lam = evaluator.forward_dynamics_with_multipliers(q, qd)
            np.testing.assert_allclose(lam, mech.lagrange_multipliers(q, qd), rtol=1e-12,
                                       atol=1e-12)
            phi, phi_q = evaluator.constraints(q)
            np.testing.assert_array_equal(phi, mech.phi(q))
            np.testing.assert_array_equal(phi_q, mech.phi_q(q))
            if mech.sensor_labels:
                h, h_q, h_qd = evaluator.sensors_with_jacobians(q, qd)
                for e, g in zip(mech.sensors_with_jacobians(q, qd), (h, h_q, h_qd),
                                strict=True):
                    np.testing.assert_array_equal(g, e)
    finally:
        mech.options.method = "auto"


def test_results_are_the_evaluators_buffers(compiled: Compiled, fast: bool) -> None:
    """Views, overwritten by the next call (documented): nothing is allocated per call."""
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    evaluator = mech.evaluator(fast)
    (q1, qd1), (q2, qd2) = states(mech, 2)
    first = evaluator.forward_dynamics_jacobians(q1, qd1)
    kept = [a.copy() for a in first]
    second = evaluator.forward_dynamics_jacobians(q2, qd2)
    assert all(a is b for a, b in zip(first, second, strict=True))
    assert not np.allclose(first[0], kept[0])
    np.testing.assert_allclose(second[1], mech.forward_dynamics_jacobians(q2, qd2)[1],
                               rtol=1e-13, atol=1e-13)


def test_evaluator_sees_parameter_and_baumgarte_changes(compiled: Compiled,
                                                        fast: bool) -> None:
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    evaluator = mech.evaluator(fast)
    q, qd = states(mech, 1)[0]
    q_off = q + 1e-3  # off the manifold, so the β term acts
    before = evaluator.forward_dynamics(q, qd).copy()
    moved = []
    for name, value in dict(mech.parameters).items():
        try:
            mech.set_parameters(**{name: 1.1 * value + 0.1})
            changed = evaluator.forward_dynamics(q, qd).copy()
            np.testing.assert_allclose(changed, mech.forward_dynamics(q, qd), rtol=1e-13,
                                       atol=1e-13)
            moved.append(not np.allclose(changed, before))
        finally:
            mech.set_parameters(**{name: value})
    assert any(moved)
    try:
        mech.baumgarte = (3.0, 4.0)
        got = evaluator.forward_dynamics_jacobians(q_off, qd)
        for e, g in zip(mech.forward_dynamics_jacobians(q_off, qd), got, strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-13, atol=1e-13)
    finally:
        mech.baumgarte = (0.0, 0.0)


def test_evaluator_raises_named_errors(compiled: Compiled, fast: bool) -> None:
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    evaluator = mech.evaluator(fast)
    q, qd = states(mech, 1)[0]
    bad = q.copy()
    bad[0] = np.nan
    with pytest.raises(SingularConfigurationError, match="not finite"):
        evaluator.forward_dynamics_jacobians(bad, qd)
    with pytest.raises(ValueError):
        evaluator.forward_dynamics(q[:-1], qd)
    # still usable after an error
    np.testing.assert_allclose(evaluator.forward_dynamics(q, qd),
                               mech.forward_dynamics(q, qd), rtol=1e-13, atol=1e-13)


def test_both_paths_agree_bit_for_bit(compiled: Compiled) -> None:
    """The same C call behind both: equal results, the same error text, and any sequence
    of numbers taken as input (a list, float32, a strided view)."""
    if fast_module() is None:
        pytest.skip("the one-state extension cannot be built here")
    mech = compiled(SHIPPED_DIR / "actuated-double-pendulum.yaml")
    extension, cffi = mech.evaluator(), mech.evaluator(fast=False)
    q, qd = states(mech, 1)[0]
    Q = np.linspace(-1.0, 1.0, mech.n)
    for args in [(q, qd, Q), (list(q), qd.astype(np.float32), None),
                 (np.repeat(q, 2)[::2], qd, Q)]:
        for name in ("forward_dynamics", "forward_dynamics_with_multipliers",
                     "forward_dynamics_jacobians"):
            got, expected = getattr(extension, name)(*args), getattr(cffi, name)(*args)
            got = got if isinstance(got, tuple) else (got,)
            expected = expected if isinstance(expected, tuple) else (expected,)
            for g, e in zip(got, expected, strict=True):
                np.testing.assert_array_equal(g, e)
    bad = q.copy()
    bad[0] = np.inf
    messages = []
    for evaluator in (extension, cffi):
        with pytest.raises(SingularConfigurationError) as caught:
            evaluator.forward_dynamics(bad, qd)
        messages.append(str(caught.value))
    assert messages[0] == messages[1] and "q = [" in messages[0]
    with pytest.raises(ValueError, match="q must have"):
        extension.forward_dynamics(q[:-1], qd)


@pytest.mark.parametrize("path", ALL_MECHANISMS, ids=mechanism_id)
def test_a_batch_in_lanes_gives_each_state_what_it_gives_alone(compiled: Compiled,
                                                              path: Path) -> None:
    """Batched q̈ of small mechanisms runs MB_LANES states side by side: bit for bit the
    one-state results, a failed state (here a NaN among them) only failing itself, and the
    states after the last block of 8 done alone."""
    mech = compiled(path)
    one = mech.evaluator(fast=False)
    rng = np.random.default_rng(3)
    pairs = states(mech, 19)
    q = np.array([a for a, _ in pairs])
    qd = np.array([b for _, b in pairs])
    Q = rng.standard_normal(q.shape)
    q[5, 0] = np.nan
    for forces in (None, Q):
        qdd, status = mech.forward_dynamics(q, qd, forces, errors="status")
        assert status[5] != 0 and np.isnan(qdd[5]).all()
        for k in range(len(q)):
            if k != 5:
                assert status[k] == 0
                expected = one.forward_dynamics(q[k], qd[k], None if forces is None
                                                else forces[k])
                np.testing.assert_array_equal(qdd[k], expected)

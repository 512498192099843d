"""The batched API's common path (issue 58): a workspace kept per thread and the native
call of the inputs it fits give every shipped mechanism's results bit for bit as before
(the previous path, a workspace made per call; one state: the evaluator's; the general
cffi path), at every batch size, with the same statuses and errors."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import SHIPPED, SHIPPED_DIR, mechanism_id

from mbgen.errors import SingularConfigurationError
from mbgen.runtime.single import fast_module

SIZES = (1, 8, 37)  # one state, one block of lanes, blocks and a tail


def states(mech: Any, count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q = mech.solve_position(mech.q0 + 0.02 * rng.standard_normal((count, mech.n)),
                            minimum_norm=True)
    qd = mech.project_velocity(q, rng.standard_normal((count, mech.n)))
    return q, qd


def general(x: np.ndarray) -> list[Any]:
    """The same values as a list: the inputs the native path hands to the general one."""
    return x.tolist()


def same(a: Any, b: Any) -> bool:
    """Bit for bit (NaN where the other has NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture(scope="module")
def native() -> Any:
    module = fast_module()
    if module is None:
        pytest.skip("the pybind11 extension does not build here")
    return module


def previous(mech: Any, q: np.ndarray, qd: np.ndarray, jacobians: bool) -> list[np.ndarray]:
    """The previous path: mb_forward_dynamics, which makes its own workspace (and lanes'
    scratch) for the call, through cffi."""
    core, n = mech.core, mech.n
    count = len(q)
    outs = [np.empty((count, n))] + [np.empty((count, n, n)) for _ in range(3 * jacobians)]
    status = np.empty(count, dtype=np.int32)
    ptrs = [core.doubles(o) for o in outs] + [core.null] * (4 - len(outs))
    core.checked(core.lib.mb_forward_dynamics(
        mech.structure.plan, mech.options.struct, count, core.doubles(q), n,
        core.doubles(qd), n, core.null, 0, core.parameters.pointer, 0, ptrs[0], core.null,
        ptrs[1], ptrs[2], ptrs[3], core.ints(status)))
    assert not status.any()
    return outs


@pytest.mark.parametrize("path", SHIPPED, ids=mechanism_id)
def test_batched_dynamics_are_the_previous_paths_bit_for_bit(
        path: Path, compiled: Any, native: Any) -> None:
    mech = compiled(path)
    q, qd = states(mech, max(SIZES))
    assert mech.dynamics._prepared()[1] is not None  # the native path is taken
    evaluator = mech.evaluator()
    one = tuple(np.copy(x) for x in evaluator.forward_dynamics_jacobians(q[0], qd[0]))
    for count in SIZES:
        batch = (q[0], qd[0]) if count == 1 else (q[:count], qd[:count])
        before = previous(mech, q[:count], qd[:count], True)
        before_plain = previous(mech, q[:count], qd[:count], False)[0]
        if count == 1:  # one state: the evaluator's numbers, as before
            before = [b[0] for b in before]
            before_plain = before_plain[0]
            assert all(same(a, b) for a, b in zip(before, one, strict=True))
        for got in (mech.forward_dynamics_jacobians(*batch),
                    mech.forward_dynamics_jacobians(*map(general, batch)),
                    mech.forward_dynamics_jacobians(*batch)):  # the workspace reused
            for part in range(4):
                assert same(got[part], before[part]), (path.stem, count, part)
        assert same(mech.forward_dynamics(*batch), before_plain)
        assert same(mech.forward_dynamics(*map(general, batch)), before_plain)
        assert same(mech.forward_dynamics_jacobians(*batch)[0], before_plain)
    # the lanes (blocks of 8) against each state alone, the one-state code's arithmetic
    alone = [[np.copy(x) for x in evaluator.forward_dynamics_jacobians(q[k], qd[k])]
             for k in range(len(q))]
    batch = mech.forward_dynamics_jacobians(q, qd)
    for part in range(4):
        assert same(batch[part], np.stack([a[part] for a in alone])), (path.stem, part)


@pytest.mark.parametrize("path", SHIPPED, ids=mechanism_id)
def test_batched_independent_dynamics_are_one_states_bit_for_bit(
        path: Path, compiled: Any, native: Any) -> None:
    mech = compiled(path)
    q, qd = states(mech, max(SIZES), seed=1)
    z = mech.independent_coordinates()
    for choice in (None, z):
        one = [mech.independent_dynamics(general(q[k]), general(qd[k]), z=choice)
               for k in range(len(q))]
        alone = [mech.independent_dynamics(general(q[k]), general(qd[k]), z=choice,
                                           jacobians=False) for k in range(len(q))]
        for count in SIZES:
            batch = (q[0], qd[0]) if count == 1 else (q[:count], qd[:count])
            got = mech.independent_dynamics(*batch, z=choice)
            zdd = mech.independent_dynamics(*batch, z=choice, jacobians=False)
            for part in range(4):
                expected = one[0][part] if count == 1 else np.stack(
                    [o[part] for o in one[:count]])
                assert same(got[part], expected), (path.stem, choice, count, part)
            assert same(zdd, alone[0] if count == 1 else np.stack(alone[:count]))


def test_independent_dynamics_in_lanes_group_the_states_by_their_chosen_z(
        compiled: Any, native: Any) -> None:
    """Four-bar states far apart, whose full-pivoting choices of z differ (so blocks of
    lanes are formed per z, in chunks of 512 states, the rest alone), two of them not
    finite: each state's results are its one-state call's, bit for bit."""
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    rng = np.random.default_rng(3)
    crank = rng.uniform(-np.pi, np.pi, 600)
    q = mech.solve_position(np.stack([np.cos(crank), np.sin(crank), np.cos(crank) + 0.5,
                                      np.sin(crank) + 1.9], axis=1), z=["x1"])
    qd = mech.project_velocity(q, rng.standard_normal(q.shape))
    chosen = mech.partition(q)[0]
    assert len(np.unique(chosen, axis=0)) > 1  # the states choose differently
    q[77, 2] = q[530, 0] = np.nan
    Q = rng.standard_normal(q.shape)
    got = mech.independent_dynamics(q, qd, Q, errors="status")
    assert list(np.flatnonzero(got[-1])) == [77, 530]
    every = [mech.independent_dynamics(general(q[k]), general(qd[k]), general(Q[k]),
                                       errors="status") for k in range(len(q))]
    for part in range(4):
        assert same(got[part], np.stack([e[part] for e in every])), part
    assert same(got[4], np.concatenate([e[4] for e in every]))


def test_z_named_in_a_call_is_kept_and_bad_names_still_fail(compiled: Any,
                                                            native: Any) -> None:
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    q, qd = states(mech, 9)
    z = mech.independent_coordinates()
    index = [mech.coordinate_names.index(name) for name in z]
    expected = mech.independent_dynamics(q, qd, z=index)
    for named in (z, list(z), tuple(z), z):
        got = mech.independent_dynamics(q, qd, z=named)
        assert all(same(a, b) for a, b in zip(got, expected, strict=True))
    for _ in range(2):
        with pytest.raises(KeyError, match="unknown coordinate 'no such coordinate'"):
            mech.independent_dynamics(q, qd, z=["no such coordinate"])
        with pytest.raises(ValueError, match="z must name 1 coordinates, got 2"):
            mech.independent_dynamics(q, qd, z=[z[0]] * 2)


def test_a_bad_state_fails_alone_with_the_same_status_and_error(compiled: Any,
                                                                native: Any) -> None:
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    q, qd = states(mech, 12)
    q[5, 0] = np.nan
    fast = mech.forward_dynamics_jacobians(q, qd, errors="status")
    slow = mech.forward_dynamics_jacobians(general(q), general(qd), errors="status")
    assert list(np.flatnonzero(fast[-1])) == [5]
    for a, b in zip(fast, slow, strict=True):
        assert same(a, b)
    assert np.isnan(fast[0][5]).all() and np.isfinite(fast[0][np.arange(12) != 5]).all()
    messages = []
    for inputs in ((q, qd), (general(q), general(qd))):
        with pytest.raises(SingularConfigurationError) as error:
            mech.forward_dynamics(*inputs)
        messages.append(str(error.value))
    assert messages[0] == messages[1] and "state 5 (1 of 12 failed)" in messages[0]
    for inputs in ((q, qd), (general(q), general(qd))):
        with pytest.raises(SingularConfigurationError, match="state 5"):
            mech.independent_dynamics(*inputs)
    ok = mech.forward_dynamics(q[:5], qd[:5])  # a failure leaves the kept workspace sound
    assert same(ok, mech.forward_dynamics(general(q[:5]), general(qd[:5])))


def test_bad_shapes_and_modes_raise_as_before(compiled: Any, native: Any) -> None:
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    q, qd = states(mech, 3)
    with pytest.raises(ValueError, match=r"q must have shape \(4,\) or \(N, 4\)"):
        mech.forward_dynamics(q[:, :3], qd)
    with pytest.raises(ValueError, match="qd has 2 states, expected 3"):
        mech.forward_dynamics_jacobians(q, qd[:2])
    with pytest.raises(ValueError, match="errors must be one of"):
        mech.forward_dynamics(q, qd, errors="ignore")
    with pytest.raises(ValueError, match="out must hold 4 arrays"):
        mech.forward_dynamics_jacobians(q, qd, out=(np.empty((3, 4)),))
    # broadcasting one state against a batch still goes the general way, to the same values
    assert same(mech.forward_dynamics(q[0], qd), mech.forward_dynamics(np.stack([q[0]] * 3),
                                                                       qd))


def test_each_thread_keeps_its_own_workspace(compiled: Any, native: Any) -> None:
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    q, qd = states(mech, 16)
    expected = mech.forward_dynamics_jacobians(q, qd)
    results: list[Any] = []

    def work() -> None:
        for _ in range(20):
            results.append(mech.forward_dynamics_jacobians(q, qd))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 60
    assert all(same(a, b) for got in results for a, b in zip(got, expected, strict=True))

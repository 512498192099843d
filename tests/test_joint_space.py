"""Dynamics in a spatial open chain's joint angles (symbolic/joint_space.py, reduced.py,
csrc/joint_space.c): which mechanisms get it, z̈ against the Furuta pendulum's closed form,
its Jacobians against finite differences along the constraint manifold, and agreement
with the KKT path for batches, per-state parameters and a bad state in a batch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import SHIPPED_DIR
from independent import furuta_acceleration
from test_spatial import furuta_state

from mbgen.model import parse_mechanism
from mbgen.model.chain import spatial_chain_yaml
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.symbolic import build_symbolic_model
from mbgen.symbolic.joint_space import MAX_JOINTS, joint_space_of

Compiled = Callable[[Path], CompiledMechanism]
FURUTA = SHIPPED_DIR / "furuta.yaml"
Z = ["theta1", "theta2"]


def joint_states(mech: CompiledMechanism, count: int, seed: int,
                 params: list[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``count`` consistent states at random joint angles and rates: q, q̇ (count, n)."""
    rng = np.random.default_rng(seed)
    z = mech.independent_coordinates()
    guess = np.repeat(mech.q0[None], count, axis=0)
    guess[:, mech.coordinate_indices(z)] = rng.uniform(-np.pi, np.pi, (count, len(z)))
    q = mech.solve_position(guess, z=z, params=params)
    return q, mech.solve_velocity(q, rng.normal(0.0, 2.0, (count, len(z))), z=z,
                                  params=params)


def kkt_path(mech: CompiledMechanism) -> CompiledMechanism:
    """The same module with the joint-space path off (any method but "auto")."""
    mech.options.method = "sparse"
    return mech


@pytest.fixture
def furuta(compiled: Compiled) -> Iterator[CompiledMechanism]:
    mech = compiled(FURUTA)
    yield mech
    mech.options.method = "auto"


def test_open_chains_of_joint_angles_get_joint_space_dynamics_and_others_say_why() -> None:
    def space(text: str) -> list[int] | str:
        found = joint_space_of(build_symbolic_model(parse_mechanism(text)))
        return found if isinstance(found, str) else found.z

    assert space(FURUTA.read_text()) == [15, 16]
    assert space(spatial_chain_yaml(3, joint_angles=True)) == [18, 19, 20]
    assert "is not placed" in space((SHIPPED_DIR / "bricard.yaml").read_text())  # a loop
    assert "spatial" in space((SHIPPED_DIR / "double-pendulum.yaml").read_text())
    assert "no independent" in space(spatial_chain_yaml(3))
    assert f"beyond {MAX_JOINTS}" in space(spatial_chain_yaml(MAX_JOINTS + 1,
                                                             joint_angles=True))
    # the pendulum's angle measured from a direction fixed in the world, not on the arm:
    # θ1 then turns the pendulum about more than the vertical axis
    tilted = FURUTA.read_text().replace(
        "  - {name: down, x: 0, y: 0, z: -1, fixed: true}",
        "  - {name: down, x: 0, y: 0.6, z: -0.8, fixed: true}")
    assert "does not turn its body about its axis alone" in space(tilted)


@pytest.mark.parametrize("extras", [{}, {"c1": 4e-3, "c2": 5e-4, "K": 0.9, "tilt": 0.3}],
                         ids=["file", "friction-tilt-gain"])
def test_furuta_joint_accelerations_match_the_closed_form(
        furuta: CompiledMechanism, extras: dict[str, float]) -> None:
    p = {**dict(furuta.parameters), **extras}
    params = [p[name] for name in furuta.parameters]
    rng = np.random.default_rng(4)
    count = 29  # three blocks of lanes and five states alone
    theta, rate = rng.uniform(-np.pi, np.pi, (count, 2)), rng.normal(0.0, 3.0, (count, 2))
    # the pendulum where θ2 says (the angle's equation also holds with it reversed)
    q = np.array([furuta_state(p, angles) for angles in theta])
    qd = furuta.solve_velocity(q, rate, z=Z, params=params)
    torque = rng.normal(size=count)
    forces = np.zeros_like(q)
    forces[:, furuta.coordinate_index("theta1")] = torque
    zdd = furuta.independent_dynamics(q, qd, forces, z=Z, params=params, jacobians=False)
    expected = np.array([furuta_acceleration(p, theta[k], rate[k], torque[k] / p["K"])
                         for k in range(count)])
    assert np.max(np.abs(zdd - expected) / np.abs(expected)) <= 1e-10


def test_furuta_joint_space_jacobians_match_finite_differences(
        furuta: CompiledMechanism) -> None:
    q, qd = joint_states(furuta, 4, seed=6)
    zi = furuta.coordinate_indices(Z)
    forces = np.random.default_rng(7).normal(0.0, 0.3, q.shape)
    step = 1e-6
    for k in range(len(q)):
        zdd, jz, jzd, jq = furuta.independent_dynamics(q[k], qd[k], forces[k], z=Z)
        z, zd = q[k, zi], qd[k, zi]

        def at(z_new: np.ndarray, zd_new: np.ndarray, force: np.ndarray,
               start: np.ndarray = q[k]) -> np.ndarray:
            guess = start.copy()
            guess[zi] = z_new
            moved = furuta.solve_position(guess, z=Z)
            rates = furuta.solve_velocity(moved, zd_new, z=Z)
            return furuta.independent_dynamics(moved, rates, force, z=Z, jacobians=False)

        for j in range(2):
            e = np.eye(2)[j] * step
            np.testing.assert_allclose((at(z + e, zd, forces[k]) - at(z - e, zd, forces[k]))
                                       / (2 * step), jz[:, j], rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose((at(z, zd + e, forces[k]) - at(z, zd - e, forces[k]))
                                       / (2 * step), jzd[:, j], rtol=1e-6, atol=1e-6)
        for i in range(furuta.n):
            e = np.eye(furuta.n)[i]
            np.testing.assert_allclose(at(z, zd, forces[k] + e) - zdd, jq[:, i], atol=1e-9)


def test_joint_space_agrees_with_the_kkt_path_per_state_and_per_parameter_set(
        furuta: CompiledMechanism) -> None:
    count = 21
    rng = np.random.default_rng(8)
    names = list(furuta.parameters)
    params = np.tile(list(furuta.parameters.values()), (count, 1))
    for name in ("m1", "J2p", "b2", "tilt"):
        params[:, names.index(name)] *= rng.uniform(0.8, 1.2, count)
    q, qd = joint_states(furuta, count, seed=9)
    forces = rng.normal(0.0, 0.3, q.shape)
    fast = furuta.independent_dynamics(q, qd, forces, z=Z, params=params)
    slow = kkt_path(furuta).independent_dynamics(q, qd, forces, z=Z, params=params)
    for mine, theirs in zip(fast, slow, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-9, atol=1e-9 * np.max(np.abs(theirs)))
    # one state at a time, the parameter sets taking turns: each call sees its own set
    furuta.options.method = "auto"
    for k in (0, 1, 0, 2):
        alone = furuta.independent_dynamics(q[k], qd[k], forces[k], z=Z, params=params[k])
        np.testing.assert_allclose(alone[0], slow[0][k], rtol=1e-9)


def test_independent_dynamics_writes_into_given_arrays(furuta: CompiledMechanism) -> None:
    """``out=``: the results land in the caller's arrays (returned as they are), equal to
    fresh ones, batched and for one state, on the joint-space and the KKT path; a wrong
    shape is refused before any work."""
    q, qd = joint_states(furuta, 10, seed=15)
    d, n = furuta.dof, furuta.n
    for method in ("auto", "sparse"):
        furuta.options.method = method
        fresh = furuta.independent_dynamics(q, qd, z=Z)
        out = (np.empty((10, d)), np.empty((10, d, d)), np.empty((10, d, d)),
               np.empty((10, d, n)))
        given = furuta.independent_dynamics(q, qd, z=Z, out=out)
        assert all(a is b for a, b in zip(given, out, strict=True))
        for a, b in zip(given, fresh, strict=True):
            assert np.array_equal(a, b)
        one = (np.empty(d),)
        assert furuta.independent_dynamics(q[3], qd[3], z=Z, jacobians=False,
                                           out=one) is one[0]
        assert np.array_equal(one[0], furuta.independent_dynamics(q[3], qd[3], z=Z,
                                                                  jacobians=False))
    with pytest.raises(ValueError, match="shape"):
        furuta.independent_dynamics(q, qd, z=Z, jacobians=False, out=(np.empty((9, d)),))
    with pytest.raises(ValueError, match="out must hold 4 arrays"):
        furuta.independent_dynamics(q, qd, z=Z, out=(np.empty((10, d)),))


def test_a_bad_state_fails_alone_in_a_joint_space_batch(furuta: CompiledMechanism) -> None:
    q, qd = joint_states(furuta, 12, seed=10)
    q[3, furuta.coordinate_index("theta2")] = np.nan
    zdd, jz, jzd, jq, status = furuta.independent_dynamics(q, qd, z=Z, errors="status")
    assert np.flatnonzero(status).tolist() == [3]
    assert np.isnan(zdd[3]).all() and np.isnan(jq[3]).all()
    good = np.delete(np.arange(12), 3)
    assert np.isfinite(zdd[good]).all() and np.isfinite(jz[good]).all()


def test_joint_space_lanes_give_each_state_alone_bit_for_bit(furuta: CompiledMechanism) -> None:
    """19 states, each with its own parameters and force: two blocks of 8 in lanes (the
    terms, J and the finish of Mz⁻¹ side by side) and a tail of 3 alone give exactly what
    each state gives in a call of its own; a state whose Mz is not positive definite (a
    negative mass in its parameter set) fails alone in its block, with its status."""
    count = 19
    rng = np.random.default_rng(13)
    names = list(furuta.parameters)
    params = np.tile(list(furuta.parameters.values()), (count, 1))
    params *= rng.uniform(0.9, 1.1, params.shape)
    params[:, names.index("c1")] = rng.uniform(0.0, 0.01, count)  # tanh's calls, hoisted
    q, qd = joint_states(furuta, count, seed=14)
    forces = rng.normal(0.0, 0.3, q.shape)
    params[5, names.index("m2")] = -1.0
    params[5, names.index("J2p")] = -1.0
    *batch, status = furuta.independent_dynamics(q, qd, forces, z=Z, params=params,
                                                 errors="status")
    assert np.flatnonzero(status).tolist() == [5]
    assert status[5] == furuta.lib.MB_SINGULAR_MASS and np.isnan(batch[0][5]).all()
    for k in range(count):
        if k == 5:
            continue
        alone = furuta.independent_dynamics(q[k], qd[k], forces[k], z=Z, params=params[k])
        for part, values in zip(alone, batch, strict=True):
            assert np.array_equal(values[k], part), k


@pytest.mark.parametrize("joints", [3, 4])  # the finish in lanes (d <= 3), or per state
def test_a_serial_arm_in_joint_space_agrees_with_the_kkt_path(
        tmp_path: Path, out_dir: Path, joints: int) -> None:
    import mbgen

    path = tmp_path / "arm.yaml"
    path.write_text(spatial_chain_yaml(joints, joint_angles=True))
    arm = mbgen.load(str(path), out_dir=str(out_dir))
    q, qd = joint_states(arm, 10, seed=11)
    forces = np.random.default_rng(12).normal(0.0, 0.5, q.shape)
    fast = arm.independent_dynamics(q, qd, forces)
    slow = kkt_path(arm).independent_dynamics(q, qd, forces)
    for mine, theirs in zip(fast, slow, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-8, atol=1e-8 * np.max(np.abs(theirs)))


def test_info_says_whether_a_spatial_mechanism_has_joint_space_dynamics(out_dir: Path) -> None:
    from click.testing import CliRunner

    from mbgen.cli.main import cli

    def info(name: str) -> str:
        result = CliRunner().invoke(cli, ["info", str(SHIPPED_DIR / name), "--build-dir",
                                          str(out_dir)], terminal_width=200)
        assert result.exit_code == 0, result.output
        return " ".join(result.output.split())

    assert "joint-space dynamics in theta1, theta2" in info("furuta.yaml")
    assert "joint-space dynamics none: body BC is not placed" in info("bricard.yaml")


def test_placed_coordinates_are_a_consistent_state_at_the_angles() -> None:
    """placed_coordinates (forward kinematics with numbers) at random angles of a spatial
    chain of 4 revolute joints, far from the file's pose: Φ = 0 to rounding (every
    constraint of the file, evaluated symbolically), the angles kept."""
    from mbgen.symbolic.joint_space import placed_coordinates

    text = spatial_chain_yaml(4, joint_angles=True)
    mechanism = parse_mechanism(text, "chain.yaml")
    names = mechanism.independent
    angles = dict(zip(names, np.random.default_rng(2).uniform(-1.5, 1.5, len(names)),
                      strict=True))
    q = placed_coordinates(mechanism, angles)
    model = build_symbolic_model(mechanism)
    phi = [float(c.expr.xreplace(mechanism.parameter_values).xreplace(dict(zip(
        model.q, q, strict=True)))) for c in model.constraints]
    assert np.max(np.abs(phi)) <= 1e-12
    index = [mechanism.coordinate_names.index(name) for name in names]
    assert np.array_equal(q[index], list(angles.values()))

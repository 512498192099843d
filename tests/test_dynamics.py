"""Forward dynamics: values against independent results, exact Jacobians against finite
differences, and clear errors where the dynamics have no unique solution."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    ALL_MECHANISMS,
    entrywise_error,
    finite_difference_error,
    mechanism_id,
    numerical_jacobian,
    reference,
)

import mbgen
from mbgen.errors import SingularConfigurationError
from mbgen.runtime.compiled import CompiledMechanism

Compiled = Callable[[Path], CompiledMechanism]
# Central-difference step of the dynamics checks: q̈ comes out of a linear solve, so its
# round-off (not the O(h²) truncation) limits smaller steps.
FD_STEP = 1e-5


def manifold_state(mech: CompiledMechanism, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A random assembled configuration near q0 with an admissible velocity."""
    rng = np.random.default_rng(seed)
    q = mech.solve_position(mech.q0 + 0.03 * rng.standard_normal(mech.n), minimum_norm=True)
    qd = mech.project_velocity(q, rng.standard_normal(mech.n))
    return q, qd


@pytest.mark.parametrize(("name", "expected"), [
    ("pendulum1", [7.3575, -7.3575]),
    ("fourbars1", [0.0, -9.690366, -6.460244, -9.690366]),
    ("fourbars1-with-rel-angle", [0.0, -9.690366, -6.460244, -9.690366, -9.690366]),
])
def test_accelerations_at_rest_match_independent_values(compiled: Compiled, name: str,
                                                        expected: list[float]) -> None:
    mech = compiled(reference(name))
    qdd = mech.forward_dynamics(mech.q0, np.zeros(mech.n))
    np.testing.assert_allclose(qdd, expected, atol=5e-6)


def test_pick_and_place_with_redundant_constraint_and_singular_mass(compiled: Compiled) -> None:
    mech = compiled(reference("pick-and-place-robot"))
    assert np.linalg.matrix_rank(mech.mass_matrix(mech.q0)) < mech.n  # angles carry no mass
    assert len(mech.active_rows) == mech.m - 1
    q, qd = manifold_state(mech, 3)
    for velocity in (np.zeros(mech.n), qd):
        qdd = mech.forward_dynamics(q, velocity)
        c = -mech.dphiq_qd(q, velocity)
        # Every row holds, the redundant one included.
        np.testing.assert_allclose(mech.phi_q(q) @ qdd, c, atol=1e-9)
        # Newton's law projected on the motions the constraints allow: Rᵀ(M q̈ − Q) = 0.
        _, R, _ = mech.partition(q)
        residual = R.T @ (mech.mass_matrix(q) @ qdd - mech.generalized_forces(q, velocity))
        assert np.abs(residual).max() < 1e-9


@pytest.mark.parametrize("path", ALL_MECHANISMS, ids=mechanism_id)
def test_forward_dynamics_jacobians_match_finite_differences(compiled: Compiled,
                                                             path: Path) -> None:
    mech = compiled(path)
    rng = np.random.default_rng(7)
    for seed in range(2):
        q, qd = manifold_state(mech, seed)
        Q = rng.standard_normal(mech.n)
        qdd, jq, jqd, jQ = mech.forward_dynamics_jacobians(q, qd, Q)
        np.testing.assert_allclose(qdd, mech.forward_dynamics(q, qd, Q), rtol=1e-12, atol=1e-12)
        def qdd_of(q: np.ndarray, qd: np.ndarray, Q: np.ndarray) -> np.ndarray:
            return mech.forward_dynamics(q, qd, Q)

        for k, (jacobian, x) in enumerate(((jq, q), (jqd, qd), (jQ, Q))):
            args = [q, qd, Q]

            def vary(value: np.ndarray, k: int = k, args: list = args) -> np.ndarray:
                return qdd_of(*[value if i == k else a for i, a in enumerate(args)])

            assert finite_difference_error(
                jacobian, lambda h, f=vary, x=x: numerical_jacobian(f, x, h), FD_STEP) <= 1e-5


@pytest.mark.parametrize("path", ALL_MECHANISMS, ids=mechanism_id)
def test_independent_coordinate_jacobians_match_finite_differences(compiled: Compiled,
                                                                   path: Path) -> None:
    """∂z̈/∂z and ∂z̈/∂ż, moving along the constraint manifold by the position and
    velocity problems (so the test exercises solve_position and solve_velocity too)."""
    mech = compiled(path)
    q, qd = manifold_state(mech, 11)
    ind, _, _ = mech.partition(q)
    z, zd = q[ind], qd[ind]

    def zdd_at(z_new: np.ndarray, zd_new: np.ndarray) -> np.ndarray:
        guess = q.copy()
        guess[ind] = z_new
        q_new = mech.solve_position(guess, z=ind, tol=1e-14)
        qd_new = mech.solve_velocity(q_new, zd_new, z=ind)
        return mech.forward_dynamics(q_new, qd_new)[ind]

    zdd, jz, jzd, _ = mech.independent_dynamics(q, qd, z=ind)
    np.testing.assert_allclose(zdd, zdd_at(z, zd), atol=1e-9)
    assert entrywise_error(jz, numerical_jacobian(lambda x: zdd_at(x, zd), z, FD_STEP)) <= 1e-5
    assert entrywise_error(jzd, numerical_jacobian(lambda x: zdd_at(z, x), zd, FD_STEP)) <= 1e-5


def test_batched_dynamics_equal_single_calls(compiled: Compiled) -> None:
    mech = compiled(reference("pendulum3"))
    states = [manifold_state(mech, s) for s in range(4)]
    q = np.array([s[0] for s in states])
    qd = np.array([s[1] for s in states])
    qdd, jq, jqd, jQ = mech.forward_dynamics_jacobians(q, qd)
    for k in range(4):
        single = mech.forward_dynamics_jacobians(q[k], qd[k])
        for batched_value, value in zip((qdd, jq, jqd, jQ), single, strict=True):
            np.testing.assert_allclose(batched_value[k], value, rtol=1e-13, atol=1e-13)


def test_kinematic_problems(compiled: Compiled) -> None:
    mech = compiled(reference("fourbars1-with-rel-angle"))
    guess = mech.q0 + np.array([0.02, -0.03, 0.05, 0.01, 0.2])
    q = mech.solve_position(guess, z=["theta0"])
    assert np.abs(mech.phi(q)).max() < 1e-12
    assert q[4] == pytest.approx(guess[4])  # z kept its value
    np.testing.assert_allclose(q[:2], [np.cos(q[4]), np.sin(q[4])], atol=1e-12)
    qd = mech.solve_velocity(q, [1.5], z=["theta0"])
    assert np.abs(mech.phi_q(q) @ qd).max() < 1e-12
    assert qd[4] == pytest.approx(1.5)
    qdd = mech.solve_acceleration(q, qd, [0.7], z=["theta0"])
    np.testing.assert_allclose(mech.phi_q(q) @ qdd, -mech.dphiq_qd(q, qd), atol=1e-10)
    assert qdd[4] == pytest.approx(0.7)
    assert mech.independent_coordinates() == ["theta0"]


PARALLELOGRAM = """
points:
  - {x: 0, y: 0, fixed: true}
  - {x: cos(pi/3), y: sin(pi/3)}
  - {x: 2 + cos(pi/3), y: sin(pi/3)}
  - {x: 2, y: 0, fixed: true}
planar_bodies:
  - {points: [0, 1], mass: 1}
  - {points: [1, 2], mass: 2}
  - {points: [2, 3], mass: 1}
"""


def test_dead_point_raises_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "parallelogram.yaml"
    path.write_text(PARALLELOGRAM)
    mech = mbgen.load(str(path), out_dir=str(tmp_path / "gen"))
    assert mech.dof == 1
    flat = np.array([1.0, 0.0, 3.0, 0.0])  # all four points on one line: Φq loses rank
    assert np.abs(mech.phi(flat)).max() < 1e-12
    with pytest.raises(SingularConfigurationError, match=r"loses rank.*x1=1, y1=0, x2=3"):
        mech.forward_dynamics(flat, np.zeros(4))
    with pytest.raises(SingularConfigurationError):
        mech.forward_dynamics_jacobians(flat, np.zeros(4))


def test_massless_mechanism_raises_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "massless.yaml"
    path.write_text("points:\n  - {x: 0, y: 0, fixed: true}\n  - {x: 1, y: 0}\n"
                    "planar_bodies:\n  - {points: [0, 1], mass: 0, I0: 0}\n")
    mech = mbgen.load(str(path), out_dir=str(tmp_path / "gen"))
    with pytest.raises(SingularConfigurationError, match="mass matrix is singular"):
        mech.forward_dynamics(mech.q0, np.zeros(2))


def test_over_constrained_model_that_cannot_assemble_raises(tmp_path: Path) -> None:
    """A triangle whose bar lengths violate the triangle inequality has no configuration."""
    path = tmp_path / "impossible.yaml"
    path.write_text("points:\n  - {x: 0, y: 0, fixed: true}\n  - {x: 1, y: 0}\n"
                    "  - {x: 4, y: 0, fixed: true}\n"
                    "planar_bodies:\n  - {points: [0, 1], mass: 1, length: 1}\n"
                    "  - {points: [1, 2], mass: 1, length: 1}\n")
    mech = mbgen.load(str(path), out_dir=str(tmp_path / "gen"))
    with pytest.raises(SingularConfigurationError, match="position problem.*over-constrained"):
        mech.solve_position(mech.q0 + 0.1, minimum_norm=True)


def test_energy_equals_work_of_constant_generalized_force(compiled: Compiled) -> None:
    """d(T+V)/dt = q̇ᵀ Q_ext: power balance at a random state (V excludes Q_ext)."""
    mech = compiled(reference("fourbars1"))
    q, qd = manifold_state(mech, 5)
    Q = np.array([0.3, -1.2, 0.5, 2.0])
    qdd = mech.forward_dynamics(q, qd, Q)
    h = 1e-6
    rate = (mech.energy(q + h * qd, qd + h * qdd) - mech.energy(q - h * qd, qd - h * qdd)) / (2 * h)
    assert rate == pytest.approx(qd @ Q, rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("scale", [1.0, 1e-4])
def test_a_contradicting_redundant_row_is_found_at_any_size(tmp_path: Path,
                                                            scale: float) -> None:
    """At q0 the two bars are collinear, so the second length row is redundant there (Φq
    loses rank) but does not hold: the model contradicts itself. The check of such rows
    had an absolute floor (1e-7 m²), under which the same mechanism 0.4 mm across passed."""
    path = tmp_path / "contradiction.yaml"
    path.write_text(f"points:\n  - {{x: 0, y: 0, fixed: true}}\n  - {{x: {scale}, y: 0}}\n"
                    f"  - {{x: {4 * scale}, y: 0, fixed: true}}\n"
                    f"planar_bodies:\n  - {{points: [0, 1], mass: 1, length: {scale}}}\n"
                    f"  - {{points: [1, 2], mass: 1, length: {scale}}}\n")
    mech = mbgen.load(str(path), out_dir=str(tmp_path / "gen"))
    assert len(mech.active_rows) == 1
    _, status = mech.solve_position(mech.q0, errors="status")
    assert mech.is_status(int(status[0]), "INCONSISTENT")


@pytest.mark.parametrize("bodies", [64, 65])
def test_large_jacobians_written_past_the_caches_are_right(compiled: Compiled, tmp_path: Path,
                                                          bodies: int) -> None:
    """A 64-bar chain (n = 128) and a 65-bar one (n = 130, not a multiple of the 4 x 4
    blocks): their n x n Jacobians are large enough to be written with non-temporal stores
    (in transposed 4 x 4 blocks where n allows), and each column of a product is summed in
    vector accumulators from the inverse's rows, which the generic inverse keeps in
    elimination order. Batched they equal one state at a time, and all three match finite
    differences."""
    from mbgen.model.chain import chain_yaml

    path = tmp_path / f"chain{bodies}.yaml"
    path.write_text(chain_yaml(bodies))
    mech = compiled(path)
    assert mech.n == 2 * bodies
    states = [manifold_state(mech, seed) for seed in range(3)]
    q, qd = np.array([s[0] for s in states]), np.array([s[1] for s in states])
    batched = mech.forward_dynamics_jacobians(q, qd)
    for k in range(3):
        for value, single in zip(batched, mech.forward_dynamics_jacobians(q[k], qd[k]),
                                 strict=True):
            assert np.array_equal(value[k], single)
    Q = np.zeros(mech.n)
    for jacobian, vary, x in ((batched[1][0], lambda v: mech.forward_dynamics(v, qd[0], Q), q[0]),
                              (batched[2][0], lambda v: mech.forward_dynamics(q[0], v, Q), qd[0]),
                              (batched[3][0], lambda f: mech.forward_dynamics(q[0], qd[0], f), Q)):
        assert finite_difference_error(
            jacobian, lambda h, f=vary, x=x: numerical_jacobian(f, x, h), FD_STEP) <= 1e-5

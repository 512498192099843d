"""The customer's reference mechanisms (the copies in tests/data): sizes, rank, coordinate
order and physics sanity. test_shared_reference.py checks the originals in ../shared."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import REFERENCE_MECHANISMS, mechanism_id, reference

from mbgen.model import load_mechanism
from mbgen.runtime.compiled import CompiledMechanism

Compiled = Callable[[Path], CompiledMechanism]
G = 9.81

# name: (n, m, rank of Φq, DOF, number of redundant constraints)
EXPECTED_SIZES = {
    "pendulum1": (2, 1, 1, 1, 0),
    "fourbars1": (4, 3, 3, 1, 0),
    "fourbars1-with-rel-angle": (5, 4, 4, 1, 0),
    "pendulum2": (10, 6, 6, 4, 0),
    "pendulum3": (12, 8, 8, 4, 0),
    "pick-and-place-robot": (22, 21, 20, 2, 1),
}


def test_every_reference_copy_has_expected_sizes() -> None:
    assert {p.stem for p in REFERENCE_MECHANISMS} == set(EXPECTED_SIZES)


@pytest.mark.parametrize("name", sorted(EXPECTED_SIZES))
def test_sizes_rank_and_dof(name: str, compiled: Compiled) -> None:
    n, m, rank, dof, redundant = EXPECTED_SIZES[name]
    mech = compiled(reference(name))
    assert (mech.n, mech.m) == (n, m)
    assert mech.phi_q(mech.q0).shape == (m, n)
    assert np.linalg.matrix_rank(mech.phi_q(mech.q0)) == rank  # independent of mbgen's split
    assert mech.rank == rank
    assert mech.dof == dof
    kept, dropped = mech.independent_constraints()
    assert len(dropped) == redundant
    assert sorted(kept + dropped) == list(range(m))
    assert np.linalg.matrix_rank(mech.phi_q(mech.q0)[kept]) == rank


def test_pick_and_place_redundant_row_is_a_combination_of_kept_rows(compiled: Compiled) -> None:
    mech = compiled(reference("pick-and-place-robot"))
    jac = mech.phi_q(mech.q0)
    kept, dropped = mech.independent_constraints()
    assert len(dropped) == 1
    coeffs, *_ = np.linalg.lstsq(jac[kept].T, jac[dropped[0]], rcond=None)
    assert np.allclose(jac[kept].T @ coeffs, jac[dropped[0]], atol=1e-9)


def test_coordinate_names_literal() -> None:
    assert load_mechanism(reference("pendulum1")).coordinate_names == ["x1", "y1"]
    assert load_mechanism(reference("fourbars1-with-rel-angle")).coordinate_names == [
        "x1", "y1", "x2", "y2", "theta0"]
    pick = load_mechanism(reference("pick-and-place-robot")).coordinate_names
    assert pick == [f"{axis}{i}" for i in range(2, 12) for axis in "xy"] + ["theta0", "theta1"]


def test_relative_angle_q0_is_crank_angle(compiled: Compiled) -> None:
    mech = compiled(reference("fourbars1-with-rel-angle"))
    assert mech.q0[mech.coordinate_index("theta0")] == pytest.approx(0.0, abs=1e-12)
    pick = compiled(reference("pick-and-place-robot"))
    # theta0: segment point 1 (0.5, -0.5) → point 3 (-0.5, -1.5); theta1: 12 (1, -.5) → 10.
    assert pick.q0[pick.coordinate_index("theta0")] == pytest.approx(math.atan2(-1, -1))
    assert pick.q0[pick.coordinate_index("theta1")] == pytest.approx(math.atan2(-1.0, 1.0))


# -- physics against closed forms computed by hand ------------------------------------------

def bar_mass_matrix(m: float, length: float, a: float, b: float, i0: float) -> np.ndarray:
    """Textbook 4×4 mass matrix of a planar bar in natural coordinates (x_i, y_i, x_j, y_j).

    The body-frame point ρ = (1 − ξ/L) r_i + (ξ/L) r_j + (η/L) J (r_j − r_i), integrated over
    the body with ∫dm = m, ∫ξ dm = m a, ∫η dm = m b and ∫(ξ² + η²) dm = I0 (about point i).
    """
    eye = np.eye(2)
    rot = np.array([[0.0, -1.0], [1.0, 0.0]])
    lsq = length**2
    m_ii = (m - 2 * m * a / length + i0 / lsq) * eye
    m_ij = (m * a / length - i0 / lsq) * eye + (m * b / length) * rot
    m_jj = (i0 / lsq) * eye
    return np.block([[m_ii, m_ij], [m_ij.T, m_jj]])


def test_pendulum1_mass_matrix_is_textbook_bar(compiled: Compiled) -> None:
    mech = compiled(reference("pendulum1"))
    m, length = 5.0, 2.0
    i0 = m * length**2 / 3
    full = bar_mass_matrix(m, length, length / 2, 0.0, i0)
    expected = full[2:, 2:]  # point 0 is fixed: only the tip's x, y are coordinates
    assert np.allclose(expected, (i0 / length**2) * np.eye(2))  # sanity of the hand formula
    for q in (mech.q0, mech.q0 + [0.3, -0.2]):  # M is constant in natural coordinates
        assert np.allclose(mech.mass_matrix(q), expected, rtol=1e-12, atol=1e-12)


def test_pendulum1_gravity_force_on_tip(compiled: Compiled) -> None:
    mech = compiled(reference("pendulum1"))
    m, length, a = 5.0, 2.0, 1.0
    expected = np.array([0.0, -m * (a / length) * G])
    rng = np.random.default_rng(1)
    for q, qd in ((mech.q0, np.zeros(2)), (mech.q0 + 0.1, rng.standard_normal(2))):
        assert np.allclose(mech.generalized_forces(q, qd), expected, rtol=1e-12, atol=1e-12)


def test_fourbars1_potential_energy_at_q0(compiled: Compiled) -> None:
    mech = compiled(reference("fourbars1"))
    # (mass, first point, second point, cog along the bar) at q0, L = 1, xb = 4:
    bodies = [
        (1.0, (0.0, 0.0), (1.0, 0.0), 0.5),
        (2.0, (1.0, 0.0), (1.0, 2.0), 1.0),
        (4.0, (1.0, 2.0), (4.0, 0.0), 0.5 * math.hypot(3.0, 2.0)),
    ]
    potential = 0.0
    for mass, (xi, yi), (xj, yj), a in bodies:
        length = math.hypot(xj - xi, yj - yi)
        y_cog = yi + a * (yj - yi) / length
        potential += mass * G * y_cog
    assert potential == pytest.approx(G * (2 * 1.0 + 4 * 1.0))
    kinetic, pot = mech.energy_parts(mech.q0, np.zeros(mech.n))
    assert kinetic == 0.0
    assert pot == pytest.approx(potential, rel=1e-12)
    assert mech.energy(mech.q0, np.zeros(mech.n)) == pytest.approx(potential, rel=1e-12)


def rigid_rotation_velocity(mech: CompiledMechanism, omega: float) -> np.ndarray:
    """q̇ of every mobile point for a rigid rotation about the origin: ω × r."""
    qd = np.zeros(mech.n)
    for k, name in enumerate(mech.coordinate_names):
        if name.startswith("x"):
            qd[k] = -omega * mech.q0[k + 1]
            qd[k + 1] = omega * mech.q0[k]
        elif not name.startswith("y"):
            qd[k] = omega  # absolute angles rotate with the mechanism
    return qd


@pytest.mark.parametrize("omega", [1.0, -2.5, 0.3])
def test_pendulum1_kinetic_energy_of_rotation(omega: float, compiled: Compiled) -> None:
    mech = compiled(reference("pendulum1"))
    qd = rigid_rotation_velocity(mech, omega)
    i0 = 5.0 * 2.0**2 / 3
    kinetic = 0.5 * qd @ mech.mass_matrix(mech.q0) @ qd
    assert kinetic == pytest.approx(0.5 * i0 * omega**2, rel=1e-12)
    assert mech.energy_parts(mech.q0, qd)[0] == pytest.approx(0.5 * i0 * omega**2, rel=1e-12)


@pytest.mark.parametrize("omega", [1.0, -0.7])
def test_pendulum3_kinetic_energy_of_rigid_rotation(omega: float, compiled: Compiled) -> None:
    """Whole mechanism turning about the fixed point 0 as one rigid body.

    Body 0 pivots about its own first point, so it contributes exactly ½ I0 ω² (its cog,
    (1, 0.5) in the body frame, is off the bar axis). Every other bar contributes
    ½ (I0 − m|c|² + m|r_cog|²) ω² (parallel-axis theorem, by hand from the file's data).
    """
    mech = compiled(reference("pendulum3"))
    # mass, I0 (about the first point), cog offset |c| along the bar, world cog at q0
    body0_i0 = (1 / 3) * 2.0 * 2.0**2
    others = [
        (1.0, (1 / 3) * 1.0 * 1.0**2, 0.5, (2.5, 0.0)),   # points 1 (2,0) → 4 (3,0)
        (1.0, (1 / 3) * 1.0 * 2.0**2, 1.0, (3.0, -1.0)),  # points 2 (2,-1) → 5 (4,-1)
        (2.0, (1 / 3) * 2.0 * 1.0**2, 0.5, (0.0, -1.5)),  # points 3 (0,-1) → 6 (0,-2)
    ]
    inertia_about_origin = body0_i0 + sum(
        i0 - m * c**2 + m * (x**2 + y**2) for m, i0, c, (x, y) in others)
    qd = rigid_rotation_velocity(mech, omega)
    kinetic = 0.5 * qd @ mech.mass_matrix(mech.q0) @ qd
    assert kinetic == pytest.approx(0.5 * inertia_about_origin * omega**2, rel=1e-12)
    # Rigid motion keeps every distance: the velocity lies in the null space of Φq.
    assert np.allclose(mech.phi_q(mech.q0) @ qd, 0.0, atol=1e-12)


FREE_BODY = """\
# Body 0 of pendulum3 (cog off the bar axis) with no fixed point: a free rigid body.
points:
  - {x: 0.0, y: 0.0}
  - {x: 2.0, y: 0.0}
  - {x: 2.0, y: -1.0}
  - {x: 0.0, y: -1.0}
planar_bodies:
  - points: [0, 1, 2, 3]
    mass: 2.0
    I0: (1/3)*mass*length12^2
    cog: [0.5*length12, 0.5*length14]
"""


def test_free_off_axis_body_energies(compiled: Compiled, tmp_path: Path) -> None:
    """Rotation about an arbitrary point P: T = ½ (I0 − m|c|² + m|r_cog − P|²) ω².

    With no fixed point the off-axis cog terms of M (m b / L) take part, so a wrong sign
    or placement of the cog shows up here (and in the potential m g y_cog).
    """
    path = tmp_path / "free_body.yaml"
    path.write_text(FREE_BODY)
    mech = compiled(path)
    assert (mech.n, mech.m, mech.dof) == (8, 5, 3)
    m, i0 = 2.0, (1 / 3) * 2.0 * 2.0**2
    cog_body = np.array([1.0, 0.5])
    cog_world = np.array([1.0, 0.5])  # the body frame is the world frame at q0
    points = mech.q0.reshape(-1, 2)
    mass = mech.mass_matrix(mech.q0)
    for pivot, omega in (((0.0, 0.0), 1.0), ((1.0, -3.0), -2.0), ((1.0, 0.5), 0.5)):
        qd = (omega * (points - pivot) @ np.array([[0.0, 1.0], [-1.0, 0.0]])).ravel()
        assert np.allclose(mech.phi_q(mech.q0) @ qd, 0.0, atol=1e-12)  # rigid motion
        inertia = i0 - m * cog_body @ cog_body + m * np.sum((cog_world - pivot) ** 2)
        assert 0.5 * qd @ mass @ qd == pytest.approx(0.5 * inertia * omega**2, rel=1e-12)
    velocity = np.array([0.3, -1.2])
    qd = np.tile(velocity, 4)
    assert 0.5 * qd @ mass @ qd == pytest.approx(0.5 * m * velocity @ velocity, rel=1e-12)
    assert mech.energy_parts(mech.q0, np.zeros(8))[1] == pytest.approx(m * G * cog_world[1])
    # Gravity acts at the cog: the total vertical force is −m g, the moment about point 0
    # is −m g x_cog (generalized forces of a rigid motion equal the applied wrench's power).
    forces = mech.generalized_forces(mech.q0, np.zeros(8))
    assert forces.reshape(-1, 2).sum(axis=0) == pytest.approx([0.0, -m * G])
    qd_rot = (points @ np.array([[0.0, 1.0], [-1.0, 0.0]])).ravel()  # ω = 1 about point 0
    assert forces @ qd_rot == pytest.approx(-m * G * cog_world[0])


@pytest.mark.parametrize("path", REFERENCE_MECHANISMS, ids=mechanism_id)
def test_mass_matrix_symmetric_positive_semidefinite(path: Path, compiled: Compiled) -> None:
    mech = compiled(path)
    rng = np.random.default_rng(2)
    for q in (mech.q0, mech.q0 + 0.05 * rng.standard_normal(mech.n)):
        mass = mech.mass_matrix(q)
        assert np.allclose(mass, mass.T, rtol=0, atol=1e-12 * max(1.0, np.abs(mass).max()))
        eigenvalues = np.linalg.eigvalsh(mass)
        assert eigenvalues.min() >= -1e-10 * eigenvalues.max()
        assert eigenvalues.max() > 0


def test_coordinates_are_found_by_name_position_or_a_comma_list(compiled: Compiled) -> None:
    """The one coordinate lookup: names, positions and "a,b" lists agree, and a wrong name
    or position is refused naming the choices."""
    mech = compiled(reference("fourbars1"))
    names = mech.coordinate_names
    last = len(names) - 1
    by_name = mech.coordinate_indices([names[1], names[last]])
    assert by_name == [1, last]
    assert mech.coordinate_indices(f"{names[1]}, {names[last]}") == by_name
    assert mech.coordinate_indices([1, last]) == by_name
    assert mech.coordinate_indices(f"1,{last}") == by_name
    with pytest.raises(KeyError, match="coordinates: " + names[0]):
        mech.coordinate_indices("nowhere")
    with pytest.raises(IndexError, match=f"0..{last}"):
        mech.coordinate_indices([last + 1])
    with pytest.raises(ValueError, match="out of range"):
        mech.independent_indices([last + 1] * mech.dof)

"""Simulation against independent physics: a textbook double pendulum integrated by SciPy,
energy conservation of the free four-bar, and constraint satisfaction with projection."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, SHIPPED_DIR, reference
from scipy.integrate import solve_ivp

import mbgen
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.simulation import simulate

Compiled = Callable[[Path], CompiledMechanism]
G = 9.81
M1, L1, M2, L2 = 1.0, 1.0, 1.5, 0.8
PHI1, PHI2 = 0.0, np.pi / 4  # absolute angles of the bars from +x

DOUBLE_PENDULUM = f"""
parameters: {{m1: {M1}, L1: {L1}, m2: {M2}, L2: {L2}}}
points:
  - {{x: 0, y: 0, fixed: true}}
  - {{x: L1*cos({PHI1}), y: L1*sin({PHI1})}}
  - {{x: x1 + L2*cos({PHI2}), y: y1 + L2*sin({PHI2})}}
planar_bodies:
  - {{points: [0, 1], length: L1, mass: m1}}
  - {{points: [1, 2], length: L2, mass: m2}}
"""


def textbook_double_pendulum(t, s):
    """Two uniform bars, absolute angles φ1, φ2 (Lagrange's equations, derived by hand)."""
    p1, p2, w1, w2 = s
    m11 = M1 * L1**2 / 3 + M2 * L1**2
    m22 = M2 * L2**2 / 3
    m12 = M2 * L1 * L2 / 2 * np.cos(p1 - p2)
    k = M2 * L1 * L2 / 2 * np.sin(p1 - p2)
    rhs1 = -k * w2**2 - G * (M1 * L1 / 2 + M2 * L1) * np.cos(p1)
    rhs2 = k * w1**2 - G * M2 * L2 / 2 * np.cos(p2)
    a1, a2 = np.linalg.solve([[m11, m12], [m12, m22]], [rhs1, rhs2])
    return [w1, w2, a1, a2]


@pytest.mark.parametrize(("integrator", "coords", "dt"), [
    ("rk4", "dependent", 5e-4), ("rk4", "independent", 5e-4),
])
def test_double_pendulum_matches_textbook_equations(tmp_path: Path, integrator: str,
                                                    coords: str, dt: float) -> None:
    path = tmp_path / "double.yaml"
    path.write_text(DOUBLE_PENDULUM)
    mech = mbgen.load(str(path), out_dir=str(tmp_path / "gen"))
    result = simulate(mech, t_end=5.0, dt=dt, integrator=integrator, coords=coords)
    x1, y1, x2, y2 = result.q.T
    angles = np.unwrap(np.column_stack([np.arctan2(y1, x1), np.arctan2(y2 - y1, x2 - x1)]),
                       axis=0)
    reference_run = solve_ivp(textbook_double_pendulum, (0, 5), [PHI1, PHI2, 0, 0],
                              t_eval=result.t, rtol=1e-12, atol=1e-12, method="DOP853")
    error = np.abs(angles - reference_run.y[:2].T).max()
    assert error <= 1e-6, f"max angle error {error:.3g} rad"


@pytest.mark.parametrize(("integrator", "low", "high"), [("rk4", 10, 40),
                                                      ("trapezoidal", 3, 5.5)])
def test_convergence_order_on_double_pendulum(tmp_path: Path, integrator: str, low: float,
                                              high: float) -> None:
    """Halving dt divides the error by 2^order: 16 for RK4, 4 for the trapezoidal rule."""
    path = tmp_path / "double.yaml"
    path.write_text(DOUBLE_PENDULUM)
    mech = mbgen.load(str(path), out_dir=str(tmp_path / "gen"))
    exact = solve_ivp(textbook_double_pendulum, (0, 1), [PHI1, PHI2, 0, 0], rtol=1e-13,
                      atol=1e-13, method="DOP853").y[0, -1]
    errors = []
    for dt in (4e-3, 2e-3):
        x1, y1 = simulate(mech, t_end=1.0, dt=dt, integrator=integrator).q[-1, :2]
        errors.append(abs(np.arctan2(y1, x1) - exact))
    assert low < errors[0] / errors[1] < high


def energy_error(result) -> float:
    energy = result.energy
    return float(np.abs(energy - energy[0]).max() / abs(energy[0]))


def test_free_fourbar_energy_with_trapezoidal_and_projection(compiled: Compiled) -> None:
    mech = compiled(reference("fourbars1"))
    energy_projected = simulate(mech, 10.0, 1e-3, "trapezoidal", project="energy")
    assert energy_error(energy_projected) <= 1e-5
    assert energy_projected.constraint_error.max() <= 1e-10
    manifold = simulate(mech, 10.0, 1e-3, "trapezoidal", project="manifold")
    assert manifold.constraint_error.max() <= 1e-10
    energy = manifold.energy
    assert abs(energy[-1] - energy[0]) / energy[0] <= 1e-5  # no drift over 10 s
    # The trapezoidal rule's bounded energy oscillation is second order in dt.
    half = simulate(mech, 10.0, 5e-4, "trapezoidal", project="manifold")
    ratio = energy_error(manifold) / energy_error(half)
    assert 3.0 < ratio < 5.0
    # Same trajectory either way (the energy projection only removes round-off-level drift).
    np.testing.assert_allclose(energy_projected.q[-1], manifold.q[-1], atol=1e-3)


def test_andrews_squeezer_reaches_the_published_crank_angle(compiled: Compiled) -> None:
    """IFToMM A03 / Hairer & Wanner's seven-body mechanism: a stiff spring on grams of
    links, a motor torque; the crank angle at 0.03 s is the published reference's
    (15.81077119629904 rad, the Bari test set), and T + V (the motor's work included as
    its constant force's potential) is constant."""
    mech = compiled(REPO / "tests" / "data" / "andrews-squeezer.yaml")
    run = simulate(mech, 0.03, 1e-5, "rk4")
    assert abs(run.q[-1, mech.coordinate_index("beta")] - 15.81077119629904) < 1e-8
    kinetic, potential = mech.energy_parts(run.q, run.qd).T
    energy = kinetic + potential
    assert np.abs(energy - energy[0]).max() < 1e-8 * kinetic.max()


def test_projection_keeps_constraints_and_explicit_euler_without_it_drifts(
        compiled: Compiled) -> None:
    mech = compiled(reference("fourbars1"))
    drifting = simulate(mech, 2.0, 1e-3, "euler", project="none")
    projected = simulate(mech, 2.0, 1e-3, "euler", project="manifold")
    assert drifting.constraint_error.max() > 1e-4
    assert projected.constraint_error.max() <= 1e-10


def test_independent_and_dependent_formulations_agree(compiled: Compiled) -> None:
    mech = compiled(reference("pendulum3"))
    dependent = simulate(mech, 1.0, 1e-3, "rk4", coords="dependent")
    independent = simulate(mech, 1.0, 1e-3, "rk4", coords="independent")
    np.testing.assert_allclose(independent.q, dependent.q, atol=1e-7)
    assert independent.constraint_error.max() <= 1e-10


def test_external_force_does_work(compiled: Compiled) -> None:
    """A constant torque-like force on the crank angle: ΔE equals ∫ Q·q̇ dt."""
    mech = compiled(reference("fourbars1-with-rel-angle"))
    torque = 20.0
    result = simulate(mech, 1.0, 1e-4, "rk4", forces={"theta0": lambda t: torque + 0 * t})
    energy = result.energy
    work = np.trapezoid(torque * result.qd[:, 4], result.t)
    assert energy[-1] - energy[0] == pytest.approx(work, rel=1e-6)


def test_simulation_rejects_bad_settings(compiled: Compiled) -> None:
    mech = compiled(reference("pendulum1"))
    with pytest.raises(ValueError, match="integrator"):
        simulate(mech, 1.0, 1e-3, "leapfrog")
    with pytest.raises(ValueError, match="positive"):
        simulate(mech, 1.0, -1e-3)
    with pytest.raises(ValueError, match="conservative"):
        simulate(mech, 1.0, 1e-3, project="energy", forces={"x1": lambda t: t})


def scaled_fourbar(directory: Path, scale: float) -> Path:
    """The shipped four-bar in another unit of length (lengths and gravity times scale)."""
    text = (SHIPPED_DIR / "fourbar.yaml").read_text()
    path = directory / f"fourbar-x{scale:g}.yaml"
    path.write_text(text.replace("L: 1.0", f"L: {scale}").replace("xb: 4.0", f"xb: {4 * scale}")
                    + f"gravity: [0, {-9.81 * scale}]\n")
    return path


@pytest.mark.parametrize("coords", ["independent", "dependent"])
def test_results_do_not_depend_on_the_unit_of_length(compiled: Compiled, tmp_path: Path,
                                                     coords: str) -> None:
    """The four-bar scaled to centimetres, gravity scaled alike, has the same motion in
    angles: every coordinate over the scale follows the metre one to round-off. With the
    position problem's tolerance absolute (1e-12 m²) the centimetre one stopped 7e-9
    (relative) short; it scales with the mechanism's size squared."""
    scale = 0.01
    metres = compiled(SHIPPED_DIR / "fourbar.yaml")
    centimetres = compiled(scaled_fourbar(tmp_path, scale))
    assert centimetres.size == pytest.approx(scale * metres.size)
    big = simulate(metres, 0.5, 1e-4, "rk4", coords=coords)
    tiny = simulate(centimetres, 0.5, 1e-4, "rk4", coords=coords)
    assert np.abs(tiny.q / scale - big.q).max() < 1e-12 * metres.size


def test_the_variational_step_converges_alike_in_any_unit(compiled: Compiled,
                                                          tmp_path: Path) -> None:
    """The variational integrator's Newton stops on the position step, a length: its
    tolerance is newton_tol (a length squared) over the mechanism's size. Compared with
    newton_tol itself, the four-bar in millimetres ended 2e-12 (relative) away after 0.5 s;
    now 1e-15."""
    scale = 1000.0
    metres = compiled(SHIPPED_DIR / "fourbar.yaml")
    millimetres = compiled(scaled_fourbar(tmp_path, scale))
    steps, dt = 500, 1e-3
    q = metres.integrate(metres.q0, np.zeros(metres.n), dt, steps, "variational")[0]
    q_mm = millimetres.integrate(millimetres.q0, np.zeros(metres.n), dt, steps,
                                 "variational")[0]
    assert np.abs(q_mm / scale - q).max() < 1e-13 * metres.size


@pytest.mark.parametrize("name", ["fourbar.yaml", "double-pendulum.yaml", "bricard.yaml"])
def test_the_projection_honours_the_cores_options(compiled: Compiled, name: str) -> None:
    """The manifold projection of the C steppers and of the sweep's lanes stops at
    options.projection_tol (a tenth of newton_tol, scaled with the mechanism's size)
    within max_iter: every projected state of explicit Euler (which drifts at every step)
    holds Φ to it, in the run and alike in the sweep; with no iteration allowed the
    first step that needs one fails as not converged, in the run and in every sweep run,
    instead of being taken as it is."""
    from mbgen.runtime.integration import IntegrationError, Runs

    mech = compiled(SHIPPED_DIR / name)
    options = mech.options
    assert options.projection_tol == pytest.approx(0.1 * options.newton_tol, rel=1e-15)
    rows = np.asarray(mech.active_rows)
    qd0 = np.zeros(mech.n)
    q, _, _ = mech.integrate(mech.q0, qd0, 1e-2, 100, "euler")
    assert np.abs(mech.phi(q[1:])[:, rows]).max() <= options.projection_tol
    runs = Runs.start(np.repeat(mech.q0[None], 9, axis=0), np.zeros((9, mech.n)),
                      np.repeat(mech.parameter_vector[None], 9, axis=0))
    swept, _ = mech.advance_runs(runs, 1e-2, 100, "euler")
    assert (runs.status == 0).all()
    assert np.abs(mech.phi(swept[4])[:, rows]).max() <= options.projection_tol
    assert np.abs(swept[4] - q[1:]).max() < 1e-9  # the lanes' own factorization
    limit = options.max_iter
    try:
        options.max_iter = 0
        with pytest.raises(IntegrationError, match="did not converge"):
            mech.integrate(mech.q0, qd0, 1e-2, 100, "euler")
        runs = Runs.start(np.repeat(mech.q0[None], 9, axis=0), np.zeros((9, mech.n)),
                          np.repeat(mech.parameter_vector[None], 9, axis=0))
        mech.advance_runs(runs, 1e-2, 100, "euler")
        assert (runs.status == 3).all() and (runs.failed_step < 100).all()  # MB_NO_CONVERGENCE
    finally:
        options.max_iter = limit

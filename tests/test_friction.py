"""Friction, actuator gains and sensor offsets: what the compiled model makes of them."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SHIPPED_DIR, numerical_jacobian

from mbgen.runtime.compiled import CompiledMechanism

PENDULUM = SHIPPED_DIR / "actuated-double-pendulum.yaml"


@pytest.fixture(scope="module")
def mech(compiled) -> CompiledMechanism:
    return compiled(PENDULUM)


def test_friction_forces_on_the_joint_coordinates(mech: CompiledMechanism) -> None:
    # θ1 and θ2 carry no potential: their generalized force is the friction alone.
    p = mech.parameters
    rng = np.random.default_rng(3)
    for rate in (-2.0, -4e-4, 0.0, 3e-4, 0.7):
        qd = rng.normal(size=mech.n)
        i1, i2 = mech.coordinate_index("theta1"), mech.coordinate_index("theta2")
        qd[i1], qd[i2] = rate, -0.5 * rate
        Q = mech.generalized_forces(mech.q0, qd)
        for i, b, c in ((i1, p["b1"], p["c1"]), (i2, p["b2"], p["c2"])):
            expected = -b * qd[i] - c * np.tanh(qd[i] / 1e-3)
            assert Q[i] == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_coefficients_are_friction_bounds_then_gains(mech: CompiledMechanism) -> None:
    p = mech.parameters
    assert [f["coordinate"] for f in mech.meta["friction"]] == ["theta1", "theta2"]
    np.testing.assert_allclose(mech.coefficients(), [p["c1"], p["c2"], p["K"]])
    names = list(p)
    expected = np.zeros((3, len(names)))
    for row, name in enumerate(("c1", "c2", "K")):
        expected[row, names.index(name)] = 1.0
    np.testing.assert_array_equal(mech.coefficients_p(), expected)


def test_encoder_offset_and_its_parameter_derivative(mech: CompiledMechanism) -> None:
    q = mech.q0 + 0.01
    qd = np.linspace(-1, 1, mech.n)
    h = mech.sensors(q, qd)
    assert h[0] == pytest.approx(q[mech.coordinate_index("theta1")])
    assert h[1] == pytest.approx(q[mech.coordinate_index("theta2")] + mech.parameters["offset2"])
    p0 = mech.parameter_vector
    fd = numerical_jacobian(lambda p: mech.sensors(q, qd, p), p0)
    np.testing.assert_allclose(mech.sensors_p(q, qd), fd, atol=1e-9)


def test_friction_only_dissipates(mech: CompiledMechanism) -> None:
    # Released from rest without input: the energy falls and never rises (power −b q̇² −
    # c q̇ tanh(q̇/v) ≤ 0); without friction the same run keeps it to RK4's error.
    assert mech.meta["dissipative"]
    q, qd, _ = mech.integrate(mech.q0, np.zeros(mech.n), 1e-3, 3000)
    energy = mech.energy(q, qd)
    assert np.all(np.diff(energy) < 1e-9)
    assert energy[0] - energy[-1] > 0.05


SPINNER = """\
name: spinner
parameters: {c: 0.2, b: 0.0, m: 2.0, L: 0.5}
points:
  - {x: 0, y: 0, fixed: true}
  - {x: L, y: 0}
planar_bodies:
  - {points: [0, 1], length: L, mass: m}
relative_coordinates:
  - {type: RelativeAngleAbsoluteDOF, points: [0, 1], name: theta}
gravity: [0, 0]
friction:
  - {coordinate: theta, viscous: b, coulomb: c}
"""


def test_spook_dry_friction_stops_a_spinning_bar_on_time(compiled, tmp_path) -> None:
    # No gravity: the bar decelerates at c / I0 and then sticks, exactly at t = I0 ω0 / c.
    path = tmp_path / "spinner.yaml"
    path.write_text(SPINNER)
    mech = compiled(path)
    inertia = 2.0 * 0.5**2 / 3
    j = mech.coordinate_index("theta")
    qd0 = mech.project_velocity(mech.q0, np.where(np.arange(mech.n) == j, 1.0, 0.0) * 3.0)
    omega0 = qd0[j]
    dt = 1e-3
    run = mech.integrate_spook(mech.q0, qd0, dt, 3000, compliance=1e-9)
    omega = run.qd[:, j]
    t_stop = inertia * omega0 / 0.2
    t = np.arange(len(omega)) * dt
    slipping = t < t_stop - 2 * dt
    np.testing.assert_allclose(omega[slipping], omega0 - 0.2 / inertia * t[slipping],
                               atol=5e-3 * omega0)
    assert np.all(np.abs(omega[t > t_stop + 2 * dt]) < 1e-3)  # stuck (within stiction)
    angle = run.q[-1, j] - run.q[0, j]
    assert angle == pytest.approx(omega0 * t_stop / 2, rel=5e-3)


def test_spook_friction_holds_a_pendulum_below_its_breakaway_torque(compiled,
                                                                    tmp_path) -> None:
    # Gravity torque m g (L/2) cos θ = 0.2 · 9.81 · 0.25 · cos(1.4) < c = 0.5 N m: it stays.
    path = tmp_path / "held.yaml"
    path.write_text(SPINNER.replace("gravity: [0, 0]", "gravity: [0, -9.81]")
                    .replace("m: 2.0", "m: 0.2").replace("c: 0.2", "c: 0.5")
                    .replace("{x: L, y: 0}", "{x: L*cos(1.4), y: L*sin(1.4)}"))
    mech = compiled(path)
    run = mech.integrate_spook(mech.q0, np.zeros(mech.n), 1e-3, 500, compliance=1e-9)
    j = mech.coordinate_index("theta")
    assert np.ptp(run.q[:, j]) < 1e-3
    # ... and with the bound lowered under the gravity torque it falls.
    mech.set_parameters(c=0.02)
    try:
        run = mech.integrate_spook(mech.q0, np.zeros(mech.n), 1e-3, 500, compliance=1e-9)
    finally:
        mech.set_parameters(c=0.5)
    assert run.q[-1, j] < 1.4 - 0.5

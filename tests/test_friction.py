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

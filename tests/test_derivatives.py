"""Every generated derivative against central finite differences of the generated values.

Runs on the reference mechanisms and on every shipped ``mechanisms/*.yaml``, at several
random configurations near q0 (off the constraint manifold on purpose: the kernels are
plain functions of q, q̇, v, λ and p, and must be right everywhere).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    ALL_MECHANISMS,
    entrywise_error,
    finite_difference_error,
    mechanism_id,
    numerical_jacobian,
    random_configurations,
    reference,
)

from mbgen.errors import MbgenError
from mbgen.model import Mechanism, load_mechanism
from mbgen.runtime.compiled import CompiledMechanism

Compiled = Callable[[Path], CompiledMechanism]
Array = np.ndarray
TOL = 1e-5  # per entry (see conftest.entrywise_error)
H = 1e-6
CONFIGURATIONS = 3


@cache
def parsed(path: Path) -> Mechanism | None:
    """The parsed file, for collection-time decisions (None if it does not parse)."""
    try:
        return load_mechanism(path)
    except MbgenError:
        return None


def has_sensors(path: Path) -> bool:
    model = parsed(path)
    return model is not None and bool(model.sensors)


def has_dampers(path: Path) -> bool:
    model = parsed(path)
    return model is None or (any(spring.damping != 0 for spring in model.springs)
                             or bool(model.frictions))


def check(actual: Array, expected: Array, what: str, tol: float = TOL) -> None:
    error = entrywise_error(actual, expected)
    assert error <= tol, f"{what}: relative error {error:.3e} > {tol:g}"


def directional(f: Callable[[Array], Array], x: Array, direction: Array) -> Array:
    """d/dt f(x + t·direction) at t = 0, by central differences."""
    return numerical_jacobian(lambda t: f(x + t[0] * direction), np.zeros(1), H)[..., 0]


# Each check compares one generated kernel with finite differences of another one.
def check_phi_q(mech: CompiledMechanism, s: dict[str, Array]) -> None:
    check(mech.phi_q(s["q"]), numerical_jacobian(mech.phi, s["q"], H), "phi_q")


def check_phiq_v_q(mech: CompiledMechanism, s: dict[str, Array]) -> None:
    expected = numerical_jacobian(lambda q: mech.phi_q(q) @ s["v"], s["q"], H)
    check(mech.phiq_v_q(s["q"], s["v"]), expected, "phiq_v_q")


def check_dphiq_qd(mech: CompiledMechanism, s: dict[str, Array]) -> None:
    phiq_dot = directional(mech.phi_q, s["q"], s["qd"])  # Φ̇q = Σ_k ∂Φq/∂q_k q̇_k
    check(mech.dphiq_qd(s["q"], s["qd"]), phiq_dot @ s["qd"], "dphiq_qd")


def check_dphiq_qd_q(mech: CompiledMechanism, s: dict[str, Array]) -> None:
    expected = numerical_jacobian(lambda q: mech.dphiq_qd(q, s["qd"]), s["q"], H)
    check(mech.dphiq_qd_q(s["q"], s["qd"]), expected, "dphiq_qd_q")


def check_dphiq_qd_qd(mech: CompiledMechanism, s: dict[str, Array]) -> None:
    expected = numerical_jacobian(lambda qd: mech.dphiq_qd(s["q"], qd), s["qd"], H)
    check(mech.dphiq_qd_qd(s["q"], s["qd"]), expected, "dphiq_qd_qd")


def check_phiqT_lam_q(mech: CompiledMechanism, s: dict[str, Array]) -> None:
    expected = numerical_jacobian(lambda q: mech.phi_q(q).T @ s["lam"], s["q"], H)
    check(mech.phiqT_lam_q(s["q"], s["lam"]), expected, "phiqT_lam_q")


def check_mass_v_q(mech: CompiledMechanism, s: dict[str, Array]) -> None:
    expected = numerical_jacobian(lambda q: mech.mass_matrix(q) @ s["v"], s["q"], H)
    check(mech.mass_v_q(s["q"], s["v"]), expected, "mass_v_q")


def check_forces_q(mech: CompiledMechanism, s: dict[str, Array]) -> None:
    expected = numerical_jacobian(lambda q: mech.generalized_forces(q, s["qd"]), s["q"], H)
    check(mech.generalized_forces_q(s["q"], s["qd"]), expected, "forces_q")


def check_forces_qd(mech: CompiledMechanism, s: dict[str, Array]) -> None:
    expected = numerical_jacobian(lambda qd: mech.generalized_forces(s["q"], qd), s["qd"], H)
    check(mech.generalized_forces_qd(s["q"], s["qd"]), expected, "forces_qd")


def check_forces_potential(mech: CompiledMechanism, s: dict[str, Array]) -> None:
    """Q(q, 0) = −∇V: at rest no damper acts."""
    zero = np.zeros(mech.n)
    gradient = numerical_jacobian(lambda q: mech.energy_parts(q, zero)[1], s["q"], H)
    check(mech.generalized_forces(s["q"], zero), -gradient, "forces(q, 0) vs -grad V")


def check_kinetic_energy(mech: CompiledMechanism, s: dict[str, Array]) -> None:
    kinetic, _ = mech.energy_parts(s["q"], s["qd"])
    expected = 0.5 * s["qd"] @ mech.mass_matrix(s["q"]) @ s["qd"]
    assert kinetic == pytest.approx(expected, rel=1e-12, abs=1e-14)
    _, potential = mech.energy_parts(s["q"], s["qd"])
    assert mech.energy(s["q"], s["qd"]) == pytest.approx(kinetic + potential, rel=1e-12)


def parameter_jacobian(mech: CompiledMechanism, f: Callable[[Array], Array]) -> Array:
    return numerical_jacobian(f, mech.parameter_vector, H)


def check_phi_p(mech: CompiledMechanism, s: dict[str, Array]) -> None:
    expected = parameter_jacobian(mech, lambda p: mech.phi(s["q"], params=p))
    check(mech.phi_p(s["q"]), expected, "phi_p")


def check_mass_p(mech: CompiledMechanism, s: dict[str, Array]) -> None:
    expected = parameter_jacobian(mech, lambda p: mech.mass_matrix(s["q"], params=p))
    check(mech.mass_p(s["q"]), expected, "mass_p")


def check_forces_p(mech: CompiledMechanism, s: dict[str, Array]) -> None:
    expected = parameter_jacobian(mech,
                                  lambda p: mech.generalized_forces(s["q"], s["qd"], params=p))
    check(mech.generalized_forces_p(s["q"], s["qd"]), expected, "forces_p")


def check_kkt_terms_p(mech: CompiledMechanism, s: dict[str, Array]) -> None:
    """The KKT system's parameter derivatives that ∂q̈/∂p is built from."""
    q, qd, v, lam = s["q"], s["qd"], s["v"], s["lam"]
    cases = {
        "mass_v_p": (lambda p: mech.mass_matrix(q, params=p) @ v, {"q": q, "v": v}),
        "phiqT_lam_p": (lambda p: mech.phi_q(q, params=p).T @ lam, {"q": q, "lam": lam}),
        "phiq_v_p": (lambda p: mech.phi_q(q, params=p) @ v, {"q": q, "v": v}),
        "dphiq_qd_p": (lambda p: mech.dphiq_qd(q, qd, params=p), {"q": q, "qd": qd}),
    }
    for kernel, (function, inputs) in cases.items():
        check(mech.dense(kernel, **inputs), parameter_jacobian(mech, function), kernel)


def check_qdd_p(mech: CompiledMechanism, s: dict[str, Array]) -> None:
    q, qd = s["q"], s["qd"]  # any state where the KKT matrix is regular
    # steps relative to each parameter (the Furuta pendulum's 1e-5 kg m² inertias would
    # double), and larger ones: q̈ goes through a factorization whose round-off a small
    # step amplifies
    p0 = mech.parameter_vector
    scale = np.where(p0 != 0, np.abs(p0), 1.0)
    error = finite_difference_error(
        mech.forward_dynamics_parameter_jacobian(q, qd),
        lambda h: numerical_jacobian(lambda u: mech.forward_dynamics(q, qd, params=p0 + u * scale),
                                     np.zeros_like(p0), h) / scale, 1e-4)
    assert error <= TOL, f"qdd_p: relative error {error:.3e} > {TOL:g}"


CHECKS: dict[str, Callable[[CompiledMechanism, dict[str, Array]], None]] = {
    "phi_q": check_phi_q,
    "phiq_v_q": check_phiq_v_q,
    "dphiq_qd": check_dphiq_qd,
    "dphiq_qd_q": check_dphiq_qd_q,
    "dphiq_qd_qd": check_dphiq_qd_qd,
    "phiqT_lam_q": check_phiqT_lam_q,
    "mass_v_q": check_mass_v_q,
    "forces_q": check_forces_q,
    "forces_qd": check_forces_qd,
    "forces_potential": check_forces_potential,
    "kinetic_energy": check_kinetic_energy,
    "phi_p": check_phi_p,
    "mass_p": check_mass_p,
    "forces_p": check_forces_p,
    "kkt_terms_p": check_kkt_terms_p,
    "qdd_p": check_qdd_p,
}


@pytest.mark.parametrize("check_name", list(CHECKS))
@pytest.mark.parametrize("path", ALL_MECHANISMS, ids=mechanism_id)
def test_derivative_matches_finite_differences(path: Path, check_name: str,
                                               compiled: Compiled) -> None:
    mech = compiled(path)
    seed = list(CHECKS).index(check_name)
    for state in random_configurations(mech, CONFIGURATIONS, seed=seed):
        CHECKS[check_name](mech, state)


def test_entrywise_error_detects_wrong_derivative() -> None:
    """The FD machinery itself: a wrong derivative must fail the tolerance."""
    x = np.array([0.3, -1.2, 2.0])

    def f(y: Array) -> Array:
        return np.array([np.sin(y[0]) * y[1], y[2] ** 3])

    exact = np.array([[np.cos(x[0]) * x[1], np.sin(x[0]), 0.0], [0.0, 0.0, 3 * x[2] ** 2]])
    assert entrywise_error(exact, numerical_jacobian(f, x, H)) <= 1e-8
    wrong = exact.copy()
    wrong[1, 2] *= 1 + 1e-4
    assert entrywise_error(wrong, numerical_jacobian(f, x, H)) > TOL


@pytest.mark.parametrize("path", [p for p in ALL_MECHANISMS if not has_dampers(p)],
                         ids=mechanism_id)
def test_forces_are_minus_potential_gradient(path: Path, compiled: Compiled) -> None:
    """Without dampers Q(q, q̇) = −∇V(q) for any q̇."""
    mech = compiled(path)
    for s in random_configurations(mech, CONFIGURATIONS, seed=7):
        gradient = numerical_jacobian(lambda q, s=s: mech.energy_parts(q, s["qd"])[1],
                                      s["q"], H)
        check(mech.generalized_forces(s["q"], s["qd"]), -gradient, "forces vs -grad V")
        assert np.all(mech.generalized_forces_qd(s["q"], s["qd"]) == 0.0)


@pytest.mark.parametrize("path", [p for p in ALL_MECHANISMS if has_sensors(p)],
                         ids=mechanism_id)
def test_sensor_derivatives(path: Path, compiled: Compiled) -> None:
    mech = compiled(path)
    assert "sensors" in mech.kernels
    for s in random_configurations(mech, CONFIGURATIONS, seed=11):
        q, qd = s["q"], s["qd"]
        values = mech.sensors(q, qd)
        assert values.shape == (len(mech.sensor_labels),)
        expected_q = numerical_jacobian(lambda x, qd=qd: mech.sensors(x, qd), q, H)
        expected_qd = numerical_jacobian(lambda x, q=q: mech.sensors(q, x), qd, H)
        check(mech.sensors_q(q, qd), expected_q, "sensors_q")
        check(mech.sensors_qd(q, qd), expected_qd, "sensors_qd")
        expected_p = parameter_jacobian(mech, lambda p, q=q, qd=qd: mech.sensors(q, qd,
                                                                                  params=p))
        check(mech.sensors_p(q, qd), expected_p, "sensors_p")


@pytest.mark.parametrize("path", ALL_MECHANISMS, ids=mechanism_id)
def test_parameter_derivative_shapes(path: Path, compiled: Compiled) -> None:
    mech = compiled(path)
    n, m, n_p = mech.n, mech.m, len(mech.parameters)
    q, qd = mech.q0, np.zeros(mech.n)
    assert mech.phi_p(q).shape == (m, n_p)
    assert mech.mass_p(q).shape == (n, n, n_p)
    assert mech.generalized_forces_p(q, qd).shape == (n, n_p)


# -- batching ------------------------------------------------------------------------------

def _inputs(mech: CompiledMechanism, kernel: str, states: list[dict[str, Array]]
            ) -> dict[str, Array]:
    return {name: np.stack([s[name] for s in states]) for name in mech.kernels[kernel].inputs
            if name not in ("p", "k")}  # k: the joint-space kernels' constants, from p


@pytest.mark.parametrize("path", ALL_MECHANISMS, ids=mechanism_id)
def test_batched_equals_stacked_single_calls(path: Path, compiled: Compiled) -> None:
    mech = compiled(path)
    states = list(random_configurations(mech, 5, seed=3))
    for kernel in mech.kernels:
        batch = _inputs(mech, kernel, states)
        batched = mech.dense(kernel, **batch)
        singles = np.stack([mech.dense(kernel, **{k: v[i] for k, v in batch.items()})
                            for i in range(len(states))])
        assert batched.shape == (len(states), *mech.kernels[kernel].shape), kernel
        np.testing.assert_array_equal(batched, singles, err_msg=kernel)


@pytest.mark.parametrize("path", ALL_MECHANISMS, ids=mechanism_id)
def test_batched_methods_and_broadcasting(path: Path, compiled: Compiled) -> None:
    mech = compiled(path)
    states = list(random_configurations(mech, 4, seed=5))
    qs = np.stack([s["q"] for s in states])
    qds = np.stack([s["qd"] for s in states])
    np.testing.assert_array_equal(mech.mass_matrix(qs),
                                  np.stack([mech.mass_matrix(q) for q in qs]))
    np.testing.assert_array_equal(mech.phi(qs), np.stack([mech.phi(q) for q in qs]))
    np.testing.assert_array_equal(mech.energy(qs, qds),
                                  np.array([mech.energy(q, qd) for q, qd in zip(qs, qds,
                                                                                strict=True)]))
    # One q̇ broadcast against a batch of q.
    np.testing.assert_array_equal(mech.generalized_forces(qs, qds[0]),
                                  np.stack([mech.generalized_forces(q, qds[0]) for q in qs]))


@pytest.mark.parametrize("path", [p for p in ALL_MECHANISMS if parsed(p) is None
                                  or parsed(p).parameters], ids=mechanism_id)
def test_batched_parameters(path: Path, compiled: Compiled) -> None:
    """params of shape (N, np) give each state its own parameter vector."""
    mech = compiled(path)
    rng = np.random.default_rng(9)
    p0 = mech.parameter_vector
    params = p0 * (1 + 0.1 * rng.standard_normal((3, p0.size)))
    qs = np.stack([s["q"] for s in random_configurations(mech, 3, seed=4)])
    np.testing.assert_array_equal(mech.phi(qs, params=params),
                                  np.stack([mech.phi(q, params=p) for q, p in zip(
                                      qs, params, strict=True)]))
    assert not np.allclose(mech.phi(qs, params=params), mech.phi(qs))


def test_wrong_shapes_rejected(compiled: Compiled) -> None:
    mech = compiled(ALL_MECHANISMS[0])
    with pytest.raises(ValueError, match="q must have shape"):
        mech.phi(np.zeros(mech.n + 1))
    with pytest.raises(ValueError, match="params must have shape"):
        mech.phi(mech.q0, params=np.zeros(len(mech.parameters) + 1))
    with pytest.raises(ValueError, match="states"):
        mech.generalized_forces(np.zeros((3, mech.n)), np.zeros((2, mech.n)))


@pytest.mark.parametrize("method", ["sparse", "dense", "unrolled"])
def test_parameter_sensitivity_on_every_path_with_baumgarte(method: str,
                                                            compiled: Compiled) -> None:
    """∂q̈/∂p through every factorization, with the Baumgarte terms (which bring ∂Φ/∂p and
    ∂(Φq q̇)/∂p into the right-hand side), batched over states."""
    mech = compiled(reference("fourbars1"))
    states = list(random_configurations(mech, 3, seed=21))
    q = np.array([s["q"] for s in states])
    qd = np.array([s["qd"] for s in states])
    mech.options.method, mech.baumgarte = method, (3.0, 5.0)
    try:
        jacobians = mech.forward_dynamics_parameter_jacobian(q, qd)
        for k in range(len(states)):
            expected = numerical_jacobian(
                lambda p, k=k: mech.forward_dynamics(q[k], qd[k], params=p),
                mech.parameter_vector, 1e-5)
            check(jacobians[k], expected, f"qdd_p ({method})")
    finally:
        mech.options.method, mech.baumgarte = "auto", (0.0, 0.0)

"""GTSAM factors: every Jacobian against central differences entry by entry, the linear
factors against their closed forms, and the factor-graph simulator against RK4 and
against the same graph built by hand."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gtsam
import numpy as np
import pytest
from conftest import (
    ALL_MECHANISMS,
    SHIPPED_DIR,
    finite_difference_error,
    mechanism_id,
    numerical_jacobian,
)

from mbgen.factors import (
    MechanismFactors,
    euler_factor,
    linear_factor,
    prior_factor,
    trapezoidal_factor,
)
from mbgen.factors.noise import isotropic
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.simulation import simulate
from mbgen.simulation.factor_graph import FactorGraphError, FactorGraphSimulator

Compiled = Callable[[Path], CompiledMechanism]
X = gtsam.symbol


def whitened_jacobian_error(factor: gtsam.NonlinearFactor, values: gtsam.Values) -> float:
    """Largest entry-wise error of the factor's analytic (whitened) Jacobian against
    central differences of its whitened error, over all its variables."""
    analytic, _ = factor.linearize(values).jacobian()
    keys = factor.keys()  # a GTSAM KeyVector, in the order of the Jacobian's blocks

    def numeric(step: float) -> np.ndarray:
        columns = []
        for key in keys:
            def residual(x: np.ndarray, key: int = key) -> np.ndarray:
                moved = gtsam.Values(values)
                moved.update(key, x)
                return factor.whitenedError(moved)

            columns.append(numerical_jacobian(residual, values.atVector(key), step))
        return np.hstack(columns)

    return finite_difference_error(analytic, numeric, 1e-5, floor=1e-5)


def random_state(mech: CompiledMechanism, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    q = mech.solve_position(mech.q0 + 0.02 * rng.standard_normal(mech.n), minimum_norm=True)
    qd = mech.project_velocity(q, rng.standard_normal(mech.n))
    # off the manifold on purpose: the Jacobians must hold everywhere, not just at Φ = 0
    return (q + 1e-3 * rng.standard_normal(mech.n), qd, rng.standard_normal(mech.n),
            rng.standard_normal(mech.n))


@pytest.mark.parametrize("path", ALL_MECHANISMS, ids=mechanism_id)
def test_mechanism_factor_jacobians_match_finite_differences(compiled: Compiled,
                                                             path: Path) -> None:
    mech = compiled(path)
    factors = MechanismFactors(mech)
    q, qd, qdd, Q = random_state(mech, 3)
    d = factors.d
    rng = np.random.default_rng(4)
    values = gtsam.Values()
    for key, value in ((X("q", 0), q), (X("v", 0), qd), (X("a", 0), qdd), (X("f", 0), Q),
                       (X("z", 0), rng.standard_normal(d)), (X("w", 0), rng.standard_normal(d)),
                       (X("b", 0), rng.standard_normal(d)), (X("u", 0), rng.standard_normal(d))):
        values.insert(key, value)
    kq, kv, ka, kf = X("q", 0), X("v", 0), X("a", 0), X("f", 0)
    kz, kw, kb = X("z", 0), X("w", 0), X("b", 0)
    made = {
        "position": factors.position_constraints(kq),
        "velocity": factors.velocity_constraints(kq, kv),
        "forward dynamics": factors.forward_dynamics(kq, kv, ka, forces=Q),
        "inverse dynamics": factors.inverse_dynamics(kq, kv, ka, kf),
        "inverse dynamics, actuated": factors.inverse_dynamics(kq, kv, ka, X("u", 0),
                                                               actuated=factors.z),
        "independent position": factors.independent_position(kq, kz),
        "independent velocity": factors.independent_velocity(kq, kv, kw),
        "independent acceleration": factors.independent_acceleration(kq, kv, ka, kb),
        "independent dynamics": factors.independent_dynamics(kq, kv, kb),
    }
    for row, label in enumerate(mech.sensor_labels):
        made[f"sensor {label}"] = factors.observation(kq, kv, label, 0.3 * row)
    for name, factor in made.items():
        assert whitened_jacobian_error(factor, values) < 1e-5, name


def test_factor_residuals_are_the_papers(compiled: Compiled) -> None:
    """The residuals themselves (not just their derivatives), from the mechanism's own
    batched calls."""
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    factors = MechanismFactors(mech)
    q, qd, qdd, Q = random_state(mech, 5)
    values = gtsam.Values()
    for key, value in ((X("q", 0), q), (X("v", 0), qd), (X("a", 0), qdd), (X("f", 0), Q)):
        values.insert(key, value)
    np.testing.assert_allclose(factors.position_constraints(X("q", 0)).unwhitenedError(values),
                               mech.phi(q), atol=1e-14)
    np.testing.assert_allclose(
        factors.velocity_constraints(X("q", 0), X("v", 0)).unwhitenedError(values),
        mech.phi_q(q) @ qd, atol=1e-13)
    np.testing.assert_allclose(
        factors.inverse_dynamics(X("q", 0), X("v", 0), X("a", 0), X("f", 0)
                                 ).unwhitenedError(values),
        mech.forward_dynamics(q, qd, Q) - qdd, atol=1e-12)
    acceleration = factors.independent_acceleration(X("q", 0), X("v", 0), X("a", 0),
                                                    X("b", 0))
    values.insert(X("b", 0), qdd[factors.z])
    residual = acceleration.unwhitenedError(values)
    np.testing.assert_allclose(residual[:mech.m], mech.dphiq_qd(q, qd) + mech.phi_q(q) @ qdd,
                               atol=1e-12)
    np.testing.assert_allclose(residual[mech.m:], 0.0, atol=1e-15)


def test_linear_factors_are_their_closed_forms() -> None:
    """½‖(Σ A_i x_i − b)/σ‖² at random points, for the Jacobian (≤ 3 keys) and the
    Hessian (4 keys) constructions, so both are exact everywhere."""
    rng = np.random.default_rng(0)
    keys = [X("x", i) for i in range(4)]
    dim, dt, sigma = 3, 0.01, 0.2
    noise = isotropic(dim, sigma)
    made = [
        (trapezoidal_factor(*keys, dt, dim, noise),
         lambda x: x[1] - x[0] - dt / 2 * (x[2] + x[3])),
        (euler_factor(*keys[:3], dt, dim, noise), lambda x: x[1] - x[0] - dt * x[2]),
    ]
    blocks = [rng.standard_normal((2, dim)) for _ in range(4)]
    rhs = rng.standard_normal(2)
    made.append((linear_factor(keys, blocks, rhs, isotropic(2, sigma)),
                 lambda x: sum(b @ xi for b, xi in zip(blocks, x, strict=True)) - rhs))
    for factor, residual in made:
        for _ in range(5):
            x = [rng.standard_normal(dim) for _ in keys]
            values = gtsam.Values()
            for key, value in zip(keys, x, strict=True):
                values.insert(key, value)
            e = residual(x)
            assert factor.error(values) == pytest.approx(0.5 * (e @ e) / sigma**2, rel=1e-10)
    with pytest.raises(ValueError, match="one block per key"):
        linear_factor(keys[:2], blocks, rhs, isotropic(2, sigma))


def test_factor_graph_stays_with_rk4(compiled: Compiled) -> None:
    """The issue's run: four-bar under gravity, 5 s, dt = 1 ms, at rest, crank angle 0;
    within 1 mm of RK4 at dt = 0.1 ms and ‖Φ‖ ≤ 1e-6 throughout."""
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    simulator = FactorGraphSimulator(mech, 1e-3, window=2)
    run = simulator.run(5.0)
    reference = simulate(mech, 5.0, 1e-4, "rk4")
    assert np.abs(run.q - reference.q[::10]).max() < 1e-3
    assert run.constraint_error.max() <= 1e-6
    assert max(simulator.iterations) <= 5


@pytest.mark.parametrize("smoother", ["batch", "incremental"])
def test_independent_coordinates_factor_graph(compiled: Compiled, smoother: str) -> None:
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    run = FactorGraphSimulator(mech, 1e-3, window=3, coords="independent",
                               smoother=smoother).run(0.5)
    reference = simulate(mech, 0.5, 1e-4, "rk4")
    # 0.018 mm after 0.5 s (the paper's soft equality q_k+1 = q_k as the tie: 0.2 mm)
    assert np.abs(run.q - reference.q[::10]).max() < 5e-5
    assert run.constraint_error.max() <= 1e-6


def test_independent_coordinates_converge_with_dt(compiled: Compiled) -> None:
    """The crank angle as z (as the paper and libmbse run it), 1 s: the error against RK4
    at 10 µs falls like dt² (0.0066 → 0.0017 mm). The paper's tie q_k+1 = q_k between
    steps, wrong by dt·q̇ on the true motion, left a drag that did not shrink with dt
    (3.4 mm at dt 1e-3 and 3.2 mm at 5e-4 over 5 s)."""
    from conftest import reference

    mech = compiled(reference("fourbars1-with-rel-angle"))
    exact = simulate(mech, 1.0, 1e-5, "rk4")
    errors = []
    for dt in (2e-3, 1e-3):
        run = FactorGraphSimulator(mech, dt, coords="independent").run(1.0)
        every = round(dt / 1e-5)
        errors.append(float(np.sqrt(np.mean((run.q - exact.q[::every]) ** 2))))
    assert errors[1] < 5e-6
    assert errors[0] / errors[1] > 3.0


@pytest.mark.parametrize("smoother", ["batch", "incremental"])
def test_smoother_sigma_is_the_monte_carlo_spread(compiled: Compiled, smoother: str) -> None:
    """Tight dynamics and integrator factors and an uncertain start (z and ż known to
    σ = 1e-3): the graph's σ of every coordinate after 0.3 s is the linearized spread of
    the initial uncertainty, checked against 400 RK4 runs of the C core from sampled
    starts (the sample σ's own error: ±3.5 %). Dependent coordinates are refused."""
    from mbgen.factors.noise import NoiseDefaults

    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    sigma, tight, dt, t_end = 1e-3, 1e-7, 1e-3, 0.3
    noise = NoiseDefaults(prior=sigma, prior_z=1.0, integrator=tight, dynamics=tight,
                          constraints=tight)
    q0 = mech.solve_position(mech.q0, minimum_norm=True)
    simulator = FactorGraphSimulator(mech, dt, coords="independent", smoother=smoother,
                                     noise=noise)
    run = simulator.run(t_end, q0, covariance=True)
    assert run.sigma is not None and run.sigma.shape == run.q.shape
    z = simulator.factors.z
    assert run.sigma[0, z] == pytest.approx(sigma, rel=1e-4)
    rng = np.random.default_rng(0)
    finals = []
    for _ in range(400):
        start = q0.copy()
        start[z] += sigma * rng.standard_normal(len(z))
        q = mech.solve_position(start, z=z)
        qd = mech.solve_velocity(q, sigma * rng.standard_normal(len(z)), z=z)
        finals.append(mech.integrate(q, qd, dt, round(t_end / dt), "rk4")[0][-1])
    spread = np.std(finals, axis=0, ddof=1)
    np.testing.assert_allclose(run.sigma[-1], spread, rtol=0.1)
    assert not np.allclose(run.sigma[-1], run.sigma[0], rtol=0.1)  # it did move
    with pytest.raises(ValueError, match="need --coords independent"):
        FactorGraphSimulator(mech, dt, noise=noise).run(dt, q0, covariance=True)


def test_factor_residuals_on_the_exact_motion(compiled: Compiled) -> None:
    """On the exact motion (RK4 at 10 µs), the trapezoidal factors between steps of dt are
    wrong by O(dt³) (halving dt divides them by 8), every other factor is exact to the
    reference's accuracy. A factor wrong by O(dt) (the paper's tie q_k+1 = q_k) drags
    the simulated motion by a bias that does not shrink with dt."""
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    exact = simulate(mech, 0.2, 1e-5, "rk4")
    f, n = MechanismFactors(mech, z=["x1"]), mech.n
    k = 10_000  # t = 0.1 s
    sizes = []
    for every in (400, 200):  # dt = 4 ms, 2 ms
        values = gtsam.Values()
        for key, step in ((0, k), (1, k + every)):
            for name, array in (("q", exact.q), ("v", exact.qd), ("a", exact.qdd)):
                values.insert(X(name, key), array[step])
            values.insert(X("z", key), exact.q[step, f.z])
            values.insert(X("w", key), exact.qd[step, f.z])
        dt = every * 1e-5
        trapezoids = [trapezoidal_factor(X(x, 0), X(x, 1), X(r, 0), X(r, 1), dt, n,
                                         isotropic(n, 1.0)) for x, r in (("q", "v"), ("v", "a"))]
        # σ = 1: the error ½‖r‖² gives the residual's norm
        sizes.append([float(np.sqrt(2.0 * t.error(values))) for t in trapezoids])
        for factor in (f.position_constraints(X("q", 1)),
                       f.velocity_constraints(X("q", 1), X("v", 1)),
                       f.forward_dynamics(X("q", 1), X("v", 1), X("a", 1)),
                       f.independent_position(X("q", 1), X("z", 1)),
                       f.independent_velocity(X("q", 1), X("v", 1), X("w", 1))):
            assert np.abs(factor.unwhitenedError(values)).max() < 1e-9
    ratios = np.array(sizes[0]) / np.array(sizes[1])
    assert ((ratios > 7.0) & (ratios < 9.0)).all(), ratios


def test_independent_coordinates_are_chosen_again_in_time(compiled: Compiled) -> None:
    """fourbars1.yaml with z chosen by pivoting: y2 would stop determining the others at
    0.553 s. The simulator chooses z again where their conditioning falls under
    Z_RESELECT and carries the state across: 2 s within 0.5 mm of RK4 (0.39 mm over 5 s;
    dependent coordinates: 0.14 mm)."""
    from conftest import reference

    mech = compiled(reference("fourbars1"))
    simulator = FactorGraphSimulator(mech, 1e-3, coords="independent")
    run = simulator.run(2.0)
    exact = simulate(mech, 2.0, 1e-4, "rk4")
    assert np.abs(run.q - exact.q[::10]).max() < 5e-4
    assert len(simulator.switches) >= 2 and run.settings["z_switches"][0][0] < 0.553
    assert run.constraint_error.max() <= 1e-6


def test_hand_built_graph_gives_the_simulators_answer(compiled: Compiled) -> None:
    """A user's own graph of the same factors, optimized in one batch with GTSAM's
    Levenberg–Marquardt, agrees with the simulator whose window holds every step."""
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    dt, steps = 1e-3, 20
    simulated = FactorGraphSimulator(mech, dt, window=steps + 1).run(steps * dt)
    factors = MechanismFactors(mech)
    n = mech.n
    graph, values = gtsam.NonlinearFactorGraph(), gtsam.Values()
    q0, qd0 = simulated.q[0], simulated.qd[0]
    graph.add(prior_factor(X("q", 0), q0, isotropic(n, 1e-5)))
    graph.add(prior_factor(X("v", 0), qd0, isotropic(n, 1e-5)))
    sigma = isotropic(n, np.sqrt(1e-3))
    rng = np.random.default_rng(2)
    for k in range(steps + 1):  # initial values: the answer, visibly disturbed
        q, v, a = X("q", k), X("v", k), X("a", k)
        values.insert(q, simulated.q[k] + 1e-3 * rng.standard_normal(n))
        values.insert(v, simulated.qd[k] + 1e-2 * rng.standard_normal(n))
        values.insert(a, simulated.qdd[k] + 1e-1 * rng.standard_normal(n))
        graph.add(factors.position_constraints(q))
        graph.add(factors.velocity_constraints(q, v))
        graph.add(factors.forward_dynamics(q, v, a))
        if k:
            graph.add(trapezoidal_factor(X("q", k - 1), q, X("v", k - 1), v, dt, n, sigma))
            graph.add(trapezoidal_factor(X("v", k - 1), v, X("a", k - 1), a, dt, n, sigma))
    params = gtsam.LevenbergMarquardtParams()
    params.setLinearSolverType("MULTIFRONTAL_QR")
    params.setRelativeErrorTol(1e-14)
    params.setAbsoluteErrorTol(1e-20)
    result = gtsam.LevenbergMarquardtOptimizer(graph, values, params).optimize()
    by_hand = np.array([result.atVector(X("q", k)) for k in range(steps + 1)])
    assert np.abs(by_hand - simulated.q).max() < 1e-8


def test_bad_settings_and_a_step_that_does_not_converge(compiled: Compiled) -> None:
    mech = compiled(SHIPPED_DIR / "fourbar.yaml")
    for window in (0, -2, 1.5):
        with pytest.raises(ValueError, match="window must be a positive number"):
            FactorGraphSimulator(mech, 1e-3, window=window)
    with pytest.raises(ValueError, match="smoother must be one of"):
        FactorGraphSimulator(mech, 1e-3, smoother="magic")
    # y2 reaches its lowest point at t ≈ 0.553 s: as z it stops determining x1, y1, x2
    independent = FactorGraphSimulator(mech, 1e-3, coords="independent", z=["y2"])
    with pytest.raises(FactorGraphError, match=r"at t = 0\.5\d+ s the independent "
                                               r"coordinates \['y2'\] stop determining"):
        independent.run(1.0)
    # a 0.2 s step is far too long for the trapezoidal rule to meet the dynamics
    simulator = FactorGraphSimulator(mech, 0.2, window=2, max_iterations=2, max_error=1e-3)
    with pytest.raises(FactorGraphError, match=r"at t = 0\.2 s did not converge: .*error"):
        simulator.run(1.0)

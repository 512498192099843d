"""The variational integrator: its Newton Jacobian, the discrete Euler–Lagrange equations,
the constraints, energy and momentum over long runs, its order, and the linear algebra
paths (sparse L D U Newton, quasi-Newton, dense LU) agreeing to round-off."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SHIPPED_DIR, entrywise_error, numerical_jacobian

from mbgen.cli.main import cli
from mbgen.model.chain import chain_yaml
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.runtime.integration import IntegrationError

Compiled = Callable[[Path], CompiledMechanism]

FREE_CHAIN = """\
name: free-chain
gravity: [0, 0]
points:
  - {x: 0, y: 0}
  - {x: 1, y: 0.2}
  - {x: 1.8, y: 0.9}
  - {x: 2.5, y: 0.4}
planar_bodies:
  - {points: [0, 1], mass: 1.0}
  - {points: [1, 2], mass: 2.0, I0: 0.9, cog: [0.3, 0.1]}
  - {points: [2, 3], mass: 0.5}
"""


@pytest.fixture(scope="module")
def chain5(compiled: Compiled, tmp_path_factory: pytest.TempPathFactory) -> CompiledMechanism:
    path = tmp_path_factory.mktemp("variational") / "chain5.yaml"
    path.write_text(chain_yaml(5))
    return compiled(path)


@pytest.fixture(scope="module")
def spring(compiled: Compiled) -> CompiledMechanism:
    """Damper, constant torque, a massless relative angle: every term of the step."""
    return compiled(SHIPPED_DIR / "spring-pendulum.yaml")


def moving_state(mech: CompiledMechanism, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q = mech.solve_position(mech.q0 + 0.05 * rng.standard_normal(mech.n), minimum_norm=True)
    return q, mech.project_velocity(q, rng.standard_normal(mech.n))


@pytest.mark.parametrize("name", ["chain", "spring"])
def test_newton_jacobian_matches_finite_differences(name: str, chain5: CompiledMechanism,
                                                    spring: CompiledMechanism) -> None:
    mech = {"chain": chain5, "spring": spring}[name]
    n, r = mech.n, len(mech.active_rows)
    rng = np.random.default_rng(3)
    for seed in range(3):
        q, qd = moving_state(mech, seed)
        x = np.r_[qd + 0.1 * rng.standard_normal(n), rng.standard_normal(r)]
        Q = rng.standard_normal(n)

        def residual(x: np.ndarray, q: np.ndarray = q, qd: np.ndarray = qd,
                     Q: np.ndarray = Q) -> np.ndarray:
            return mech.variational_residual(q, qd, 0.01, x[:n], x[n:], Q)[0]

        _, jacobian = mech.variational_residual(q, qd, 0.01, x[:n], x[n:], Q)
        assert entrywise_error(jacobian, numerical_jacobian(residual, x)) < 1e-6


def test_sparse_newton_quasi_newton_and_dense_agree(compiled: Compiled) -> None:
    mech = compiled(SHIPPED_DIR / "pick-and-place-robot.yaml")
    q, qd = moving_state(mech, 1)
    runs = {}
    try:
        for method in ("sparse", "dense"):
            mech.options.method = method
            for newton in (False, True):
                runs[method, newton] = mech.integrate_variational(q, qd, 1e-3, 200,
                                                                  newton=newton)
    finally:
        mech.options.method = "auto"
    base = runs["dense", True]
    assert base.iterations.max() <= 4  # Newton converges quadratically
    for run in runs.values():
        assert np.abs(run.q - base.q).max() < 1e-11
        assert np.abs(run.qd - base.qd).max() < 1e-9
        np.testing.assert_allclose(run.qdd, base.qdd, atol=1e-7)


def test_each_step_solves_the_discrete_euler_lagrange_equations(spring: CompiledMechanism,
                                                                chain5: CompiledMechanism
                                                                ) -> None:
    """From the positions alone: M(v_k - v_k-1) - h/2 (Q(q_k, v_k-1) + Q(q_k, v_k)) must
    be a constraint force Φq(q_k)ᵀ μ; what is left, as a position (h e / m), is below the
    Newton tolerance."""
    h = 1e-3
    for mech in (spring, chain5):
        q0, qd0 = moving_state(mech, 2)
        run = mech.integrate_variational(q0, qd0, h, 300)
        v = np.diff(run.q, axis=0) / h
        mass = mech.mass_matrix(q0)
        scale = np.abs(np.diag(mass)).max()
        worst = 0.0
        for k in range(1, len(v)):
            q = run.q[k]
            e = mass @ (v[k] - v[k - 1]) - h / 2 * (mech.generalized_forces(q, v[k - 1])
                                                    + mech.generalized_forces(q, v[k]))
            phi_q = mech.phi_q(q)
            mu = np.linalg.lstsq(phi_q.T, e, rcond=None)[0]
            worst = max(worst, float(np.abs(e - phi_q.T @ mu).max()) * h / scale)
        assert worst < mech.options.newton_tol
        assert np.abs(mech.phi(run.q)).max() < 1e-11
        velocity_constraints = np.einsum("kij,kj->ki", mech.phi_q(run.q), run.qd)
        assert np.abs(velocity_constraints).max() < 1e-10


def test_energy_stays_bounded_where_semi_implicit_euler_drifts(
        chain5: CompiledMechanism) -> None:
    q0, qd0 = chain5.q0, np.zeros(chain5.n)
    steps, dt = 10_000, 1e-3
    scale = None

    def energy_error(q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        nonlocal scale
        scale = scale or float(np.abs(chain5.energy_parts(q, qd)).max())
        energy = chain5.energy(q, qd)
        return np.abs(energy - energy[0]) / scale

    second = energy_error(*chain5.integrate(q0, qd0, dt, steps, "variational")[:2])
    fourth = energy_error(*chain5.integrate(q0, qd0, dt, steps, "variational-4")[:2])
    euler = energy_error(*chain5.integrate(q0, qd0, dt, steps, "semi-implicit-euler")[:2])
    assert second.max() < 1e-3 and fourth.max() < 1e-4
    # bounded: the last thousand steps are no worse than the whole run's typical level
    assert np.median(second[-1000:]) < 10 * np.median(second) + 1e-9
    assert euler[-1] > 1e-2 and euler[-1] > 100 * second[-1]


def test_free_chain_keeps_linear_and_angular_momentum(compiled: Compiled,
                                                      tmp_path: Path) -> None:
    path = tmp_path / "free-chain.yaml"
    path.write_text(FREE_CHAIN)
    mech = compiled(path)
    q0, qd0 = moving_state(mech, 4)
    names = mech.coordinate_names
    xs = [names.index(f"x{i}") for i in range(4)]
    ys = [names.index(f"y{i}") for i in range(4)]

    def momenta(q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        p = qd @ mech.mass_matrix(q0).T
        angular = (q[:, xs] * p[:, ys] - q[:, ys] * p[:, xs]).sum(axis=1)
        return np.column_stack([p[:, xs].sum(axis=1), p[:, ys].sum(axis=1), angular])

    run = mech.integrate_variational(q0, qd0, 2e-3, 2000, accelerations=False)
    values = momenta(run.q, run.qd)
    assert np.abs(values[0]).max() > 0.1  # the test would be empty at rest
    assert np.abs(values - values[0]).max() < 1e-12 * max(1.0, np.abs(values).max())


@pytest.mark.parametrize(("integrator", "order"), [("variational", 2), ("variational-4", 4)])
def test_order_of_accuracy_with_damping_and_forces(spring: CompiledMechanism,
                                                   integrator: str, order: int) -> None:
    """Against a fine RK4 run, with a damper, a constant torque and a time-varying input."""
    q0, qd0 = moving_state(spring, 5)
    t_end = 0.4

    def final(integrator: str, dt: float) -> np.ndarray:
        steps = round(t_end / dt)
        t = np.arange(2 * steps + 1) * dt / 2
        forces = np.zeros((len(t), spring.n))
        forces[:, spring.coordinate_index("x1")] = 3 * np.sin(5 * t)
        return spring.integrate(q0, qd0, dt, steps, integrator, forces=forces)[0][-1]

    reference = final("rk4", 1e-4)
    errors = [np.abs(final(integrator, dt) - reference).max() for dt in (8e-3, 4e-3)]
    assert errors[0] / errors[1] == pytest.approx(2**order, rel=0.3)


def test_a_step_that_cannot_converge_reports_where(chain5: CompiledMechanism) -> None:
    chain5.options.max_iter = 1
    try:
        with pytest.raises(IntegrationError, match="did not converge") as caught:
            chain5.integrate(chain5.q0, np.zeros(chain5.n), 1e-3, 10, "variational")
    finally:
        chain5.options.max_iter = 25
    assert caught.value.step == 0


def test_bad_requests_are_refused(chain5: CompiledMechanism) -> None:
    q0, qd0 = chain5.q0, np.zeros(chain5.n)
    with pytest.raises(ValueError, match="dependent coordinates"):
        chain5.integrate(q0, qd0, 1e-3, 10, "variational", coords="independent")
    with pytest.raises(ValueError, match="order must be 2 or 4"):
        chain5.integrate_variational(q0, qd0, 1e-3, 10, order=3)
    with pytest.raises(ValueError, match="non-zero"):
        chain5.integrate_variational(q0, qd0, 0.0, 10)


def test_command_line_refuses_independent_coordinates(tmp_path: Path, out_dir: Path) -> None:
    result = CliRunner().invoke(cli, [
        "simulate", str(SHIPPED_DIR / "spring-pendulum.yaml"), "--t-end", "0.1", "--dt",
        "1e-3", "--integrator", "variational-newton", "--coords", "independent", "--out",
        str(tmp_path / "run.csv"), "--build-dir", str(out_dir)])
    assert result.exit_code == 1
    assert "variational-newton integrator works in dependent coordinates" in result.output
    assert not (tmp_path / "run.csv").exists()

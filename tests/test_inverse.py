"""Inverse dynamics: the C kernel (Jacobians, a forward simulation round trip), both
methods against the MSC Adams table and against each other, prescribed-motion input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    ALL_MECHANISMS,
    REFERENCE_DATA,
    finite_difference_error,
    mechanism_id,
    numerical_jacobian,
    reference,
)

from mbgen.errors import TrajectoryError
from mbgen.inverse.direct import inverse_dynamics_direct
from mbgen.inverse.factor_graph import inverse_dynamics_factor_graph
from mbgen.inverse.motion import coordinate_indices, prescribed_motion
from mbgen.io.trajectory import (
    Trajectory,
    read_trajectory,
    trajectory_from_expressions,
)
from mbgen.runtime.compiled import CompiledMechanism

Compiled = Callable[[Path], CompiledMechanism]
TRAJECTORIES = REFERENCE_DATA / "config" / "trajectories"
ADAMS = REFERENCE_DATA / "experiments" / "InverseDynamics_4bars_MSC.tab"


@pytest.mark.parametrize("path", ALL_MECHANISMS, ids=mechanism_id)
def test_inverse_dynamics_jacobians_match_finite_differences(compiled: Compiled,
                                                             path: Path) -> None:
    mech = compiled(path)
    actuated = [mech.coordinate_index(c) for c in mech.independent_coordinates()]
    rng = np.random.default_rng(1)
    q = mech.solve_position(mech.q0 + 0.02 * rng.standard_normal(mech.n), minimum_norm=True)
    state = [q, rng.standard_normal(mech.n), rng.standard_normal(mech.n)]
    u, lam, *jacobians = mech.inverse_dynamics(*state, actuated, jacobians=True)
    for k, jacobian in enumerate(jacobians):
        def forces(x: np.ndarray, k: int = k) -> np.ndarray:
            moved = list(state)
            moved[k] = x
            return mech.inverse_dynamics(*moved, actuated)[0]

        assert finite_difference_error(
            jacobian, lambda h, x=state[k]: numerical_jacobian(forces, x, h), 1e-6) < 1e-5


@pytest.mark.parametrize("name", ["fourbars1-with-rel-angle", "pick-and-place-robot"])
def test_inverse_dynamics_returns_the_forces_of_a_forward_simulation(compiled: Compiled,
                                                                     name: str) -> None:
    """Forces on the actuated coordinates drive a simulation; its states give them back."""
    mech = compiled(reference(name))
    actuated = [mech.coordinate_index(c) for c in mech.independent_coordinates()]
    steps, dt = 200, 1e-3
    times = np.arange(2 * steps + 1) * dt / 2
    table = np.zeros((len(times), mech.n))
    for j, index in enumerate(actuated):
        table[:, index] = 3.0 * np.sin(4.0 * times + j) + 1.0
    q, qd, qdd = mech.integrate(mech.q0, np.zeros(mech.n), dt, steps, "rk4", forces=table)
    u, lam = mech.inverse_dynamics(q, qd, qdd, actuated)
    np.testing.assert_allclose(u, table[::2][:, actuated], atol=1e-8)
    np.testing.assert_allclose(lam, mech.lagrange_multipliers(q, qd, table[::2]), atol=1e-8)


def adams_torque(t: np.ndarray) -> np.ndarray:
    """The Adams crank torque at the samples, in mbgen's convention (Adams reports the
    reaction: opposite sign)."""
    table = np.loadtxt(ADAMS, comments="%")
    return -np.interp(t, table[:, 0], table[:, 1])


@pytest.fixture(scope="module")
def fourbar_inverse(compiled: Compiled) -> dict[str, object]:
    mech = compiled(reference("fourbars1-with-rel-angle"))
    trajectory = read_trajectory(TRAJECTORIES / "fourbars1-with-rel-angle-trajectory.txt", 1)
    imposed = coordinate_indices(mech, "theta0", "--imposed")
    return {"direct": inverse_dynamics_direct(mech, trajectory, imposed),
            "factor-graph": inverse_dynamics_factor_graph(mech, trajectory, imposed)}


@pytest.mark.parametrize("method", ["direct", "factor-graph"])
def test_fourbar_crank_torque_matches_msc_adams(fourbar_inverse: dict, method: str) -> None:
    result = fourbar_inverse[method]
    torque = result.forces[:, 0]
    expected = adams_torque(result.t)
    rms = np.sqrt(np.mean((torque - expected) ** 2))
    assert len(result.t) == 2000
    assert rms <= 5e-4 * np.abs(expected).max()
    assert np.degrees(np.abs(result.following_error)).max() < 1e-3


def test_pick_and_place_both_methods_agree(compiled: Compiled) -> None:
    mech = compiled(reference("pick-and-place-robot"))
    trajectory = read_trajectory(TRAJECTORIES / "pick-and-place-robot-trajectory.txt", 2)
    direct = inverse_dynamics_direct(mech, trajectory, [20, 21])
    graph = inverse_dynamics_factor_graph(mech, trajectory, [20, 21])
    peak = np.abs(direct.forces).max(axis=0)
    assert np.all(np.sqrt(np.mean((direct.forces - graph.forces) ** 2, axis=0)) <= 1e-3 * peak)
    # continuous: the torque moves between samples no more than the prescribed
    # acceleration does (it changes quickly at 2.5 s, where the file's motion switches)
    _, _, zdd = trajectory.derivatives()
    jumps = np.abs(np.diff(direct.forces, axis=0))
    assert np.all(np.isfinite(direct.forces))
    assert jumps.max() < 0.15 * peak.max()
    assert abs(int(jumps.max(axis=1).argmax()) - int(np.abs(np.diff(zdd, axis=0)).max(
        axis=1).argmax())) <= 2


@pytest.mark.parametrize(("name", "imposed"), [("fourbars1-with-rel-angle", [4]),
                                               ("pick-and-place-robot", [20, 21])])
def test_banded_factor_graph_solver_matches_gtsam(compiled: Compiled, name: str,
                                                  imposed: list[int]) -> None:
    """One factor graph, two solvers: batched linearization with a banded Levenberg–
    Marquardt over the whole piece (the default), and GTSAM's on windows of Python
    factors; the same motion and forces."""
    mech = compiled(reference(name))
    samples = read_trajectory(TRAJECTORIES / f"{name}-trajectory.txt", len(imposed))
    piece = Trajectory(samples.t[:60], samples.values[:60], samples.source)
    banded = inverse_dynamics_factor_graph(mech, piece, imposed)
    windows = inverse_dynamics_factor_graph(mech, piece, imposed, solver="gtsam")
    assert banded.settings["solver"] == "banded" and windows.settings["solver"] == "gtsam"
    peak = np.abs(banded.forces).max(axis=0)
    # each solver stops at its own tolerance: forces agree to 1e-4 of the peak at every
    # sample (the methods' target is 1e-3 RMS)
    assert np.all(np.abs(banded.forces - windows.forces).max(axis=0) <= 1e-4 * peak)
    assert np.abs(banded.q - windows.q).max() < 1e-8
    # the windows' ends lack their neighbours' integrator factors: rates differ slightly
    assert np.abs(banded.qd - windows.qd).max() < 1e-4 * np.abs(banded.qd).max()
    with pytest.raises(ValueError, match="solver must be one of banded, gtsam"):
        inverse_dynamics_factor_graph(mech, piece, imposed, solver="lu")


def test_spline_derivatives_of_a_known_motion() -> None:
    """θ = 1.2 (1 − cos 2t) sampled every 5 ms: rates from the quintic spline."""
    t = np.arange(0.0, 10.0, 0.005)
    trajectory = Trajectory(t, (1.2 * (1 - np.cos(2 * t)))[:, None], "test")
    _, rate, acceleration = trajectory.derivatives()
    assert np.abs(rate[:, 0] - 2.4 * np.sin(2 * t)).max() < 1e-7
    assert np.abs(acceleration[:, 0] - 4.8 * np.cos(2 * t)).max() < 1e-4
    from_expression = trajectory_from_expressions({"theta0": "1.2*(1 - cos(2*t))"}, 1.0, 0.005)
    np.testing.assert_allclose(from_expression.values[:, 0], 1.2 * (1 - np.cos(
        2 * from_expression.t)), atol=1e-15)


@pytest.mark.parametrize(("text", "message"), [
    ("0 0\n0.1 1 2\n", r"bad\.txt:2: 3 cells, expected 2"),
    ("% header\n0 0\n0.1 abc\n", r"bad\.txt:3: column 2: 'abc' is not a number"),
    ("0 0\n0.1 1\n0.1 2\n", r"bad\.txt:3: time 0\.1 repeats the time of line 2"),
    ("% only a comment\n", r"bad\.txt: no samples"),
])
def test_bad_trajectory_files_are_located(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(TrajectoryError, match=message):
        read_trajectory(path, 1)


def test_unknown_coordinates_and_unreachable_motion(compiled: Compiled) -> None:
    mech = compiled(reference("fourbars1-with-rel-angle"))
    with pytest.raises(TrajectoryError, match="unknown coordinate 'nope'"):
        coordinate_indices(mech, "nope", "--imposed")
    with pytest.raises(TrajectoryError, match="name 1 coordinate"):
        coordinate_indices(mech, "x1,y1", "--imposed")
    # x1 is the crank tip: |x1| <= L = 1, so x1 = 1.5 cannot be reached
    t = np.linspace(0, 1, 101)
    motion = Trajectory(t, (1.0 + 0.5 * t)[:, None], "ramp")
    with pytest.raises(TrajectoryError, match=r"ramp: the mechanism cannot reach the "
                                              r"prescribed motion at t = "):
        prescribed_motion(mech, motion, [mech.coordinate_index("x1")])


def test_end_effector_path_gives_the_motor_torques(compiled: Compiled) -> None:
    """The robot's point 5 made to follow the path it takes under the motor trajectory:
    inverse kinematics on (x5, y5), forces on the motors, the same torques, by both
    methods."""
    mech = compiled(reference("pick-and-place-robot"))
    trajectory = read_trajectory(TRAJECTORIES / "pick-and-place-robot-trajectory.txt", 2)
    motors = inverse_dynamics_direct(mech, trajectory, [20, 21])
    point = coordinate_indices(mech, "x5,y5", "--imposed")
    path = Trajectory(trajectory.t, motors.q[:, point], "path of point 5")
    followed = inverse_dynamics_direct(mech, path, point, actuated=[20, 21])
    np.testing.assert_allclose(followed.q, motors.q, atol=1e-9)
    peak = np.abs(motors.forces).max()
    assert np.abs(followed.forces - motors.forces).max() < 1e-5 * peak
    # the factor graph too: prescribed factors on (x5, y5), force variables on the motors
    graph = inverse_dynamics_factor_graph(mech, path, point, actuated=[20, 21])
    np.testing.assert_allclose(graph.q, motors.q, atol=1e-8)
    assert np.abs(graph.forces - motors.forces).max() < 1e-4 * peak


def test_factor_graph_forces_come_with_their_marginal_sigma(compiled: Compiled) -> None:
    """The banded solver's σ of the forces are the diagonal of (JᵀJ)⁻¹ of the whole graph
    at its solution: here from a dense Jacobian by central differences, inverted whole.
    The simulation CSV columns carry them."""
    from mbgen.factors.noise import PAPER
    from mbgen.inverse.banded import STAGE_VARIABLES, InverseGraph, Layout
    from mbgen.inverse.factor_graph import PRESCRIBED_SIGMA

    mech = compiled(reference("fourbars1-with-rel-angle"))
    samples = read_trajectory(TRAJECTORIES / "fourbars1-with-rel-angle-trajectory.txt", 1)
    piece = Trajectory(samples.t[:12], samples.values[:12], samples.source)
    assert inverse_dynamics_factor_graph(mech, piece, [4]).force_sigma is None  # asked only
    result = inverse_dynamics_factor_graph(mech, piece, [4], covariance=True)
    assert result.force_sigma is not None and result.force_sigma.shape == (12, 1)
    graph = InverseGraph(mech, piece, [4], [4], PAPER, PRESCRIBED_SIGMA)
    layout = Layout(graph.sizes, STAGE_VARIABLES[4], len(piece.t))
    x = layout.join({"q": result.q, "v": result.qd, "a": result.qdd, "u": result.forces})

    def residuals(at: np.ndarray) -> np.ndarray:
        return np.concatenate([f.residual.ravel()
                               for f in graph.factors(4, layout.split(at), False)])

    jacobian = numerical_jacobian(residuals, x, 1e-6)
    dense = layout.split(np.sqrt(np.diag(np.linalg.inv(jacobian.T @ jacobian))))["u"]
    np.testing.assert_allclose(result.force_sigma, dense, rtol=1e-4)
    header, data = result.columns()
    assert header[-1] == f"force_{mech.coordinate_names[4]}_sigma"
    np.testing.assert_array_equal(data[:, -1], result.force_sigma[:, 0])
    assert inverse_dynamics_direct(mech, piece, [4]).force_sigma is None


def test_banded_inverse_is_the_band_of_the_dense_inverse(compiled: Compiled) -> None:
    """mb_banded_inverse (the Takahashi recurrence within the band) against the dense
    inverse of a random banded symmetric positive definite matrix, every band entry."""
    from scipy.linalg import cholesky_banded

    mech = compiled(reference("fourbars1-with-rel-angle"))
    rng = np.random.default_rng(3)
    n, b = 40, 5
    matrix = np.zeros((n, n))
    for d in range(b + 1):
        values = rng.standard_normal(n - d)
        matrix += np.diag(values, -d) + (np.diag(values, d) if d else 0)
    matrix += (np.abs(matrix).sum(axis=1).max() + 1.0) * np.eye(n)  # diagonally dominant
    bands = np.array([np.concatenate([np.diag(matrix, -d), np.zeros(d)]) for d in range(b + 1)])
    band = mech.banded_inverse(cholesky_banded(bands, lower=True))
    inverse = np.linalg.inv(matrix)
    for d in range(b + 1):
        np.testing.assert_allclose(band[d, :n - d], np.diag(inverse, -d), rtol=1e-12,
                                   atol=1e-15)


def test_forces_without_a_sigma_are_an_error_not_nan(compiled: Compiled,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the graph's information at the solution does not factor, asking for the
    forces' σ is a clear error naming the trajectory, never a column of NaN."""
    from mbgen.numerics.least_squares import BorderedMatrix

    mech = compiled(reference("fourbars1-with-rel-angle"))
    samples = read_trajectory(TRAJECTORIES / "fourbars1-with-rel-angle-trajectory.txt", 1)
    piece = Trajectory(samples.t[:12], samples.values[:12], "piece.txt")
    original = BorderedMatrix.factor
    calls = {"count": 0}

    def factor_then_fail(self: BorderedMatrix, *args: object, **kwargs: object) -> object:
        # the solver's own factorizations pass; the σ's one (no shift, after the last
        # stage) fails
        if not args and not kwargs:
            calls["count"] += 1
            raise np.linalg.LinAlgError("not positive definite")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(BorderedMatrix, "factor", factor_then_fail)
    with pytest.raises(TrajectoryError, match="piece.txt.*no σ"):
        inverse_dynamics_factor_graph(mech, piece, [4], covariance=True)
    assert calls["count"] == 1

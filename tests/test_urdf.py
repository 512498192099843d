"""URDF robots (mbgen/model/urdf.py): located errors for every kind of bad file, the
translation's names, limits and friction, and the compiled dynamics of the shipped arm
(mechanisms/arm.urdf: a fixed link, a prismatic joint, damping and dry friction) against
an independent Lagrangian model (tests/urdf_dynamics.py) and, where it is installed,
Pinocchio: q̈, M, gravity, inverse dynamics and the Jacobians of q̈.

Two routes are checked: the arm as shipped (its sliding joint keeps it on the KKT path of
natural coordinates) and the same arm with the carriage turning instead of sliding (an
open chain of revolute joints: the joint-space route, docs/dynamics.md)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import SHIPPED_DIR
from urdf_dynamics import Robot, derivative

from mbgen.errors import MechanismError
from mbgen.model import load_mechanism
from mbgen.runtime.compiled import CompiledMechanism

ARM = SHIPPED_DIR / "arm.urdf"
TEXT = ARM.read_text()
# the carriage turning about the forearm's axis instead of sliding along it
REVOLUTE = TEXT.replace('name="slide" type="prismatic"', 'name="slide" type="revolute"'
                        ).replace('lower="0" upper="0.15"', 'lower="-1" upper="1"')


def line_of(text: str, fragment: str) -> int:
    return text[:text.index(fragment)].count("\n") + 1


def fault(tmp_path: Path, text: str) -> MechanismError:
    path = tmp_path / "bad.urdf"
    path.write_text(text)
    with pytest.raises(MechanismError) as caught:
        load_mechanism(path)
    return caught.value


LOOP = """  <link name="loop_a"/>
  <link name="loop_b"/>
  <joint name="ab" type="fixed"><parent link="loop_a"/><child link="loop_b"/></joint>
  <joint name="ba" type="fixed"><parent link="loop_b"/><child link="loop_a"/></joint>
</robot>"""

# (the change, the fragment of the changed text the error's line holds, its element, words)
CASES = {
    "unknown joint type": (('type="continuous"', 'type="screw"'), 'name="elbow"',
                           "<joint name='elbow'>", "unknown joint type 'screw'"),
    "missing parent": (('<parent link="flange"/>', '<parent link="nowhere"/>'),
                       '<parent link="nowhere"/>', "<parent>", "'nowhere' is not a <link>"),
    "a cycle": (("</robot>", LOOP), '<joint name="ab"', "<joint name='ab'>", "on a cycle"),
    "two parents": (('<child link="carriage"/>', '<child link="upper_arm"/>'),
                    '<joint name="slide"', "<joint name='slide'>", "already the child"),
    "non-positive-definite inertia": (('ixx="0.001" ixy="0" ixz="0.0001"',
                                       'ixx="-0.001" ixy="0" ixz="0.0001"'),
                                      'ixx="-0.001"', "<inertia>", "positive"),
    "mesh-only link": (('<link name="carriage">', '<link name="carriage">'),
                       '<link name="carriage">', "<link name='carriage'>", "no <inertial>"),
    "floating base": (('name="shoulder" type="revolute"', 'name="shoulder" type="floating"'),
                      'name="shoulder"', "<joint name='shoulder'>", "floating base"),
    "bad number": (('<mass value="0.8"/>', '<mass value="heavy"/>'), 'value="heavy"',
                   "<mass>", "is not 1 number"),
    "joint name": (('name="elbow"', 'name="elbow-1"'), 'name="elbow-1"',
                   "<joint name='elbow-1'>", "an identifier"),
    "entity": (('<?xml version="1.0"?>', '<?xml version="1.0"?>\n<!DOCTYPE robot [\n'
                '<!ENTITY lol "lol">]>'), "<!DOCTYPE", "", "document type declaration"),
    "malformed": (("</robot>", "</robt>"), "</robt>", "", "invalid XML"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_urdf_is_a_located_error(tmp_path: Path, case: str) -> None:
    (old, new), fragment, element, words = CASES[case]
    assert old in TEXT
    text = TEXT.replace(old, new, 1)
    if case == "mesh-only link":  # the carriage's inertial gone, a mesh in its place
        text = re.sub(r'(<link name="carriage">\s*)<inertial>.*?</inertial>',
                      r'\1<visual><geometry><mesh filename="c.stl"/></geometry></visual>',
                      text, flags=re.S)
    error = fault(tmp_path, text)
    assert words in error.message, error
    assert error.file == str(tmp_path / "bad.urdf")
    assert error.line == line_of(text, fragment), error
    assert (error.key or "") == element, error


def test_the_command_line_names_the_fault_without_a_traceback(
        tmp_path: Path, run: Callable[..., tuple[int, str]]) -> None:
    path = tmp_path / "bad.urdf"
    path.write_text(TEXT.replace('type="continuous"', 'type="screw"'))
    code, output = run("check", str(path))
    assert code == 1
    line = line_of(TEXT, 'name="elbow"')
    assert f"bad.urdf:{line}" in output.replace("\n", "")
    assert "Traceback" not in output


NEAR = SHIPPED_DIR.parent / "tests" / "data" / "near-parallel.urdf"


def constraint_singular_values(path: Path) -> np.ndarray:
    """Φq's singular values at the file's configuration, above 1e-9 of the largest (the
    rest: redundant rows), in increasing order; n − d of them where Φq has the rank of a
    mechanism with d degrees of freedom in n coordinates."""
    import sympy as sp

    from mbgen.symbolic.model import build_symbolic_model

    mechanism = load_mechanism(path)
    model = build_symbolic_model(mechanism)
    phi = sp.Matrix([c.expr for c in model.constraints]).xreplace(mechanism.parameter_values)
    jacobian = sp.lambdify(model.q, phi.jacobian(model.q), "numpy")
    values = np.linalg.svd(np.asarray(jacobian(*mechanism.initial_coordinates()), float),
                           compute_uv=False)
    found = np.sort(values[values > 1e-9 * values.max()])
    assert len(found) == len(model.q) - len(mechanism.independent)
    return found


@pytest.mark.parametrize("point", ["8e-6", "8e-4", "4e-3"])
def test_near_parallel_directions_leave_the_constraints_well_conditioned(
        tmp_path: Path, point: str) -> None:
    """tests/data/near-parallel.urdf: a link whose child joint is a sine of 1e-5 (and
    1e-3, 5e-3: under the loader's NEAR_PARALLEL) off the line through another, and a
    joint axis 1e-9 off its parent's. Φq has full rank and, within a factor of 2, the
    smallest singular value of the same robot with the directions exactly aligned (0.20):
    a basis taken from the nearly aligned directions made it 2e-11, 2e-7 and 5e-6 (the
    body's other elements tied to it by 1/sine)."""
    text = NEAR.read_text()
    aligned, near = tmp_path / "aligned.urdf", tmp_path / "near.urdf"
    aligned.write_text(text.replace('xyz="8e-6 0 0.8"', 'xyz="0 0 0.8"').replace(
        'xyz="1e-9 0 1"', 'xyz="0 0 1"'))
    near.write_text(text.replace('xyz="8e-6 0 0.8"', f'xyz="{point} 0 0.8"'))
    reference, found = constraint_singular_values(aligned), constraint_singular_values(near)
    assert found[0] >= 0.5 * reference[0] and reference[0] > 0.1


def test_a_near_parallel_robot_moves_as_the_independent_model_says(
        compiled: Callable[[Path], CompiledMechanism]) -> None:
    """The near-parallel robot's q̈ and M against tests/urdf_dynamics.py (1e-10)."""
    mech, robot = compiled(NEAR), Robot(NEAR)
    q, qd, angles, rates = states(mech, robot, 4, seed=7)
    torque = np.random.default_rng(8).normal(0.0, 1.0, angles.shape)
    forces = np.zeros_like(q)
    index = mech.coordinate_indices(robot.names)
    forces[:, index] = torque
    zdd, _, _, jq = mech.independent_dynamics(q, qd, forces, z=robot.names)
    for k in range(len(q)):
        assert relative(zdd[k], robot.acceleration(angles[k], rates[k], torque[k])) <= 1e-10
        assert relative(np.linalg.inv(jq[k][:, index]), robot.mass_matrix(angles[k]).real
                        ) <= 1e-10


def test_the_translation_keeps_the_joint_names_limits_and_friction() -> None:
    mechanism = load_mechanism(ARM)
    assert mechanism.independent == ["shoulder", "elbow", "slide"]
    assert mechanism.limits == {"shoulder": (-2.9, 2.9), "slide": (0.0, 0.15)}
    rubbing = {f.coordinate: (float(f.viscous), float(f.coulomb))
               for f in mechanism.frictions}
    assert rubbing == {"shoulder": (0.05, 0.02), "elbow": (0.03, 0.0), "slide": (0.5, 0.1)}
    assert [b.name for b in mechanism.spatial_bodies] == ["upper_arm", "forearm", "carriage"]
    # the flange's mass is the upper arm's (merged by its fixed joint)
    assert float(mechanism.spatial_bodies[0].mass) == pytest.approx(1.5, rel=1e-15)


def states(mech: CompiledMechanism, robot: Robot, count: int, seed: int
           ) -> tuple[np.ndarray, ...]:
    """Consistent mbgen states at random joint values and rates, and those values."""
    rng = np.random.default_rng(seed)
    names = robot.names
    angles = rng.uniform(-0.7, 0.7, (count, len(names)))
    angles[:, -1] = rng.uniform(0.0, 0.15, count) if robot.moving[-1].kind == "prismatic" \
        else angles[:, -1]
    rates = rng.normal(0.0, 1.0, (count, len(names)))
    rates[np.abs(rates) < 0.05] = 0.3  # dry friction smooth at these rates
    guess = np.repeat(mech.q0[None], count, axis=0)
    guess[:, mech.coordinate_indices(names)] = angles
    q = mech.solve_position(guess, z=names)
    return q, mech.solve_velocity(q, rates, z=names), angles, rates


@pytest.fixture(scope="module", params=["prismatic", "revolute"])
def arm(request: pytest.FixtureRequest, compiled: Callable[[Path], CompiledMechanism],
        tmp_path_factory: pytest.TempPathFactory) -> tuple[CompiledMechanism, Robot, float]:
    """The compiled arm, its independent model and the tolerance of its route on q̈: the
    joint-space route's is the issue's 1e-10; the KKT path in natural coordinates is
    measured 3e-10 from both references (the same on its dense, sparse and unrolled
    factorizations: the conditioning of the arm's natural coordinates, not the solver)."""
    if request.param == "prismatic":
        path = ARM
    else:
        path = tmp_path_factory.mktemp("urdf") / "arm-revolute.urdf"
        path.write_text(REVOLUTE)
    mech = compiled(path)
    route = mech.meta["joint_space"]  # the z indices, or why there is no joint space
    assert isinstance(route, list) == (request.param == "revolute"), route
    return mech, Robot(path), 1e-9 if request.param == "prismatic" else 1e-10


def relative(mine: np.ndarray, theirs: np.ndarray) -> float:
    return float(np.max(np.abs(mine - theirs)) / np.max(np.abs(theirs)))


def test_the_arm_moves_as_the_independent_model_says(
        arm: tuple[CompiledMechanism, Robot, float]) -> None:
    mech, robot, tolerance = arm
    names = robot.names
    index = mech.coordinate_indices(names)
    q, qd, angles, rates = states(mech, robot, 6, seed=3)
    torque = np.random.default_rng(4).normal(0.0, 1.0, angles.shape)
    forces = np.zeros_like(q)
    forces[:, index] = torque
    zdd, jz, jzd, jq = mech.independent_dynamics(q, qd, forces, z=names)
    for k in range(len(q)):
        expected = robot.acceleration(angles[k], rates[k], torque[k])
        assert relative(zdd[k], expected) <= tolerance
        m_matrix = robot.mass_matrix(angles[k]).real
        assert relative(np.linalg.inv(jq[k][:, index]), m_matrix) <= tolerance
        a, r, t = angles[k], rates[k], torque[k]
        assert relative(jz[k], derivative(
            lambda x, r=r, t=t: robot.acceleration(x, r, t), a)) <= 1e-8
        assert relative(jzd[k], derivative(
            lambda x, a=a, t=t: robot.acceleration(a, x, t), r)) <= 1e-8
    # inverse dynamics: the forces of a given motion, and at rest the gravity torques
    wanted = np.random.default_rng(5).normal(0.0, 2.0, angles.shape)
    for rates_now, accelerations in ((rates, wanted), (np.zeros_like(rates), 0 * wanted)):
        velocities = mech.solve_velocity(q, rates_now, z=names)
        qdd = mech.solve_acceleration(q, velocities, accelerations, z=names)
        u, _ = mech.inverse_dynamics(q, velocities, qdd, actuated=names)
        for k in range(len(q)):
            expected = robot.inverse(angles[k], rates_now[k], accelerations[k])
            assert relative(u[k], expected) <= 1e-9  # the KKT path on either route
    still = mech.solve_velocity(q, np.zeros_like(rates), z=names)
    u, _ = mech.inverse_dynamics(q, still, mech.solve_acceleration(
        q, still, np.zeros_like(rates), z=names), actuated=names)
    for k in range(len(q)):
        assert relative(u[k], robot.gravity(angles[k]).real) <= tolerance


def test_the_arm_agrees_with_pinocchio(arm: tuple[CompiledMechanism, Robot, float],
                                       tmp_path: Path) -> None:
    pin = pytest.importorskip("pinocchio")
    mech, robot, tolerance = arm
    path = tmp_path / "arm.urdf"
    path.write_text(TEXT if robot.moving[-1].kind == "prismatic" else REVOLUTE)
    model = pin.buildModelFromUrdf(str(path))
    data = model.createData()
    assert list(model.names)[1:] == robot.names

    def configuration(values: np.ndarray) -> np.ndarray:  # a continuous joint: cos, sin
        return np.concatenate([[np.cos(x), np.sin(x)] if j.nq == 2 else [x]
                               for j, x in zip(model.joints[1:], values, strict=True)])

    names = robot.names
    index = mech.coordinate_indices(names)
    q, qd, angles, rates = states(mech, robot, 6, seed=8)
    torque = np.random.default_rng(9).normal(0.0, 1.0, angles.shape)
    forces = np.zeros_like(q)
    forces[:, index] = torque
    zdd, jz, jzd, jq = mech.independent_dynamics(q, qd, forces, z=names)
    for k in range(len(q)):
        c, v = configuration(angles[k]), rates[k]
        tau = torque[k] + robot.friction(v)  # Pinocchio's aba has no friction
        assert relative(zdd[k], pin.aba(model, data, c, v, tau)) <= tolerance
        m_matrix = pin.crba(model, data, c)
        m_matrix = np.triu(m_matrix) + np.triu(m_matrix, 1).T
        assert relative(np.linalg.inv(jq[k][:, index]), m_matrix) <= tolerance
        pin.computeABADerivatives(model, data, c, v, tau)
        minv = np.triu(data.Minv) + np.triu(data.Minv, 1).T
        friction_v = derivative(robot.friction, v)  # ∂τ/∂v of the friction, diagonal
        assert relative(jz[k], data.ddq_dq) <= 1e-8
        assert relative(jzd[k], data.ddq_dv + minv @ friction_v) <= 1e-8
        assert relative(jq[k][:, index], minv) <= 1e-8
        still = mech.solve_velocity(q[k], np.zeros(len(names)), z=names)
        u, _ = mech.inverse_dynamics(q[k], still, mech.solve_acceleration(
            q[k], still, np.zeros(len(names)), z=names), actuated=names)
        assert relative(u, pin.computeGeneralizedGravity(model, data, c)) <= tolerance
        accelerations = np.random.default_rng(k).normal(0.0, 2.0, len(names))
        qdd = mech.solve_acceleration(q[k], qd[k], accelerations, z=names)
        u, _ = mech.inverse_dynamics(q[k], qd[k], qdd, actuated=names)
        assert relative(u + robot.friction(v), pin.rnea(model, data, c, v, accelerations)
                        ) <= 1e-9


def test_the_shipped_arm_simulates_as_the_independent_model(
        tmp_path: Path, run: Callable[..., tuple[int, str]]) -> None:
    """2 s of free motion from the command line (RK4 at 1 ms, friction on) against the
    independent model integrated by SciPy's DOP853 at a tight tolerance. The forearm's
    basis was once its child point and a direction 2.3° from it: Φq's smallest singular
    value 2.4e-5, and the run stopped at t = 0.21 s with "Φq loses rank"."""
    from scipy.integrate import solve_ivp

    out = tmp_path / "arm.csv"
    code, output = run("simulate", str(ARM), "--t-end", "2", "--dt", "0.001",
                       "--out", str(out))
    assert code == 0, output
    table = np.genfromtxt(out, delimiter=",", names=True)
    robot = Robot(ARM)
    size = len(robot.names)
    free = np.zeros(size)
    reference = solve_ivp(
        lambda _t, y: np.concatenate([y[size:], robot.acceleration(y[:size], y[size:],
                                                                   free)]),
        (0.0, 2.0), np.zeros(2 * size), method="DOP853", rtol=1e-10, atol=1e-12,
        dense_output=True)
    assert reference.success
    assert table["t"][-1] == pytest.approx(2.0)
    expected = reference.sol(table["t"])[:size].T
    mine = np.column_stack([table[name] for name in robot.names])
    # RK4's error at 1 ms, measured: 1.1e-5 (4.4e-8 at 0.25 ms: the h⁴ of the method)
    assert np.max(np.abs(mine - expected)) <= 3e-5
    assert np.max(np.abs(expected[:, 1])) > 2.0  # the elbow turned well past the old stop


def test_check_and_info_report_the_limits(tmp_path: Path,
                                          run: Callable[..., tuple[int, str]]) -> None:
    """The <limit> of each revolute and prismatic joint (read here by ElementTree), shown
    by check and info as recorded, not enforced; a q0 outside its limits is pointed out."""
    import xml.etree.ElementTree as ET

    limits = {j.get("name"): (float(j.find("limit").get("lower")),  # type: ignore[union-attr]
                              float(j.find("limit").get("upper")))  # type: ignore[union-attr]
              for j in ET.parse(ARM).getroot().iter("joint")
              if j.get("type") in ("revolute", "prismatic") and j.find("limit") is not None}
    assert set(limits) == {"shoulder", "slide"}
    code, output = run("check", str(ARM))
    assert code == 0, output
    for name, (lower, upper) in limits.items():
        assert f"limit {name}: [{lower:g}, {upper:g}] (recorded, not enforced)" in output
    assert "outside" not in output
    code, output = run("info", str(ARM))
    assert code == 0, output
    table = output[output.index("Limits (not enforced)"):]
    for name, (lower, upper) in limits.items():
        row = next(line for line in table.splitlines() if f" {name} " in line)
        cells = [cell.strip() for cell in row.split("│")]
        assert cells[2:5] == [f"{lower:g}", f"{upper:g}", "0"], row
    # q0 (all joints at the URDF's zero) below a slide limit starting at 0.05
    path = tmp_path / "arm.urdf"
    path.write_text(TEXT.replace('lower="0" upper="0.15"', 'lower="0.05" upper="0.15"'))
    code, output = run("check", str(path))
    assert code == 0, output
    assert "limit slide: [0.05, 0.15] (recorded, not enforced); q0 is 0, outside it" in output


EXAMPLES = SHIPPED_DIR.parent / "examples"
CLOSED = EXAMPLES / "fourbar-closed.yaml"  # urdf: fourbar.urdf, closed, with sensors


def including_fault(tmp_path: Path, change: tuple[str, str], file: str, line: str, key: str,
                    run: Callable[..., tuple[int, str]]) -> str:
    """examples/fourbar-closed.yaml with ``change`` made (its text returned): the loader
    names ``file``, the line holding ``line`` and ``key``; ``mbgen check`` exits 1 with
    that place and no traceback."""
    (tmp_path / "fourbar.urdf").write_text((EXAMPLES / "fourbar.urdf").read_text())
    text = CLOSED.read_text().replace(*change)
    assert text != CLOSED.read_text()
    (tmp_path / "closed.yaml").write_text(text)
    with pytest.raises(MechanismError) as caught:
        load_mechanism(tmp_path / "closed.yaml")
    error = caught.value
    assert (Path(error.file or "").name, error.line, error.key) == (
        file, line_of(text, line), key), error
    code, output = run("check", str(tmp_path / "closed.yaml"))
    assert code == 1 and "Traceback" not in output
    assert f"closed.yaml:{line_of(text, line)}" in output.replace("\n", "")
    return text


def test_a_yaml_file_adds_a_loop_sensors_and_gravity_to_a_urdf(
        tmp_path: Path, run: Callable[..., tuple[int, str]]) -> None:
    """examples/fourbar-closed.yaml: the four-bar's links as a URDF chain, closed at the
    rocker's support, gravity along −y, three sensors. Its motion against the planar file
    mechanisms/fourbar.yaml (the same bars, another formulation): the crank's angle; the
    encoder, the coupler's gyroscope (its absolute rate) and the rocker's accelerometer
    Rᵀ(a − g) at its joint with the coupler, from the planar run's point 2."""
    mine, planar = tmp_path / "closed.csv", tmp_path / "planar.csv"
    code, output = run("simulate", str(CLOSED), "--t-end", "1", "--dt", "0.001",
                       "--with", "sensors", "--out", str(mine))
    assert code == 0, output
    code, output = run("simulate", str(SHIPPED_DIR / "fourbar.yaml"), "--t-end", "1",
                       "--dt", "0.001", "--out", str(planar))
    assert code == 0, output
    a = np.genfromtxt(mine, delimiter=",", names=True)
    b = np.genfromtxt(planar, delimiter=",", names=True)
    crank = np.unwrap(np.arctan2(b["y1"], b["x1"]))
    assert np.ptp(crank) > 1.0  # it swings
    assert np.max(np.abs(a["crank_joint"] - crank)) <= 1e-8
    assert np.array_equal(a["crank_encoder"], a["crank_joint"])
    coupler = np.gradient(np.unwrap(np.arctan2(b["y2"] - b["y1"], b["x2"] - b["x1"])),
                          b["t"])
    assert np.max(np.abs(a["coupler_gyroz"] - coupler)[1:-1]) <= 1e-3 * np.ptp(coupler)
    assert np.max(np.abs(a["coupler_gyroz"] - a["crank_joint_dot"] - a["knee_dot"])) <= 1e-9
    rocker = a["crank_joint"] + a["knee"] + a["wrist"]  # its turn from the file's pose
    force = np.column_stack([b["x2_ddot"], b["y2_ddot"] + 9.81])  # a − g, g = (0, −9.81)
    along = np.column_stack([np.cos(rocker) * force[:, 0] + np.sin(rocker) * force[:, 1],
                             -np.sin(rocker) * force[:, 0] + np.cos(rocker) * force[:, 1]])
    assert np.max(np.abs(np.column_stack([a["rocker_accelx"], a["rocker_accely"]]) - along)
                  ) <= 1e-6 * np.max(np.abs(along))
    assert np.max(np.abs(a["rocker_accelz"])) <= 1e-9


@pytest.mark.parametrize(("change", "file", "line", "key"), [
    (("urdf: fourbar.urdf", "urdf: missing.urdf"), "closed.yaml", "urdf:", "urdf"),
    (("links: [rocker, base]", "links: [rocker, bse]"), "closed.yaml", "links:",
     "closures[0].links[1]"),
    (("body: coupler", "body: nowhere"), "closed.yaml", "body: nowhere", "sensors[1].body"),
    (("name: fourbar_closed", "points: []"), "closed.yaml", "points:", "points"),
    (("type: revolute", "type: universal"), "closed.yaml", "universal", "closures[0].type"),
])
def test_an_including_file_names_its_faults(tmp_path: Path, change: tuple[str, str],
                                            file: str, line: str, key: str,
                                            run: Callable[..., tuple[int, str]]) -> None:
    including_fault(tmp_path, change, file, line, key, run)


# (change to examples/fourbar-closed.yaml, the fragment on the faulty line, the key the
# loader names): each a fault the JSON Schema also finds, at the same key
SCHEMA_FAULTS = [
    (("name: fourbar_closed", "dimension: 3"), "dimension:", "dimension"),
    (("name: fourbar_closed", "name: [fourbar_closed]"), "name:", "name"),
    (("urdf: fourbar.urdf", "urdf: 5"), "urdf:", "urdf"),
    (("urdf: fourbar.urdf", "urdf: [fourbar.urdf]"), "urdf:", "urdf"),
    (("urdf: fourbar.urdf", "urdf:"), "urdf:", "urdf"),
    (("gravity: [0, -9.81, 0]", "gravity: down"), "gravity:", "gravity"),
    (("independent_coordinates: [crank_joint]", "independent_coordinates: crank_joint"),
     "independent_coordinates:", "independent_coordinates"),
    (("closures:\n  - {type: revolute, links: [rocker, base], xyz: [4, 0, 0], axis: [0, 0, "
      "1], name: support}", "closures: 3"), "closures:", "closures"),
    (("name: support}", "name: support, at: [1, 2, 3]}"), "at: [1", "closures[0].at"),
    (("xyz: [4, 0, 0], ", ""), "links: [rocker", "closures[0]"),
    (("links: [rocker, base]", "links: rocker"), "links: rocker", "closures[0].links"),
    (("xyz: [4, 0, 0]", "xyz: [4, 0]"), "xyz: [4, 0]", "closures[0].xyz"),
    (("name: support}", "name: 7}"), "name: 7", "closures[0].name"),
    (("{type: encoder, coordinate: crank_joint, ", "{type: encoder, "), "type: encoder",
     "sensors[0]"),
]


@pytest.mark.parametrize(("change", "line", "key"), SCHEMA_FAULTS,
                         ids=[f"{case[2]}-{k}" for k, case in enumerate(SCHEMA_FAULTS)])
def test_the_loader_and_the_schema_find_an_including_files_fault_at_one_key(
        tmp_path: Path, change: tuple[str, str], line: str, key: str,
        run: Callable[..., tuple[int, str]]) -> None:
    """The keys of a file with ``urdf:`` (mbgen.model.urdf.INCLUDE, CLOSURE): an unknown
    key, a value of the wrong type, a missing required key, each a located error (file,
    line, key; exit 1 from ``mbgen check``, no traceback) and rejected by the JSON Schema
    editors use (mbgen.model.schema) at the same key."""
    import jsonschema
    import yaml

    from mbgen.model.schema import mechanism_schema

    text = including_fault(tmp_path, change, "closed.yaml", line, key, run)
    validator = jsonschema.Draft202012Validator(mechanism_schema())
    assert validator.is_valid(yaml.safe_load(CLOSED.read_text()))
    errors = list(validator.iter_errors(yaml.safe_load(text)))
    paths = {".".join(str(p) for p in e.absolute_path).replace(".0", "[0]") for e in errors}
    unexpected = {f"{path}.{name}" if path else name for e, path in zip(
        errors, [".".join(str(p) for p in e.absolute_path).replace(".0", "[0]")
                 for e in errors], strict=True)
        for name in re.findall(r"'(\w+)' was unexpected", e.message)}
    assert key in paths | unexpected, [e.message for e in errors]


def test_every_key_of_an_including_file_is_documented() -> None:
    from mbgen.model.urdf import CLOSURE, INCLUDE

    doc = (SHIPPED_DIR.parent / "docs" / "robots.md").read_text()
    missing = [key for key in [*INCLUDE.keys, *CLOSURE.keys] if f"`{key}" not in doc]
    assert missing == []


@pytest.mark.parametrize(("joint", "value"), [("slide", 0.1), ("elbow", 0.4)])
def test_a_locked_joint_holds_its_links_where_the_value_puts_them(
        tmp_path: Path, compiled: Callable[[Path], CompiledMechanism], joint: str,
        value: float) -> None:
    """``locked: {joint: value}`` in a file including mechanisms/arm.urdf: the other
    joints' mass matrix and gravity torques are the full arm's (tests/urdf_dynamics.py)
    at the locked value, restricted to them; the slide locked, the arm's two revolute
    joints take the joint-space route."""
    (tmp_path / "arm.urdf").write_text(TEXT)
    (tmp_path / "held.yaml").write_text(f"urdf: arm.urdf\nlocked: {{{joint}: {value}}}\n")
    mech, robot = compiled(tmp_path / "held.yaml"), Robot(ARM)
    free = [name for name in robot.names if name != joint]
    assert [mech.coordinate_names[k] for k in mech.default_independent or []] == free
    assert isinstance(mech.meta["joint_space"], list) == (joint == "slide")
    rng = np.random.default_rng(9)
    angles = rng.uniform(-0.7, 0.7, (4, len(free)))
    guess = np.repeat(mech.q0[None], len(angles), axis=0)
    guess[:, mech.coordinate_indices(free)] = angles
    q = mech.solve_position(guess, z=free)
    still = mech.solve_velocity(q, np.zeros_like(angles), z=free)
    torque = rng.normal(0.0, 1.0, angles.shape)
    forces = np.zeros_like(q)
    forces[:, mech.coordinate_indices(free)] = torque
    zdd, _, _, jq = mech.independent_dynamics(q, still, forces, z=free)
    kept = [robot.names.index(name) for name in free]
    for k in range(len(q)):
        full = np.insert(angles[k], robot.names.index(joint), value)
        m_matrix = robot.mass_matrix(full).real[np.ix_(kept, kept)]
        assert relative(np.linalg.inv(jq[k][:, mech.coordinate_indices(free)]), m_matrix
                        ) <= 1e-9
        expected = np.linalg.solve(m_matrix, torque[k] - robot.gravity(full).real[kept])
        assert relative(zdd[k], expected) <= 1e-9


@pytest.mark.parametrize(("locked", "fragment", "key"), [
    ("{nowhere: 0}", "nowhere", "locked.nowhere"),
    ("{crank_joint: 0, knee: [1]}", "knee", "locked.knee"),
    ("{crank_joint: 0.1, knee: 0.1, knee: 0.2}", "knee: 0.2", "locked.knee"),
    ("[crank_joint]", "locked:", "locked"),
])
def test_a_bad_locked_joint_is_a_located_error(tmp_path: Path, locked: str, fragment: str,
                                              key: str) -> None:
    (tmp_path / "fourbar.urdf").write_text((EXAMPLES / "fourbar.urdf").read_text())
    text = CLOSED.read_text().replace("name: fourbar_closed\n",
                                      f"name: fourbar_closed\nlocked: {locked}\n")
    (tmp_path / "closed.yaml").write_text(text)
    with pytest.raises(MechanismError) as caught:
        load_mechanism(tmp_path / "closed.yaml")
    error = caught.value
    line = line_of(text, "locked:")
    assert (Path(error.file or "").name, error.line, error.key) == ("closed.yaml", line, key)
    assert fragment == "locked:" or fragment in text.splitlines()[line - 1]


def test_a_locked_joint_outside_its_limits_is_refused(tmp_path: Path) -> None:
    (tmp_path / "arm.urdf").write_text(TEXT)
    (tmp_path / "held.yaml").write_text("urdf: arm.urdf\nlocked: {slide: 0.2}\n")
    with pytest.raises(MechanismError, match=r"0.2 is outside the joint's limits \[0, 0.15\]"
                       ) as caught:
        load_mechanism(tmp_path / "held.yaml")
    assert (caught.value.line, caught.value.key) == (2, "locked.slide")


def test_a_fault_in_the_included_urdf_is_named_in_the_urdf(tmp_path: Path) -> None:
    robot = (EXAMPLES / "fourbar.urdf").read_text().replace(
        'name="knee" type="continuous"', 'name="knee" type="screw"')
    (tmp_path / "fourbar.urdf").write_text(robot)
    (tmp_path / "closed.yaml").write_text(CLOSED.read_text())
    with pytest.raises(MechanismError) as caught:
        load_mechanism(tmp_path / "closed.yaml")
    assert (Path(caught.value.file or "").name, caught.value.line) == (
        "fourbar.urdf", line_of(robot, 'name="knee"'))


def test_a_changed_included_urdf_is_a_new_build(tmp_path: Path) -> None:
    from mbgen.codegen.cache import content_hash, mechanism_bytes

    robot = tmp_path / "fourbar.urdf"
    robot.write_text((EXAMPLES / "fourbar.urdf").read_text())
    (tmp_path / "closed.yaml").write_text(CLOSED.read_text())
    before = content_hash(mechanism_bytes(tmp_path / "closed.yaml"))
    robot.write_text(robot.read_text().replace('<mass value="4"/>', '<mass value="5"/>'))
    assert content_hash(mechanism_bytes(tmp_path / "closed.yaml")) != before

"""The benchmark mechanisms in joint angles, for the peer tools of ``benchmarks/peers.py``.

mbgen works in natural coordinates (x, y of every mobile point); Pinocchio, SymForce and
CasADi describe the same mechanisms as a serial chain of revolute joints. This module
holds that second description (:class:`SerialLinkage`), the maps between the two sets of
coordinates, and one builder per peer tool:

* :func:`pinocchio_runner`: a Pinocchio model (ABA, or constraint dynamics with a
  loop-closure constraint for the four-bar) and its derivative algorithms;
* :func:`symforce_build` / :func:`casadi_build`: q̈ (and its Jacobians) derived in the
  tool's own symbolic types, generated as C++ / C, compiled with the same optimisation
  level as mbgen's kernels, and wrapped in a C loop over a batch of states.

Every peer import happens inside its builder, so a missing tool costs nothing but its
own rows.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

Array = np.ndarray
# mbgen's kernels are built with -O2 (mbgen/codegen/build.py); the peers' generated code
# gets the same level so that the comparison is about the code, not the flags.
OPT = "-O2"


# -- the mechanisms in joint angles ------------------------------------------------------------
@dataclass(frozen=True)
class Bar:
    """A planar body on two points, as mbgen's ``planar_bodies`` entry describes it."""

    mass: float
    length: float
    i0: float  # moment of inertia about the first point
    cog: tuple[float, float]  # centre of mass in the body frame (+X toward the second point)

    @property
    def i_cog(self) -> float:
        return self.i0 - self.mass * (self.cog[0] ** 2 + self.cog[1] ** 2)


def uniform_bar(mass: float, length: float) -> Bar:
    """mbgen's default body: I0 = m L²/3 about the first point, cog = [L/2, 0]."""
    return Bar(mass, length, mass * length**2 / 3.0, (length / 2.0, 0.0))


@dataclass(frozen=True)
class SerialLinkage:
    """Bars ``k`` from point ``points[k]`` to ``points[k + 1]``, hinged end to end.

    ``points`` are mbgen's point indices; ``fixed`` the positions of its fixed points.
    The first point is the ground pivot. ``closed``: the last point is fixed too, so the
    chain is a closed loop (the four-bar), which the peers model as an open chain plus a
    loop-closure constraint. Joint coordinates are relative angles: joint k turns bar k
    relative to bar k - 1 (bar -1 = ground), counter-clockwise, zero = aligned.
    """

    name: str
    bars: tuple[Bar, ...]
    points: tuple[int, ...]
    fixed: dict[int, tuple[float, float]]
    gravity: tuple[float, float] = (0.0, -9.81)
    closed: bool = False
    dof: int = field(init=False)

    def __post_init__(self) -> None:
        if len(self.points) != len(self.bars) + 1:
            raise ValueError("a serial linkage of k bars has k + 1 points")
        object.__setattr__(self, "dof", len(self.bars))

    @property
    def base(self) -> tuple[float, float]:
        return self.fixed[self.points[0]]


def _point_columns(linkage: SerialLinkage, names: Sequence[str]) -> list[tuple[int, int] | None]:
    index = {name: k for k, name in enumerate(names)}
    return [None if p in linkage.fixed else (index[f"x{p}"], index[f"y{p}"])
            for p in linkage.points]


def _points(linkage: SerialLinkage, names: Sequence[str], values: Array,
            fixed_value: bool) -> Array:
    """(S, P, 2): the linkage's points (positions, or their derivatives) from mbgen's q."""
    out = np.zeros((values.shape[0], len(linkage.points), 2))
    for k, (point, cols) in enumerate(zip(linkage.points, _point_columns(linkage, names),
                                          strict=True)):
        if cols is None:
            if fixed_value:
                out[:, k] = linkage.fixed[point]
        else:
            out[:, k, 0], out[:, k, 1] = values[:, cols[0]], values[:, cols[1]]
    return out


def joint_coordinates(linkage: SerialLinkage, names: Sequence[str], q: Array, qd: Array,
                      qdd: Array | None = None) -> tuple[Array, Array, Array | None]:
    """mbgen state (S, n) → relative joint angles, their rates and accelerations (S, dof).

    Bar angle θ = atan2(u) with u = p_b - p_a; θ̇ = (u × u̇)/|u|² and
    θ̈ = (u × ü)/|u|² - 2 (u·u̇)(u × u̇)/|u|⁴ (exact also off the bar-length manifold).
    """
    p = _points(linkage, names, q, True)
    u = np.diff(p, axis=1)
    ud = np.diff(_points(linkage, names, qd, False), axis=1)
    r2 = (u**2).sum(-1)
    cross_d = u[..., 0] * ud[..., 1] - u[..., 1] * ud[..., 0]
    theta = np.arctan2(u[..., 1], u[..., 0])
    omega = cross_d / r2
    alpha = None
    if qdd is not None:
        udd = np.diff(_points(linkage, names, qdd, False), axis=1)
        cross_dd = u[..., 0] * udd[..., 1] - u[..., 1] * udd[..., 0]
        dot_d = (u * ud).sum(-1)
        alpha = cross_dd / r2 - 2.0 * dot_d * cross_d / r2**2

    def relative(a: Array) -> Array:
        return np.diff(a, axis=1, prepend=0.0)

    joints = np.angle(np.exp(1j * relative(theta)))  # wrapped to (-π, π]
    return joints, relative(omega), None if alpha is None else relative(alpha)


def natural_coordinates(linkage: SerialLinkage, names: Sequence[str], theta: Array,
                        omega: Array) -> tuple[Array, Array]:
    """Absolute bar angles and rates (S, dof) of an open chain → mbgen's q, q̇ (S, n)."""
    if linkage.closed:
        raise ValueError("a closed loop has no free joint angles: use mbgen to assemble it")
    lengths = np.array([bar.length for bar in linkage.bars])
    steps = lengths * np.stack([np.cos(theta), np.sin(theta)], axis=-1).transpose(2, 0, 1)
    rates = lengths * omega * np.stack([-np.sin(theta), np.cos(theta)], axis=-1
                                       ).transpose(2, 0, 1)
    base = np.array(linkage.base)[:, None, None]
    positions = base + np.concatenate([np.zeros_like(steps[:, :, :1]),
                                       np.cumsum(steps, axis=2)], axis=2)
    velocities = np.concatenate([np.zeros_like(rates[:, :, :1]), np.cumsum(rates, axis=2)],
                                axis=2)
    q = np.zeros((theta.shape[0], len(names)))
    qd = np.zeros_like(q)
    for k, cols in enumerate(_point_columns(linkage, names)):
        if cols is not None:
            q[:, cols[0]], q[:, cols[1]] = positions[0, :, k], positions[1, :, k]
            qd[:, cols[0]], qd[:, cols[1]] = velocities[0, :, k], velocities[1, :, k]
    return q, qd


def joint_jacobians(linkage: SerialLinkage, names: Sequence[str], joints: Array, rates: Array,
                    forward_dynamics_jacobians: Callable[..., tuple[Array, ...]],
                    step: float = 1e-6) -> tuple[Array, Array, Array]:
    """mbgen's exact (∂q̈/∂q, ∂q̈/∂q̇, ∂q̈/∂Q) turned into ∂θ̈/∂θ, ∂θ̈/∂θ̇, ∂θ̈/∂τ (open chains).

    θ̈ = A(q, q̇, q̈(q, q̇)) with q, q̇ = P(θ, θ̇), so along a joint direction e:
    dθ̈ = A_q dq + A_q̇ dq̇ + A_q̈ (Jq dq + Jqd dq̇). Only the maps P and A, plain NumPy
    geometry, are differentiated numerically (central differences); mbgen's Jacobians
    enter exactly. τ acts as any Q with Jᵀ Q = τ (J = ∂q/∂θ), here Q = J (JᵀJ)⁻¹ τ.
    """
    def natural(theta: Array, omega: Array) -> tuple[Array, Array]:
        return natural_coordinates(linkage, names, np.cumsum(theta, axis=1),
                                   np.cumsum(omega, axis=1))

    def accel(q: Array, qd: Array, qdd: Array) -> Array:
        out = joint_coordinates(linkage, names, q, qd, qdd)[2]
        assert out is not None
        return out

    q, qd = natural(joints, rates)
    qdd, jq, jqd, jQ = forward_dynamics_jacobians(q, qd)
    free = accel(q, qd, np.zeros_like(qdd))

    def a_qdd(w: Array) -> Array:  # A is affine in q̈
        return accel(q, qd, w) - free

    def mv(m: Array, v: Array) -> Array:
        return np.einsum("sij,sj->si", m, v)

    count, dof = joints.shape
    d_theta, d_omega = np.empty((count, dof, dof)), np.empty((count, dof, dof))
    tangent = np.empty((count, q.shape[1], dof))
    h = step
    for j in range(dof):
        e = np.zeros_like(joints)
        e[:, j] = h
        (qp, qdp), (qm, qdm) = natural(joints + e, rates), natural(joints - e, rates)
        dq, dqd = (qp - qm) / (2 * h), (qdp - qdm) / (2 * h)
        tangent[:, :, j] = dq
        moved = (accel(q + h * dq, qd + h * dqd, qdd) - accel(q - h * dq, qd - h * dqd, qdd))
        d_theta[:, :, j] = moved / (2 * h) + a_qdd(mv(jq, dq) + mv(jqd, dqd))
        (_, qdp), (_, qdm) = natural(joints, rates + e), natural(joints, rates - e)
        dqd = (qdp - qdm) / (2 * h)
        moved = accel(q, qd + h * dqd, qdd) - accel(q, qd - h * dqd, qdd)
        d_omega[:, :, j] = moved / (2 * h) + a_qdd(mv(jqd, dqd))
    force = tangent @ np.linalg.inv(np.swapaxes(tangent, 1, 2) @ tangent)  # Q per unit τ
    response = jQ @ force  # (count, n, dof): q̈ per unit τ
    d_tau = np.stack([a_qdd(response[:, :, j]) for j in range(dof)], axis=2)
    return d_theta, d_omega, d_tau


# -- Pinocchio ---------------------------------------------------------------------------------
@dataclass
class PinocchioRunner:
    """One Pinocchio model with the calls the benchmark times (one state per call).

    The Jacobian call returns Pinocchio's own ``data`` arrays (no copy, as a user would
    get them): copy them before the next call if they are kept.
    """

    qdd: Callable[[Array, Array, Array], Array]
    qdd_jacobians: Callable[[Array, Array, Array], tuple[Array, Array, Array, Array]]
    algorithm: str
    jacobian_algorithm: str
    info: dict[str, Any]
    iterations: Callable[[], int] | None = None  # proximal iterations of the last call


def pinocchio_runner(linkage: SerialLinkage) -> PinocchioRunner:
    """RZ joints in the xy plane, gravity in -y; the loop closed by a CONTACT_3D constraint.

    A planar loop closed by a 3D point contact has one trivially satisfied row (z), so
    the Delassus matrix is singular: Pinocchio's proximal solver handles that (it is why
    ``mu`` > 0 below); the rows that matter are solved to ``accuracy``.
    """
    import pinocchio as pin

    model = pin.Model()
    gx, gy = linkage.gravity
    model.gravity = pin.Motion(np.array([gx, gy, 0.0, 0.0, 0.0, 0.0]))
    parent = 0
    placement = pin.SE3(np.eye(3), np.array([*linkage.base, 0.0]))
    for k, bar in enumerate(linkage.bars):
        joint = model.addJoint(parent, pin.JointModelRZ(), placement, f"joint{k}")
        # Only the z inertia acts in planar motion; x and y get the same (valid) value.
        inertia = pin.Inertia(bar.mass, np.array([*bar.cog, 0.0]), np.eye(3) * bar.i_cog)
        model.appendBodyToJoint(joint, inertia, pin.SE3.Identity())
        parent = joint
        placement = pin.SE3(np.eye(3), np.array([bar.length, 0.0, 0.0]))
    data = model.createData()

    if not linkage.closed:
        def aba(q: Array, v: Array, tau: Array) -> Array:
            return pin.aba(model, data, q, v, tau)

        def aba_jacobians(q: Array, v: Array, tau: Array) -> tuple[Array, Array, Array, Array]:
            dq, dv, dtau = pin.computeABADerivatives(model, data, q, v, tau)
            return data.ddq, dq, dv, dtau

        return PinocchioRunner(aba, aba_jacobians, "aba", "computeABADerivatives",
                               {"nq": model.nq})

    end = linkage.fixed[linkage.points[-1]]
    closure = pin.RigidConstraintModel(
        pin.ContactType.CONTACT_3D, model,
        parent, pin.SE3(np.eye(3), np.array([linkage.bars[-1].length, 0.0, 0.0])),
        0, pin.SE3(np.eye(3), np.array([*end, 0.0])), pin.ReferenceFrame.LOCAL)
    models = pin.StdVec_RigidConstraintModel()
    models.append(closure)
    datas = pin.StdVec_RigidConstraintData()
    datas.append(closure.createData())
    pin.initConstraintDynamics(model, data, models, datas)
    accuracy, mu, max_iter = 1e-12, 1e-9, 10
    settings = pin.ProximalSettings(accuracy, mu, max_iter)

    def constrained(q: Array, v: Array, tau: Array) -> Array:
        return pin.constraintDynamics(model, data, q, v, tau, models, datas, settings)

    def constrained_jacobians(q: Array, v: Array, tau: Array,
                              ) -> tuple[Array, Array, Array, Array]:
        ddq = pin.constraintDynamics(model, data, q, v, tau, models, datas, settings)
        dq, dv, dtau, *_ = pin.computeConstraintDynamicsDerivatives(model, data, models,
                                                                     datas, settings)
        return ddq, dq, dv, dtau

    return PinocchioRunner(
        constrained, constrained_jacobians, "constraintDynamics",
        "constraintDynamics + computeConstraintDynamicsDerivatives",
        {"nq": model.nq, "constraint": "RigidConstraintModel CONTACT_3D (LOCAL), rocker tip to "
         "ground (point 3)", "proximal_settings": {"accuracy": accuracy, "mu": mu,
                                          "max_iter": max_iter}},
        lambda: int(settings.iter))


# -- symbolic q̈ of a serial chain (SymForce and CasADi) ---------------------------------------
@dataclass
class Symbolic:
    """The few operations the derivation needs, in one tool's symbolic types."""

    sin: Callable[[Any], Any]
    cos: Callable[[Any], Any]
    diff: Callable[[Any, Any], Any]  # d expression / d symbol


def serial_chain_qdd(linkage: SerialLinkage, q: Sequence[Any], qd: Sequence[Any],
                     tau: Sequence[Any], ops: Symbolic) -> list[Any]:
    """q̈ = M⁻¹ (τ - Σ m Jcᵀ (J̇c q̇) + Σ m Jcᵀ g) in relative joint angles, symbolically.

    Jc: Jacobian of each centre of mass; the bar angles are sums of joint angles, so their
    Jacobian is constant and contributes no velocity-product term. M is solved by
    Gaussian elimination without pivoting (it is symmetric positive definite).
    """
    if linkage.closed:
        raise ValueError("only open chains are derived symbolically")
    n = linkage.dof
    gx, gy = linkage.gravity
    mass = [[0 for _ in range(n)] for _ in range(n)]
    rhs = list(tau)
    corner_x, corner_y = linkage.base
    phi: Any = 0
    for k, bar in enumerate(linkage.bars):
        phi = phi + q[k]
        c, s = ops.cos(phi), ops.sin(phi)
        cog = (corner_x + bar.cog[0] * c - bar.cog[1] * s,
               corner_y + bar.cog[0] * s + bar.cog[1] * c)
        jac = [[ops.diff(coord, q[j]) for j in range(n)] for coord in cog]
        vel = [sum(jac[a][j] * qd[j] for j in range(n)) for a in range(2)]
        acc_bias = [sum(ops.diff(vel[a], q[j]) * qd[j] for j in range(n)) for a in range(2)]
        for i in range(n):
            rhs[i] = rhs[i] - bar.mass * (jac[0][i] * (acc_bias[0] - gx)
                                          + jac[1][i] * (acc_bias[1] - gy))
            for j in range(n):
                mass[i][j] = mass[i][j] + bar.mass * (jac[0][i] * jac[0][j]
                                                      + jac[1][i] * jac[1][j])
                if i <= k and j <= k:  # bar angle = q0 + ... + qk
                    mass[i][j] = mass[i][j] + bar.i_cog
        corner_x, corner_y = corner_x + bar.length * c, corner_y + bar.length * s
    # forward elimination, then back substitution
    for col in range(n):
        for row in range(col + 1, n):
            factor = mass[row][col] / mass[col][col]
            for j in range(col + 1, n):
                mass[row][j] = mass[row][j] - factor * mass[col][j]
            rhs[row] = rhs[row] - factor * rhs[col]
    out: list[Any] = [0] * n
    for row in reversed(range(n)):
        acc = rhs[row]
        for j in range(row + 1, n):
            acc = acc - mass[row][j] * out[j]
        out[row] = acc / mass[row][row]
    return out


@dataclass
class CompiledPeer:
    """A peer's generated code, compiled, with batched C entry points and a Python call."""

    qdd_batch: Callable[[Array, Array, Array], Array]
    jacobians_batch: Callable[[Array, Array, Array], tuple[Array, Array, Array, Array]]
    python_qdd: Callable[[Array, Array, Array], Any]
    info: dict[str, Any]


def _compiler(kind: str) -> str:
    name = os.environ.get("CXX" if kind == "c++" else "CC", "g++" if kind == "c++" else "cc")
    if shutil.which(name) is None:
        raise RuntimeError(f"no {kind} compiler ({name}) on PATH")
    return name


def _compile(command: list[str], cwd: Path) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")


def _batched(lib: Any, ffi: Any, n: int) -> tuple[Callable[..., Array], Callable[..., Any]]:
    """NumPy wrappers around ``<prefix>_qdd_batch`` / ``<prefix>_jacobians_batch``."""

    def ptr(a: Array) -> Any:
        return ffi.cast("double *", a.ctypes.data)

    def qdd_batch(q: Array, qd: Array, tau: Array, out: Array | None = None) -> Array:
        out = np.empty_like(q) if out is None else out
        lib.qdd_batch(q.shape[0], ptr(q), ptr(qd), ptr(tau), ptr(out))
        return out

    def jacobians_batch(q: Array, qd: Array, tau: Array,
                        out: tuple[Array, ...] | None = None) -> tuple[Array, ...]:
        """(q̈, ∂q̈/∂q, ∂q̈/∂q̇, ∂q̈/∂τ), into ``out`` when given (shapes (N, n), 3 × (N, n, n))."""
        if out is None:
            shape = (q.shape[0], n, n)
            out = (np.empty_like(q), np.empty(shape), np.empty(shape), np.empty(shape))
        lib.jacobians_batch(q.shape[0], ptr(q), ptr(qd), ptr(tau), *(ptr(a) for a in out))
        return out

    return qdd_batch, jacobians_batch


BATCH_CDEF = """
void qdd_batch(long count, const double *q, const double *qd, const double *tau, double *qdd);
void jacobians_batch(long count, const double *q, const double *qd, const double *tau,
                     double *qdd, double *dq, double *dqd, double *dtau);
"""


def _dlopen(library: Path) -> tuple[Any, Any]:
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(BATCH_CDEF)
    return ffi.dlopen(str(library)), ffi


def eigen_include() -> Path | None:
    """Eigen headers for SymForce's generated C++: CasADi's wheel ships them, or the system."""
    candidates = []
    spec = importlib.util.find_spec("casadi")
    if spec is not None and spec.origin is not None:
        candidates.append(Path(spec.origin).parent / "include" / "eigen3")
    candidates += [Path("/usr/include/eigen3"), Path("/usr/local/include/eigen3")]
    return next((c for c in candidates if (c / "Eigen" / "Core").is_file()), None)


def symforce_build(linkage: SerialLinkage, workdir: Path) -> CompiledPeer:
    """q̈ and (q̈, ∂q̈/∂q, ∂q̈/∂q̇, ∂q̈/∂τ) with SymForce → C++ (Eigen) and → Python."""
    import symforce

    with contextlib.suppress(Exception):  # refused once symforce.symbolic is imported
        symforce.set_epsilon_to_number()  # no ε in this model; silences SymForce's warning
    import symforce.symbolic as sf
    from symforce import codegen
    from symforce.values import Values

    eigen = eigen_include()
    if eigen is None:
        raise RuntimeError("no Eigen headers (install casadi, or apt-get install libeigen3-dev)")
    n = linkage.dof
    q = sf.Matrix([sf.Symbol(f"q{i}") for i in range(n)])
    qd = sf.Matrix([sf.Symbol(f"qd{i}") for i in range(n)])
    tau = sf.Matrix([sf.Symbol(f"tau{i}") for i in range(n)])
    ops = Symbolic(sf.sin, sf.cos, lambda e, v: sf.sympify(e).diff(v))
    qdd = sf.Matrix(serial_chain_qdd(linkage, list(q), list(qd), list(tau), ops))
    inputs = Values(q=q, qd=qd, tau=tau)
    plain = Values(qdd=qdd)
    with_jacobians = Values(qdd=qdd, qdd_q=qdd.jacobian(q), qdd_qd=qdd.jacobian(qd),
                            qdd_tau=qdd.jacobian(tau))
    cpp_dir, py_dir = workdir / "symforce_cpp", workdir / "symforce_py"
    for name, outputs in (("peer_qdd", plain), ("peer_qdd_jacobians", with_jacobians)):
        codegen.Codegen(inputs=inputs, outputs=outputs, config=codegen.CppConfig(), name=name,
                        return_key="qdd").generate_function(output_dir=cpp_dir,
                                                            skip_directory_nesting=True)
    codegen.Codegen(inputs=inputs, outputs=plain, config=codegen.PythonConfig(),
                    name="peer_qdd", return_key="qdd").generate_function(
                        output_dir=py_dir, skip_directory_nesting=True)
    wrapper = cpp_dir / "batch.cpp"
    wrapper.write_text(f"""// Batch loops over SymForce's generated functions (benchmarks/peers.py).
#include <Eigen/Core>
#include "peer_qdd.h"
#include "peer_qdd_jacobians.h"
constexpr int N = {n};
using Vec = Eigen::Matrix<double, N, 1>;
using Mat = Eigen::Matrix<double, N, N>;
using RowMat = Eigen::Matrix<double, N, N, Eigen::RowMajor>;
extern "C" {{
void qdd_batch(long count, const double *q, const double *qd, const double *tau, double *qdd) {{
  for (long k = 0; k < count; ++k) {{
    Eigen::Map<Vec>(qdd + k * N) = sym::PeerQdd<double>(
        Eigen::Map<const Vec>(q + k * N), Eigen::Map<const Vec>(qd + k * N),
        Eigen::Map<const Vec>(tau + k * N));
  }}
}}
void jacobians_batch(long count, const double *q, const double *qd, const double *tau,
                     double *qdd, double *dq, double *dqd, double *dtau) {{
  Mat jq, jqd, jtau;
  for (long k = 0; k < count; ++k) {{
    Eigen::Map<Vec>(qdd + k * N) = sym::PeerQddJacobians<double>(
        Eigen::Map<const Vec>(q + k * N), Eigen::Map<const Vec>(qd + k * N),
        Eigen::Map<const Vec>(tau + k * N), &jq, &jqd, &jtau);
    Eigen::Map<RowMat>(dq + k * N * N) = jq;
    Eigen::Map<RowMat>(dqd + k * N * N) = jqd;
    Eigen::Map<RowMat>(dtau + k * N * N) = jtau;
  }}
}}
}}
""")
    library = cpp_dir / "libpeer_symforce.so"
    command = [_compiler("c++"), OPT, "-std=c++17", "-fPIC", "-shared", "-DNDEBUG",
               f"-I{eigen}", f"-I{cpp_dir}", "-o", str(library), str(wrapper)]
    _compile(command, cpp_dir)
    lib, ffi = _dlopen(library)
    qdd_batch, jacobians_batch = _batched(lib, ffi, n)
    spec = importlib.util.spec_from_file_location("peer_symforce_qdd", py_dir / "peer_qdd.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    keep = (lib, ffi)  # the library must outlive the wrappers

    def python_qdd(q1: Array, qd1: Array, tau1: Array, _keep: Any = keep) -> Any:
        return module.peer_qdd(q1, qd1, tau1)

    ops_count = {}
    for name in ("peer_qdd", "peer_qdd_jacobians"):
        match = re.search(r"Total ops: (\d+)", (cpp_dir / f"{name}.h").read_text())
        ops_count[name] = int(match.group(1)) if match else None
    return CompiledPeer(qdd_batch, jacobians_batch, python_qdd,
                        {"version": symforce.__version__, "compile": " ".join(command[:6]),
                         "operations (SymForce's count)": ops_count,
                         "eigen": str(eigen), "python": "generated Python function "
                         "(codegen.PythonConfig), NumPy in/out"})


def casadi_build(linkage: SerialLinkage, workdir: Path) -> CompiledPeer:
    """q̈ and (q̈, ∂q̈/∂q, ∂q̈/∂q̇, ∂q̈/∂τ) with CasADi SX → C (CodeGenerator)."""
    import casadi as ca

    n = linkage.dof
    q = [ca.SX.sym(f"q{i}") for i in range(n)]
    qd = [ca.SX.sym(f"qd{i}") for i in range(n)]
    tau = [ca.SX.sym(f"tau{i}") for i in range(n)]
    ops = Symbolic(ca.sin, ca.cos, ca.jacobian)
    qdd = ca.vertcat(*serial_chain_qdd(linkage, q, qd, tau, ops))
    Q, QD, TAU = ca.vertcat(*q), ca.vertcat(*qd), ca.vertcat(*tau)
    # CasADi stores matrices column-major: J.T column-major is J row-major, like mbgen's.
    plain = ca.Function("peer_qdd", [Q, QD, TAU], [qdd])
    jacobians = ca.Function("peer_qdd_jacobians", [Q, QD, TAU],
                            [qdd] + [ca.densify(ca.jacobian(qdd, x).T) for x in (Q, QD, TAU)])
    out = workdir / "casadi_c"
    out.mkdir(parents=True, exist_ok=True)
    generator = ca.CodeGenerator("peer_casadi.c", {"with_header": True})
    generator.add(plain)
    generator.add(jacobians)
    generator.generate(f"{out}/")

    def buffers(f: Any, tag: str) -> str:
        return (f"static casadi_real w_{tag}[{max(f.sz_w(), 1)}];\n"
                f"static casadi_int iw_{tag}[{max(f.sz_iw(), 1)}];\n"
                f"#define ARG_{tag} {max(f.sz_arg(), 3)}\n#define RES_{tag} {max(f.sz_res(), 4)}\n")

    wrapper = out / "batch.c"
    wrapper.write_text(f"""/* Batch loops over CasADi's generated code (benchmarks/peers.py). */
#include "peer_casadi.h"
#define N {n}
{buffers(plain, "plain")}{buffers(jacobians, "jac")}
void qdd_batch(long count, const double *q, const double *qd, const double *tau, double *qdd) {{
  const casadi_real *arg[ARG_plain] = {{0}};
  casadi_real *res[RES_plain] = {{0}};
  for (long k = 0; k < count; ++k) {{
    arg[0] = q + k * N; arg[1] = qd + k * N; arg[2] = tau + k * N;
    res[0] = qdd + k * N;
    peer_qdd(arg, res, iw_plain, w_plain, 0);
  }}
}}
void jacobians_batch(long count, const double *q, const double *qd, const double *tau,
                     double *qdd, double *dq, double *dqd, double *dtau) {{
  const casadi_real *arg[ARG_jac] = {{0}};
  casadi_real *res[RES_jac] = {{0}};
  for (long k = 0; k < count; ++k) {{
    arg[0] = q + k * N; arg[1] = qd + k * N; arg[2] = tau + k * N;
    res[0] = qdd + k * N; res[1] = dq + k * N * N; res[2] = dqd + k * N * N;
    res[3] = dtau + k * N * N;
    peer_qdd_jacobians(arg, res, iw_jac, w_jac, 0);
  }}
}}
""")
    library = out / "libpeer_casadi.so"
    command = [_compiler("c"), OPT, "-fPIC", "-shared", "-o", str(library), str(wrapper),
               str(out / "peer_casadi.c"), "-lm"]
    _compile(command, out)
    lib, ffi = _dlopen(library)
    qdd_batch, jacobians_batch = _batched(lib, ffi, n)
    keep = (lib, ffi)

    def python_qdd(q1: Array, qd1: Array, tau1: Array, _keep: Any = keep) -> Any:
        return plain(q1, qd1, tau1)

    return CompiledPeer(qdd_batch, jacobians_batch, python_qdd,
                        {"version": ca.__version__, "compile": " ".join(command[:4]),
                         "instructions (CasADi's count)": {
                             "peer_qdd": plain.n_instructions(),
                             "peer_qdd_jacobians": jacobians.n_instructions()},
                         "python": "casadi.Function call from Python (NumPy in, DM out)"})

"""Inverse dynamics of the SPOOK stepper: the impulses that take one state to the next.

SPOOK (Lacoursière) advances (q, v) by one step h with regularized constraints and the
dry friction as a bounded impulse:

    M v⁺ + Aᵀ μ = M v + h f + Σ_j d_j e_j,      μ = Σ⁻¹ (A v⁺ + (4/h) Υ Φ − Υ A v),
    q⁺ = q + h v⁺,                               d_j = −h c_j sat(v⁺_j / s_j),

with M, A = Φq (active rows), Φ, f = Q + inputs (without the smoothed dry friction the
continuous model carries) all at (q, v), Σ = 4 ε Υ / h², Υ = 1 / (1 + 4 τ / h), and
d_j the friction impulse on coordinate j (bound c_j, stiction rate s_j: the exact
solution of the box complementarity condition). Read backwards, for any pair of states
it gives the residual impulses of Marklund, Servin and Larson (eqs. 3.6, 3.7):

    r_u = M (v⁺ − v) + Aᵀ μ − h f − Σ_j d_j e_j          (velocity impulse)
    r_q = M_Σ ((q⁺ − q) / h − v⁺),  M_Σ = M + Aᵀ Σ⁻¹ A    (position impulse)

Both vanish on a SPOOK trajectory. :class:`MidpointImpulses` reads the implicit midpoint
rule on the same regularized model the same way (second order where SPOOK is first
order): what identification uses by default. The Jacobians with respect to both states
and the parameters come from the compiler's closed-form kernels (no finite differences),
for all steps in one batched call per kernel. Setting the residuals to zero and
differentiating gives the step's own derivatives (:func:`step_sensitivity`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbgen.numerics.batched import matrix_vector, transposed_product, transposed_vector
from mbgen.runtime.compiled import CompiledMechanism

Array = np.ndarray


@dataclass(frozen=True)
class StepImpulses:
    """Residual impulses of K steps and their Jacobians.

    ``ru``, ``rq`` (K, n); ``ru_q0``, ``ru_q1``, ``ru_v0``, ``ru_v1``, ``rq_q0``, ``rq_q1``,
    ``rq_v0``, ``rq_v1`` (K, n, n): derivatives with respect to the step's first (0) and
    second (1) state (``ru_q1``, ``rq_v0`` are None where the scheme has no such term);
    ``ru_p``, ``rq_p`` (K, n, parameters): with respect to every parameter (None when
    Jacobians were not asked for). ``sticking`` (K, friction elements): whether the
    friction impulse is inside its bound (stick) rather than at it (slip).
    """

    ru: Array
    rq: Array
    sticking: Array
    ru_q0: Array | None = None
    ru_v0: Array | None = None
    ru_v1: Array | None = None
    ru_p: Array | None = None
    rq_q0: Array | None = None
    rq_q1: Array | None = None
    rq_v1: Array | None = None
    rq_p: Array | None = None
    ru_q1: Array | None = None
    rq_v0: Array | None = None


class ImpulseModel:
    """What every step scheme read as inverse dynamics shares: the step h, the constraint
    regularization, the friction elements and the actuators of one mechanism.

    ``compliance`` ε and ``damping`` τ: scalars or one per active constraint row (as in
    ``integrate_spook``; τ defaults to 2 h). ``phase``: where in the step the scheme
    evaluates masses, forces and the actuators' commands (0 at its start, 0.5 at its
    middle).
    """

    phase = 0.0

    def __init__(self, mech: CompiledMechanism, h: float, compliance: float | Array = 1e-8,
                 damping: float | Array | None = None) -> None:
        if not (h > 0 and np.isfinite(h)):
            raise ValueError(f"the step must be positive and finite, got {h}")
        self.mech = mech
        self.h = float(h)
        self.rows = np.asarray(mech.active_rows)
        r = len(self.rows)
        eps = np.broadcast_to(np.asarray(compliance, dtype=float), r)
        tau = np.broadcast_to(np.asarray(2 * h if damping is None else damping, dtype=float), r)
        if np.any(~(eps > 0)) or np.any(~np.isfinite(eps)):
            raise ValueError("identification needs a positive, finite compliance on every "
                             f"constraint, got {compliance!r}")
        if np.any(~(tau >= 0)) or np.any(~np.isfinite(tau)):
            raise ValueError(f"damping must be finite and non-negative, got {damping!r}")
        self.compliance, self.damping = eps, tau
        self.upsilon = 1.0 / (1.0 + 4.0 * tau / h)
        self.sigma = 4.0 * eps * self.upsilon / h**2
        friction = mech.meta.get("friction", [])
        self.friction_index = np.array([mech.coordinate_index(f["coordinate"])
                                        for f in friction], dtype=int)
        self.stiction = np.array([f["stiction"] for f in friction], dtype=float)
        self.actuator_index = np.array([mech.coordinate_index(a["coordinate"])
                                        for a in mech.meta.get("actuators", [])], dtype=int)

    @property
    def actuators(self) -> int:
        return len(self.actuator_index)

    def input_forces(self, commands: Array | None, params: Array) -> Array:
        """Generalized forces gain·u of the actuators, (K, n) for commands (K, actuators)."""
        return self.input_forces_p(commands, params)[0]

    def input_forces_p(self, commands: Array | None, params: Array) -> tuple[Array, Array]:
        """The forces of :meth:`input_forces` and their parameter derivatives
        (K, n, parameters)."""
        return self._inputs(commands, params, len(commands) if commands is not None else 0)

    def evaluate(self, q: Array, v: Array, params: Array, commands: Array | None = None,
                 jacobians: bool = True) -> StepImpulses:
        """Residual impulses of the K steps between the K + 1 states q, v (K + 1, n);
        ``commands`` (K, actuators): each actuator's command u at ``phase`` of
        each step."""
        raise NotImplementedError

    def _inputs(self, commands: Array | None, params: Array, steps: int
                ) -> tuple[Array, Array]:
        """(forces (K, n), their parameter derivatives (K, n, parameters))."""
        n, nf = self.mech.n, len(self.friction_index)
        forces = np.zeros((steps, n))
        forces_p = np.zeros((steps, n, len(params)))
        if commands is None or not self.actuators:
            return forces, forces_p
        gains = self.mech.coefficients(params)[nf:]
        gains_p = self.mech.coefficients_p(params)[nf:]
        for a, coordinate in enumerate(self.actuator_index):
            forces[:, coordinate] += gains[a] * commands[:, a]
            forces_p[:, coordinate, :] += commands[:, a, None] * gains_p[a]
        return forces, forces_p

    def _position_impulse(self, q: Array, d: Array, p: Array, mass: Array, jac: Array,
                          jacobians: bool) -> tuple[Array, Array, Array | None, Array | None]:
        """M_Σ(q) d, M_Σ, and the derivatives of M_Σ(q) d in q (d held) and in p; q, d
        (K, n); ``mass`` M(q) (K, n, n) and ``jac`` A(q) (K, active rows, n), which the
        caller has already evaluated."""
        mech, rows = self.mech, self.rows
        ja_s = jac / self.sigma[None, :, None]  # Σ⁻¹ A
        mass_sigma = mass + transposed_product(jac, ja_s)
        rq = matrix_vector(mass_sigma, d)
        if not jacobians:
            return rq, mass_sigma, None, None
        lam_d = np.zeros((len(q), mech.m))
        lam_d[:, rows] = matrix_vector(jac, d) / self.sigma
        rq_q = (mech.mass_v_q(q, d, p) + mech.phiqT_lam_q(q, lam_d, p)
                + transposed_product(ja_s, mech.dense("phiq_v_q", p, q=q, v=d)[:, rows]))
        rq_p = (mech.dense("mass_v_p", p, q=q, v=d) + mech.dense("phiqT_lam_p", p, q=q, lam=lam_d)
                + transposed_product(ja_s, mech.dense("phiq_v_p", p, q=q, v=d)[:, rows]))
        return rq, mass_sigma, rq_q, rq_p


class SpookImpulses(ImpulseModel):
    """The SPOOK step of one mechanism, read as inverse dynamics (see the module doc):
    first order in h, the paper's residuals."""

    def evaluate(self, q: Array, v: Array, params: Array, commands: Array | None = None,
                 jacobians: bool = True) -> StepImpulses:
        """Residual impulses of the K steps between the K + 1 states q, v (K + 1, n);
        ``commands`` (K, actuators): each actuator's command u during each step."""
        mech, h, rows = self.mech, self.h, self.rows
        q, v = np.asarray(q, dtype=float), np.asarray(v, dtype=float)
        p = np.asarray(params, dtype=float)
        q0, v0, q1, v1 = q[:-1], v[:-1], q[1:], v[1:]
        steps, n = q0.shape
        inputs, inputs_p = self._inputs(commands, p, steps)
        ups, sig = self.upsilon, self.sigma

        mass = mech.mass_matrix(q0, p)
        jac = mech.phi_q(q0, p)[:, rows]
        phi = mech.phi(q0, p)[:, rows]
        forces = mech.generalized_forces(q0, v0, p)
        coef = mech.coefficients(p)
        nf = len(self.friction_index)
        bound, rate0 = coef[:nf], v0[:, self.friction_index]
        smooth = np.tanh(rate0 / self.stiction)
        forces[:, self.friction_index] += bound * smooth  # remove −c tanh(v/s)
        forces += inputs
        dv = v1 - v0
        mu = (matrix_vector(jac, v1) + (4.0 / h) * ups * phi
              - ups * matrix_vector(jac, v0)) / sig
        ratio = v1[:, self.friction_index] / self.stiction
        sticking = np.abs(ratio) < 1.0
        impulse = -h * bound * np.clip(ratio, -1.0, 1.0)
        ru = matrix_vector(mass, dv) + transposed_vector(jac, mu) - h * forces
        ru[:, self.friction_index] -= impulse
        rq, mass_sigma, rq_q, rq_p = self._position_impulse(q0, (q1 - q0) / h - v1, p, mass,
                                                            jac, jacobians)
        if not jacobians:
            return StepImpulses(ru, rq, sticking)
        assert rq_q is not None  # asked for with the Jacobians

        eye = np.eye(n)
        lam_full = np.zeros((steps, mech.m))
        lam_full[:, rows] = mu
        tensor = mech.dense("phiq_v_q", p, q=q0, v=v1)[:, rows] - ups[:, None] * mech.dense(
            "phiq_v_q", p, q=q0, v=v0)[:, rows] + (4.0 / h) * ups[:, None] * jac
        ru_q0 = (mech.mass_v_q(q0, dv, p) + mech.phiqT_lam_q(q0, lam_full, p)
                 + transposed_product(jac, tensor / sig[:, None])
                 - h * mech.generalized_forces_q(q0, v0, p))
        friction_slope = np.zeros((steps, n))
        friction_slope[:, self.friction_index] = bound / self.stiction * (1.0 - smooth**2)
        ja_s = jac / sig[None, :, None]  # Σ⁻¹ A
        ru_v0 = (-mass - transposed_product(jac, ups[None, :, None] * ja_s)
                 - h * (mech.generalized_forces_qd(q0, v0, p) + friction_slope[:, :, None] * eye))
        stick_slope = np.zeros((steps, n))
        stick_slope[:, self.friction_index] = h * bound / self.stiction * sticking
        ru_v1 = mass_sigma + stick_slope[:, :, None] * eye

        def kernel_p(name: str, **inputs: Array) -> Array:
            return mech.dense(name, p, **inputs)

        coef_p = mech.coefficients_p(p)[:nf]
        forces_p = kernel_p("forces_p", q=q0, qd=v0)
        forces_p[:, self.friction_index, :] += smooth[:, :, None] * coef_p[None]
        forces_p += inputs_p
        tensor_p = (kernel_p("phiq_v_p", q=q0, v=v1)[:, rows]
                    - ups[:, None] * kernel_p("phiq_v_p", q=q0, v=v0)[:, rows]
                    + (4.0 / h) * ups[:, None] * kernel_p("phi_p", q=q0)[:, rows])
        ru_p = (kernel_p("mass_v_p", q=q0, v=dv) + kernel_p("phiqT_lam_p", q=q0, lam=lam_full)
                + transposed_product(ja_s, tensor_p) - h * forces_p)
        ru_p[:, self.friction_index, :] += h * np.clip(ratio, -1.0, 1.0)[:, :, None] * coef_p
        return StepImpulses(ru, rq, sticking, ru_q0, ru_v0, ru_v1, ru_p, rq_q - mass_sigma / h,
                            mass_sigma / h, -mass_sigma, rq_p)


class MidpointImpulses(ImpulseModel):
    """The implicit midpoint rule on the regularized equations of motion, read as inverse
    dynamics: second order in h where SPOOK is first order (see the module doc).

    Identification only evaluates residuals between given states, so an implicit scheme
    costs no more than an explicit one, and data from a continuous system then meet a
    model whose error per step is O(h³) rather than O(h²) (on the exact motion of the
    double pendulum at 100 Hz its residuals are about 100 times smaller than SPOOK's).
    """

    phase = 0.5

    def __init__(self, mech: CompiledMechanism, h: float, compliance: float | Array = 1e-8,
                 damping: float | Array | None = None, friction: str = "smooth") -> None:
        """``friction``: dry friction as the continuous model's −c tanh(v̄/s) ("smooth",
        what RK4 and the other continuous integrators simulate; residuals without kinks)
        or as the box impulse −h c sat(v̄/s) of the SPOOK stepper ("box")."""
        super().__init__(mech, h, compliance, damping)
        if friction not in ("smooth", "box"):
            raise ValueError(f"friction must be 'smooth' or 'box', got {friction!r}")
        self.box = friction == "box"

    def evaluate(self, q: Array, v: Array, params: Array, commands: Array | None = None,
                 jacobians: bool = True) -> StepImpulses:
        mech, h, rows = self.mech, self.h, self.rows
        q, v = np.asarray(q, dtype=float), np.asarray(v, dtype=float)
        p = np.asarray(params, dtype=float)
        qm, vm = 0.5 * (q[:-1] + q[1:]), 0.5 * (v[:-1] + v[1:])
        dv = v[1:] - v[:-1]
        steps, n = qm.shape
        inputs, inputs_p = self._inputs(commands, p, steps)
        eps, tau = self.compliance, self.damping
        # the box replaces the continuous model's −c tanh(v̄/s) on the friction coordinates
        fi = self.friction_index if self.box else self.friction_index[:0]
        stiction = self.stiction[:len(fi)]

        mass = mech.mass_matrix(qm, p)
        jac = mech.phi_q(qm, p)[:, rows]
        lam = (mech.phi(qm, p)[:, rows] + tau * matrix_vector(jac, vm)) / eps
        forces = mech.generalized_forces(qm, vm, p)
        bound = mech.coefficients(p)[:len(fi)]
        smooth = np.tanh(vm[:, fi] / stiction)
        forces[:, fi] += bound * smooth
        forces += inputs
        ratio = vm[:, fi] / stiction
        sticking = np.abs(vm[:, self.friction_index] / self.stiction) < 1.0
        ru = (matrix_vector(mass, dv) + h * transposed_vector(jac, lam)
              - h * forces)
        ru[:, fi] += h * bound * np.clip(ratio, -1.0, 1.0)
        rq, mass_sigma, rq_q, rq_p = self._position_impulse(
            qm, (q[1:] - q[:-1]) / h - vm, p, mass, jac, jacobians)
        if not jacobians:
            return StepImpulses(ru, rq, sticking)
        assert rq_q is not None  # asked for with the Jacobians

        lam_full = np.zeros((steps, mech.m))
        lam_full[:, rows] = lam
        lam_q = (jac + tau[:, None] * mech.dense("phiq_v_q", p, q=qm, v=vm)[:, rows]) / eps[:, None]
        g_q = (mech.mass_v_q(qm, dv, p) + h * mech.phiqT_lam_q(qm, lam_full, p)
               + h * transposed_product(jac, lam_q)
               - h * mech.generalized_forces_q(qm, vm, p))
        slope = np.zeros((steps, n))
        slope[:, fi] = bound / stiction * ((np.abs(ratio) < 1.0) - (1.0 - smooth**2))
        g_v = (h * transposed_product(jac, (tau / eps)[None, :, None] * jac)
               - h * mech.generalized_forces_qd(qm, vm, p) + h * slope[:, :, None] * np.eye(n))
        lam_p = (mech.dense("phi_p", p, q=qm)[:, rows]
                 + tau[:, None] * mech.dense("phiq_v_p", p, q=qm, v=vm)[:, rows]) / eps[:, None]
        coef_p = mech.coefficients_p(p)[:len(fi)]
        forces_p = mech.dense("forces_p", p, q=qm, qd=vm)
        forces_p[:, fi, :] += smooth[:, :, None] * coef_p[None]
        forces_p += inputs_p
        ru_p = (mech.dense("mass_v_p", p, q=qm, v=dv)
                + h * mech.dense("phiqT_lam_p", p, q=qm, lam=lam_full)
                + h * transposed_product(jac, lam_p) - h * forces_p)
        ru_p[:, fi, :] += h * np.clip(ratio, -1.0, 1.0)[:, :, None] * coef_p
        return StepImpulses(ru, rq, sticking,
                            ru_q0=0.5 * g_q, ru_q1=0.5 * g_q,
                            ru_v0=0.5 * g_v - mass, ru_v1=0.5 * g_v + mass, ru_p=ru_p,
                            rq_q0=0.5 * rq_q - mass_sigma / h, rq_q1=0.5 * rq_q + mass_sigma / h,
                            rq_v0=-0.5 * mass_sigma, rq_v1=-0.5 * mass_sigma, rq_p=rq_p)


def step_sensitivity(impulses: StepImpulses) -> tuple[Array, Array]:
    """Derivatives of the step (q⁺, v⁺) of either scheme with respect to (q, v) and the
    parameters, by implicit differentiation of r_u = r_q = 0: ((K, 2n, 2n),
    (K, 2n, parameters))."""
    assert impulses.ru_q0 is not None  # Jacobians were evaluated
    zero = np.zeros_like(impulses.ru_q0)
    ru_q1 = zero if impulses.ru_q1 is None else impulses.ru_q1
    rq_v0 = zero if impulses.rq_v0 is None else impulses.rq_v0
    wrt_next = np.block([[ru_q1, impulses.ru_v1], [impulses.rq_q1, impulses.rq_v1]])
    wrt_state = np.block([[impulses.ru_q0, impulses.ru_v0], [impulses.rq_q0, rq_v0]])
    wrt_params = np.concatenate([impulses.ru_p, impulses.rq_p], axis=1)
    return (-np.linalg.solve(wrt_next, wrt_state), -np.linalg.solve(wrt_next, wrt_params))

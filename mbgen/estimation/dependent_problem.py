"""Identification in dependent coordinates (Marklund, Servin and Larson): the unknowns are
(q_k, v_k) of every coordinate at every step k = 0..K of the SPOOK grid and the chosen
parameters θ. Residuals, each divided by its standard deviation (the weights), in the
groups of :class:`~mbgen.estimation.problem_layout.ResidualGroups`:

- per step, the velocity and position impulses of :mod:`mbgen.estimation.impulses` that
  SPOOK would need to go from state k to k + 1 (``impulse_noise``);
- per reading, sensor model minus reading (the sensors' ``noise`` from the file);
- at k = 0, the constraint violation Φ(q0) and normal velocity Φq v0
  (``constraint_noise``): the paper's initial-state residual;
- per parameter with a prior (a weighed mass, a datasheet value): (θ − mean) / std.

The Jacobian is sparse (banded in the states, a dense border for θ) and exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from mbgen.estimation.identification_inputs import (
    SCHEMES,
    IdentificationError,
    Recording,
    Settings,
)
from mbgen.estimation.impulses import MidpointImpulses, SpookImpulses
from mbgen.estimation.problem_layout import ProblemLayout, ResidualGroups
from mbgen.numerics.batched import matrix_vector, transposed_vector
from mbgen.numerics.least_squares import BlockJacobian, RowBlocks
from mbgen.runtime.compiled import CompiledMechanism

Array = np.ndarray


class DependentProblem(ProblemLayout):
    """Residuals and sparse Jacobian of one identification problem in the dependent
    coordinates (q, v) of every state."""

    def __init__(self, mech: CompiledMechanism, recording: Recording, names: Sequence[str],
                 settings: Settings, priors: Mapping[str, tuple[float, float]]) -> None:
        super().__init__(mech, recording, names, settings, priors)
        if settings.scheme not in SCHEMES:
            raise IdentificationError(f"unknown scheme {settings.scheme!r} (one of: "
                                      f"{', '.join(SCHEMES)})")
        if settings.friction not in ("smooth", "box"):
            raise IdentificationError(f"unknown friction model {settings.friction!r} (one "
                                      "of: smooth, box)")
        self.impulses: MidpointImpulses | SpookImpulses
        if settings.scheme == "midpoint":
            self.impulses = MidpointImpulses(mech, self.h, settings.compliance,
                                             settings.damping, settings.friction)
        else:
            self.impulses = SpookImpulses(mech, self.h, settings.compliance, settings.damping)
        self.commands = self.commands_between(recording, self.impulses.phase)
        self.inertia = float(np.trace(mech.mass_matrix(mech.q0, self.base)))
        self.state_size = 2 * mech.n * (self.steps + 1)
        self.size = self.state_size + len(names)

    # -- layout -----------------------------------------------------------------------------
    def split(self, x: Array) -> tuple[Array, Array, Array]:
        n = self.mech.n
        states = x[:self.state_size].reshape(self.steps + 1, 2 * n)
        return states[:, :n], states[:, n:], self.parameters(x)

    def pack(self, q: Array, v: Array, theta: Array) -> Array:
        return np.concatenate([np.hstack([q, v]).ravel(), theta])

    def inertia_scale(self, p: Array) -> tuple[Array, Array]:
        """The model's inertia relative to the file's, tr M(q0; θ) / tr M(q0; θ_file), and
        its gradient (selected parameters,). The impulse noise is stated at the file's
        parameters and scales with this: an impulse residual in absolute units would be
        lowered by shrinking every inertia, friction and gain together (a direction the
        data cannot see), a pull towards a smaller model that grows with the dynamics'
        weight (the least-squares stand-in for the likelihood's log-determinant)."""
        q0 = self.mech.q0
        scale = np.trace(self.mech.mass_matrix(q0, p)) / self.inertia
        gradient = np.trace(self.mech.mass_p(q0, p)) / self.inertia
        return scale, gradient[self.selected]

    # -- residuals -----------------------------------------------------------------------
    def __call__(self, x: Array, jacobian: bool) -> tuple[Array, BlockJacobian | None]:
        mech, s = self.mech, self.settings
        q, v, p = self.split(x)
        n, steps, rows = mech.n, self.steps, self.impulses.rows
        # white process noise: a substep's impulses are 1/√substeps of a sample period's
        scale, scale_p = self.inertia_scale(p)
        if not scale > 0.0:  # a trial point without inertia: refused
            return np.full(self.size, np.nan), None
        w_dyn = np.sqrt(s.substeps) / (s.impulse_noise * scale)
        w_con = 1.0 / s.constraint_noise
        out = self.impulses.evaluate(q, v, p, self.commands, jacobian)
        model, hq, hv, hp = self.readings(q, v, p, jacobian)
        w_obs = self.sensor_weight[self.obs_sensor]
        obs = (model - self.obs_value) * w_obs
        jac0 = mech.phi_q(q[0], p)[rows]
        initial = np.concatenate([mech.phi(q[0], p)[rows], jac0 @ v[0]]) * w_con
        theta = x[self.state_size:]
        prior = (theta[self.prior_index] - self.prior_mean) * self.prior_weight
        impulses = np.hstack([out.ru, out.rq])  # (steps, rows)
        residual = np.concatenate([impulses.ravel() * w_dyn, obs, initial, prior])
        if not jacobian:
            return residual, None

        sel = self.selected
        zero = np.zeros((steps, n, n))
        ru_q1 = zero if out.ru_q1 is None else out.ru_q1
        rq_v0 = zero if out.rq_v0 is None else out.rq_v0
        # per step: rows (r_u, r_q), columns (q_k, v_k, q_k+1, v_k+1)
        dynamics = np.concatenate([
            np.concatenate([out.ru_q0, out.ru_v0, ru_q1, out.ru_v1], axis=2),
            np.concatenate([out.rq_q0, rq_v0, out.rq_q1, out.rq_v1], axis=2)], axis=1)
        assert out.ru_p is not None and out.rq_p is not None  # Jacobians were asked for
        dynamics_p = (np.concatenate([out.ru_p[:, :, sel], out.rq_p[:, :, sel]], axis=1)
                      - impulses[:, :, None] * (scale_p / scale))  # w_dyn's own derivative
        assert hq is not None and hv is not None and hp is not None  # asked for
        r0 = len(rows)
        init = np.zeros((1, 2 * r0, 2 * n))
        init[0, :r0, :n] = jac0
        init[0, r0:, :n] = mech.dense("phiq_v_q", p, q=q[0], v=v[0])[rows]
        init[0, r0:, n:] = jac0
        init_p = np.concatenate([mech.phi_p(q[0], p)[rows][:, sel],
                                 mech.dense("phiq_v_p", p, q=q[0], v=v[0])[rows][:, sel]])
        count = len(self.prior_index)
        priors = np.zeros((count, 1, len(sel)))
        priors[np.arange(count), 0, self.prior_index] = self.prior_weight
        groups = ResidualGroups(
            RowBlocks(2 * n * np.arange(steps), dynamics * w_dyn, dynamics_p * w_dyn),
            RowBlocks(2 * n * self.obs_state, (np.hstack([hq, hv]) * w_obs[:, None])[:, None],
                      (hp[:, sel] * w_obs[:, None])[:, None]),
            RowBlocks(np.zeros(1, dtype=int), init * w_con, init_p[None] * w_con),
            RowBlocks(np.zeros(count, dtype=int), np.zeros((count, 1, 0)), priors),
        )
        return residual, BlockJacobian(groups, self.state_size)

    def correct(self, x: Array, trial: Array) -> Array:
        """Second-order correction of a trial point. A step along the linearized
        constraints leaves the curved constraint manifold at second order, which the
        compliance ε turns into a large force residual, so rotating a body (a gravity tilt,
        an encoder offset) would take many tiny steps. Each state's positions and then
        velocities are moved, least norm, until Φ and Φq v take the values the linear model
        predicted for the step."""
        mech, rows = self.mech, self.impulses.rows
        q, v, p = self.split(x)
        q1, v1, p1 = self.split(trial)
        dq, dp = q1 - q, p1 - p
        jac = mech.phi_q(q, p)[:, rows]
        phi_target = (mech.phi(q, p)[:, rows] + matrix_vector(jac, dq)
                      + mech.phi_p(q, p)[:, rows] @ dp)
        rate_target = (matrix_vector(jac, v1)
                       + matrix_vector(mech.dense("phiq_v_q", p, q=q, v=v)[:, rows], dq)
                       + mech.dense("phiq_v_p", p, q=q, v=v)[:, rows] @ dp)
        for _ in range(2):
            jac1 = mech.phi_q(q1, p1)[:, rows]
            q1 = q1 - least_norm(jac1, mech.phi(q1, p1)[:, rows] - phi_target)
        jac1 = mech.phi_q(q1, p1)[:, rows]
        v1 = v1 - least_norm(jac1, matrix_vector(jac1, v1) - rate_target)
        return self.pack(q1, v1, trial[self.state_size:])


def least_norm(jac: Array, gap: Array) -> Array:
    """Per state k, the least-norm δ with J_k δ = gap_k: J (K, r, n), gap (K, r) → (K, n)."""
    gram = jac @ jac.transpose(0, 2, 1)
    return transposed_vector(jac, np.linalg.solve(gram, gap[:, :, None])[:, :, 0])

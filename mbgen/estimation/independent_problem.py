"""Identification in independent coordinates: the states are (z, ż) of the mechanism's
independent coordinates, not (q, v) of all of them.

Why: identification data come from a real, rigid mechanism. The dependent-coordinate
problem (:class:`~mbgen.estimation.dependent_problem.DependentProblem`) holds its states on
the constraints through a compliance, whose give biases the parameters that the
constraint forces carry (on the Furuta pendulum spun at 12 rad/s, the arm's viscous
friction by over 20 % at the default compliance) and makes each step's block (2n)² wide. Here
every state is on the constraints exactly (a position and a velocity solve per state)
and a step's block is (2d)²: for the Furuta pendulum 4 unknowns per state instead of 34.

Per step k the implicit midpoint rule on z, read as inverse dynamics, with z_m, ż_m the
step's midpoints and z̈ the independent-coordinate dynamics at them (inputs at the
midpoint):

    r_u = W (ż_k+1 − ż_k − h z̈(z_m, ż_m, u_m; θ)),    r_q = W ((z_k+1 − z_k)/h − ż_m)

With W = Lᵀ / σ, L Lᵀ = M̄(q0) (M̄ = Rᵀ M R, the mass matrix of z at the file's start, σ
the impulse noise of one substep), |r_u| is the size of the impulse M̄ Δż in the metric
M̄⁻¹ over σ: ``impulse_noise`` keeps its units (N s, N m s) and scale. A residual in z̈
does not change when every inertia, friction and gain scale together, so no pull towards
a smaller model arises and W stays constant. The parameters may not move the constraints
(a length): z̈'s parameter derivative holds q(z) fixed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from mbgen.estimation.identification_inputs import (
    IdentificationError,
    Recording,
    Settings,
)
from mbgen.estimation.impulses import ImpulseModel
from mbgen.estimation.problem_layout import ProblemLayout, ResidualGroups
from mbgen.numerics.batched import transposed_vector
from mbgen.numerics.least_squares import BlockJacobian, RowBlocks
from mbgen.runtime.compiled import CompiledMechanism

Array = np.ndarray


class IndependentProblem(ProblemLayout):
    """Residuals and sparse Jacobian of one identification problem in independent
    coordinates; the interface of ``DependentProblem`` (``split`` and ``pack`` in
    the dependent (q, v), so the caller's states and results stay those of the file)."""

    def __init__(self, mech: CompiledMechanism, recording: Recording, names: Sequence[str],
                 settings: Settings, priors: Mapping[str, tuple[float, float]]) -> None:
        super().__init__(mech, recording, names, settings, priors)
        self.impulses = ImpulseModel(mech, self.h)  # the actuators' forces only
        # at each step's midpoint; zero without commands (z̈ takes a force row per step)
        commands = self.commands_between(recording, 0.5)
        self.commands = (np.zeros((self.steps, len(mech.meta.get("actuators", []))))
                         if commands is None else commands)
        moved = np.abs(mech.phi_p(mech.q0, self.base)[:, self.selected]).max(axis=0) > 0
        if moved.any():
            raise IdentificationError(
                "identification in independent coordinates needs the constraints to stay "
                "put: " + ", ".join(np.asarray(names)[moved]) + " moves them (identify it "
                "in dependent coordinates)")
        self.z_names = mech.independent_coordinates()
        self.zi = np.array([mech.coordinate_index(name) for name in self.z_names], dtype=int)
        self.rows = np.asarray(mech.active_rows)
        if len(self.rows) + len(self.zi) != mech.n:
            raise IdentificationError(
                "identification in independent coordinates needs independent constraints "
                f"({len(self.rows)} kept rows and {len(self.zi)} independent coordinates for "
                f"{mech.n} coordinates): use dependent coordinates")
        d = len(self.zi)
        self.state_size = 2 * d * (self.steps + 1)
        self.size = self.state_size + len(names)
        reduced = self._reduced_mass(mech.q0, self.base)
        self.weight = np.linalg.cholesky(reduced).T * (np.sqrt(settings.substeps)
                                                        / settings.impulse_noise)
        # the positions of the lowest cost yet, from which every solve starts: a trial's
        # own would carry a jump to another assembly (a relative angle's constraint also
        # holds at θ + π) into the next, where a refused trial's are forgotten
        self._q = np.repeat(mech.q0[None], self.steps + 1, axis=0)
        self._qm = np.repeat(mech.q0[None], self.steps, axis=0)
        self._best = np.inf

    def _reduced_mass(self, q: Array, p: Array) -> Array:
        """Rᵀ M R (d, d) at one state: the mass matrix of z."""
        _, r, _ = self.mech.partition(q, z=self.z_names, params=p)
        return r.T @ self.mech.mass_matrix(q, p) @ r

    # -- layout ---------------------------------------------------------------------------
    def pack(self, q: Array, v: Array, theta: Array) -> Array:
        """Unknowns from dependent states q, v (K + 1, n): their z and ż."""
        self._q = np.array(q, dtype=float)
        self._qm = 0.5 * (self._q[:-1] + self._q[1:])
        self._best = np.inf
        return np.concatenate([np.hstack([q[:, self.zi], v[:, self.zi]]).ravel(), theta])

    def unknowns(self, x: Array) -> tuple[Array, Array, Array]:
        """(z, ż) (K + 1, d) and the whole parameter vector."""
        d = len(self.zi)
        states = x[:self.state_size].reshape(self.steps + 1, 2 * d)
        return states[:, :d], states[:, d:], self.parameters(x)

    def _dependent(self, z: Array, zd: Array, guess: Array, p: Array
                   ) -> tuple[Array, Array, bool]:
        """q, q̇ (K, n) with these z, ż, solved from ``guess``; whether all were solved."""
        mech = self.mech
        start = guess.copy()
        start[:, self.zi] = z
        q, status = mech.solve_position(start, z=self.z_names, params=p, errors="status")
        ok = bool((status == 0).all())
        if not ok:
            q = np.where((status == 0)[:, None], q, start)
        qd, status = mech.solve_velocity(q, zd, z=self.z_names, params=p, errors="status")
        return q, qd, ok and bool((status == 0).all())

    def split(self, x: Array) -> tuple[Array, Array, Array]:
        """The dependent states q, v (K + 1, n) of x and the whole parameter vector."""
        z, zd, p = self.unknowns(x)
        q, v, ok = self._dependent(z, zd, self._q, p)
        if not ok:
            raise IdentificationError("a state of the identification has no assembly (the "
                                      "position solve failed at the independent "
                                      "coordinates' values)")
        return q, v, p

    def correct(self, x: Array, trial: Array) -> Array:
        """Nothing to correct: every state is on the constraints by construction."""
        return trial

    # -- residuals ------------------------------------------------------------------------
    def __call__(self, x: Array, jacobian: bool) -> tuple[Array, BlockJacobian | None]:
        mech, h = self.mech, self.h
        z, zd, p = self.unknowns(x)
        d, steps = len(self.zi), self.steps
        q, v, ok = self._dependent(z, zd, self._q, p)
        zm, zdm = 0.5 * (z[:-1] + z[1:]), 0.5 * (zd[:-1] + zd[1:])
        qm, vm, ok_m = self._dependent(zm, zdm, self._qm, p)
        if not (ok and ok_m):
            if self._best == np.inf:  # the starting point itself: nothing to fall back to
                raise IdentificationError(
                    f"the starting states put the mechanism where it has no assembly (a "
                    f"position solve at the independent coordinates {', '.join(self.z_names)}"
                    " failed): use dependent coordinates")
            return np.full(self.size, np.nan), None  # a trial the solver will refuse
        forces, forces_p = self.impulses.input_forces_p(self.commands, p)
        out = mech.independent_dynamics(qm, vm, forces, z=self.z_names, params=p,
                                        jacobians=jacobian)
        zdd = out[0] if jacobian else out
        w = self.weight
        ru = (zd[1:] - zd[:-1] - h * zdd) @ w.T
        rq = ((z[1:] - z[:-1]) / h - zdm) @ w.T
        model, hq, hv, h_p = self.readings(q, v, p, jacobian)
        w_obs = self.sensor_weight[self.obs_sensor]
        obs = (model - self.obs_value) * w_obs
        theta = x[self.state_size:]
        prior = (theta[self.prior_index] - self.prior_mean) * self.prior_weight
        residual = np.concatenate([np.hstack([ru, rq]).ravel(), obs, prior])
        with np.errstate(over="ignore"):  # an overflow is an infinite cost, never the best
            cost = float(residual @ residual)
        if cost <= self._best:  # warm starts from the best point (the solver's current one)
            self._q, self._qm, self._best = q, qm, cost
        if not jacobian:
            return residual, None

        _, a_z, a_w, a_force = out
        sel = self.selected
        eye = np.broadcast_to(np.eye(d), (steps, d, d))
        ru_z = -0.5 * h * a_z
        ru_w0, ru_w1 = -eye - 0.5 * h * a_w, eye - 0.5 * h * a_w
        rq_z0, rq_z1, rq_w = -eye / h, eye / h, -0.5 * eye
        dynamics = np.concatenate([
            np.concatenate([ru_z, ru_w0, ru_z, ru_w1], axis=2),
            np.concatenate([rq_z0, rq_w, rq_z1, rq_w], axis=2)], axis=1)
        dynamics = np.concatenate([w @ dynamics[:, :d], w @ dynamics[:, d:]], axis=1)
        zdd_p = (mech.forward_dynamics_parameter_jacobian(qm, vm, forces, p)[:, self.zi]
                 + a_force @ forces_p)[:, :, sel]
        dynamics_p = np.concatenate([w @ (-h * zdd_p), np.zeros((steps, d, len(sel)))],
                                    axis=1)
        assert hq is not None and hv is not None and h_p is not None  # asked for
        # through each reading's state: ∂q/∂z = R, ∂q̇/∂z = V_z, ∂q̇/∂ż = R
        r_map, v_z = self._state_maps(q[self.obs_state], v[self.obs_state], p)
        h_z = transposed_vector(r_map, hq) + transposed_vector(v_z, hv)
        h_w = transposed_vector(r_map, hv)
        observed = np.concatenate([h_z, h_w], axis=1) * w_obs[:, None]
        count = len(self.prior_index)
        priors = np.zeros((count, 1, len(sel)))
        priors[np.arange(count), 0, self.prior_index] = self.prior_weight
        groups = ResidualGroups(  # no initial constraints: every state is on them
            RowBlocks(2 * d * np.arange(steps), dynamics, dynamics_p),
            RowBlocks(2 * d * self.obs_state, observed[:, None],
                      (h_p[:, sel] * w_obs[:, None])[:, None]),
            RowBlocks(np.zeros(0, dtype=int), np.zeros((0, 0, 0)), np.zeros((0, 0, len(sel)))),
            RowBlocks(np.zeros(count, dtype=int), np.zeros((count, 1, 0)), priors),
        )
        return residual, BlockJacobian(groups, self.state_size)

    def _state_maps(self, q: Array, v: Array, p: Array) -> tuple[Array, Array]:
        """∂q/∂z = R and ∂q̇/∂z at fixed ż = −S (Φq q̇)_q R, (K, n, d) each, from the
        augmented matrix A = [Φq (kept rows); E_z] (K, n, n): R its inverse's z columns,
        S the constraint columns."""
        mech, rows, m = self.mech, self.rows, len(self.rows)
        augmented = np.zeros((len(q), mech.n, mech.n))
        augmented[:, :m] = mech.phi_q(q, p)[:, rows]
        augmented[:, m + np.arange(len(self.zi)), self.zi] = 1.0
        inverse = np.linalg.inv(augmented)
        r_map, s_map = inverse[:, :, m:], inverse[:, :, :m]
        rate_q = mech.dense("phiq_v_q", p, q=q, v=v)[:, rows]
        return r_map, -s_map @ (rate_q @ r_map)

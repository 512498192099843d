"""The factor-graph smoother: a fixed-lag smoother on GTSAM's iSAM2 (marginalizing as
GTSAM's IncrementalFixedLagSmoother does, a chunk of steps at a time) over mbgen's native
dynamics, constraint and observation factors, or the whole readings file in one batch.

Variables of step k: q_k, q̇_k (n each), z̈_k (d: the independent accelerations), and when
asked the unknown forces f_k (a random walk) and, with accelerometers, q̈_k (n). Factors:

- Φ(q_k) and Φq q̇_k (σ_c, tight: the constraints are exact);
- the dynamics z̈_k = q̈(q_k, q̇_k, B f_k)[z] + ε_k, ε ~ N(0, σa²) per independent
  coordinate: the errorEKF's acceleration noise, here one value per step;
- the transition, linear, in the coordinates z of step k, z̈ linear over the step
  (Newmark's linear acceleration): q_{k+1}[z] = q_k[z] + dt q̇_k[z] + dt²/6 (2 z̈_k +
  z̈_{k+1}) and q̇_{k+1}[z] = q̇_k[z] + dt/2 (z̈_k + z̈_{k+1}), each with a σ TIGHT times
  the part ε gives it (a soft equality GTSAM can eliminate); where z changes, z̈_k held
  over the step (dt²/2 z̈_k, dt z̈_k);
- f_{k+1} − f_k ~ N(0, σf² dt);
- each reading: the sensors' h(q_k, q̇_k) and the accelerometers' a(q_k, q̈_k) with q̈_k
  tied to z̈_k by the acceleration constraints [Φ̇q q̇ + Φq q̈; q̈[z] − z̈] (σ_c);
- at step 0 priors on q_0[z], q̇_0[z] (and f_0), the errorEKF's initial σ.

Each step has as many residual rows, readings aside, as unknowns, so the graph is the
density of a Markov chain in s_k = (q_k, q̇_k, z̈_k) (the rows of step k+1, transition,
constraints and dynamics, are a square linear system in s_{k+1} given s_k): its
marginals are the state's honest σ, and on a linear mechanism the batch answer is the
Rauch–Tung–Striebel smoother of that chain (tests/test_smoother.py). The constraints
make the normal equations ill-conditioned, so every elimination is by QR.

z starts as the file's independent coordinates (or full pivoting at q0) and is chosen
again, by the errorEKF's rule (kalman.RESELECT), at each new step's initial value (the
newest estimate, or the RK4 prediction from it); a transition is always written in the z
of its first step, so a switch needs no restart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import gtsam
import numpy as np

from mbgen.estimation.consistency import Inconsistency, describe, run_tests
from mbgen.estimation.kalman import LOST, RESELECT, KalmanError, KalmanTrack
from mbgen.estimation.particle_filter import filter_times
from mbgen.factors.linear import equality_factor, linear_factor, prior_factor
from mbgen.factors.mechanism import MechanismFactors
from mbgen.factors.noise import isotropic
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.runtime.integration import IntegrationError

Array = np.ndarray
#: σ of the constraint factors [the constraints' units]: tight, they are exact.
SIGMA_CONSTRAINTS = 1e-6
#: σ of a redundant constraint row: its information is another row's, so ~none of it.
REDUNDANT = 1e3
#: The transition's own σ as a fraction of the part the acceleration noise gives it.
TIGHT = 1e-3
#: iSAM2 relinearizes a variable that moved more than this since its last linearization,
#: once per chunk (where the chunk is read: ``FactorSmoother.run``), never in between (on
#: the four-bar at a lag of 50 steps, relinearizing at every update cost 17 ms a step; the
#: outputs are projected onto the constraints, which a stale linearization leaves at
#: ~4e-5)
RELINEARIZE = 1e-3
NEVER = 1 << 30  # iSAM2's relinearizeSkip: only where forced
#: Batch Gauss–Newton iterations of ``lag=None`` at most (it starts at the forward
#: pass's estimates, next to the answer).
BATCH_ITERATIONS = 20
#: Steps of lag of the forward pass that starts a batch.
FORWARD_LAG = 20
#: Steps whose factors go to GTSAM in one update at most (their initial values one RK4
#: run of the core from the newest estimate): a GTSAM update costs about as much for one
#: step as for fifty (on the four-bar at a lag of 50 steps: 1.25 ms a step updating at
#: every step, 0.36 ms once per chunk; the same RMS error and coverage).
UPDATE_STEPS = 50


@dataclass(frozen=True)
class Keys:
    """The GTSAM keys of step k's variables (None: not in this graph)."""

    q: int
    qd: int
    zdd: int
    qdd: int | None
    f: int | None

    @staticmethod
    def of(k: int, accelerations: bool, forces: bool) -> Keys:
        s = gtsam.symbol
        return Keys(s("q", k), s("v", k), s("a", k), s("b", k) if accelerations else None,
                    s("f", k) if forces else None)

    def all(self) -> list[int]:
        return [key for key in (self.q, self.qd, self.zdd, self.qdd, self.f)
                if key is not None]


def readings_at_steps(t: Array, readings: Array, dt: float | None
                      ) -> tuple[Array, float, Array]:
    """The steps' times (N,), the step, and each step's readings (N, labels; NaN: none):
    a step takes the reading within half a step of its time, as the filters do."""
    t = np.asarray(t, dtype=float)
    readings = np.asarray(readings, dtype=float)
    times, step = filter_times(t, dt)
    row = np.searchsorted(t, times - step / 2)
    rows = np.minimum(row, len(t) - 1)
    at_step = (row < len(t)) & (np.abs(t[rows] - times) < step / 2)
    y = np.full((len(times), readings.shape[1]), np.nan)
    y[at_step] = readings[rows[at_step]]
    return times, step, y


@dataclass(frozen=True)
class SmootherTrack(KalmanTrack):
    """The smoother's track: the Kalman filters', with ``residuals`` each reading's
    residual at the written state over its σ, (y − h(q, q̇))/σ or (y − a(q, q̈))/σ.

    Whitened, a least-squares fit's residuals are its noise projected, (I − P) e, so any
    sum of their squares is at most the noise's χ²: where the intervals hold, each output's
    normalized residuals pass the χ² tests of every second and of the run (the graph's
    whole normalized residual, ``nis``, too), and a model error, which is slow, shows as
    residuals correlated in time (estimation/consistency.py's tests, one Bonferroni
    level)."""

    def inconsistencies(self) -> list[Inconsistency]:
        """The failed tests: the graph's normalized residual (``nis``, per step) and each
        output's squared normalized residuals, per second and over the run, and each
        output's whiteness."""
        if self.residuals is None:
            return super().inconsistencies()
        count = (np.zeros(len(self.t)) if self.readings is None
                 else np.asarray(self.readings, dtype=float))
        r = np.asarray(self.residuals, dtype=float)
        seen = np.isfinite(r)
        squares = np.column_stack([np.where(count > 0, np.nan_to_num(self.nis, nan=np.inf),
                                            0.0), np.where(seen, r * r, 0.0)])
        counts = np.column_stack([count, seen.astype(float)])
        return run_tests(squares, counts, self.t, ["the graph's residual", *self.labels],
                         r, self.labels)

    def distrust(self) -> str | None:
        """The Kalman filters' reasons (a state not assembled, a reading lost), then
        residuals inconsistent with the noise (:meth:`inconsistencies`)."""
        failed = self.inconsistencies()
        if self.failed or self.lost.any() or not failed:
            return super().distrust()
        return (f"its readings' residuals are inconsistent with its noise model "
                f"({describe(failed)}): the intervals are too narrow for the model's error "
                "(raise --noise-accel, estimate a force the model lacks with "
                "--unknown-forces, or check --noise-sensor and the model's parameters)")


class FactorSmoother:
    """The smoother of a compiled mechanism (see the module's notes); arguments as
    :class:`mbgen.estimation.kalman.ErrorEKF`'s, plus ``sigma_constraints``."""

    label = "factor-graph smoother"  # in messages, as the Kalman filters' labels

    def __init__(self, mech: CompiledMechanism, sigma_a: float = 1.0,
                 sigma_s: float | Array | None = None, sigma_acc: float | Array | None = None,
                 unknown_forces: Sequence[str] = (), sigma_f: float = 1.0,
                 q0: Array | None = None, qd0: Array | None = None, spread: float = 0.1,
                 speed: float = 1.0, force_spread: float = 1.0,
                 sigma_constraints: float = SIGMA_CONSTRAINTS) -> None:
        if not mech.sensor_labels and not mech.accelerometer_labels:
            raise KalmanError(f"{mech.name} has no sensors")
        rows = np.asarray(mech.active_rows, dtype=int)
        if len(rows) + mech.dof != mech.n:
            raise KalmanError(f"{mech.name}: the smoother needs independent constraints "
                              f"({len(rows)} independent rows and {mech.dof} degrees of "
                              f"freedom for {mech.n} coordinates)")
        self.mech, self.d = mech, mech.dof
        self.sigma_a, self.sigma_f = float(sigma_a), float(sigma_f)
        self.sigma_s = mech.sensor_noise(sigma_s)
        self.sigma_acc = (mech.accelerometer_noise(sigma_acc) if mech.accelerometer_labels
                          else np.zeros(0))
        self.sigma_c = float(sigma_constraints)
        # σ per constraint row: a redundant row (Bricard's) loose, or it would count twice
        self.sigma_rows = np.full(mech.m, REDUNDANT)
        self.sigma_rows[rows] = self.sigma_c
        self.forces = [mech.coordinate_index(c) for c in unknown_forces]
        self.spread, self.speed, self.force_spread = spread, speed, force_spread
        q = mech.q0.copy() if q0 is None else np.asarray(q0, dtype=float).copy()
        self.zi = [int(i) for i in np.atleast_1d(mech.partition(q)[0])]
        self.q = mech.solve_position(q, z=self.zi)
        qd = np.zeros(mech.n) if qd0 is None else np.asarray(qd0, dtype=float)
        self.qd = mech.solve_velocity(self.q, qd[self.zi], z=self.zi)
        self._makers: dict[tuple[int, ...], MechanismFactors] = {}
        self._blocks: dict[tuple[tuple[int, ...], float, bool],
                           tuple[tuple[list[Array], list[Array]],
                                 list[gtsam.noiseModel.Base]]] = {}
        self.switches = 0

    # -- graph pieces ----------------------------------------------------------------
    def factors(self, z: Sequence[int]) -> MechanismFactors:
        """The factor maker for independent coordinates z (made once per choice)."""
        key = tuple(int(i) for i in z)
        if key not in self._makers:
            self._makers[key] = MechanismFactors(self.mech, z=list(key))
        return self._makers[key]

    def _external(self, f: Array) -> Array:
        Q = np.zeros(self.mech.n)
        Q[self.forces] = f
        return Q

    def step_factors(self, keys: Keys, z: Sequence[int], y: Array
                     ) -> list[gtsam.NonlinearFactor]:
        """Step k's own factors: the tight ones first (the constraints: 2, or 3 with
        q̈), then the dynamics, then the readings ``y`` (labels; NaN: none)."""
        f, c = self.factors(z), self.sigma_rows
        out: list[gtsam.NonlinearFactor] = [
            f.position_constraints(keys.q, c), f.velocity_constraints(keys.q, keys.qd, c)]
        if keys.qdd is not None:
            out.append(f.independent_acceleration(
                keys.q, keys.qd, keys.qdd, keys.zdd,
                np.concatenate([c, np.full(self.d, self.sigma_c)])))
        if keys.f is None:
            out.append(f.independent_dynamics(keys.q, keys.qd, keys.zdd, sigma=self.sigma_a))
        else:
            out.append(f.independent_input_dynamics(keys.q, keys.qd, keys.zdd, keys.f,
                                                    self.forces, self.sigma_a))
        count = len(self.sigma_s)
        for row in np.flatnonzero(np.isfinite(y[:count])):
            out.append(f.observation(keys.q, keys.qd, int(row), float(y[row]),
                                     float(self.sigma_s[row])))
        for row in np.flatnonzero(np.isfinite(y[count:])):
            assert keys.qdd is not None
            out.append(f.accelerometer(keys.q, keys.qdd, int(row), float(y[count + row]),
                                       float(self.sigma_acc[row])))
        return out

    def transition(self, old: Keys, new: Keys, z: Sequence[int], dt: float,
                   linear: bool = True) -> list[gtsam.NonlinearFactor]:
        """Step k to k+1 in step k's z (see the module's notes), and the forces' walk.
        ``linear``: z̈ linear over the step (Newmark's linear acceleration, third order
        in z); False (where z changes at k+1, so z̈_k+1 is another coordinate's): z̈_k
        held over the step."""
        (position, velocity), noises = self._transition_blocks(tuple(z), dt, linear)
        zero = np.zeros(self.d)
        if linear:
            out = [linear_factor([old.q, old.qd, old.zdd, new.q, new.zdd], position, zero,
                                 noises[0]),
                   linear_factor([old.qd, old.zdd, new.qd, new.zdd], velocity, zero,
                                 noises[1])]
        else:
            out = [linear_factor([old.q, old.qd, old.zdd, new.q], position, zero, noises[0]),
                   linear_factor([old.qd, old.zdd, new.qd], velocity, zero, noises[1])]
        if old.f is not None and new.f is not None:
            out.append(equality_factor(old.f, new.f, len(self.forces), noises[2]))
        return out

    def _transition_blocks(self, z: tuple[int, ...], dt: float, linear: bool
                           ) -> tuple[tuple[list[Array], list[Array]],
                                      list[gtsam.noiseModel.Base]]:
        """The transition's blocks (position rows, velocity rows) and noise models, made
        once per (z, dt, linear): they are the same at every step."""
        key = (z, dt, linear)
        if key not in self._blocks:
            n, d = self.mech.n, self.d
            select = np.eye(n)[list(z)]
            eye = np.eye(d)
            if linear:
                blocks = ([-select, -dt * select, -dt * dt / 3 * eye, select,
                           -dt * dt / 6 * eye], [-select, -dt / 2 * eye, select, -dt / 2 * eye])
            else:
                blocks = ([-select, -dt * select, -dt * dt / 2 * eye, select],
                          [-select, -dt * eye, select])
            noises = [isotropic(d, TIGHT * self.sigma_a * dt * dt / 2),
                      isotropic(d, TIGHT * self.sigma_a * dt),
                      isotropic(max(len(self.forces), 1), self.sigma_f * np.sqrt(dt))]
            self._blocks[key] = (blocks, noises)
        return self._blocks[key]

    def priors(self, keys: Keys, z: Sequence[int]) -> list[gtsam.NonlinearFactor]:
        """Step 0's: q[z], q̇[z] about the start (σ spread, speed) and f about 0."""
        n, d = self.mech.n, self.d
        select = np.eye(n)[list(z)]
        out = [linear_factor([keys.q], [select], self.q[list(z)], isotropic(d, self.spread)),
               linear_factor([keys.qd], [select], self.qd[list(z)],
                             isotropic(d, self.speed))]
        if keys.f is not None:
            out.append(prior_factor(keys.f, np.zeros(len(self.forces)),
                                    isotropic(len(self.forces), self.force_spread)))
        return out

    def initial(self, keys: Keys, q: Array, qd: Array, f: Array, z: Sequence[int],
                values: gtsam.Values, qdd: Array | None = None) -> None:
        """Initial values of a step at the state (q, q̇, f) (q̈: the dynamics' there, if
        known)."""
        if qdd is None:
            qdd = self.mech.forward_dynamics(q, qd, self._external(f))
        values.insert(keys.q, q)
        values.insert(keys.qd, qd)
        values.insert(keys.zdd, qdd[list(z)])
        if keys.qdd is not None:
            values.insert(keys.qdd, qdd)
        if keys.f is not None:
            values.insert(keys.f, f)

    def predict(self, q: Array, qd: Array, f: Array, dt: float) -> tuple[Array, Array]:
        """The next step's initial (q, q̇): one RK4 step of the core, or a Taylor step."""
        table = None if not self.forces else np.tile(self._external(f), (3, 1))
        try:
            path = self.mech.integrate(q, qd, dt, 1, "rk4", forces=table)
            return path[0][1], path[1][1]
        except IntegrationError:  # near a singular configuration the graph may still pass
            qdd = self.mech.forward_dynamics(q, qd, self._external(f))
            return q + dt * qd + 0.5 * dt * dt * qdd, qd + dt * qdd

    def predictions(self, q: Array, qd: Array, f: Array, dt: float, steps: int
                    ) -> tuple[Array, Array, Array | None]:
        """The next ``steps`` steps' initial (q, q̇, q̈), each (steps, n), by RK4 in one
        call of the core from (q, q̇) with the forces f held (q̈ None: Taylor steps of
        :meth:`predict`, near a singular configuration)."""
        table = None if not self.forces else np.tile(self._external(f), (2 * steps + 1, 1))
        try:
            path = self.mech.integrate(q, qd, dt, steps, "rk4", forces=table)
            return path[0][1:], path[1][1:], path[2][1:]
        except IntegrationError:  # near a singular configuration the graph may still pass
            qs, qds = np.empty((steps, self.mech.n)), np.empty((steps, self.mech.n))
            for i in range(steps):
                q, qd = self.predict(q, qd, f, dt)
                qs[i], qds[i] = q, qd
            return qs, qds, None

    def reselect(self, q: Array, z: list[int]) -> list[int]:
        """z chosen again by full pivoting where the current choice's R = ∂q/∂z is
        RESELECT times larger than that choice's (the errorEKF's rule). Any choice's R
        holds the identity in its own rows, so an R no larger than RESELECT keeps z
        without the full pivoting."""
        mech = self.mech
        current = np.abs(mech.partition(q, z=z)[1]).max()
        if current <= RESELECT:
            return z
        best = [int(i) for i in np.atleast_1d(mech.partition(q, z=())[0])]
        if set(best) == set(z):
            return z
        if current <= RESELECT * np.abs(mech.partition(q, z=best)[1]).max():
            return z
        self.switches += 1
        return best

    # -- running ----------------------------------------------------------------------
    def _smoother(self) -> gtsam.ISAM2:
        """iSAM2 by QR, relinearized only where asked (once per chunk: see ``run``)."""
        params = gtsam.ISAM2Params()
        params.setFactorization("QR")  # Cholesky breaks down on the tight constraints
        params.setRelinearizeThreshold(RELINEARIZE)
        params.relinearizeSkip = NEVER
        return gtsam.ISAM2(params)

    def run(self, t: Array, readings: Array, dt: float | None = None,
            lag: int | None = 50) -> SmootherTrack:
        """The smoother over readings (N, sensors then accelerometers; NaN: none) at times
        t (N,) on steps of dt (default the readings' median period). ``lag``: steps of
        readings after a step that its estimate weighs (each step's output is read when
        it is about to leave the window; the last ``lag`` steps weigh what there is);
        None: the whole file in one batch. The track's ``nis`` holds each step's share of
        the graph's normalized squared residual (every factor counted once, at the step
        it joins), whose sum over the file has the number of readings as expectation:
        the track's ``distrust`` tests it, and each output's normalized residuals, with
        estimation/consistency.py (:class:`SmootherTrack`). Stops at a step
        GTSAM cannot solve (``failed``)."""
        if lag is not None and (int(lag) != lag or lag < 1):
            raise KalmanError(f"the lag must be a positive number of steps, got {lag}")
        times, step, y = readings_at_steps(t, readings, dt)
        count = len(self.sigma_s)
        accelerations = bool(np.isfinite(y[:, count:]).any())
        N, nf = len(times), len(self.forces)
        window = FORWARD_LAG if lag is None else int(lag)
        # iSAM2 as a fixed-lag smoother, a chunk of ``window`` steps at a time: a chunk
        # is read (estimates and marginals) and marginalized when its last step is
        # ``window`` steps old, so a step's estimate weighs between ``window`` and
        # 2 ``window`` − 1 steps of later readings. Marginalizing re-eliminates the whole
        # window and a marginal of an old step costs a walk through it (cached until the
        # next update), so both once per chunk, in the update that brings the chunk's
        # last readings, which relinearizes the window too; in between, updates of up to
        # UPDATE_STEPS steps, each one Gauss–Newton step from the RK4 predictions
        smoother = self._smoother()
        keys_of = [Keys.of(k, accelerations, nf > 0) for k in range(N)]
        share: list[gtsam.NonlinearFactorGraph] = []
        whole = gtsam.NonlinearFactorGraph()  # every factor (the batch's graph)
        observed: list[list[gtsam.NonlinearFactor]] = []
        forward = gtsam.Values()  # each step's estimate as it left the window
        sigmas: dict[int, list[Array]] = {}
        z = list(self.zi)
        qs = qds = np.zeros((0, self.mech.n))
        qdds: Array | None = None
        chosen: list[list[int]] = []  # each step's z
        q, qd, f = self.q, self.qd, np.zeros(nf)
        failed, done = False, N
        estimate = gtsam.Values()

        def read(k: int) -> None:
            for key in keys_of[k].all():
                forward.insert(key, estimate.atVector(key))
            if lag is not None:
                sigmas[k] = [_sd(smoother.marginalCovariance(key)) for key in
                             (keys_of[k].q, keys_of[k].qd, keys_of[k].f) if key is not None]

        first = 0  # the first step of the update being gathered
        while first < N and not failed:
            # an update's steps: at most UPDATE_STEPS, ending where a chunk is read
            last = min(first + UPDATE_STEPS, N) - 1
            ends = [j for j in range(first, last + 1) if _reads_at(j, window)]
            last = ends[0] if ends else last
            graph, values = gtsam.NonlinearFactorGraph(), gtsam.Values()
            origin = max(first - 1, 0)  # the step of the newest estimate (or the start)
            if last > origin:
                qs, qds, qdds = self.predictions(q, qd, f, step, last - origin)
            for k in range(first, last + 1):
                keys = keys_of[k]
                start = graph.size()
                if k:  # the prediction from the newest estimate
                    q, qd = qs[k - origin - 1], qds[k - origin - 1]
                    link = chosen[k - 1]  # a transition in the z of its first step
                    for factor in self.transition(keys_of[k - 1], keys, link, step,
                                                   link == z):
                        graph.add(factor)
                else:
                    for factor in self.priors(keys, z):
                        graph.add(factor)
                chosen.append(z)
                own = self.step_factors(keys, z, y[k])
                readings_k = int(np.isfinite(y[k]).sum())
                observed.append(own[len(own) - readings_k:] if readings_k else [])
                # the factors whose residuals are the test of the intervals: all but the
                # tight ones (constraints, the transition's kinematics), whose residuals
                # are ~0 at any estimate (leverage ~1) but huge between two windows'
                # estimates
                mine = gtsam.NonlinearFactorGraph()
                loose = [*(graph.at(i) for i in range(start if k == 0 else start + 2,
                                                       graph.size())),
                         *own[2 if keys.qdd is None else 3:]]
                for factor in loose:
                    mine.add(factor)
                share.append(mine)
                for factor in own:
                    graph.add(factor)
                self.initial(keys, q, qd, f, z, values,
                             None if k == 0 or qdds is None else qdds[k - origin - 1])
                if k < last:  # z of the next step, at this one's prediction
                    z = self.reselect(q, z)
            try:
                if _reads_at(last, window):
                    # chunk c = [last − 2 window + 1, last − window] is read after this
                    # update, then marginalized: its keys ordered first (leaves of the
                    # Bayes tree), the window relinearized and re-eliminated once
                    oldest = last - 2 * window + 1
                    leaving = [key for j in range(oldest, oldest + window)
                               for key in keys_of[j].all()]
                    groups = gtsam.KeyGroupMap()
                    for j in range(oldest, last + 1):
                        for key in keys_of[j].all():
                            groups.insert2(key, _group(j - oldest, window, last - oldest))
                    present = gtsam.KeyList()
                    for j in range(oldest, first):
                        for key in keys_of[j].all():
                            present.push_back(key)
                    smoother.update(graph, values, constrainedKeys=groups,
                                    extraReelimKeys=present, force_relinearize=True)
                else:
                    smoother.update(graph, values)
                whole.push_back(graph)
                keys = keys_of[last]  # the newest step alone read (the next predictions')
                q = smoother.calculateEstimateVector(keys.q)
                qd = smoother.calculateEstimateVector(keys.qd)
                if not (np.isfinite(q).all() and np.isfinite(qd).all()):
                    raise RuntimeError("a state that is not finite")
                if keys.f is not None:
                    f = smoother.calculateEstimateVector(keys.f)
                if _reads_at(last, window):
                    estimate = smoother.calculateEstimate()
                    for j in range(oldest, oldest + window):
                        read(j)  # one chunk, before it is marginalized (see above)
                    out = gtsam.KeyList()
                    for key in leaving:
                        out.push_back(key)
                    smoother.marginalizeLeaves(out)
                z = self.reselect(q, z)
            except RuntimeError:  # GTSAM's indeterminant system, a lost state
                failed, done = True, first
                del chosen[first:], share[first:], observed[first:]
                break
            first = last + 1
        if done:
            try:
                estimate = smoother.calculateEstimate()
            except RuntimeError:  # the failed update left nothing to read: the chunks read
                done = next(j for j in range(done + 1) if j == done
                            or not forward.exists(keys_of[j].q))
            for j in range(done):
                if not forward.exists(keys_of[j].q):
                    read(j)
        if lag is None and done:
            try:
                forward, sigmas = self._batch(whole, forward, keys_of[:done])
            except RuntimeError:
                failed, done = True, 0
        return self._track(times[:done], y[:done], share[:done], observed[:done], forward,
                           sigmas, keys_of[:done], chosen[:done], failed)

    def _batch(self, graph: gtsam.NonlinearFactorGraph, start: gtsam.Values,
               keys_of: list[Keys]) -> tuple[gtsam.Values, dict[int, list[Array]]]:
        """The whole ``graph`` by batch Gauss–Newton (QR) from the forward pass's
        estimates ``start``; σ from one iSAM2 (QR) over it at the optimum."""
        params = gtsam.GaussNewtonParams()
        params.setMaxIterations(BATCH_ITERATIONS)
        params.setLinearSolverType("MULTIFRONTAL_QR")
        params.setRelativeErrorTol(1e-14)
        params.setAbsoluteErrorTol(0.0)
        estimate = gtsam.GaussNewtonOptimizer(graph, start, params).optimize()
        isam_params = gtsam.ISAM2Params()
        isam_params.setFactorization("QR")
        isam = gtsam.ISAM2(isam_params)
        isam.update(graph, estimate)
        sigmas = {k: [_sd(isam.marginalCovariance(key)) for key in
                      (keys.q, keys.qd, keys.f) if key is not None]
                  for k, keys in enumerate(keys_of)}
        return estimate, sigmas

    def _projected(self, q: Array, qd: Array, z: list[int]) -> tuple[Array, Array]:
        """(q, q̇) (states, n) solved onto the constraints at their own z, ż, in one call
        of the core; state by state where that fails (a state whose position or velocity
        problem fails is kept as it is)."""
        from mbgen.errors import MbgenError

        try:
            on = self.mech.solve_position(q, z=z)
            return on, self.mech.solve_velocity(on, qd[:, z], z=z)
        except MbgenError:
            if len(q) == 1:
                return q, qd
            pairs = [self._projected(q[i:i + 1], qd[i:i + 1], z) for i in range(len(q))]
            return (np.vstack([p[0] for p in pairs]), np.vstack([p[1] for p in pairs]))

    def _track(self, times: Array, y: Array, share: list[gtsam.NonlinearFactorGraph],
               observed: list[list[gtsam.NonlinearFactor]], values: gtsam.Values,
               sigmas: dict[int, list[Array]], keys_of: list[Keys],
               chosen: list[list[int]], failed: bool) -> SmootherTrack:
        """The estimates as the errorEKF's track: q, q̇ on the constraints at the
        estimated z, ż (of the step's ``chosen`` z), q̈ from the dynamics there,
        each step's share of the normalized squared residual (``nis``) and whether a
        reading lies beyond LOST σ of the estimate (``lost``)."""
        N, n, nf = len(times), self.mech.n, len(self.forces)
        q, qd, qdd = (np.full((N, n), np.nan) for _ in range(3))
        sq, sqd = np.full((N, n), np.nan), np.full((N, n), np.nan)
        force, sforce = np.full((N, nf), np.nan), np.full((N, nf), np.nan)
        nis, lost = np.full(N, np.nan), np.zeros(N, dtype=bool)
        for k, keys in enumerate(keys_of):
            q[k], qd[k] = values.atVector(keys.q), values.atVector(keys.qd)
            sq[k], sqd[k] = sigmas[k][0], sigmas[k][1]
            if keys.f is not None:
                force[k], sforce[k] = values.atVector(keys.f), sigmas[k][2]
        # the residuals at what is written: the dynamics off the constraints (Baumgarte)
        # are far off; the steps of one z projected in one call
        z_of = [tuple(z) for z in chosen]
        for z in set(z_of):
            rows = np.array([k for k in range(N) if z_of[k] == z], dtype=int)
            q[rows], qd[rows] = self._projected(q[rows], qd[rows], list(z))
        if N:
            Q = np.zeros((N, n))
            Q[:, self.forces] = force
            qdd[:] = self.mech.forward_dynamics(q, qd, Q if nf else None)
        reported = gtsam.Values(values)
        for k, keys in enumerate(keys_of):
            reported.update(keys.q, q[k])
            reported.update(keys.qd, qd[k])
        for k in range(N):
            nis[k] = 2.0 * share[k].error(reported)
            lost[k] = any(2.0 * factor.error(reported) > LOST**2 for factor in observed[k])
        count = np.isfinite(y).sum(axis=1)
        return SmootherTrack(times, q, qd, qdd, sq, sqd, force, sforce, nis, count > 0, lost,
                             failed, count, residuals=self.residuals(q, qd, qdd, y),
                             labels=(*self.mech.sensor_labels,
                                     *self.mech.accelerometer_labels))

    def residuals(self, q: Array, qd: Array, qdd: Array, y: Array) -> Array:
        """The readings' residuals at the written states, each over its σ: (y − h(q, q̇))/σ
        and (y − a(q, q̈))/σ (N, labels; NaN: no reading)."""
        N = len(q)
        count = len(self.sigma_s)
        out = np.full((N, y.shape[1]), np.nan)
        if not N:
            return out
        out[:, :count] = (y[:, :count] - np.reshape(self.mech.sensors(q, qd), (N, -1))
                          ) / self.sigma_s
        if y.shape[1] > count and self.mech.accelerometer_labels:
            out[:, count:] = (y[:, count:] - np.reshape(self.mech.accelerometers(q, qdd),
                                                        (N, -1))) / self.sigma_acc
        return out


def _group(i: int, window: int, newest: int) -> int:
    """The elimination group of step i of a read update's steps 0..``newest`` (the first
    ``window`` are the chunk read, then marginalized): the chunk first, oldest first,
    then the other steps from the newest to the chunk's neighbour, which becomes the
    Bayes tree's root: a marginal of the chunk walks to the root through the chunk only
    (not through the newer steps too: on the four-bar at a lag of 50 steps, 3.6 ms
    instead of 7 for a chunk's first marginal)."""
    return i if i < window else window + newest - i


def _reads_at(k: int, window: int) -> bool:
    """Whether step k ends a chunk of ``window`` steps that is then ``window`` steps old
    (its estimates and σ are read before it leaves the smoother)."""
    return k >= window and (k - window + 1) % window == 0


def _sd(covariance: Array) -> Array:
    return np.sqrt(np.maximum(np.diag(covariance), 0.0))

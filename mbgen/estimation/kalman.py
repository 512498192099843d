"""The error-state extended Kalman filter in independent coordinates (errorEKF), with
optional input estimation (errorEKF-FE): Sanjurjo, Naya, Blanco-Claraco, Torres-Moreno
and Giménez-Fernández, "Accuracy and efficiency comparison of various nonlinear Kalman
filters applied to multibody models", Nonlinear Dynamics 88 (2017); the force estimation
of Sanjurjo et al. 2017 and Rodríguez et al. 2021.

The filter's state is x = (z, ż, f): the independent coordinates and velocities and, when
asked, the generalized forces f at some coordinates, a random walk. The mechanism's state
(q, q̇) always lies on the constraints: the prediction integrates z by RK4 with the
dependent coordinates assembled at every stage from the last ones (which keeps the
assembly branch), and after each update q, q̇ follow from the position and velocity
problems at the corrected (z, ż). What the literature gets by finite differences or
approximations, the covariance's transition F = ∂x_k+1/∂x_k, is exact here: the chain
rule through the RK4 stages of the compiled ∂z̈/∂z, ∂z̈/∂ż, ∂z̈/∂Q. The update uses the
sensors' exact ∂h/∂q, ∂h/∂q̇ through ∂q/∂z = R and ∂q̇/∂z (the error state's Jacobian).

Noise: the acceleration noise ε ~ N(0, σa²) per independent coordinate, held over the
step, enters z̈ (as the particle filter's prediction does), so its covariance is G σa² Gᵀ
with G = ∂x_k+1/∂ε through the same stages; the forces walk by N(0, σf² dt) per step.
Accelerometers read a(q, q̈) with q̈ the dynamics' at the filter's state; the noise of z̈
they also see is added to their reading noise (σa² B Bᵀ, B = ∂a/∂q̈ R).

z starts as the file's independent coordinates (or full pivoting on Φq at q0) and is
chosen again, by full pivoting, when the current choice's augmented matrix [Φq; E_z]
becomes much worse conditioned than the best one's (a natural coordinate of a crank that
passes its dead centre); the covariance is carried across the switch by the exact map
between the two choices.

This module, in NumPy over the runtime's calls, is the reference of the filter in C
(mbgen/csrc/kalman.c), which runs a whole readings file in one call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

import mbgen.columns as columns
from mbgen.runtime.compiled import CompiledMechanism

if TYPE_CHECKING:
    from mbgen.estimation.consistency import Inconsistency

Array = np.ndarray
#: Readings this many σ (of their innovation's covariance) from the prediction: the filter
#: has lost the state (as the particle filter's HOPELESS).
LOST = 30.0
#: A z whose R = ∂q/∂z has an entry this many times larger than the largest of full
#: pivoting's choice is replaced by it (R grows without bound where z nears a dead point;
#: a ratio, for hysteresis: no switching back and forth between two choices about as
#: good).
RESELECT = 4.0
#: A track without residuals (the smoother's): the mean normalized squared residual per
#: reading above which its intervals are too narrow, over at least NIS_READINGS readings.
#: The filters' tracks are tested instead by estimation/consistency.py: per window and
#: over the run at a Bonferroni level, and for whiteness (a mean of 2 let intervals that
#: held the truth 55 % and 39 % of the time pass, issue 55).
NIS_LIMIT = 2.0
NIS_READINGS = 50
#: 95 % two-sided interval of a Gaussian, in σ.
Z95 = 1.959963984540054


class KalmanError(ValueError):
    """A mechanism or a request the filter cannot take (said in words)."""


@dataclass(frozen=True)
class KalmanTrack:
    """The filter's estimates over a readings file, one row per filter step."""

    t: Array  # (N,)
    q: Array  # (N, n) the mechanism's state at the filter's mean
    qd: Array  # (N, n)
    qdd: Array  # (N, n) the dynamics' accelerations there (unknown forces included)
    sigma_q: Array  # (N, n) σ of q from the covariance (R P_zz Rᵀ)
    sigma_qd: Array  # (N, n)
    force: Array  # (N, forces) the estimated generalized forces
    sigma_force: Array  # (N, forces)
    nis: Array  # (N,) normalized innovation squared of the step's readings (NaN: none)
    weighed: Array  # (N,) bool: the step weighed a reading
    lost: Array  # (N,) bool: a reading beyond LOST σ of the prediction
    failed: bool = False  # the state could not be assembled: the track stops there
    readings: Array | None = None  # (N,) readings weighed per step
    #: (N, labels) each reading minus its model at the step's estimate (NaN: no reading),
    #: for the whiteness test (None: the legacy mean-NIS rule alone, the smoother's)
    residuals: Array | None = None
    labels: tuple[str, ...] = ()  # the residuals' columns

    def inconsistencies(self) -> list[Inconsistency]:
        """The failed innovation tests (estimation/consistency.py): the normalized
        innovations squared of each second and of the run against the χ² bound, and each
        output's residuals for whiteness."""
        from mbgen.estimation.consistency import run_tests

        count = (np.zeros(len(self.t)) if self.readings is None
                 else np.asarray(self.readings, dtype=float))
        squares = np.where(count > 0, np.nan_to_num(self.nis, nan=np.inf), 0.0)
        return run_tests(squares, count, self.t, ["readings"], self.residuals, self.labels)

    def distrust(self) -> str | None:
        """Why the track is not to be trusted, in words (None: it is): a state that could
        not be assembled, readings beyond LOST σ of the prediction, or innovations
        inconsistent with the covariance (too large in a second or over the run, or
        correlated in time: the intervals too narrow for the model's own error)."""
        if self.failed:
            end = f"{self.t[-1]:g} s" if len(self.t) else "the start"
            return (f"the filter's state could not be assembled after t = {end} (a position "
                    "or velocity problem failed: a dead point or a diverged estimate)")
        if self.lost.any():
            at = self.t[self.lost]
            return (f"{len(at)} reading(s) lay more than {LOST:g} σ from the prediction, "
                    f"the first at t = {at[0]:g} s: the filter lost the state")
        if self.residuals is not None:
            from mbgen.estimation.consistency import describe

            failed = self.inconsistencies()
            if failed:
                return ("its innovations are inconsistent with its covariance ("
                        f"{describe(failed)}): the intervals are too narrow for the "
                        "model's error (try --model-error --noise-force auto, which "
                        "estimates a force that absorbs it; or raise --noise-accel, or "
                        "check --noise-sensor and the model's parameters)")
            return None
        count = int(self.readings.sum()) if self.readings is not None else 0
        if count >= NIS_READINGS:
            ratio = float(np.nansum(self.nis)) / count
            if ratio > NIS_LIMIT:
                return (f"its innovations are {np.sqrt(ratio):.3g} times larger than its "
                        "covariance says (mean normalized innovation squared "
                        f"{ratio:.3g} per reading, above {NIS_LIMIT:g}): the intervals are "
                        "too narrow (raise --noise-accel, or check --noise-sensor)")
        return None

    def table(self, names: Sequence[str], force_names: Sequence[str] = (),
              sigma: bool = False) -> tuple[list[str], Array]:
        """The CSV's header and rows: t, each coordinate with _lo/_hi (95 %) and, with
        ``sigma``, _sigma, then force_<c> likewise, then nis (0 on a step without a
        reading: the sum over none of them; a NaN cell made the table unreadable by
        `animate`) and lost."""
        header, cells = [columns.TIME], [self.t]
        for label, mean, sd in [*zip(names, self.q.T, self.sigma_q.T, strict=True),
                                *zip([columns.force(c) for c in force_names], self.force.T,
                                     self.sigma_force.T, strict=True)]:
            header += [label, *columns.interval(label)] + ([columns.sigma(label)]
                                                           if sigma else [])
            cells += [mean, mean - Z95 * sd, mean + Z95 * sd] + ([sd] if sigma else [])
        header += [columns.NIS, columns.LOST]
        cells += [np.where(np.isnan(self.nis), 0.0, self.nis), self.lost.astype(float)]
        return header, np.column_stack(cells)


class ErrorEKF:
    """The errorEKF of a compiled mechanism (see the module's notes).

    ``sigma_a``: acceleration noise on each z̈ [m/s² or rad/s²]; ``sigma_s``,
    ``sigma_acc``: the sensors' and accelerometers' reading noise (default: the file's);
    ``unknown_forces``: coordinates whose generalized force the filter estimates, with
    random-walk intensity ``sigma_f`` [N/√s or N m/√s]; ``model_error``: also at each of
    the initial independent coordinates not among them (a slowly varying force that
    absorbs the model's own error, which the white acceleration noise cannot: a mass 5 %
    off makes the residuals of an accelerometer correlated in time, benchmarks/
    estimators.py); ``q0``, ``qd0``: the initial state (default: the file's q0 at rest),
    on the branch it lies in; ``spread``, ``speed``, ``force_spread``: the initial σ of
    z, ż and f."""

    #: The unscented transform's (α, β, κ) for the C run (None: the errorEKF's
    #: linearization; estimation/ukf.py's UnscentedKF sets them).
    unscented: tuple[float, float, float] | None = None
    #: The filter's name in messages.
    label = "errorEKF"

    def __init__(self, mech: CompiledMechanism, sigma_a: float = 1.0,
                 sigma_s: float | Array | None = None, sigma_acc: float | Array | None = None,
                 unknown_forces: Sequence[str] = (), sigma_f: float = 1.0,
                 q0: Array | None = None, qd0: Array | None = None, spread: float = 0.1,
                 speed: float = 1.0, force_spread: float = 1.0,
                 model_error: bool = False) -> None:
        if not mech.sensor_labels and not mech.accelerometer_labels:
            raise KalmanError(f"{mech.name} has no sensors")
        self.mech = mech
        self.rows = np.asarray(mech.active_rows, dtype=int)
        d = mech.dof
        if len(self.rows) + d != mech.n:
            raise KalmanError(f"{mech.name}: the filter needs independent constraints "
                              f"({len(self.rows)} independent rows and {d} degrees of "
                              f"freedom for {mech.n} coordinates)")
        self.d = d
        self.sigma_a = float(sigma_a)
        self.sigma_s = mech.sensor_noise(sigma_s)
        self.sigma_acc = (mech.accelerometer_noise(sigma_acc) if mech.accelerometer_labels
                          else np.zeros(0))
        q = mech.q0.copy() if q0 is None else np.asarray(q0, dtype=float).copy()
        self.zi = np.asarray(mech.partition(q)[0], dtype=np.int32)
        names = list(unknown_forces)
        if model_error:
            names += [c for c in (mech.coordinate_names[int(i)] for i in self.zi)
                      if c not in names]
        #: the coordinates of the estimated forces, as the track's force columns
        self.force_names = names
        self.forces = np.array([mech.coordinate_index(c) for c in names], dtype=int)
        self.sigma_f = float(sigma_f)
        q = mech.solve_position(q, z=self.zi)
        qd = np.zeros(mech.n) if qd0 is None else np.asarray(qd0, dtype=float)
        self.q, self.qd = q, mech.solve_velocity(q, qd[self.zi], z=self.zi)
        self.f = np.zeros(len(self.forces))
        self.P = np.diag(np.concatenate([np.full(d, spread**2), np.full(d, speed**2),
                                         np.full(len(self.forces), force_spread**2)]))
        self.switches = 0

    @property
    def size(self) -> int:
        return 2 * self.d + len(self.forces)

    # -- the mechanism's state --------------------------------------------------------
    def generalized_forces(self, f: Array) -> Array:
        """Q (n,) with the unknown forces f (forces,) at their coordinates."""
        Q = np.zeros(self.mech.n)
        Q[self.forces] = f
        return Q

    def assemble(self, z: Array, zd: Array, guess: Array) -> tuple[Array, Array]:
        """q, q̇ (n,) with these z, ż, solved from ``guess`` (its branch)."""
        mech = self.mech
        start = guess.copy()
        start[self.zi] = z
        q = mech.solve_position(start, z=self.zi)
        return q, mech.solve_velocity(q, zd, z=self.zi)

    def state_maps(self, q: Array, qd: Array, zi: Array | None = None) -> tuple[Array, Array]:
        """R = ∂q/∂z and V = ∂q̇/∂z at fixed ż (n, d each), for z = ``zi``."""
        mech, m, d = self.mech, len(self.rows), self.d
        zi = self.zi if zi is None else zi
        augmented = np.zeros((mech.n, mech.n))
        augmented[:m] = mech.phi_q(q)[self.rows]
        augmented[m + np.arange(d), zi] = 1.0
        inverse = np.linalg.inv(augmented)
        r_map, s_map = inverse[:, m:], inverse[:, :m]
        rate_q = mech.phiq_v_q(q, qd)[self.rows]
        return r_map, -s_map @ (rate_q @ r_map)

    # -- prediction ----------------------------------------------------------------------
    def transition(self, dt: float, noise: Array | None = None,
                   start: tuple[Array, Array, Array] | None = None
                   ) -> tuple[Array, Array, Array, Array]:
        """One RK4 step of (z, ż) under f from (q, q̇) (``start``: q, q̇ (n,) on the
        constraints and f (forces,); default the filter's), with ``noise`` (d,) added to
        z̈ over the step (default none), and its exact Jacobians: the new q, q̇ (n,),
        F = ∂x_k+1/∂x_k (size²) and G = ∂x_k+1/∂ε (size, d)."""
        mech, d, nf = self.mech, self.d, len(self.forces)
        eps = np.zeros(d) if noise is None else np.asarray(noise, dtype=float)
        q, qd, f = (self.q, self.qd, self.f) if start is None else start
        Q = self.generalized_forces(f)
        width = 2 * d + nf + d  # derivatives with respect to (z, ż, f, ε)
        start_x = np.concatenate([q[self.zi], qd[self.zi]])
        slope_prev = np.zeros(2 * d)
        dslope_prev = np.zeros((2 * d, width))
        total, dtotal = np.zeros(2 * d), np.zeros((2 * d, width))
        base = np.zeros((2 * d, width))
        base[:, :2 * d] = np.eye(2 * d)
        for stage, (c, w) in enumerate(((0.0, 1.0), (0.5, 2.0), (0.5, 2.0), (1.0, 1.0))):
            x = start_x + c * dt * slope_prev
            dx = base + c * dt * dslope_prev
            if stage:
                q, qd = self.assemble(x[:d], x[d:], q)
            zdd, a_z, a_w, a_q = mech.independent_dynamics(q, qd, Q, z=self.zi)
            slope = np.concatenate([x[d:], zdd + eps])
            dslope = np.zeros((2 * d, width))
            dslope[:d] = dx[d:]
            dslope[d:] = a_z @ dx[:d] + a_w @ dx[d:]
            dslope[d:, 2 * d:2 * d + nf] += a_q[:, self.forces]
            dslope[d:, 2 * d + nf:] += np.eye(d)
            total += w * slope
            dtotal += w * dslope
            slope_prev, dslope_prev = slope, dslope
        end = start_x + dt / 6.0 * total
        dend = base + dt / 6.0 * dtotal
        q, qd = self.assemble(end[:d], end[d:], q)
        F = np.eye(self.size)
        F[:2 * d] = dend[:, :2 * d + nf]
        G = np.zeros((self.size, d))
        G[:2 * d] = dend[:, 2 * d + nf:]
        return q, qd, F, G

    def predict(self, dt: float) -> None:
        """x and P one step of dt ahead: P = F P Fᵀ + σa² G Gᵀ + σf² dt on the forces."""
        q, qd, F, G = self.transition(dt)
        self.q, self.qd = q, qd
        P = F @ self.P @ F.T + self.sigma_a**2 * (G @ G.T)
        nf = len(self.forces)
        if nf:
            P[2 * self.d:, 2 * self.d:] += self.sigma_f**2 * dt * np.eye(nf)
        self.P = 0.5 * (P + P.T)

    # -- update ------------------------------------------------------------------------
    def measurement(self, seen: Array) -> tuple[Array, Array, Array]:
        """The readings' model h (k,), its Jacobian H (k, size) with respect to the
        filter's state and its noise covariance (k, k), for the labels ``seen`` (bool,
        sensors then accelerometers)."""
        mech, d = self.mech, self.d
        q, qd = self.q, self.qd
        r_map, v_map = self.state_maps(q, qd)
        count = len(mech.sensor_labels)
        parts, jac, noise = [], [], []
        if seen[:count].any():
            s = seen[:count]
            h, h_q, h_qd = mech.sensors_with_jacobians(q, qd)
            H = np.zeros((count, self.size))
            H[:, :d] = h_q @ r_map + h_qd @ v_map
            H[:, d:2 * d] = h_qd @ r_map
            parts.append(h[s])
            jac.append(H[s])
            noise.append(self.sigma_s[s] ** 2)
        if seen[count:].any():
            s = seen[count:]
            Q = self.generalized_forces(self.f)
            qdd, j_q, j_qd, j_Q = mech.forward_dynamics_jacobians(q, qd, Q)
            a = mech.accelerometers(q, qdd).ravel()
            a_q = mech.accelerometers_q(q, qdd).reshape(len(a), -1)
            a_qdd = mech.accelerometers_qdd(q, qdd).reshape(len(a), -1)
            H = np.zeros((len(a), self.size))
            H[:, :d] = a_q @ r_map + a_qdd @ (j_q @ r_map + j_qd @ v_map)
            H[:, d:2 * d] = a_qdd @ (j_qd @ r_map)
            H[:, 2 * d:] = a_qdd @ j_Q[:, self.forces]
            b = (a_qdd @ r_map)[s]
            parts.append(a[s])
            jac.append(H[s])
            covariance = np.diag(self.sigma_acc[s] ** 2) + self.sigma_a**2 * (b @ b.T)
            noise.append(covariance)
        blocks = [np.diag(n) if n.ndim == 1 else n for n in noise]
        k = sum(len(b) for b in blocks)
        covariance = np.zeros((k, k))
        at = 0
        for b in blocks:
            covariance[at:at + len(b), at:at + len(b)] = b
            at += len(b)
        return np.concatenate(parts), np.vstack(jac), covariance

    def update(self, y: Array) -> tuple[float, bool]:
        """The Kalman update with the readings y (labels; NaN: none), Joseph form, then
        q, q̇ assembled at the corrected (z, ż) on the current branch. Returns the
        normalized innovation squared (NaN: no reading) and whether the readings lie
        beyond LOST σ of the prediction."""
        seen = np.isfinite(y)
        if not seen.any():
            return float("nan"), False
        h, H, noise = self.measurement(seen)
        innovation = y[seen] - h
        S = H @ self.P @ H.T + noise
        K = np.linalg.solve(S, H @ self.P).T
        nis = float(innovation @ np.linalg.solve(S, innovation))
        dx = K @ innovation
        A = np.eye(self.size) - K @ H
        self.P = A @ self.P @ A.T + K @ noise @ K.T
        self.P = 0.5 * (self.P + self.P.T)
        d = self.d
        self.q, self.qd = self.assemble(self.q[self.zi] + dx[:d], self.qd[self.zi]
                                        + dx[d:2 * d], self.q)
        self.f = self.f + dx[2 * d:]
        self._reselect()
        return nis, nis > LOST**2 * len(h)

    def _reselect(self) -> None:
        """z chosen again by full pivoting where the current one's R = ∂q/∂z is RESELECT
        times larger (max |entry|) than that choice's; P carried by the exact map
        (z, ż) → (z', ż')."""
        mech = self.mech
        best = np.asarray(mech.partition(self.q, z=())[0], dtype=np.int32)
        if set(best.tolist()) == set(self.zi.tolist()):
            return
        r_map, v_map = self.state_maps(self.q, self.qd)
        if np.abs(r_map).max() <= RESELECT * np.abs(self.state_maps(self.q, self.qd,
                                                                    best)[0]).max():
            return
        d = self.d
        T = np.eye(self.size)
        T[:d, :d] = r_map[best]
        T[d:2 * d, :d] = v_map[best]
        T[d:2 * d, d:2 * d] = r_map[best]
        self.P = T @ self.P @ T.T
        self.zi = best
        self.switches += 1

    # -- estimates -----------------------------------------------------------------------
    def sigmas(self) -> tuple[Array, Array, Array]:
        """σ of q, q̇ (n,) and of f from P: δq = R δz, δq̇ = V δz + R δż."""
        r_map, v_map = self.state_maps(self.q, self.qd)
        d = self.d
        zero = np.zeros_like(r_map)
        to_q = np.hstack([r_map, zero])
        to_qd = np.hstack([v_map, r_map])
        P = self.P[:2 * d, :2 * d]
        sq = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", to_q, P, to_q), 0.0))
        sqd = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", to_qd, P, to_qd), 0.0))
        return sq, sqd, np.sqrt(np.maximum(np.diag(self.P)[2 * d:], 0.0))

    def run(self, t: Array, readings: Array, dt: float | None = None,
            native: bool = True) -> KalmanTrack:
        """The filter over readings (N, labels) at times t (N,) on steps of dt (default:
        the readings' median period) from t[0] (a step takes the reading within half a
        step of its time, as the particle filter's run; the first weighs the initial
        belief). ``native``: the whole run in one C call (mbgen/csrc/kalman.c), else step
        by step here (the reference). Stops at a state that cannot be assembled
        (``failed``)."""
        from mbgen.estimation.particle_filter import filter_times

        t = np.asarray(t, dtype=float)
        times, step = filter_times(t, dt)
        row = np.searchsorted(t, times - step / 2)
        rows = np.minimum(row, len(t) - 1)
        at_step = (row < len(t)) & (np.abs(t[rows] - times) < step / 2)
        y = np.full((len(times), len(self.sigma_s) + len(self.sigma_acc)), np.nan)
        y[at_step] = np.asarray(readings, dtype=float)[rows[at_step]]
        count = np.isfinite(y).sum(axis=1)
        weighed = count > 0
        if native:
            return self.with_residuals(self._run_native(times, step, y, count), y)
        n, nf, N = self.mech.n, len(self.forces), len(times)
        out = {name: np.full((N, n), np.nan) for name in ("q", "qd", "qdd", "sq", "sqd")}
        force, sforce = np.full((N, nf), np.nan), np.full((N, nf), np.nan)
        nis = np.full(N, np.nan)
        lost = np.zeros(N, dtype=bool)
        done, failed = N, False
        for k in range(N):
            try:
                if k:
                    self.predict(step)
                nis[k], lost[k] = self.update(y[k])
                sq, sqd, sf = self.sigmas()
                qdd = self.mech.forward_dynamics(self.q, self.qd, self.generalized_forces(self.f))
            except Exception as exc:  # a state the solvers cannot assemble: stop there
                if not _is_state_failure(exc):
                    raise
                done, failed = k, True
                break
            out["q"][k], out["qd"][k], out["qdd"][k] = self.q, self.qd, qdd
            out["sq"][k], out["sqd"][k] = sq, sqd
            force[k], sforce[k] = self.f, sf
        cut = slice(0, done)
        return self.with_residuals(KalmanTrack(
            times[cut], out["q"][cut], out["qd"][cut], out["qdd"][cut], out["sq"][cut],
            out["sqd"][cut], force[cut], sforce[cut], nis[cut], weighed[cut], lost[cut],
            failed, count[cut]), y)

    def with_residuals(self, track: KalmanTrack, y: Array) -> KalmanTrack:
        """The track with each reading's residual at the step's estimate (y (N, labels),
        NaN: none): the sensors at (q, q̇), the accelerometers at (q, q̈)."""
        mech, N = self.mech, len(track.t)
        model = np.full((N, y.shape[1]), np.nan)
        count = len(mech.sensor_labels)
        if N and count:
            model[:, :count] = np.asarray(mech.sensors(track.q, track.qd)).reshape(N, -1)
        if N and mech.accelerometer_labels:
            model[:, count:] = np.asarray(mech.accelerometers(track.q, track.qdd)
                                          ).reshape(N, -1)
        return replace(track, residuals=y[:N] - model,
                       labels=(*mech.sensor_labels, *mech.accelerometer_labels))

    def _run_native(self, times: Array, step: float, y: Array, count: Array
                    ) -> KalmanTrack:
        """run() in one C call; the filter's state afterwards is where the C left it."""
        got = self.mech.kalman_run(self.q, self.qd, self.zi, self.forces, self.f, self.P, y,
                                   self.sigma_s, self.sigma_acc, step, self.sigma_a,
                                   self.sigma_f, LOST**2, RESELECT, self.unscented)
        self.q, self.qd, self.f, self.P = got.state
        self.zi = got.z
        self.switches += got.switches
        done = len(got.q)
        return KalmanTrack(times[:done], got.q, got.qd, got.qdd, got.sigma_q, got.sigma_qd,
                           got.force, got.sigma_force, got.nis, count[:done] > 0,
                           got.lost, got.status != 0, count[:done])


def _is_state_failure(exc: Exception) -> bool:
    """A singular or unsolvable state (the runtime's errors), or a singular matrix."""
    from mbgen.errors import SingularConfigurationError

    return isinstance(exc, SingularConfigurationError | np.linalg.LinAlgError)

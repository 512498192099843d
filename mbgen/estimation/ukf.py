"""The unscented Kalman filter in independent coordinates (UKF): the errorEKF's state
x = (z, ż, f), noise model, readings and trust rules (estimation/kalman.py), with the
linearizations replaced by the unscented transform (Julier and Uhlmann 1997; Wan and van
der Merwe 2000; on multibody models Pastorino et al. 2013 and Sanjurjo et al. 2017).

Prediction: the sigma points of the state augmented with the acceleration noise ε
(x, ε) ~ N((x̄, 0), diag(P, σa² I)), 2L + 1 of them for L = size + d; each is assembled
into (q, q̇) by the position and velocity problems started at the filter's mean (its
branch) and carried one RK4 step with its ε held on z̈, exactly as the errorEKF's mean;
the forces then walk by σf² dt. The mean's (q, q̇) is assembled at the points' weighted
mean, from the central point's. Update: sigma points of (x̄, P) again, each assembled on
the branch and read by the sensors h(q, q̇) and the accelerometers a(q, q̈) (q̈ the
dynamics' under the point's forces); the reading noise is the errorEKF's (accelerometers:
their σ² plus the z̈ noise they see, σa² B Bᵀ at the mean). Then, as the errorEKF, the
dependent coordinates follow from the position and velocity problems at the corrected
(z, ż), z is chosen again where it becomes ill-conditioned (P carried across), and σ of
q, q̇ comes from P through R = ∂q/∂z and V = ∂q̇/∂z at the mean.

The weights are the unscaled transform's, α = 1, β = 2, κ = 0 (points at ±√L σ, every
weight but the centre's 1/(2L), none negative: P stays positive definite). For a linear
model and sensor the transform is exact and the filter is the linear Kalman filter
(tests/test_kalman.py). This module in NumPy is the reference of the run in C
(mb_ukf_run in mbgen/csrc/kalman.c).
"""

from __future__ import annotations

import numpy as np

from mbgen.estimation.kalman import LOST, ErrorEKF

Array = np.ndarray
#: The unscented transform's spread α, prior β and κ (see the module's notes).
ALPHA, BETA, KAPPA = 1.0, 2.0, 0.0


def sigma_weights(size: int, alpha: float = ALPHA, beta: float = BETA,
                  kappa: float = KAPPA) -> tuple[float, Array, Array]:
    """The scale c (the points are x̄ ± columns of chol(c P)) and the weights of the mean
    and of the covariance (2 size + 1,) of the scaled unscented transform: point 0 the
    mean, then + and − of each column in turn."""
    lam = alpha**2 * (size + kappa) - size
    c = size + lam
    wm = np.full(2 * size + 1, 0.5 / c)
    wc = wm.copy()
    wm[0] = lam / c
    wc[0] = lam / c + 1.0 - alpha**2 + beta
    return c, wm, wc


def sigma_points(mean: Array, P: Array, c: float) -> Array:
    """The 2L + 1 points (2L + 1, L) of N(mean, P): mean, then mean ± column j of the
    lower Cholesky factor of c P."""
    root = np.linalg.cholesky(c * P)
    points = [mean]
    for j in range(len(mean)):
        points += [mean + root[:, j], mean - root[:, j]]
    return np.array(points)


def weighed(points: Array, wm: Array, wc: Array) -> tuple[Array, Array, Array]:
    """The weighted mean (cols,), the deviations from it (rows, cols) and their weighted
    covariance (cols, cols)."""
    mean = wm @ points
    dev = points - mean
    return mean, dev, (wc[:, None] * dev).T @ dev


class UnscentedKF(ErrorEKF):
    """The UKF of a compiled mechanism (see the module's notes); options as ErrorEKF's."""

    unscented = (ALPHA, BETA, KAPPA)
    label = "UKF"

    def _state(self, x: Array, r_map: Array, central: bool) -> tuple[Array, Array]:
        """q, q̇ of a sigma point x (z, ż, ...): the filter's own for the central point,
        else assembled from the mean's q moved to first order, q + R (z − z̄) (a point
        √L σ away may be far from the mean in the dependent coordinates too)."""
        d = self.d
        if central:
            return self.q, self.qd
        guess = self.q + r_map @ (x[:d] - self.q[self.zi])
        return self.assemble(x[:d], x[d:2 * d], guess)

    def predict(self, dt: float) -> None:
        """x̄ and P one step of dt ahead through the sigma points of (x, ε)."""
        d, size, nf = self.d, self.size, len(self.forces)
        P = np.zeros((size + d, size + d))
        P[:size, :size] = self.P
        P[size:, size:] = self.sigma_a**2 * np.eye(d)
        c, wm, wc = sigma_weights(size + d)
        mean = np.concatenate([self.q[self.zi], self.qd[self.zi], self.f, np.zeros(d)])
        moved, centre = [], (self.q, self.qd)
        r_map = self.state_maps(self.q, self.qd)[0]
        for k, x in enumerate(sigma_points(mean, P, c)):
            q, qd = self._state(x, r_map, k == 0)
            f = x[2 * d:size]
            q, qd, _, _ = self.transition(dt, x[size:], start=(q, qd, f))
            moved.append(np.concatenate([q[self.zi], qd[self.zi], f]))
            if k == 0:
                centre = (q, qd)
        x_bar, _, P = weighed(np.array(moved), wm, wc)
        if nf:
            P[2 * d:, 2 * d:] += self.sigma_f**2 * dt * np.eye(nf)
        self.P = 0.5 * (P + P.T)
        self.q, self.qd = self.assemble(x_bar[:d], x_bar[d:2 * d], centre[0])
        self.f = x_bar[2 * d:]

    def readings_at(self, q: Array, qd: Array, f: Array, seen: Array) -> Array:
        """The model's readings (k,) at a state for the labels ``seen`` (bool, sensors
        then accelerometers)."""
        mech = self.mech
        count = len(mech.sensor_labels)
        parts = []
        if seen[:count].any():
            parts.append(mech.sensors(q, qd).ravel()[seen[:count]])
        if seen[count:].any():
            qdd = mech.forward_dynamics(q, qd, self.generalized_forces(f))
            parts.append(mech.accelerometers(q, qdd).ravel()[seen[count:]])
        return np.concatenate(parts)

    def update(self, y: Array) -> tuple[float, bool]:
        """The unscented update with the readings y (labels; NaN: none), then q, q̇
        assembled at the corrected (z, ż) and z chosen again; returns the normalized
        innovation squared (NaN: no reading) and whether it lies beyond LOST σ."""
        seen = np.isfinite(y)
        if not seen.any():
            return float("nan"), False
        d, size = self.d, self.size
        noise = self.measurement(seen)[2]  # the errorEKF's reading noise at the mean
        c, wm, wc = sigma_weights(size)
        mean = np.concatenate([self.q[self.zi], self.qd[self.zi], self.f])
        points = sigma_points(mean, self.P, c)
        r_map = self.state_maps(self.q, self.qd)[0]
        read = np.array([self.readings_at(*self._state(x, r_map, k == 0),
                                          x[2 * d:], seen) for k, x in enumerate(points)])
        h, dev, S = weighed(read, wm, wc)
        S = S + noise
        cross = (wc[:, None] * (points - mean)).T @ dev  # (size, k)
        K = np.linalg.solve(S, cross.T).T
        innovation = y[seen] - h
        nis = float(innovation @ np.linalg.solve(S, innovation))
        dx = K @ innovation
        P = self.P - cross @ K.T
        self.P = 0.5 * (P + P.T)
        self.q, self.qd = self.assemble(mean[:d] + dx[:d], mean[d:2 * d] + dx[d:2 * d],
                                        self.q)
        self.f = self.f + dx[2 * d:]
        self._reselect()
        return nis, nis > LOST**2 * len(h)

"""A particle-filter observer for mechanisms (SIR, Blanco-Claraco, Torres-Moreno and
Giménez-Fernández, "Multibody dynamic systems as Bayesian networks", Algorithm 1).

Each particle is a full state (q, q̇) on the constraint manifold plus the label of the
assembly branch it was drawn in. A state carries its branch with it: the prediction moves
q continuously (every position problem starts from the particle's own last q), so the
label set at initialization stays true. Branches are found automatically (the position
problem at the initial independent coordinates from many guesses, distinct solutions
kept) and particles are drawn in each by continuation from its solution, so the labels
mean the same thing for every particle.

Every step is a handful of batched C calls over all particles (forward dynamics, the
position and velocity projections, the sensor model); particles whose state fails (a
singular configuration, a failed projection) get zero weight and are replaced at the next
resampling, never poisoning the batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from mbgen.runtime.compiled import CompiledMechanism

Array = np.ndarray
HOPELESS = 30.0  # readings this many σ from every particle: the belief has lost the truth


@dataclass(frozen=True)
class Estimate:
    """The filter's belief after one step."""

    mean: Array  # (n,) expected q
    low: Array  # (n,) 2.5 % quantile of q
    high: Array  # (n,) 97.5 % quantile of q
    ess: float  # effective sample size
    branch_probability: Array  # (branches,)
    reinitialized: bool  # all weights had vanished: the filter started over


def find_branches(mech: CompiledMechanism, z: list[int], z_value: Array, guesses: int = 64,
                  spread: float | None = None, seed: int = 0) -> Array:
    """The distinct assemblies (branches, k x n) with q[z] = z_value, from random guesses
    around q0; sorted, so the same mechanism always numbers them the same way."""
    rng = np.random.default_rng(seed)
    scale = spread if spread is not None else max(1.0, float(np.abs(mech.q0).max()))
    # q0 itself, then guesses ever farther from it (a large mechanism's Newton needs
    # nearby ones, a small one's other branches need far ones)
    reach = scale * np.geomspace(0.02, 1.0, guesses)[:, None]
    start = mech.q0 + reach * rng.uniform(-1.0, 1.0, (guesses, mech.n))
    start[0] = mech.q0
    start[:, z] = z_value
    solved, status = mech.solve_position(start, z=z, errors="status")
    found: list[Array] = []
    for q in solved[status == 0]:
        if all(np.abs(q - other).max() > 1e-6 * scale for other in found):
            found.append(q)
    if not found:
        raise ValueError(f"no assembly found with {[mech.coordinate_names[i] for i in z]} "
                         f"= {np.asarray(z_value).tolist()}")
    return np.array(sorted(found, key=lambda q: tuple(np.round(q, 9))))


class ParticleFilter:
    """Tracks a mechanism's state and assembly branch from its sensors.

    ``sigma_a``: acceleration noise of the prediction (m/s² or rad/s² per coordinate);
    ``sigma_s``: standard deviation of each sensor output (default: the file's ``noise``,
    else 1e-3). ``z``: the independent coordinates the initial belief is drawn over
    (default: the mechanism's); ``z_range`` its half-width around q0 (default: the
    mechanism's size); ``speed``: the largest initial |ż|.
    """

    def __init__(self, mech: CompiledMechanism, particles: int = 100, sigma_a: float = 1.0,
                 sigma_s: float | Array | None = None, seed: int = 0,
                 z: list[str] | None = None, z_range: float | None = None,
                 speed: float = 1.0) -> None:
        if not mech.sensor_labels:
            raise ValueError(f"{mech.name} has no sensors: declare them under `sensors:` in "
                             "its file (gyroscope, encoder, position, velocity)")
        self.mech = mech
        self.count = int(particles)
        self.sigma_a = float(sigma_a)
        noise = mech.meta.get("sensor_noise") or [None] * len(mech.sensor_labels)
        default = np.array([1e-3 if s is None else float(s) for s in noise])
        self.sigma_s = default if sigma_s is None else np.broadcast_to(
            np.asarray(sigma_s, dtype=float), default.shape).copy()
        self.rng = np.random.default_rng(seed)
        names = z or mech.independent_coordinates()
        self.z = [mech.coordinate_index(c) if isinstance(c, str) else int(c) for c in names]
        self.z_range = z_range if z_range is not None else max(
            1.0, float(np.ptp(mech.q0)))
        self.speed = speed
        self.branches = find_branches(mech, self.z, mech.q0[self.z])
        self.ranges = [self._reach(b) for b in self.branches]
        self.initialize()

    def _reach(self, solution: Array, steps: int = 200) -> tuple[Array, Array]:
        """How far each independent coordinate can move from a branch's assembly (the
        others held) before the branch ends, within ±z_range: the initial belief's box."""
        low, high = solution[self.z].copy(), solution[self.z].copy()
        for j in range(len(self.z)):
            for sign, bound in ((-1.0, low), (1.0, high)):
                path = np.repeat(solution[self.z][None], steps, axis=0)
                path[:, j] += sign * np.linspace(0.0, self.z_range, steps)
                _, status = self.mech.solve_position_path(solution, path, self.z,
                                                          errors="status")
                failed = np.flatnonzero(status != 0)
                reached = (failed[0] if failed.size else steps) - 1  # before the first fail
                bound[j] = path[max(reached, 0), j]
        return low, high

    # -- belief ------------------------------------------------------------------------------
    def initialize(self) -> None:
        """Uniform over the independent coordinates (q0 ± z_range), their rates and the
        branches: each particle is continued from its branch's assembly to its own z."""
        mech, M = self.mech, self.count
        q = np.empty((M, mech.n))
        label = np.empty(M, dtype=int)
        filled = 0
        for _ in range(50):
            if filled == M:
                break
            branch = self.rng.integers(len(self.branches), size=M - filled)
            for b in branch:
                low, high = self.ranges[b]
                zt = self.rng.uniform(low, high)
                path = np.linspace(self.branches[b][self.z], zt, 25)
                solved, status = mech.solve_position_path(self.branches[b], path, self.z,
                                                          errors="status")
                if status[-1] == 0 and filled < M:
                    q[filled], label[filled] = solved[-1], b
                    filled += 1
        if filled < M:
            raise ValueError("could not draw the initial particles: is z_range reachable?")
        rates = np.zeros((M, mech.n))
        rates[:, self.z] = self.rng.uniform(-self.speed, self.speed, (M, len(self.z)))
        self.q = q
        self.qd = mech.solve_velocity(q, rates[:, self.z], z=self.z)
        self.branch = label
        self.log_w = np.full(M, -np.log(M))

    # -- one step ----------------------------------------------------------------------------
    def predict(self, dt: float) -> None:
        """RK4 of the dynamics with a random acceleration per particle (held over the
        step), then back onto Φ = 0 and Φq q̇ = 0 (minimum change)."""
        mech = self.mech
        noise = self.rng.normal(0.0, self.sigma_a, self.q.shape)
        q, qd = self.q, self.qd

        def acceleration(qs: Array, vs: Array) -> Array:
            a, status = mech.forward_dynamics(qs, vs, errors="status")
            bad = status != 0
            a[bad] = 0.0
            self.log_w[bad] = -np.inf
            return a + noise

        k1v = acceleration(q, qd)
        k1q = qd
        k2v = acceleration(q + 0.5 * dt * k1q, qd + 0.5 * dt * k1v)
        k2q = qd + 0.5 * dt * k1v
        k3v = acceleration(q + 0.5 * dt * k2q, qd + 0.5 * dt * k2v)
        k3q = qd + 0.5 * dt * k2v
        k4v = acceleration(q + dt * k3q, qd + dt * k3v)
        k4q = qd + dt * k3v
        q_new = q + dt / 6 * (k1q + 2 * k2q + 2 * k3q + k4q)
        qd_new = qd + dt / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)
        q_new, status = mech.solve_position(q_new, minimum_norm=True, errors="status")
        qd_new, status_v = mech.project_velocity(np.where(status[:, None] == 0, q_new, q),
                                                 qd_new, errors="status")
        bad = (status != 0) | (status_v != 0) | ~np.isfinite(q_new).all(axis=1)
        self.log_w[bad] = -np.inf
        self.q = np.where(bad[:, None], q, q_new)
        self.qd = np.where(bad[:, None], qd, qd_new)

    def update(self, readings: Mapping[str, float] | Array) -> bool:
        """Weights times the likelihood of the readings (missing or NaN: no reading from
        that sensor); normalized in log space; systematic resampling when ESS < M/2.
        Returns whether the filter had to start over (every weight vanished)."""
        y = self._readings(readings)
        seen = np.isfinite(y)
        hopeless = False
        if seen.any():
            h = self.mech.sensors(self.q, self.qd).reshape(self.count, -1)
            r = (h[:, seen] - y[seen]) / self.sigma_s[seen]
            likelihood = -0.5 * (r * r).sum(axis=1)
            self.log_w = self.log_w + likelihood
            # no particle within HOPELESS σ of the readings: every weight has vanished
            # (in floating point they would be exact zeros)
            best = np.nanmax(likelihood) if np.isfinite(likelihood).any() else -np.inf
            hopeless = best < -0.5 * HOPELESS**2 * int(seen.sum())
        self.log_w[np.isnan(self.log_w)] = -np.inf  # a broken particle weighs nothing
        top = np.max(self.log_w)
        if hopeless or not np.isfinite(top):
            self.initialize()
            return True
        self.log_w -= top + np.log(np.exp(self.log_w - top).sum())
        if self.ess() < self.count / 2:
            self._resample()
        return False

    def _readings(self, readings: Mapping[str, float] | Array) -> Array:
        labels = self.mech.sensor_labels
        if isinstance(readings, Mapping):
            unknown = set(readings) - set(labels)
            if unknown:
                raise KeyError(f"unknown sensor(s) {sorted(unknown)} (sensors: "
                               f"{', '.join(labels)})")
            return np.array([float(readings.get(label, np.nan)) for label in labels])
        return np.asarray(readings, dtype=float).reshape(len(labels))

    def ess(self) -> float:
        w = np.exp(self.log_w)
        return float(1.0 / (w * w).sum())

    def _resample(self) -> None:
        """Systematic resampling: one random offset, M evenly spaced pointers."""
        w = np.exp(self.log_w)
        positions = (self.rng.random() + np.arange(self.count)) / self.count
        index = np.minimum(np.searchsorted(np.cumsum(w), positions), self.count - 1)
        self.q, self.qd, self.branch = self.q[index], self.qd[index], self.branch[index]
        self.log_w = np.full(self.count, -np.log(self.count))

    def step(self, dt: float, readings: Mapping[str, float] | Array | None) -> Estimate:
        """Predict over dt, then weigh by the readings (None: no reading this step)."""
        self.predict(dt)
        restarted = False
        if readings is not None:
            restarted = self.update(readings)
        return self.estimate(restarted)

    def estimate(self, reinitialized: bool = False) -> Estimate:
        """Weighted mean and 95 % interval of every coordinate; angles by circular
        statistics (particles at π − 0.1 and −π + 0.1 average to π, not 0), in the turn of
        the heaviest particle."""
        w = np.exp(self.log_w)
        w = w / w.sum()
        angle = np.array([unit == "rad" for unit in self.mech.coordinate_units])
        reference = self.q[int(np.argmax(w))]
        # angles as deviations from the heaviest particle, wrapped to (−π, π]
        values = np.where(angle, reference + _wrap(self.q - reference), self.q)
        mean = w @ values
        circular = np.arctan2(w @ np.sin(values), w @ np.cos(values))
        mean = np.where(angle, reference + _wrap(circular - reference), mean)
        values = np.where(angle, mean + _wrap(values - mean), values)
        order = np.argsort(values, axis=0)
        cumulative = np.cumsum(w[order], axis=0)
        low = np.take_along_axis(values, order, 0)[
            (cumulative < 0.025).sum(axis=0).clip(0, self.count - 1), np.arange(self.mech.n)]
        high = np.take_along_axis(values, order, 0)[
            (cumulative < 0.975).sum(axis=0).clip(0, self.count - 1), np.arange(self.mech.n)]
        branches = np.bincount(self.branch, weights=w, minlength=len(self.branches))
        return Estimate(mean, low, high, self.ess(), branches, reinitialized)


def _wrap(angle: Array) -> Array:
    """Angles to (−π, π]."""
    return np.pi - np.mod(np.pi - angle, 2 * np.pi)

"""A particle-filter observer for mechanisms (SIR, Blanco-Claraco, Torres-Moreno and
Giménez-Fernández, "Multibody dynamic systems as Bayesian networks", Algorithm 1).

Each particle is a state on the constraint manifold, carried as its independent
coordinates and velocities (z, ż) with its configuration q, plus the label of the assembly
branch it was drawn in (branches are found automatically, see mbgen.estimation.branches).
As in the paper, z is chosen per particle and step by full pivoting on Φq, the
acceleration noise acts on z̈, and the dependent coordinates follow from the position
problem started at the particle's own last q, which keeps it on its branch.

Three departures from the paper, each because its set-up failed without it (the paper's
simulated experiment from a uniform belief, 100 particles: wrong branch or wrong crank
angle in most seeds):
- the branch is a static variable, so its posterior is a mixture: every branch keeps its
  own particles, weights and resampling, and its probability takes the likelihood of its
  own particles. Resampling noise can no longer lose the true branch before the readings
  tell the branches apart; a branch is dropped only when its probability is negligible;
- the uniform belief starts with `pool` times more particles and comes down to the
  requested number once the readings leave less than that many effective ones. Every
  branch sample gets the same number of copies, and the copies draw their velocities at
  stratified quantiles: the posterior soon becomes far narrower than the particles'
  spacing in (q, q̇), and a gap near the truth let a wrong branch claim 0.99
  (benchmarks/pf_calibration.py);
- resampled particles may be moved apart by a kernel of the cloud's spread (regularized
  particle filter, ``roughening``), so that copies of one particle do not stay together.
  Off by default: sized by each branch's own spread, the kernel is extra process noise
  for the less determined branch, and it made the branch probability overconfident
  (benchmarks/pf_calibration.py); 1000 particles track as well without it.

Two for precise sensors (issue 55; benchmarks/pf_precise.py), where the posterior is far
narrower than anything the particles' spacing or the acceleration noise reaches, and the
Furuta pendulum read by two encoders to 1e-4 rad started over at every reading:
- a fresh belief that a reading would leave with fewer than ``particles`` effective
  particles meets it in tempered stages (progressive correction), each followed by
  resampling and Metropolis–Hastings moves of the configurations;
- a branch that a reading leaves with under ENSEMBLE_ESS of its particles effective is
  moved by an ensemble Kalman update from its cloud before the reading (the velocities'
  posterior narrows faster than the acceleration noise spreads resampled copies).
Where the filter still cannot be honest (a model error its σa does not cover, such as an
unknown torque), ``Track.distrust`` says so from the readings' normalized innovations under
the predicted cloud (estimation/consistency.py).

And one that is not about failing: a uniform belief draws its velocities again at the
first reading, from their posterior given it (the sensors are affine in q̇, so this is
exact). A gyroscope read to 1 deg/s otherwise leaves a handful of particles of thousands
to decide the branch, and the branch reached 0.99 within six readings as often in the
wrong branch as in the true one (benchmarks/pf_prototype.py).

The whole prediction of all particles is one batched C call per step (the integrator's
stages, the noise and the projection, split across the cores for large batches), the
update one more (the sensor model); particles whose state fails (a singular
configuration, a failed position problem) get zero weight and are replaced at the next
resampling, never poisoning the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.special import ndtri

import mbgen.columns as columns
from mbgen.estimation import filter_defaults as defaults
from mbgen.estimation.branches import Branches, find_branches, sample_configurations
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.runtime.integration import PREDICTORS

Array = np.ndarray
#: The largest initial velocities' span ``speed`` [m/s or rad/s]: far beyond any
#: mechanism's, with room left for products of its variance speed²/3 in the first
#: reading's update (1e300 overflowed squaring it).
MAX_SPEED = 1e100


def belief_bytes(mech: CompiledMechanism) -> float:
    """About the memory one particle of the initial belief (``particles × pool`` of
    them) takes while the first reading is weighed: its state, velocity draws and the
    tangent bases (n × dof), the sensors' rates (outputs × n) and the readings per
    tangent velocity, in doubles; what a command checks before it allocates."""
    outputs = len(mech.sensor_labels) + len(mech.accelerometer_labels)
    d = max(mech.dof, 1)
    return 8.0 * (12 * mech.n + 2 * d * mech.n + 2 * outputs * (mech.n + d) + 16)

Members = list[tuple[int, Array | slice]]  # each branch held, with its particles' index


class AccelerometerModel(NamedTuple):
    """The accelerometers' readings at a cloud's states
    (ParticleFilter._accelerometer_model)."""

    a: Array  # (M, k) the readings at the states' dynamics
    b: Array  # (M, k, d) their change per unit of z̈ noise
    ok: Array  # (M,) bool: the dynamics and the partition succeeded
HOPELESS = 30.0  # readings this many σ from every particle: the belief has lost the truth
#: The tempered first reading's Metropolis–Hastings moves per stage, and their first step
#: as a factor of the cloud's spread (adapted to the acceptance after each move).
MOVES = 3
MOVE_SCALE = 0.5
#: ... and at most this many stages (each at least halves the effective particles: 2⁻⁶⁰
#: is beyond any reading's information).
MAX_STAGES = 60
#: A branch whose effective particles a reading leaves under this fraction of its
#: particles is moved by the ensemble Kalman update (ParticleFilter._ensemble_moves).
ENSEMBLE_ESS = 0.1
#: The moves check a moved particle's branch by an approximate nearest sample (within
#: 1 + BRANCH_EPS of the nearest distance): an exact query in the Furuta pendulum's 19
#: embedded dimensions took 90 ms per 1000 particles.
BRANCH_EPS = 1.0


@dataclass(frozen=True)
class Estimate:
    """The filter's belief after one step."""

    mean: Array  # (n,) expected q
    low: Array  # (n,) 2.5 % quantile of q
    high: Array  # (n,) 97.5 % quantile of q
    sigma: Array  # (n,) weighted standard deviation of q (the particles' spread)
    ess: float  # effective sample size
    branch_probability: Array  # (branches,)
    reinitialized: bool  # all weights had vanished: the filter started over
    # (labels,) each reading minus its mean under the predicted cloud over its σ there
    # (NaN: no reading, or a fresh belief's first)
    innovation: Array | None = None


#: Readings the filter must weigh after its last re-initialization before its estimate is
#: trusted again: a fresh belief meets each new reading, and a few are needed before it
#: has forgotten the uniform start.
RECOVERY_READINGS = 10
#: Readings in a row at which the filter started over before it gives up: its fresh
#: belief meets no reading, so going on would only spend time (readings far more precise
#: than a uniform belief over the configurations can meet, or a wrong model).
GIVE_UP_READINGS = 20


@dataclass(frozen=True)
class Track:
    """The filter's estimates over a readings file, one row per filter step."""

    t: Array  # (N,)
    mean: Array  # (N, n)
    low: Array  # (N, n) 2.5 % quantiles
    high: Array  # (N, n) 97.5 % quantiles
    sigma: Array  # (N, n) weighted standard deviations
    ess: Array  # (N,)
    branch_probability: Array  # (N, branches)
    reinitialized: Array  # (N,) bool: every weight had vanished and the filter started over
    weighed: Array  # (N,) bool: the step weighed a reading
    gave_up: bool = False  # stopped after GIVE_UP_READINGS readings in a row started over
    innovation: Array | None = None  # (N, labels) normalized innovations (Estimate's)
    labels: tuple[str, ...] = ()  # the readings' columns

    def distrust(self) -> str | None:
        """Why the track is not to be trusted, in words (None: it is): it gave up or has
        not recovered from starting over, or the readings are inconsistent with the cloud
        that predicted them (their normalized innovations too large in some second or
        over the run, or correlated in time: the cloud narrower than the truth's
        distance from it, a collapsed cloud; estimation/consistency.py)."""
        if self.gave_up:
            return (f"the filter started over at each of {GIVE_UP_READINGS} readings in a "
                    f"row and stopped at t = {self.t[-1]:g} s: no particle of a fresh belief "
                    "comes near the readings (check --noise-sensor and --noise-accel against "
                    "the data; readings far more precise than the particles can meet need a "
                    "larger --noise-sensor or more --particles)")
        if not self.recovered:
            return (f"the filter started over at t = {self.t[self.reinitialized][-1]:g} s "
                    f"and weighed fewer than {RECOVERY_READINGS} readings after that (check "
                    "--noise-sensor and --noise-accel against the data)")
        if self.innovation is None or not np.isfinite(self.innovation).any():
            return None
        from mbgen.estimation.consistency import describe, innovation_tests

        after = np.zeros(len(self.t), dtype=bool)
        last = np.flatnonzero(self.reinitialized)
        after[(int(last[-1]) + 1 if len(last) else 0):] = True
        x = np.where(after[:, None], self.innovation, np.nan)
        failed = innovation_tests(x, self.t, list(self.labels) or [
            f"reading {k}" for k in range(x.shape[1])])
        if failed:
            return ("the readings are inconsistent with the particles that predicted them ("
                    f"{describe(failed)}): the cloud is narrower than its error (raise "
                    "--noise-accel or --particles, or check --noise-sensor and the model's "
                    "parameters)")
        return None

    @property
    def restarts(self) -> int:
        """Steps where every weight had vanished and the filter started over."""
        return int(self.reinitialized.sum())

    @property
    def recovered(self) -> bool:
        """No re-initialization, or at least RECOVERY_READINGS readings weighed after the
        last one (before that, the rows come from a belief the readings ruled out)."""
        if not self.reinitialized.any():
            return True
        last = int(np.flatnonzero(self.reinitialized)[-1])
        return int(self.weighed[last + 1:].sum()) >= RECOVERY_READINGS

    def table(self, names: list[str], sigma: bool = False) -> tuple[list[str], Array]:
        """The CSV's header and rows: t, each coordinate with _lo/_hi (95 %) and, with
        ``sigma``, _sigma (the particles' standard deviation), then ess, restart (1 where
        the filter started over) and p_branch<k>."""
        parts = [("", self.mean), (columns.LOW_SUFFIX, self.low),
                 (columns.HIGH_SUFFIX, self.high)]
        if sigma:
            parts.append((columns.SIGMA_SUFFIX, self.sigma))
        header = [columns.TIME] + [f"{n}{suffix}" for n in names for suffix, _ in parts] + [
            columns.ESS, columns.RESTART] + [columns.branch(b)
                                 for b in range(self.branch_probability.shape[1])]
        interleaved = np.stack([values for _, values in parts], axis=2).reshape(
            len(self.t), -1)
        return header, np.column_stack([self.t, interleaved, self.ess, self.reinitialized,
                                        self.branch_probability])


class ParticleFilter:
    """Tracks a mechanism's state and assembly branch from its sensors.

    ``sigma_a``: acceleration noise of the prediction on each independent coordinate
    (m/s² or rad/s², as the coordinate); ``sigma_s``, ``sigma_acc``: standard deviation
    of each sensor output and each accelerometer output (default: the file's ``noise``;
    none declared is an error); readings are the sensors' outputs, then the
    accelerometers' (``labels``); ``integrator``: "rk4", "euler" or
    "semi-implicit-euler". The initial belief is uniform over the branches and, in each,
    over every configuration the mechanism can take (``spread=None``) or over those within
    ±spread of q0 in every coordinate; velocities are uniform within ±``speed`` per
    coordinate, projected on Φq q̇ = 0, until the first reading draws them again from
    their posterior given it (Gaussian on Φq q̇ = 0 with the same variance, speed²/3 per
    direction). The belief starts with ``pool`` times as many
    particles, which the first readings weigh and resampling brings down to
    ``particles``: a sample of the whole state space dense enough that some particles
    explain the first readings. ``prior``: states (q, q̇) (K, n each) to draw the initial
    belief from instead (a cloud around a known start, the particles of an earlier run),
    moved onto the constraints; each branch starts with the share of them it holds. A
    branch whose probability falls under ``prune`` is ruled out and its particles go to
    the others. ``roughening``: the regularized filter's kernel, as a factor of Silverman's
    bandwidth (0: off, the default; see the module's notes). ``branches``: the
    mechanism's, when already found (many filters on one mechanism).
    """

    def __init__(self, mech: CompiledMechanism, particles: int = defaults.PARTICLES,
                 sigma_a: float = defaults.SIGMA_A, sigma_s: float | Array | None = None,
                 seed: int = 0, spread: float | None = None, speed: float = defaults.SPEED,
                 prune: float = 1e-6, pool: int = defaults.POOL, roughening: float = 0.0,
                 branches: Branches | None = None, integrator: str = defaults.INTEGRATOR,
                 prior: tuple[Array, Array] | None = None,
                 sigma_acc: float | Array | None = None) -> None:
        if not mech.sensor_labels and not mech.accelerometer_labels:
            raise ValueError(f"{mech.name} has no sensors: declare them under `sensors:` in "
                             "its file (gyroscope, encoder, position, velocity, "
                             "accelerometer)")
        self.mech = mech
        self.count = int(particles)
        self.sigma_a = float(sigma_a)
        self.sigma_s = mech.sensor_noise(sigma_s)
        self.sigma_acc = mech.accelerometer_noise(sigma_acc)
        self.labels = [*mech.sensor_labels, *mech.accelerometer_labels]
        self.rng = np.random.default_rng(seed)
        self.spread = spread
        self.speed = float(speed)
        if not 0 <= self.speed <= MAX_SPEED:  # NaN too
            raise ValueError(f"the initial velocities' span {speed:g} is not within 0 and "
                             f"{MAX_SPEED:g} (its variance speed²/3 must stay a number)")
        self.prune = float(prune)
        self.pool = max(1, int(pool))
        self.roughening = float(roughening)
        if integrator not in PREDICTORS:
            raise ValueError(f"unknown integrator {integrator!r} (choose from "
                             f"{', '.join(PREDICTORS)})")
        self.integrator = integrator
        self.prior = None if prior is None else _prior_states(prior, mech.n)
        self._spread: Array | None = None  # kernel scales of the particles to roughen
        self._group = np.zeros(0, dtype=np.int64)  # a fresh belief's branch sample per particle
        # the last reading's normalized innovations under the predicted cloud (labels,)
        self._innovation = np.full(len(self.labels), np.nan)
        self.moved = 0  # particles the ensemble moves have moved so far
        self._angles = np.array([unit == "rad" for unit in mech.coordinate_units])
        self.branches = branches or find_branches(mech, seed=seed)
        self.initialize()

    # -- belief ------------------------------------------------------------------------------
    def initialize(self, uniform: bool = False) -> None:
        """The initial belief: drawn from the given prior states, each in the branch it
        lies in, or (none given, or ``uniform``: starting over after the belief lost the
        truth) uniform, the same number of particles in every branch it covers."""
        if self.prior is not None and not uniform:
            q, qd, status = self._from_prior()
            label = self.branches.of(q)
            share = np.bincount(label, minlength=self.branches.count) / len(label)
            with np.errstate(divide="ignore"):
                self.log_p = np.log(share)
        else:
            q, qd, status, label = self._uniform()
            present = np.unique(label)
            self.log_p = np.full(self.branches.count, -np.inf)
            self.log_p[present] = -np.log(len(present))
        self.q, self.qd, self.branch = q, qd, label
        self.log_w = np.where(status == 0, 0.0, -np.inf)  # a singular sample weighs nothing
        # the next step's acceleration noise given accelerometer readings: (mean (M, dof),
        # root (M, dof, dof)) of its posterior, None: its prior
        self._noise: tuple[Array, Array] | None = None
        self._spread = None
        # a uniform belief takes its velocities from the first reading (_from_reading)
        self._fresh = self.prior is None or uniform
        self._normalize_within_branches()

    def _uniform(self) -> tuple[Array, Array, Array, Array]:
        """q, q̇ (M, n), status, branch (M,) uniform over the branches, over configurations
        (all, or within ±spread of q0) and over velocities within ±speed."""
        mech, M = self.mech, self.count * self.pool
        if self.spread is None:
            candidates, their_branch = self.branches.samples, self.branches.label
        else:
            candidates = sample_configurations(mech, max(4 * M, 1000), self.rng,
                                               self.spread)
            if len(candidates) == 0:
                raise ValueError(f"no configuration within ±{self.spread} of q0 could be "
                                 "assembled: widen the spread")
            their_branch = self.branches.of(candidates)
        present = np.unique(their_branch)
        label = present[np.arange(M) % len(present)]
        q = np.empty((M, mech.n))
        group = np.empty(M, dtype=np.int64)
        for b in present:
            mine = np.flatnonzero(their_branch == b)
            take = int((label == b).sum())
            # every candidate the same number of copies (±1), the extra ones at random
            picks = np.concatenate([np.repeat(mine, take // len(mine)),
                                    self.rng.choice(mine, size=take % len(mine), replace=False)])
            q[label == b] = candidates[picks]
            group[label == b] = picks
        self._group = group
        rates = self.speed * self.rng.uniform(-1.0, 1.0, (M, mech.n))
        qd, status = mech.project_velocity(q, rates, errors="status")
        return q, qd, status, label

    def _from_prior(self) -> tuple[Array, Array, Array]:
        """q, q̇ (M, n) and status: the prior's states (all of them when there are M,
        else drawn with replacement), moved onto the constraints the least."""
        assert self.prior is not None  # called only with a prior
        prior_q, prior_qd = self.prior
        M = self.count * self.pool
        pick = np.arange(M) if len(prior_q) == M else self.rng.integers(len(prior_q),
                                                                          size=M)
        q, status = self.mech.solve_position(prior_q[pick], minimum_norm=True,
                                             errors="status")
        q = np.where(status[:, None] == 0, q, prior_q[pick])
        qd, status_v = self.mech.project_velocity(q, prior_qd[pick], errors="status")
        return q, qd, np.where(status == 0, status_v, status)

    # -- one step ----------------------------------------------------------------------------
    def predict(self, dt: float) -> None:
        """Every particle one step of dt in C (one batched call): the integrator with an
        acceleration noise of σa on its independent coordinates z̈, held over the step,
        then back onto the constraints keeping z and ż (the dependent coordinates follow
        from the particle's own last q, so it stays on its branch). A particle whose
        dynamics or position problem fails keeps its state and loses its weight."""
        if self._noise is None:
            noise = self.rng.normal(0.0, self.sigma_a, (len(self.q), self.mech.dof))
        else:  # given the accelerometers' last readings
            mean, root = self._noise
            noise = mean + posterior_draw(root, self.rng.standard_normal((*mean.shape, 1)))
            self._noise = None
        status = self.mech.predict_particles(self.q, self.qd, noise, dt, self.integrator,
                                             *self._jitter())
        self.log_w[status != 0] = -np.inf

    def update(self, readings: Mapping[str, float] | Array) -> bool:
        """Weights times the likelihood of the readings (missing or NaN: no reading from
        that sensor), in log space. Each branch's probability takes the likelihood of its
        own particles; within a branch the weights are normalized and resampled
        (systematic, when the branch's ESS falls under half its particles). A fresh
        belief that the reading leaves fewer than ``particles`` effective particles meets
        it in tempered stages (_temper); a branch whose weights the reading collapses is
        moved by an ensemble Kalman update (_ensemble_moves). Returns whether the filter
        had to start over (every weight vanished)."""
        y = self._readings(readings)
        seen = np.isfinite(y)
        self._innovation = np.full(len(y), np.nan)
        if not seen.any():  # no reading: the weights stay as they are
            return False
        seen_a = seen[len(self.mech.sensor_labels):]
        # the accelerometers' model at the predicted states, evaluated once for the
        # innovations and the likelihood (a fresh belief draws new velocities instead)
        model = self._accelerometer_model(self.q, self.qd, seen_a) \
            if not self._fresh and seen_a.any() else None
        predicted = None if self._fresh else self._predicted_readings(self.q, self.qd, seen,
                                                                       model)
        if predicted is not None:
            self._innovation[seen] = self._normalized_innovation(y[seen], seen, *predicted)
        likelihood, velocities, self._noise = self._likelihood(y, seen, model=model)
        if self._fresh and self._tempering_needed(likelihood):
            if self._temper(y, seen, likelihood, velocities):
                return False
            self.initialize(uniform=True)  # not even tempered stages met the reading
            return True
        if _hopeless(likelihood, seen):
            # no particle within HOPELESS σ of the readings: every weight has vanished (in
            # floating point they would be exact zeros); a new belief meets this reading
            self.initialize(uniform=True)
            likelihood, velocities, self._noise = self._likelihood(y, seen)
            if self._tempering_needed(likelihood):
                if not self._temper(y, seen, likelihood, velocities):
                    self.initialize(uniform=True)
            elif not _hopeless(likelihood, seen):
                self._weigh(likelihood, velocities)
            return True
        return self._weigh(likelihood, velocities, (y, seen, predicted))

    def _weigh(self, likelihood: Array, velocities: Array | None = None,
               reading: tuple[Array, Array, tuple[Array, Array] | None] | None = None
               ) -> bool:
        """The weights times the likelihood (M,) of a reading (with the particles'
        velocities (M, n) drawn given it, for a fresh belief), the branches' probabilities
        times theirs, then resampling; returns whether the filter had to start over.
        ``reading``: (y, seen, the particles' predicted readings) for the ensemble moves
        of a branch the reading collapses."""
        if velocities is not None:
            self.qd = velocities
        self._fresh = False
        before = self.log_w.copy()
        self.log_w = self.log_w + likelihood
        members = self._members()  # the particles do not change branch until resampling
        self.log_p = self.log_p + self._normalize_within_branches(members)
        top = self.log_p.max()
        if not np.isfinite(top):
            self.initialize(uniform=True)
            return True
        self.log_p -= top + np.log(np.exp(self.log_p - top).sum())
        if reading is not None and reading[2] is not None:
            self._ensemble_moves(members, before, reading[0], reading[1], reading[2])
        self._resample(members)
        return False

    # -- precise readings ----------------------------------------------------------------
    def _predicted_readings(self, q: Array, qd: Array, seen: Array,
                            model: AccelerometerModel | None = None) -> tuple[Array, Array]:
        """Each state's readings where ``seen`` (M, k) and the variance (M, k) the next
        acceleration noise adds to them (accelerometers: σa² Σ (∂a/∂q̈ R)²; state sensors:
        none), the sensor noise left out. A broken state reads NaN. ``model``: the
        accelerometers' at these states, when already evaluated."""
        mech, count = self.mech, len(self.mech.sensor_labels)
        seen_s, seen_a = seen[:count], seen[count:]
        parts, extra = [], []
        if seen_s.any():
            h = mech.sensors(q, qd).reshape(len(q), -1)[:, seen_s]
            parts.append(h)
            extra.append(np.zeros_like(h))
        if seen_a.any():
            a, b, ok = model if model is not None else self._accelerometer_model(q, qd,
                                                                                 seen_a)
            parts.append(np.where(ok[:, None], a, np.nan))
            extra.append(self.sigma_a**2 * np.square(b).sum(axis=2))
        return np.hstack(parts), np.hstack(extra)

    def _normalized_innovation(self, y: Array, seen: Array, h: Array, extra: Array) -> Array:
        """Each seen reading (k,) minus its mean under the predicted cloud, over its σ
        there: the cloud's spread of the readings, the acceleration noise's and the
        sensor's (k,). A filter whose cloud holds the truth as often as it claims gives
        standard normal values, white in time (estimation/consistency.py)."""
        w = self.weights()
        good = np.isfinite(h).all(axis=1) & (w > 0)
        w, h, extra = w[good] / w[good].sum(), h[good], extra[good]
        # einsum, not BLAS: OpenBLAS's threads would spin on the core the prediction uses
        mean = np.einsum("i,ij->j", w, h)
        spread = np.einsum("i,ij->j", w, np.square(h - mean) + extra)
        return (y - mean) / np.sqrt(spread + self._noise_of(seen) ** 2)

    def _noise_of(self, seen: Array) -> Array:
        """The sensors' and accelerometers' σ where ``seen`` (k,)."""
        return np.concatenate([self.sigma_s, self.sigma_acc])[seen]

    def _tempering_needed(self, likelihood: Array) -> bool:
        """Whether weighing a fresh belief by the reading would leave fewer than
        ``particles`` effective particles (or none)."""
        log_w = self.log_p[self.branch] + self.log_w + likelihood
        top = log_w.max()
        if not np.isfinite(top):
            return False
        w = np.exp(log_w - top)
        return bool(w.sum() ** 2 / (w * w).sum() < min(self.count, len(w) / 2))

    def _temper(self, y: Array, seen: Array, likelihood: Array,
                velocities: Array | None) -> bool:
        """A fresh belief meets a reading too precise for it by progressive correction
        (Musso, Oudjane and Le Gland 2001): the likelihood enters in stages L^δ, each δ
        the largest that leaves half the branch's particles effective, each stage
        followed by resampling (down to the branch's share of ``particles``) and
        Metropolis–Hastings moves of the configurations targeting prior × L^(the
        exponent so far), the prior uniform on the configurations (velocities, where the
        sensors are affine in them, integrated out and drawn again given the reading).
        Each branch's probability takes its tempered evidence, the product of its stages'
        mean weights. Why: a uniform belief of 10⁵ configurations has no particle within
        30 σ of two encoders read to 10⁻⁴ rad, and started over at every reading.
        Returns False, the belief unchanged, where MAX_STAGES stages did not reach the
        whole likelihood or left no particle within HOPELESS σ of the reading."""
        members = [(b, mine) for b, mine in self._members() if np.isfinite(self.log_p[b])]
        shares = np.full(len(members), self.count // max(len(members), 1))
        shares[: self.count % max(len(members), 1)] += 1
        qd_all = self.qd if velocities is None else velocities
        log_z = np.full(self.branches.count, -np.inf)
        parts = []
        for (b, mine), k in zip(members, shares, strict=True):
            index = np.arange(len(self.q))[mine]
            L = likelihood[index] + self.log_w[index]
            if k == 0 or not np.isfinite(L).any():
                continue
            q, qd, group = self.q[index], qd_all[index], self._group[index]
            exponent, evidence, scale = 0.0, 0.0, MOVE_SCALE
            for _ in range(MAX_STAGES):
                if exponent >= 1.0:
                    break
                delta = tempering_exponent(L, 1.0 - exponent)
                increment = delta * L
                top = increment.max()
                evidence += top + np.log(np.exp(increment - top).mean())
                exponent = 1.0 if delta >= 1.0 - exponent else exponent + delta
                pick = systematic(np.exp(increment - top), int(k), self.rng)
                q, qd, group, L = q[pick], qd[pick], group[pick], L[pick]
                for _ in range(MOVES):
                    q, qd, L, scale = self._move(b, q, qd, group, L, exponent, y, seen,
                                                 scale)
            final, drawn, noise = self._likelihood(y, seen, (q, qd, group))
            if exponent < 1.0 or _hopeless(final, seen) or not np.isfinite(evidence):
                continue  # this branch's particles never met the reading
            log_z[b] = evidence
            parts.append((b, q, qd if drawn is None else drawn, noise))
        if not parts:
            return False
        self.q = np.concatenate([p[1] for p in parts])
        self.qd = np.concatenate([p[2] for p in parts])
        self.branch = np.concatenate([np.full(len(p[1]), p[0]) for p in parts])
        noises = [p[3] for p in parts]
        self._noise = None if any(n is None for n in noises) else (
            np.concatenate([n[0] for n in noises if n is not None]),
            np.concatenate([n[1] for n in noises if n is not None]))
        self.log_w = np.zeros(len(self.q))
        self.log_p = self.log_p + log_z
        self.log_p -= self.log_p.max() + np.log(np.exp(self.log_p - self.log_p.max()).sum())
        self._fresh = False
        self._spread = None
        self._normalize_within_branches()
        return True

    def _move(self, b: int, q: Array, qd: Array, group: Array, L: Array, exponent: float,
              y: Array, seen: Array, scale: float) -> tuple[Array, Array, Array, float]:
        """One Metropolis–Hastings move of branch b's configurations q (K, n) targeting
        the uniform prior times L^exponent (L (K,): their log-likelihoods): a Gaussian
        step of ``scale`` times the cloud's spread per coordinate, back onto the
        constraints by the least move, refused off the branch or mirrored (a spatial
        body's frame turned left-handed: no reading tells, and the samples leave those
        out); the step's scale adapted
        to the acceptance. Returns q, q̇, L and the next scale."""
        mech = self.mech
        centre = q[0].copy()
        deviation = q - centre
        deviation[:, self._angles] = _wrap(deviation[:, self._angles])
        spread = deviation.std(axis=0)
        trial, status = mech.solve_position(
            q + scale * spread * self.rng.standard_normal(q.shape), minimum_norm=True,
            errors="status")
        ok = status == 0
        trial = np.where(ok[:, None], trial, q)
        ok &= (self.branches.of(trial, eps=BRANCH_EPS) == b) & ~self.mech.mirrored(trial)
        trial_qd, status_v = mech.project_velocity(trial, qd, errors="status")
        ok &= status_v == 0
        trial_qd = np.where(ok[:, None], trial_qd, qd)
        new, drawn, _ = self._likelihood(y, seen, (trial, trial_qd, group))
        with np.errstate(invalid="ignore"):
            accept = ok & (np.log(self.rng.random(len(q))) < exponent * (new - L))
        q, L = np.where(accept[:, None], trial, q), np.where(accept, new, L)
        qd = np.where(accept[:, None], trial_qd if drawn is None else drawn, qd)
        rate = float(accept.mean())
        scale *= 1.5 if rate > 0.4 else 0.5 if rate < 0.15 else 1.0
        return q, qd, L, scale

    def _ensemble_moves(self, members: Members, before: Array, y: Array, seen: Array,
                        predicted: tuple[Array, Array]) -> None:
        """A branch whose weights the reading left fewer than ENSEMBLE_ESS of its
        particles effective: its particles drawn again by their weights before the
        reading, then each moved by the ensemble Kalman filter's update with perturbed
        readings (the gain from the cloud's covariance with its readings), back onto the
        constraints; equal weights. Why: readings of 10⁻⁴ rad narrow the posterior of the
        velocities faster than the acceleration noise spreads the copies of resampled
        particles, and the cloud lost the truth within ten steps of the Furuta pendulum
        (a step of σa = 1 rad/s² spreads q̇ by 10⁻³ rad/s). A move that fails, leaves
        the branch or mirrors a body keeps the particle."""
        h_all, extra_all = predicted
        noise = self._noise_of(seen)
        n = self.mech.n
        for b, mine in members:
            index = np.arange(len(self.q))[mine]
            w = np.exp(self.log_w[index])
            collapsed = 1.0 / (w * w).sum() < ENSEMBLE_ESS * len(index)
            if len(index) <= 2 * self.mech.dof + 1 or not collapsed:
                continue
            prior = before[index]
            if not np.isfinite(prior).any():
                continue
            pick = index[systematic(np.exp(prior - prior.max()), len(index), self.rng)]
            q, qd, h = self.q[pick], self.qd[pick], h_all[pick]
            good = np.isfinite(h).all(axis=1)
            if good.sum() <= 2 * self.mech.dof + 1:
                continue
            centre = q[good][0]
            dq = q - centre
            dq[:, self._angles] = _wrap(dq[:, self._angles])
            x = np.hstack([dq, qd])
            mean_x, mean_h = x[good].mean(axis=0), h[good].mean(axis=0)
            ex, eh = x[good] - mean_x, h[good] - mean_h
            count = int(good.sum()) - 1
            c_xh = np.einsum("ij,ik->jk", ex, eh) / count
            c_hh = np.einsum("ij,ik->jk", eh, eh) / count + np.diag(
                noise**2 + extra_all[pick][good].mean(axis=0))
            gain = np.linalg.solve(c_hh, c_xh.T).T  # (2n, k)
            perturbed = y[seen] + noise * self.rng.standard_normal(h.shape)
            moved = x + np.einsum("ik,jk->ij", np.where(good[:, None], perturbed - h, 0.0),
                                  gain)
            trial, status = self.mech.solve_position(centre + moved[:, :n],
                                                     minimum_norm=True, errors="status")
            ok = (status == 0) & good
            trial = np.where(ok[:, None], trial, q)
            ok &= (self.branches.of(trial, eps=BRANCH_EPS) == b) & ~self.mech.mirrored(trial)
            trial_qd, status_v = self.mech.project_velocity(trial, moved[:, n:],
                                                            errors="status")
            ok &= (status_v == 0) & np.isfinite(trial_qd).all(axis=1)
            self.q[index] = np.where(ok[:, None], trial, q)
            self.qd[index] = np.where(ok[:, None], trial_qd, qd)
            self.log_w[index] = -np.log(len(index))
            if self._noise is not None:
                for part in self._noise:
                    part[index] = part[pick]
            self.moved += int(ok.sum())

    def _likelihood(self, y: Array, seen: Array, states: tuple[Array, Array, Array] | None
                    = None, model: AccelerometerModel | None = None
                    ) -> tuple[Array, Array | None, tuple[Array, Array] | None]:
        """log p(y | particle) (M,) of the readings y (``labels``) where ``seen``, by the
        Gaussian sensor model; for a fresh uniform belief, with new velocities (M, n)
        drawn given the sensors' readings (_from_reading), else None. The accelerometers'
        readings are weighed at the particles' (new) velocities; with them, the posterior
        (mean (M, d), root (M, d, d)) of the next step's acceleration noise, else None.
        ``states``: (q, q̇, group) to weigh instead of the particles' (the tempered first
        reading's moves); ``model``: the accelerometers' at those states and velocities,
        when already evaluated (unused where new velocities are drawn)."""
        q, qd, group = states if states is not None else (self.q, self.qd, self._group)
        count = len(self.mech.sensor_labels)
        y_s, seen_s, y_a, seen_a = y[:count], seen[:count], y[count:], seen[count:]
        likelihood, velocities = np.zeros(len(q)), None
        conditioned = self._from_reading(y_s, seen_s, q, qd, group) \
            if self._fresh and seen_s.any() else None
        if conditioned is not None:
            likelihood, velocities = conditioned
        elif seen_s.any():
            h = self.mech.sensors(q, qd).reshape(len(q), -1)
            r = (h[:, seen_s] - y_s[seen_s]) / self.sigma_s[seen_s]
            likelihood = -0.5 * (r * r).sum(axis=1)
        noise = None
        if seen_a.any():
            weighed, noise = self._accelerometer_likelihood(
                y_a[seen_a], seen_a, q, qd if velocities is None else velocities,
                model if velocities is None else None)
            likelihood = likelihood + weighed
        likelihood[np.isnan(likelihood)] = -np.inf  # a broken particle weighs nothing
        return likelihood, velocities, noise

    def _accelerometer_model(self, q: Array, qd: Array, seen: Array) -> AccelerometerModel:
        """The accelerometers' readings where ``seen`` at the states' dynamics, a (M, k),
        their change per unit of z̈ noise, B = (∂a/∂q̈) R (M, k, d) (z by full pivoting
        as the prediction chooses it), and which states' dynamics and partition succeeded
        (M,)."""
        mech = self.mech
        qdd, status = mech.forward_dynamics(q, qd, errors="status")
        _, basis, _, status_r = mech.partition(q, z=(), errors="status")
        a = mech.accelerometers(q, qdd).reshape(len(q), -1)[:, seen]
        seen_by = mech.accelerometers_qdd(q, qdd).reshape(len(q), len(seen), -1)[:, seen]
        return AccelerometerModel(a, seen_by @ basis, (status == 0) & (status_r == 0))

    def _accelerometer_likelihood(self, y: Array, seen: Array, q: Array, qd: Array,
                                  model: AccelerometerModel | None = None
                                  ) -> tuple[Array, tuple[Array, Array]]:
        """log p(y | particle) (M,) of accelerometer readings y (where ``seen``), as the
        state sensors' are, without the constant every particle shares, and the posterior
        of the next step's acceleration noise given them. The reading sees
        the particle's q̈: its dynamics' plus the acceleration noise R ε of the step that
        follows (ε ~ N(0, σa²) on z̈, z by full pivoting as the prediction chooses it), so
        a(q, q̈) = a₀ + B ε + e with B = (∂a/∂q̈) R: the particle is weighed by the
        reading with ε integrated out, and the next prediction draws its ε from ε's
        posterior given the reading (mean, root; kept as ``_noise`` by :meth:`update`),
        not from the prior again."""
        count, d = len(q), self.mech.dof
        a, b, ok = model if model is not None else self._accelerometer_model(q, qd, seen)
        r = y - a
        good = ok & np.isfinite(b).all(axis=(1, 2)) & np.isfinite(r).all(axis=1)
        likelihood = np.full(count, -np.inf)  # a broken particle weighs nothing
        noise = self.sigma_acc[seen] ** 2
        mean, root = np.zeros((count, d)), np.repeat(np.eye(d)[None] / self.sigma_a, count, 0)
        likelihood[good], mean[good], root[good] = gaussian_posterior(
            b[good], r[good], noise, self.sigma_a**2)
        # the state sensors' convention
        return likelihood + 0.5 * np.log(noise).sum(), (mean, root)

    def _from_reading(self, y: Array, seen: Array, q: Array, qd: Array, group: Array
                      ) -> tuple[Array, Array] | None:
        """A uniform belief meeting its first reading: each particle's velocity drawn from
        its posterior given the reading, and the particle weighed by the reading's
        likelihood with the velocity integrated out. Returns that log-likelihood (M,) and
        the velocities (M, n), or None when the sensors are not affine in q̇.

        Why: a rate sensor far more precise than the belief's spread of velocities (a
        gyroscope read to 1 deg/s, velocities within some rad/s) would otherwise leave a
        few particles of thousands, drawn at random angles, to carry the belief and the
        branches' probabilities; with velocities that agree with the reading, every
        configuration keeps a particle. The velocity prior is Gaussian on the tangent
        space, with the variance of the uniform ±speed it replaces (speed²/3 per
        direction); the sensors' model h(q, q̇) = h(q, 0) + ∂h/∂q̇ q̇ makes the rest exact
        (a linear-Gaussian update per particle). q, q̇ (M, n): the states; group (M,):
        each one's initial configuration sample (copies draw stratified velocities)."""
        mech, rng = self.mech, self.rng
        count, d = len(q), mech.dof
        if d == 0 or self.speed <= 0:
            return None
        # an orthonormal basis (M, n, d) of each particle's tangent space
        directions, failed = [], np.zeros(count, dtype=bool)
        for _ in range(d):
            v, status = mech.project_velocity(q, rng.standard_normal(q.shape), errors="status")
            directions.append(v)
            failed |= status != 0
        basis = np.linalg.qr(np.stack(directions, axis=2))[0]
        still = np.zeros_like(q)
        at_rest = mech.sensors(q, still).reshape(count, -1)
        rates = mech.sensors_qd(q, still).reshape(count, len(y), -1)  # ∂h/∂q̇ (M, k, n)
        probe = basis[:, :, 0]
        if not np.allclose(mech.sensors(q, probe).reshape(count, -1),
                           at_rest + np.einsum("ijk,ik->ij", rates, probe),
                           rtol=1e-9, atol=1e-12, equal_nan=True):
            return None  # a sensor not affine in the velocities
        A = rates[:, seen] @ basis  # (M, s, d): the readings per tangent velocity
        r = y[seen] - at_rest[:, seen]
        good = ~failed & np.isfinite(A).all(axis=(1, 2)) & np.isfinite(r).all(axis=1)
        likelihood = np.full(count, -np.inf)  # a broken particle weighs nothing
        velocities = qd.copy()
        normals = stratified_normals(group, d, rng)
        likelihood[good], tangent = linear_gaussian_update(
            A[good], r[good], self.sigma_s[seen] ** 2, self.speed**2 / 3.0, normals[good])
        velocities[good] = np.einsum("ijk,ik->ij", basis[good], tangent)
        return likelihood, velocities

    def _normalize_within_branches(self, members: Members | None = None) -> Array:
        """Normalize each branch's weights to sum 1; returns the log of what each summed to
        (B,), the likelihood of the readings given the branch. ``members``: _members(),
        when the caller has it."""
        total = np.full(self.branches.count, -np.inf)
        self.log_w[np.isnan(self.log_w)] = -np.inf
        for b, mine in members or self._members():
            top = self.log_w[mine].max()
            if not np.isfinite(top):  # every particle of the branch broke
                self.log_w[mine] = 0.0
                continue
            total[b] = top + np.log(np.exp(self.log_w[mine] - top).sum())
            self.log_w[mine] -= total[b]
        return total

    def _resample(self, members: Members) -> None:
        """Systematic resampling within each branch whose ESS fell under half its
        particles; a branch ruled out (probability under ``prune``) gives its particles to
        the others, drawn by their weights."""
        alive = self.log_p >= np.log(self.prune)
        ruled_out = not all(alive[b] for b, _ in members)
        if ruled_out:
            self.log_p[~alive] = -np.inf
            self.log_p -= np.log(np.exp(self.log_p).sum())
        if ruled_out or (len(self.q) > self.count and self.ess() < self.count):
            self._share(np.flatnonzero(alive))
            return
        picked = []
        for _, mine in members:
            w = np.exp(self.log_w[mine])
            if 1.0 / (w * w).sum() < len(w) / 2:
                pick = np.arange(len(self.q))[mine][systematic(w, len(w), self.rng)]
                self.q[mine], self.qd[mine] = self.q[pick], self.qd[pick]
                if self._noise is not None:
                    for part in self._noise:
                        part[mine] = part[pick]
                self.log_w[mine] = -np.log(len(w))
                picked.append(mine)
        if picked:
            self._roughen(picked)

    def _roughen(self, groups: list[Array | slice]) -> None:
        """Mark the particles just resampled (each group: one branch's index) to be moved
        apart at the next prediction by a Gaussian kernel of their group's own spread
        (the regularized particle filter): copies of one particle would otherwise stay
        together, and a cloud that lost the truth could not find it again."""
        if not self.roughening:
            return
        dim = 2 * max(self.mech.dof, 1)
        scale = np.zeros((len(self.q), 2 * self.mech.n))
        for group in groups:
            state = np.hstack([self.q[group], self.qd[group]])
            h = self.roughening * (4.0 / (dim + 2)) ** (1 / (dim + 4)) * len(state) ** (
                -1 / (dim + 4))
            scale[group] = h * state.std(axis=0)
        self._spread = scale

    def _jitter(self) -> tuple[Array | None, Array | None]:
        """The kernel moves (Δq, Δq̇) (M, n each) of the particles marked by _roughen."""
        scale, self._spread = self._spread, None
        if scale is None:
            return None, None
        step = scale * self.rng.standard_normal(scale.shape)
        return (np.ascontiguousarray(step[:, :self.mech.n]),
                np.ascontiguousarray(step[:, self.mech.n:]))

    def _share(self, alive: Array) -> None:
        """Resample to ``count`` particles shared evenly among the live branches, each
        drawing its share from its own particles by their weights."""
        share = np.full(len(alive), self.count // len(alive))
        share[: self.count % len(alive)] += 1
        index = np.concatenate([
            np.flatnonzero(self.branch == b)[systematic(
                np.exp(self.log_w[self.branch == b]), k, self.rng)]
            for b, k in zip(alive, share, strict=True) if k > 0])
        self.q, self.qd, self.branch = self.q[index], self.qd[index], self.branch[index]
        if self._noise is not None:
            self._noise = (self._noise[0][index], self._noise[1][index])
        self.log_w = np.zeros(len(index))
        self._spread = None
        self._normalize_within_branches()

    def weights(self) -> Array:
        """Each particle's probability (M,): its branch's times its weight within it."""
        return np.exp(self.log_p[self.branch] + self.log_w)

    def _readings(self, readings: Mapping[str, float] | Array) -> Array:
        labels = self.labels
        if isinstance(readings, Mapping):
            unknown = set(readings) - set(labels)
            if unknown:
                raise KeyError(f"unknown sensor(s) {sorted(unknown)} (sensors: "
                               f"{', '.join(labels)})")
            return np.array([float(readings.get(label, np.nan)) for label in labels])
        return np.asarray(readings, dtype=float).reshape(len(labels))

    def ess(self) -> float:
        w = self.weights()
        return float(1.0 / (w * w).sum())

    def step(self, dt: float, readings: Mapping[str, float] | Array | None) -> Estimate:
        """Predict over dt, then weigh by the readings (None: no reading this step)."""
        self.predict(dt)
        restarted = False
        self._innovation = np.full(len(self.labels), np.nan)
        if readings is not None:
            restarted = self.update(readings)
        return self.estimate(restarted)

    def _members(self) -> Members:
        """Each branch some particle is in, with its particles' indices: a slice over all
        of them when one branch holds every particle (the usual case once the readings
        have decided, where views save copying every array through an index)."""
        held = np.flatnonzero(np.bincount(self.branch, minlength=self.branches.count))
        if len(held) == 1:
            return [(int(held[0]), slice(None))]
        return [(int(b), np.flatnonzero(self.branch == b)) for b in held]

    def run(self, t: Array, readings: Array, dt: float | None = None,
            progress: Callable[[], None] | None = None) -> Track:
        """The filter over a readings file: t (N,) increasing, readings (N, labels) with
        NaN for no reading. Steps of dt (default: the readings' median period) from t[0];
        a step takes the reading within half a step of its time, if any. The first
        reading weighs the initial belief (no prediction before it). ``progress`` is
        called after every step. After GIVE_UP_READINGS readings in a row that each made
        it start over, the filter stops there (``Track.gave_up``)."""
        t = np.asarray(t, dtype=float)
        times, step = filter_times(t, dt)
        row = np.searchsorted(t, times - step / 2)
        estimates: list[Estimate] = []
        weighed = np.zeros(len(times), dtype=bool)
        in_a_row = 0
        for k, now in enumerate(times):
            r = row[k]
            reading = readings[r] if r < len(t) and abs(t[r] - now) < step / 2 else None
            weighed[k] = reading is not None and bool(np.isfinite(reading).any())
            if k:
                estimates.append(self.step(step, reading))
            else:
                self._innovation = np.full(len(self.labels), np.nan)
                restarted = reading is not None and self.update(reading)
                estimates.append(self.estimate(bool(restarted)))
            if progress:
                progress()
            if weighed[k]:
                in_a_row = in_a_row + 1 if estimates[-1].reinitialized else 0
            if in_a_row >= GIVE_UP_READINGS:
                break

        def stacked(name: str) -> Array:
            return np.array([getattr(e, name) for e in estimates])

        done = len(estimates)
        return Track(times[:done], stacked("mean"), stacked("low"), stacked("high"),
                     stacked("sigma"), stacked("ess"), stacked("branch_probability"),
                     stacked("reinitialized"), weighed[:done], done < len(times),
                     stacked("innovation"), tuple(self.labels))

    def estimate(self, reinitialized: bool = False) -> Estimate:
        """Weighted mean and 95 % interval of every coordinate; angles by circular
        statistics (particles at π − 0.1 and −π + 0.1 average to π, not 0), in the turn of
        the heaviest particle."""
        w = self.weights()
        w = w / w.sum()
        ess = float(1.0 / (w * w).sum())
        # einsum, not BLAS: OpenBLAS's threads would spin on the core the prediction uses
        mean = np.einsum("i,ij->j", w, self.q)
        values = self.q
        angle = self._angles
        if angle.any():
            # angles as deviations from the heaviest particle, wrapped to (−π, π]
            reference = self.q[int(np.argmax(w)), angle]
            turns = reference + _wrap(self.q[:, angle] - reference)
            circular = np.arctan2(np.einsum("i,ij->j", w, np.sin(turns)),
                                  np.einsum("i,ij->j", w, np.cos(turns)))
            mean[angle] = reference + _wrap(circular - reference)
            values = self.q.copy()
            values[:, angle] = mean[angle] + _wrap(turns - mean[angle])
        low, high = self.mech.weighted_quantiles(values, w, (0.025, 0.975))
        spread = values - mean
        sigma = np.sqrt(np.einsum("i,ij->j", w, spread * spread))
        return Estimate(mean, low, high, sigma, ess, np.exp(self.log_p), reinitialized,
                        self._innovation.copy())


def tempering_exponent(log_likelihood: Array, remaining: float) -> float:
    """The largest exponent δ ≤ remaining whose weights L^δ (log L: (K,), −inf for none)
    leave at least half the K particles effective (bisection; the ESS falls as δ grows)."""
    finite = np.isfinite(log_likelihood)
    if finite.sum() <= 1:
        return remaining

    def ess(delta: float) -> float:
        x = delta * log_likelihood[finite]
        w = np.exp(x - x.max())
        return float(w.sum() ** 2 / (w * w).sum())

    half = len(log_likelihood) / 2
    if ess(remaining) >= half:
        return remaining
    low, high = 0.0, remaining
    for _ in range(40):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if ess(middle) >= half else (low, middle)
    return max(low, 1e-12 * remaining)


def stratified_normals(group: Array, d: int, rng: np.random.Generator) -> Array:
    """Standard normal draws (M, d, 1), stratified within each group of particles (the
    copies of one configuration): a Latin hypercube per group, so that k copies take k
    different quantiles of every direction instead of k independent draws that may
    leave a gap where the truth is."""
    count = len(group)
    u = np.empty((count, d))
    for i in range(d):
        order = np.lexsort((rng.random(count), group))  # by group, randomly within one
        members = group[order]
        starts = np.flatnonzero(np.r_[True, members[1:] != members[:-1]])
        sizes = np.diff(np.r_[starts, count])
        stratum = np.empty(count)
        stratum[order] = np.arange(count) - np.repeat(starts, sizes)
        size = np.empty(count)
        size[order] = np.repeat(sizes, sizes)
        u[:, i] = (stratum + rng.random(count)) / size
    return ndtri(u)[:, :, None]


def linear_gaussian_update(A: Array, r: Array, noise: Array, prior: float,
                           normals: Array) -> tuple[Array, Array]:
    """Readings r = A s + e (r (M, k), A (M, k, d)) with s ~ N(0, prior I) and
    e ~ N(0, diag(noise)) (noise (k,)), for M independent problems: log p(r) (M,), up to
    one constant, and a draw (M, d) of s from its posterior (``gaussian_posterior``) made
    from the standard normals ``normals`` (M, d, 1)."""
    log_likelihood, mean, root = gaussian_posterior(A, r, noise, prior)
    return log_likelihood, mean + posterior_draw(root, normals)


def gaussian_posterior(A: Array, r: Array, noise: Array, prior: float
                       ) -> tuple[Array, Array, Array]:
    """The same problems' log p(r) (M,), up to one constant, and the posterior N(μ, P) of
    s: μ (M, d) and the root (M, d, d) with P = root⁻ᵀ root⁻¹, where
    P⁻¹ = I/prior + Aᵀ diag(noise)⁻¹ A and μ = P Aᵀ diag(noise)⁻¹ r."""
    d = A.shape[2]
    C = prior * A @ A.transpose(0, 2, 1) + np.diag(noise)  # r's covariance
    L = np.linalg.cholesky(C)
    white = np.linalg.solve(L, r[:, :, None])[:, :, 0]
    log_likelihood = -0.5 * (white * white).sum(axis=1) - np.log(
        np.diagonal(L, axis1=1, axis2=2)).sum(axis=1)
    scaled = A.transpose(0, 2, 1) / noise  # Aᵀ diag(noise)⁻¹ (M, d, k)
    information = np.eye(d) / prior + scaled @ A
    mean = np.linalg.solve(information, scaled @ r[:, :, None])[:, :, 0]
    return log_likelihood, mean, np.linalg.cholesky(information)


def posterior_draw(root: Array, normals: Array) -> Array:
    """Draws (M, d) from N(0, P), P = root⁻ᵀ root⁻¹ (root (M, d, d)), made from the
    standard normals ``normals`` (M, d, 1)."""
    return np.linalg.solve(root.transpose(0, 2, 1), normals)[:, :, 0]


def _hopeless(likelihood: Array, seen: Array) -> bool:
    """Whether no particle lies within HOPELESS σ of the readings (``seen`` of them)."""
    return not likelihood.max() >= -0.5 * HOPELESS**2 * int(seen.sum())


def _prior_states(prior: tuple[Array, Array], n: int) -> tuple[Array, Array]:
    """The prior's (q, q̇) as (K, n) float arrays, K ≥ 1, or a ValueError."""
    q, qd = (np.atleast_2d(np.asarray(a, dtype=float)) for a in prior)
    if q.ndim != 2 or q.shape[1] != n or q.shape != qd.shape or len(q) == 0:
        raise ValueError(f"prior must be (q, q̇) of shape (K, {n}) each, got "
                         f"{np.shape(prior[0])} and {np.shape(prior[1])}")
    if not (np.isfinite(q).all() and np.isfinite(qd).all()):
        raise ValueError("prior states must be finite")
    return q, qd


def filter_step(t: Array, dt: float | None = None) -> tuple[float, int]:
    """The filter's step over readings at times t (N,) (dt, default the readings' median
    period) and the number of steps from t[0] to t[-1], known before any array is made."""
    step = dt if dt is not None else (float(np.median(np.diff(t))) if len(t) > 1 else 1e-3)
    if not (np.isfinite(step) and step > 0):
        raise ValueError(f"the filter step must be positive, got {step}")
    with np.errstate(over="ignore"):
        span = (t[-1] - t[0]) / step
    if not span < 1e15:  # int() of it would overflow or take gigabytes
        raise ValueError(f"{span:.3g} filter steps of {step:g} s from t = {t[0]:g} to "
                         f"{t[-1]:g} s: the step is too small")
    return step, int(round(span)) + 1


def readings_between_steps(t: Array, step: float) -> int:
    """How many of the readings at times t (N,) a filter of this step leaves out: a step
    takes one reading, the one within half a step of its time (see ParticleFilter.run)."""
    return len(t) - len(np.unique(np.round((t - t[0]) / step)))


def filter_times(t: Array, dt: float | None = None) -> tuple[Array, float]:
    """The filter's step times over readings at times t (N,), from t[0] every dt
    (default: the readings' median period) to t[-1], and that step."""
    step, count = filter_step(t, dt)
    return t[0] + step * np.arange(count), step


def systematic(weights: Array, count: int, rng: np.random.Generator) -> Array:
    """Indices (count,) drawn by systematic resampling (one offset, evenly spaced
    pointers) from weights (N,), which need not sum to one."""
    positions = (rng.random() + np.arange(count)) / count
    cumulative = np.cumsum(weights)
    return np.minimum(np.searchsorted(cumulative / cumulative[-1], positions),
                      len(weights) - 1)


def _wrap(angle: Array) -> Array:
    """Angles to (−π, π]."""
    return np.pi - np.mod(np.pi - angle, 2 * np.pi)

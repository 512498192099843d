"""The Kalman filters' unknown-force noise chosen from the readings (``--noise-force
auto``): the smallest random-walk intensity on a log grid whose run passes every
innovation test (estimation/consistency.py), then one grid step more.

Why the consistency tests and not the innovations' likelihood: the filter in C returns
each step's normalized innovation squared but not log det S, and the tests are the trust
rule itself, so the chosen filter is the most precise one the readings do not refute.
Why one step more: over 10 s of readings the tests pass a filter mildly too sure of
itself (benchmarks/estimators.py, set-up (a): σf = 3 N·m/√s passed with its 95 %
interval holding the truth 89.5 % of the time; 10 held it 96.6 %). Why upwards from the
smallest: an intensity far too large fails too (1e4 N·m/√s lost the four-bar's state:
the linearization breaks under so wide a covariance), so passing is not monotone over
the whole grid. A run costs the whole file (about 0.4 s for 10 s of the four-bar at 1 ms
in C); a typical choice takes five to seven runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mbgen.estimation.kalman import ErrorEKF, KalmanTrack

#: The grid: LOWEST × STEP^k up to HIGHEST [N/√s or N m/√s].
LOWEST, HIGHEST, STEP = 0.1, 1e3, float(np.sqrt(10.0))


@dataclass(frozen=True)
class Tuned:
    """The filter run at the chosen intensity, its track and the intensities tried."""

    sigma_f: float
    kalman: ErrorEKF
    track: KalmanTrack
    tried: list[tuple[float, bool]]  # (σf, passed) in the order run

    def describe(self) -> str:
        tried = ", ".join(f"{s:.3g} {'✓' if ok else '✗'}" for s, ok in self.tried)
        passed = [s for s, ok in self.tried if ok]
        how = ("none passes the innovation tests: the largest tried" if not passed else
               "the smallest that passes the innovation tests" if self.sigma_f == passed[0]
               else "one step of √10 above the smallest that passes the innovation tests")
        return f"--noise-force auto: {self.sigma_f:.3g} ({how}; tried {tried})"


def grid() -> np.ndarray:
    """The intensities tried, smallest first."""
    count = int(round(np.log(HIGHEST / LOWEST) / np.log(STEP))) + 1
    return LOWEST * STEP ** np.arange(count)


def tune_noise_force(make: Callable[[float], ErrorEKF],
                     run: Callable[[ErrorEKF], KalmanTrack]) -> Tuned:
    """``make(σf)`` a filter, ``run(filter)`` its track over the readings: the filter at
    one grid step above the smallest σf whose track passes the innovation tests (at that
    smallest if the step above fails; the largest of the grid, untrusted, if none
    passes)."""
    values = grid()
    runs: dict[int, tuple[ErrorEKF, KalmanTrack, bool]] = {}

    def at(k: int) -> bool:
        if k not in runs:
            kalman = make(float(values[k]))
            track = run(kalman)
            runs[k] = (kalman, track, track.distrust() is None)
        return runs[k][2]

    chosen = next((k for k in range(len(values)) if at(k)), len(values) - 1)
    if runs[chosen][2] and chosen + 1 < len(values) and at(chosen + 1):
        chosen += 1
    kalman, track, _ = runs[chosen]
    tried = [(float(values[k]), runs[k][2]) for k in sorted(runs)]
    return Tuned(float(values[chosen]), kalman, track, tried)

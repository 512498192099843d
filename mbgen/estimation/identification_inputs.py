"""What an identification is given: the recording, the method's settings, and the error
for bad input. A home of their own so both problem formulations (dependent and
independent coordinates) read them without importing each other."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbgen.errors import MbgenError

Array = np.ndarray
#: What ``Settings.coordinates`` may name: the states' coordinates (the first is the
#: default: independent where the file declares independent coordinates and the problem
#: allows them, else dependent; :func:`mbgen.estimation.identify.make_problem`)
COORDINATES = ("auto", "dependent", "independent")
#: What ``Settings.scheme`` may name: the step read as inverse dynamics
SCHEMES = ("midpoint", "spook")


class IdentificationError(MbgenError):
    """Bad identification input: unknown parameters, bounds, data."""


@dataclass(frozen=True)
class Recording:
    """Uniformly sampled readings: ``t`` (N,), ``readings`` (N, sensor outputs) with NaN
    where a sensor gave nothing, ``commands`` (N, actuators) or None."""

    t: Array
    readings: Array
    commands: Array | None = None


@dataclass(frozen=True)
class Settings:
    """Method parameters (docs/identification.md). ``scheme``: the step read as inverse
    dynamics, ``"midpoint"`` (second order) or ``"spook"`` (the paper's, first order);
    ``friction``: the midpoint scheme's dry friction, ``"smooth"`` (−c tanh(v/s), the
    continuous model that RK4 simulates) or ``"box"`` (SPOOK's bounded impulse; the
    SPOOK scheme always uses it); ``substeps``: steps per sample; ``impulse_noise``: the
    standard deviation of the impulse residuals over one sample period (white process
    noise: a substep's is impulse_noise/√substeps, so the model does not change with the
    step); ``coordinates``: the states, ``"dependent"`` (q, v of every coordinate, held on
    the constraints by the compliance: the paper's) or ``"independent"`` (z, ż: exactly on
    the constraints, no compliance, a fraction of the unknowns; the midpoint scheme with
    smooth friction only, :mod:`mbgen.estimation.independent_problem`) or ``"auto"``
    (the default: independent where the file declares independent coordinates and the
    problem allows them; the compliance's give biased a spring carried by constraints
    9σ, issue 52); ``step_check``: solve again at half the step, report that solution and
    fold how far the values moved into each σ (:func:`identify`; on by default: the σ of
    the noise alone do not cover what the step does, 11σ on the guide's friction)."""

    scheme: str = SCHEMES[0]
    coordinates: str = COORDINATES[0]
    friction: str = "smooth"
    impulse_noise: float = 1e-3
    constraint_noise: float = 1e-3
    compliance: float = 1e-5
    damping: float | None = None
    substeps: int = 1
    max_iterations: int = 100
    step_check: bool = True
    warm_iterations: int = 20


def check_recording(t: Array, where: str = "data") -> float:
    """The sample period of uniformly sampled times; a clear error at the first gap."""
    t = np.asarray(t, dtype=float)
    if t.size < 3:
        raise IdentificationError(f"{where}: need at least 3 samples, got {t.size}")
    steps = np.diff(t)
    period = float(np.median(steps))
    bad = np.flatnonzero(np.abs(steps - period) > 1e-6 * max(period, 1e-12) + 1e-9)
    if bad.size:
        k = int(bad[0])
        raise IdentificationError(
            f"{where}: a gap between t = {t[k]:g} and t = {t[k + 1]:g} (row {k + 2} of the "
            f"data; the sample period is {period:g}): identification needs uniformly sampled "
            "rows (leave a cell empty for a missing reading)")
    return period

"""What both identification problems (dependent and independent coordinates) share: the
grid of steps, the parameters identified among the mechanism's, the priors and readings
as residual rows, and the actuators' commands between samples."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from mbgen.estimation.identification_inputs import Recording, Settings, check_recording
from mbgen.runtime.compiled import CompiledMechanism

Array = np.ndarray


class ProblemLayout:
    """The step grid ``t`` (K + 1,) of step ``h``, the selected parameters and the whole
    vector ``base`` they sit in, the priors (index, mean, weight) and the observed readings
    (sample, output, value, state, weight). A subclass sets ``state_size``: the unknowns
    are the states' (state_size,) then the selected parameters."""

    state_size: int

    def __init__(self, mech: CompiledMechanism, recording: Recording, names: Sequence[str],
                 settings: Settings, priors: Mapping[str, tuple[float, float]]) -> None:
        self.mech = mech
        self.settings = settings
        self.prior_index = np.array([list(names).index(name) for name in priors], dtype=int)
        self.prior_mean = np.array([mean for mean, _ in priors.values()], dtype=float)
        self.prior_weight = 1.0 / np.array([std for _, std in priors.values()], dtype=float)
        self.h = check_recording(recording.t) / settings.substeps
        self.samples = len(recording.t)
        self.steps = (self.samples - 1) * settings.substeps
        self.t = recording.t[0] + self.h * np.arange(self.steps + 1)
        all_names = list(mech.parameters)
        self.selected = np.array([all_names.index(name) for name in names], dtype=int)
        self.base = mech.parameter_vector
        self.sensor_weight = 1.0 / mech.sensor_noise()
        observed = ~np.isnan(recording.readings)
        self.obs_step, self.obs_sensor = np.nonzero(observed)  # sample, output
        self.obs_value = recording.readings[observed]
        self.obs_state = self.obs_step * settings.substeps

    def parameters(self, x: Array) -> Array:
        """The whole parameter vector of the unknowns x."""
        p = self.base.copy()
        p[self.selected] = x[self.state_size:]
        return p

    def split(self, x: Array) -> tuple[Array, Array, Array]:
        """The states q, v (K + 1, n) of the unknowns x and the whole parameter vector."""
        raise NotImplementedError

    def fitted(self, x: Array, readings_shape: tuple[int, int]) -> Array:
        """The model's readings at the samples' states of x."""
        q, v, p = self.split(x)
        states = np.arange(self.samples) * self.settings.substeps
        return self.mech.sensors(q[states], v[states], p).reshape(readings_shape)

    def commands_between(self, recording: Recording, phase: float) -> Array | None:
        """The actuators' commands (K, actuators) at ``phase`` of each step (0 its start,
        0.5 its middle), or None without commands."""
        if recording.commands is None:
            return None
        return _commands_at(recording, self.t[:-1] + phase * self.h)


def _commands_at(recording: Recording, at: Array) -> Array:
    """The actuators' commands (N, actuators) between samples: a cubic spline through them
    (samples of a smooth signal; linear interpolation shaves the peaks by h²u''/8, about
    0.2 % of the benchmark's command at 100 Hz, a bias the motor gain would absorb)."""
    from scipy.interpolate import CubicSpline

    assert recording.commands is not None  # only asked of a recording with commands
    if len(recording.t) < 4:
        return np.column_stack([np.interp(at, recording.t, column)
                                for column in recording.commands.T])
    return CubicSpline(recording.t, recording.commands, axis=0)(at)

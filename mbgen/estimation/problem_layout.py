"""What both identification problems (dependent and independent coordinates) share: the
grid of steps, the parameters identified among the mechanism's, the priors and readings
as residual rows, and the actuators' commands between samples."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Generic, NamedTuple, TypeVar

import numpy as np

from mbgen.estimation.identification_inputs import Recording, Settings, check_recording
from mbgen.estimation.impulses import ImpulseModel
from mbgen.runtime.compiled import CompiledMechanism

Array = np.ndarray
Group = TypeVar("Group")


class ResidualGroups(NamedTuple, Generic[Group]):
    """The residual groups of both problems, in the residual vector's order (their row
    blocks, mean squares or variances): the uncertainty reads the impulses' spread off the
    fit and takes the others at their stated noise."""

    impulses: Group  # per step: the impulses the model needs between states
    readings: Group  # per reading: model minus reading
    initial: Group  # at k = 0: the constraints (dependent coordinates only)
    priors: Group  # per parameter with a prior


#: The impulses' place among the groups (BlockJacobian takes groups by index).
IMPULSES = ResidualGroups._fields.index("impulses")


class ProblemLayout:
    """The step grid ``t`` (K + 1,) of step ``h``, the selected parameters and the whole
    vector ``base`` they sit in, the priors (index, mean, weight) and the observed readings
    (sample, output, value, state, weight). A subclass sets ``state_size``: the unknowns
    are the states' (state_size,) then the selected parameters, and ``impulses``: the
    step's model, whose input forces the accelerometers' q̈ takes too."""

    state_size: int
    impulses: ImpulseModel

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
        # the readings' columns: the sensors' outputs, then (where given) the accelerometers'
        self.sensor_count = len(mech.sensor_labels)
        observed = ~np.isnan(recording.readings)
        noise = mech.sensor_noise()
        if observed[:, self.sensor_count:].any():
            noise = np.concatenate([noise, mech.accelerometer_noise()])
        self.sensor_weight = 1.0 / noise
        self.obs_step, self.obs_sensor = np.nonzero(observed)  # sample, output
        self.obs_value = recording.readings[observed]
        self.obs_state = self.obs_step * settings.substeps
        # the samples an accelerometer read (their q̈ once each), and each such reading's
        # row among them
        acc = self.obs_sensor >= self.sensor_count
        self.acc_samples, self.acc_row = np.unique(self.obs_step[acc], return_inverse=True)
        # the actuators' commands at the samples (N, actuators): zero without commands
        self.sample_commands = (np.zeros((self.samples, len(mech.meta.get("actuators", []))))
                                if recording.commands is None
                                else np.asarray(recording.commands, dtype=float))

    def parameters(self, x: Array) -> Array:
        """The whole parameter vector of the unknowns x."""
        p = self.base.copy()
        p[self.selected] = x[self.state_size:]
        return p

    def split(self, x: Array) -> tuple[Array, Array, Array]:
        """The states q, v (K + 1, n) of the unknowns x and the whole parameter vector."""
        raise NotImplementedError

    def fitted(self, x: Array, readings_shape: tuple[int, int]) -> Array:
        """The model's readings (N, outputs of ``readings_shape``: the sensors', then the
        accelerometers' if the readings have their columns) at the samples' states of x."""
        q, v, p = self.split(x)
        states = np.arange(self.samples) * self.settings.substeps
        mech, samples = self.mech, len(states)
        fitted = mech.sensors(q[states], v[states], p).reshape(samples, self.sensor_count)
        if readings_shape[1] > self.sensor_count:
            forces = self.impulses.input_forces(self.sample_commands, p)
            qdd, _ = mech.forward_dynamics(q[states], v[states], forces, p, errors="status")
            fitted = np.hstack([fitted, mech.accelerometers(q[states], qdd, p).reshape(
                samples, -1)])
        return fitted

    def readings(self, q: Array, v: Array, p: Array, jacobian: bool
                 ) -> tuple[Array, Array | None, Array | None, Array | None]:
        """The model's value of each observed reading (obs,) at its sample's state, and with
        ``jacobian`` its derivatives with respect to that state's q and v (obs, n) each and
        the whole parameter vector (obs, parameters). A sensor reads h(q, v); an
        accelerometer a(q, q̈) with q̈ the forward dynamics (the file's smooth friction) at
        the state and the sample's commands."""
        mech = self.mech
        count, n = len(self.obs_state), mech.n
        value = np.empty(count)
        d_q, d_v = np.zeros((count, n)), np.zeros((count, n))
        d_p = np.zeros((count, len(p)))
        sensor = np.flatnonzero(self.obs_sensor < self.sensor_count)
        if sensor.size:
            qs, vs = q[self.obs_state[sensor]], v[self.obs_state[sensor]]
            pick = (np.arange(sensor.size), self.obs_sensor[sensor])
            value[sensor] = mech.sensors(qs, vs, p)[pick]
            if jacobian:
                d_q[sensor] = mech.sensors_q(qs, vs, p)[pick]
                d_v[sensor] = mech.sensors_qd(qs, vs, p)[pick]
                d_p[sensor] = mech.sensors_p(qs, vs, p)[pick]
        acc = np.flatnonzero(self.obs_sensor >= self.sensor_count)
        if acc.size:
            states = self.acc_samples * self.settings.substeps
            qa, va = q[states], v[states]
            forces, forces_p = self.impulses.input_forces_p(
                self.sample_commands[self.acc_samples], p)
            pick = (self.acc_row, self.obs_sensor[acc] - self.sensor_count)
            # a trial point whose dynamics fail (a mass through zero) gives NaN: refused
            if not jacobian:
                qdd, _ = mech.forward_dynamics(qa, va, forces, p, errors="status")
                value[acc] = mech.accelerometers(qa, qdd, p)[pick]
                return value, None, None, None
            qdd, qdd_q, qdd_v, qdd_force, _ = mech.forward_dynamics_jacobians(
                qa, va, forces, p, errors="status")
            value[acc] = mech.accelerometers(qa, qdd, p)[pick]
            a_qdd = mech.accelerometers_qdd(qa, qdd, p)  # (samples, outputs, n)
            qdd_p = (mech.forward_dynamics_parameter_jacobian(qa, va, forces, p,
                                                              errors="status")[0]
                     + qdd_force @ forces_p)
            d_q[acc] = (mech.accelerometers_q(qa, qdd, p) + a_qdd @ qdd_q)[pick]
            d_v[acc] = (a_qdd @ qdd_v)[pick]
            d_p[acc] = (mech.dense("accelerometers_p", p, q=qa, qdd=qdd) + a_qdd @ qdd_p)[pick]
        if not jacobian:
            return value, None, None, None
        return value, d_q, d_v, d_p

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

"""Fixed-step simulation. The stepping loop runs in the generated C; Python only slices
the run into chunks (for the progress bar) and post-processes whole trajectories."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

import mbgen.columns as columns
from mbgen.errors import SingularConfigurationError
from mbgen.io.tables import decimated_rows
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.runtime.integration import (
    FORMULATIONS,
    INTEGRATORS,
    PROJECTIONS,
    VARIATIONAL,
    IntegrationError,
)
from mbgen.simulation.assembly import assemble, velocities

Array = np.ndarray
ForceFunction = Callable[[Array], Array]  # vectorized over time


@dataclass
class SimulationResult:
    mechanism: CompiledMechanism
    t: Array
    q: Array
    qd: Array
    qdd: Array
    settings: dict[str, Any] = field(default_factory=dict)
    forces: Mapping[str, ForceFunction] = field(default_factory=dict)  # the inputs applied
    sigma: Array | None = None  # (N, n) standard deviations of q (factor graph, asked for)
    reselected: list[float] = field(default_factory=list)  # when the kept rows were chosen

    @property
    def coordinate_names(self) -> list[str]:
        return self.mechanism.coordinate_names

    @cached_property
    def energy(self) -> Array:
        """Kinetic + potential energy along the run (excludes work of external inputs)."""
        return self.mechanism.energy(self.q, self.qd)

    @cached_property
    def constraint_error(self) -> Array:
        """‖Φ(q)‖₂ along the run."""
        return np.linalg.norm(self.mechanism.phi(self.q).reshape(len(self.t), -1), axis=1)

    @property
    def driven_coordinates(self) -> list[str]:
        """Coordinates an input can act on: those with an applied force or an actuator, in
        coordinate order."""
        acted = {a["coordinate"] for a in self.mechanism.meta.get("actuators", [])}
        return [c for c in self.coordinate_names if c in self.forces or c in acted]

    def columns(self, extras: tuple[str, ...] = (), every: int = 1,
                ) -> tuple[list[str], Array]:
        """CSV columns: t, q, q̇, q̈, energy, ‖Φ‖, <name>_sigma per coordinate when the run
        has standard deviations, then per ``extras`` the sensor outputs
        ("sensors": one column per label, the accelerometers' after the others, from the
        run's q̈), the multipliers ("lambda": lambda_<row>) and
        the applied generalized forces ("forces": force_<coordinate> for every coordinate
        with an applied force or an actuator, 0 where none is applied); every
        ``every``-th row (the last one always included)."""
        names = self.coordinate_names
        header = [columns.TIME, *columns.state(names), columns.ENERGY,
                  columns.CONSTRAINT_NORM]
        blocks = [self.t, self.q, self.qd, self.qdd, self.energy, self.constraint_error]
        if self.sigma is not None:
            header += [columns.sigma(c) for c in names]
            blocks.append(self.sigma)
        for extra in extras:
            if extra == "sensors":
                mech = self.mechanism
                if mech.sensor_labels:
                    header += mech.sensor_labels
                    blocks.append(mech.sensors(self.q, self.qd).reshape(len(self.t), -1))
                if mech.accelerometer_labels:
                    header += mech.accelerometer_labels
                    blocks.append(mech.accelerometers(self.q, self.qdd).reshape(len(self.t), -1))
            elif extra == "lambda":
                header += [columns.multiplier(i) for i in range(self.mechanism.m)]
                blocks.append(self.mechanism.lagrange_multipliers(self.q, self.qd))
            elif extra == "forces":
                header += [columns.force(name) for name in self.driven_coordinates]
                blocks += [np.zeros_like(self.t) if name not in self.forces else
                           np.broadcast_to(np.asarray(self.forces[name](self.t), dtype=float),
                                           self.t.shape) for name in self.driven_coordinates]
            else:
                raise ValueError(f"unknown extra column set {extra!r} (sensors, lambda, "
                                 "forces)")
        return header, np.column_stack(blocks)[decimated_rows(len(self.t), every)]


class RunStopped(SingularConfigurationError):
    """A run that could not reach t_end (a dead point, lost rank, a step that failed):
    ``result`` holds its rows up to the stop, so a caller can keep them for a look
    without taking them for the run asked for."""

    def __init__(self, message: str, result: SimulationResult) -> None:
        super().__init__(message)
        self.result = result


#: σ_min/σ_max of the constraint rows the dynamics use under which a mechanism with
#: redundant rows gets the best-conditioned set instead (checked between chunks).
RESELECT_BELOW = 1e-3


def simulate(mechanism: CompiledMechanism, t_end: float, dt: float, integrator: str = "rk4",
             coords: str = "dependent", q0: Array | None = None, qd0: Array | None = None,
             forces: Mapping[str, ForceFunction] | None = None, project: str = "manifold",
             baumgarte: tuple[float, float] | None = None, z: list[str] | None = None,
             progress: Callable[[int, int], None] | None = None,
             chunks: int = 50, spook: Mapping[str, Any] | None = None,
             reselect_below: float = RESELECT_BELOW) -> SimulationResult:
    """Integrate from (q0, q̇0) (default: the file's initial state, at rest) to ``t_end``.

    ``forces`` maps a coordinate name to F(t) (vectorized), added as a generalized force.
    ``project``: "none"; "manifold" (dependent coordinates are pulled back onto Φ = 0 and
    Φq q̇ = 0 after every step, minimum-norm); or "energy" (also rescales q̇ so that T + V
    keeps its initial value; only for conservative models, no inputs or dampers). The
    variational integrators keep the constraints themselves and are never projected.
    ``progress(done_steps, total_steps)`` is called between chunks. ``spook``: the
    ``compliance`` and ``damping`` of the SPOOK stepper. A mechanism with redundant
    constraints (Bricard's linkage) is watched between chunks: when the rows its
    dynamics use fall below ``reselect_below`` in σ_min/σ_max, the best-conditioned set
    at that state replaces them (``result.reselected``: the times). A run that stops
    raises :class:`RunStopped` with its rows up to the stop.
    """
    if integrator not in INTEGRATORS:
        raise ValueError(f"unknown integrator {integrator!r} (choose from "
                         f"{', '.join(INTEGRATORS)})")
    if coords not in FORMULATIONS:
        raise ValueError(f"coords must be one of {FORMULATIONS}, got {coords!r}")
    nsteps = step_count(t_end, dt)  # positive, finite and whole, or a clear error
    if project not in PROJECTIONS:
        raise ValueError(f"project must be one of {', '.join(PROJECTIONS)}, got {project!r}")
    if integrator in VARIATIONAL or integrator == "spook":
        if coords != "dependent":
            raise ValueError(f"the {integrator} integrator works in dependent coordinates")
        project = "none"  # they keep the constraints themselves; projecting would undo that
    if spook and integrator != "spook":
        raise ValueError("compliance and damping are options of the spook integrator")
    if project == "energy" and (forces or mechanism.meta.get("dissipative")):
        raise ValueError("energy projection needs a conservative model: no external forces "
                         "and no dampers")
    n = mechanism.n
    # the one rule for a start (simulation/assembly.py): the least change onto Φ = 0 and
    # Φq q̇ = 0, nothing when the caller (cli/states.py) assembled it already
    q, _ = assemble(mechanism, mechanism.q0 if q0 is None else np.asarray(q0, dtype=float),
                    {}, what=None)
    qd, _ = velocities(mechanism, q, np.zeros(n) if qd0 is None else qd0, {})
    table = _force_table(mechanism, forces, nsteps, dt)
    saved = mechanism.baumgarte
    if baumgarte is not None:
        mechanism.baumgarte = baumgarte
    out_q, out_qd, out_qdd = (np.empty((nsteps + 1, n)) for _ in range(3))
    bounds = np.linspace(0, nsteps, min(chunks, nsteps) + 1).astype(int)
    redundant = mechanism.m > mechanism.rank
    reselected: list[float] = []
    settings = {"integrator": integrator, "coords": coords, "dt": dt, "t_end": t_end,
                "project": project, "baumgarte": baumgarte, **dict(spook or {})}
    try:
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
            steps = int(stop - start)
            segment = None if table is None else table[2 * start: 2 * stop + 1]
            try:
                seg_q, seg_qd, seg_qdd = mechanism.integrate(
                    q, qd, dt, steps, integrator, coords, project, z, segment,
                    dict(spook) if spook else None)
            except IntegrationError as error:
                step = start + error.step
                done = start + len(error.states[0])  # the chunk's rows before the stop
                for whole, part in zip((out_q, out_qd, out_qdd), error.states, strict=True):
                    whole[start:done] = part
                raise RunStopped(
                    f"simulation stopped at t = {step * dt:.6g} s (step {step}): "
                    f"{str(error).split(': ', 1)[1]}",
                    SimulationResult(mechanism, np.arange(done) * dt, out_q[:done],
                                     out_qd[:done], out_qdd[:done], settings,
                                     dict(forces or {}), reselected=reselected)) from None
            out_q[start:stop + 1] = seg_q
            out_qd[start:stop + 1] = seg_qd
            out_qdd[start:stop + 1] = seg_qdd
            q, qd = seg_q[-1].copy(), seg_qd[-1].copy()
            if (redundant and mechanism.kept_rows_condition(q) < reselect_below
                    and mechanism.reselect_rows(q)):
                reselected.append(float(stop * dt))
            if progress is not None:
                progress(int(stop), nsteps)
    finally:
        mechanism.baumgarte = saved
    t = np.arange(nsteps + 1) * dt
    return SimulationResult(mechanism, t, out_q, out_qd, out_qdd, settings, dict(forces or {}),
                            reselected=reselected)


def step_count(t_end: float, dt: float) -> int:
    """Steps of dt that make t_end; refuses what a fixed-step run could not honour."""
    if not (math.isfinite(t_end) and math.isfinite(dt) and t_end > 0 and dt > 0):
        raise ValueError(f"t_end and dt must be positive and finite, got {t_end} and {dt}")
    steps = int(round(t_end / dt))
    if steps < 1 or abs(steps * dt - t_end) > 1e-9 * max(t_end, dt):
        raise ValueError(f"t_end = {t_end:g} s is not a whole number of steps of dt = {dt:g} s "
                         f"({t_end / dt:.6g} steps): the run would not end at t_end")
    return steps


def force_vector(mechanism: CompiledMechanism, forces: Mapping[str, ForceFunction] | None,
                 ) -> Callable[[float], Array] | None:
    """The named forces as one function of t giving the generalized-force vector (n,), as
    the factor-graph simulator takes them (None without forces); the integrators take
    the same forces as a table (:func:`_force_table`)."""
    if not forces:
        return None
    columns = [(mechanism.coordinate_index(name), f) for name, f in forces.items()]

    def force(t: float) -> Array:
        vector = np.zeros(mechanism.n)
        for index, function in columns:
            vector[index] += float(function(np.asarray(t)))
        return vector

    return force


def _force_table(mechanism: CompiledMechanism, forces: Mapping[str, ForceFunction] | None,
                 nsteps: int, dt: float) -> Array | None:
    """External generalized forces at every half step (RK4 needs t + dt/2)."""
    if not forces:
        return None
    times = np.arange(2 * nsteps + 1) * (dt / 2)
    table = np.zeros((len(times), mechanism.n))
    for name, function in forces.items():
        values = np.broadcast_to(np.asarray(function(times), dtype=float), times.shape)
        table[:, mechanism.coordinate_index(name)] += values
    return table

"""One chunk of a study's runs: assembled, advanced together in C, their figures taken.

Runs start from the mechanism's initial state at its nominal parameters (``nominal_q``),
with the study's initial positions and velocities put in and the whole state made
consistent at each run's own parameters: with as many named positions (velocities) as
degrees of freedom they are met exactly and the rest follows, else the state moves the
least. A run that cannot be assembled, or whose step fails, is marked in its status and
the others go on. Everything here is a function of the chunk's runs alone, so a chunk
gives the same numbers in any process, thread or order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import mbgen.columns as columns
from mbgen.io.tables import decimated_rows
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.runtime.integration import Runs
from mbgen.simulation.assembly import assemble_runs
from mbgen.sweep.design import Design
from mbgen.sweep.study import Study

Array = np.ndarray

#: Recorded states (runs x steps) per segment of a chunk: bounds the memory of a segment
#: (two arrays of n doubles per state) whatever the chunk and the run length.
SEGMENT_STATES = 1 << 15
OK = "ok"


@dataclass(frozen=True)
class ChunkResult:
    """``columns``: the runs table's columns for these runs, in order; ``trajectories``:
    the long table (run, t, one column per recorded quantity) or None."""

    columns: dict[str, Array]
    trajectories: dict[str, Array] | None


def run_parameters(mech: CompiledMechanism, design: Design, rows: Array) -> Array:
    """The parameter vectors of the runs ``rows``, (len(rows), np)."""
    params = np.tile(mech.parameter_vector, (len(rows), 1))
    names = list(mech.parameters)
    for name, values in design.of("parameters"):
        params[:, names.index(name)] = values[rows]
    return params


def start_states(mech: CompiledMechanism, design: Design, rows: Array, nominal_q: Array,
                 params: Array) -> tuple[Array, Array, list[str]]:
    """Assembled (q, q̇) of the runs ``rows``, (len(rows), n) each, and each run's status
    (``ok`` or why it could not be assembled)."""
    count, n = len(rows), mech.n
    status = [OK] * count
    named = {mech.coordinate_index(name): values[rows]
             for name, values in design.of("initial")}
    q, codes = assemble_runs(mech, np.tile(nominal_q, (count, 1)), named, params)
    for k in np.flatnonzero(codes):
        status[k] = f"assembly: {mech.status_text(int(codes[k]))}"
    rates = design.of("velocity")
    asked = np.zeros((count, n))
    for name, values in rates:
        asked[:, mech.coordinate_index(name)] = values[rows]
    if rates and len(rates) == mech.dof:
        qd, codes = mech.solve_velocity(q, asked[:, [mech.coordinate_index(name) for name, _
                                                    in rates]],
                                        z=[name for name, _ in rates], params=params,
                                        errors="status")
    else:
        qd, codes = mech.project_velocity(q, asked, params=params, errors="status")
    for k in np.flatnonzero(codes):
        if status[k] == OK:
            status[k] = f"velocity: {mech.status_text(int(codes[k]))}"
    qd = np.where(codes[:, None] == 0, qd, 0.0)
    return np.ascontiguousarray(q), np.ascontiguousarray(qd), status


def needs_velocities(mech: CompiledMechanism, names: list[str]) -> bool:
    """Whether any of the quantities ``names`` depends on q̇ (phi_norm and the coordinates
    do not: their runs need not copy out q̇ at every step)."""
    return any(name not in mech.coordinate_names and name != "phi_norm" for name in names)


class Quantities:
    """The recorded quantities of states (runs, steps, n) of runs with parameters (runs,
    np), each (runs, steps), evaluated once per segment; ``qd`` None when none of them
    needs it (see needs_velocities)."""

    def __init__(self, mech: CompiledMechanism, q: Array, qd: Array | None,
                 params: Array) -> None:
        self.mech, self.q, self.qd = mech, q, qd
        self.flat_params = np.repeat(params, q.shape[1], axis=0)
        self._sensors: Array | None = None

    def __call__(self, name: str) -> Array:
        mech, (runs, steps, n) = self.mech, self.q.shape
        flat_q = self.q.reshape(-1, n)
        if name in mech.coordinate_names:
            return self.q[:, :, mech.coordinate_index(name)]
        if name == "phi_norm":
            phi = mech.phi(flat_q, params=self.flat_params).reshape(runs, steps, -1)
            return np.linalg.norm(phi, axis=2)
        assert self.qd is not None, f"{name} needs the velocities"
        flat_qd = self.qd.reshape(-1, n)
        moving = columns.velocity_of(name, mech.coordinate_names)
        if moving is not None:
            return self.qd[:, :, mech.coordinate_index(moving)]
        if name == "energy":
            return mech.energy(flat_q, flat_qd, params=self.flat_params).reshape(runs, steps)
        if self._sensors is None:
            self._sensors = mech.sensors(flat_q, flat_qd, params=self.flat_params).reshape(
                runs, steps, -1)
        return self._sensors[:, :, mech.sensor_labels.index(name)]


class Figures:
    """Running min, max, sum and sum of squares of each figure's quantity over the finite
    samples of each run."""

    def __init__(self, study: Study, count: int) -> None:
        self.study = study
        self.names = list(dict.fromkeys(f.of for f in study.figures))
        self.low = {name: np.full(count, np.inf) for name in self.names}
        self.high = {name: np.full(count, -np.inf) for name in self.names}
        self.total = {name: np.zeros(count) for name in self.names}
        self.squares = {name: np.zeros(count) for name in self.names}
        self.samples = {name: np.zeros(count) for name in self.names}

    def add(self, quantities: Quantities) -> None:
        for name in self.names:
            values = quantities(name)
            finite = np.isfinite(values)
            self.low[name] = np.minimum(self.low[name], np.where(finite, values, np.inf).min(1))
            self.high[name] = np.maximum(self.high[name],
                                         np.where(finite, values, -np.inf).max(1))
            clean = np.where(finite, values, 0.0)
            self.total[name] += clean.sum(1)
            self.squares[name] += (clean * clean).sum(1)
            self.samples[name] += finite.sum(1)

    def columns(self) -> dict[str, Array]:
        out = {}
        for figure in self.study.figures:
            name, samples = figure.of, np.maximum(self.samples[figure.of], 1)
            seen = self.samples[name] > 0
            value = {"min": self.low[name], "max": self.high[name],
                     "mean": self.total[name] / samples,
                     "rms": np.sqrt(self.squares[name] / samples)}
            for stat in figure.stats:
                out[f"{name}_{stat}"] = np.where(seen, value[stat], np.nan)
        return out


def run_chunk(mech: CompiledMechanism, study: Study, design: Design, rows: Array,
              nominal_q: Array, phi_limit: float) -> ChunkResult:
    """The runs ``rows`` (run numbers) of the study, start to end. A run whose ‖Φ‖ at the
    end of a segment (``SEGMENT_STATES``) or of the run exceeds ``phi_limit`` is marked
    as drifted off its constraints."""
    count, n, steps, dt = len(rows), mech.n, study.steps, study.dt
    params = run_parameters(mech, design, rows)
    q0, qd0, status = start_states(mech, design, rows, nominal_q, params)
    forces = None
    if design.of("forces"):
        forces = np.zeros((count, n))
        for name, values in design.of("forces"):
            forces[:, mech.coordinate_index(name)] = values[rows]
    runs = Runs.start(q0, qd0, params, forces)
    runs.status[[k for k, s in enumerate(status) if s != OK]] = -1  # never stepped
    figures = Figures(study, count)
    kept = decimated_rows(steps + 1, study.trajectory_every) if study.trajectories else None
    traces: list[Array] = []  # per segment: (count, kept there, quantities)
    phi_max = np.zeros(count)

    def take(q: Array, qd: Array | None, first_step: int) -> None:
        quantities = Quantities(mech, q, qd, params)
        figures.add(quantities)
        phi = np.linalg.norm(mech.phi(q[:, -1], params=params).reshape(count, -1), axis=1)
        np.fmax(phi_max, phi, out=phi_max)
        if kept is not None:
            here = kept[(kept >= first_step) & (kept < first_step + q.shape[1])] - first_step
            traces.append(np.stack([quantities(name)[:, here] for name in study.trajectories],
                                   axis=-1))

    record = bool(study.figures or study.trajectories)
    velocities = needs_velocities(mech, [*figures.names, *study.trajectories])
    take(q0[:, None], qd0[:, None], 0)
    segment = max(1, SEGMENT_STATES // max(count, 1))
    for first in range(0, steps, segment):
        length = min(segment, steps - first)
        out = mech.advance_runs(runs, dt, length, study.integrator, study.coords,
                                study.projection, record=record, velocities=velocities)
        if out is not None:
            take(out[0], out[1], first + 1)
    if not record:
        take(runs.q[:, None], runs.qd[:, None], steps)
    for k in np.flatnonzero(runs.status > 0):
        status[k] = f"step: {mech.status_text(int(runs.status[k]))}"
    for k in np.flatnonzero(phi_max > phi_limit):
        if status[k] == OK:
            status[k] = f"drift: ‖Φ‖ reached {phi_max[k]:.3g}, above {phi_limit:.3g}"
    failed = runs.failed_step >= 0
    columns: dict[str, Array] = {"run": rows.astype(np.int64), **design.columns(rows),
                                 **figures.columns()}
    if study.final:
        done = runs.status == 0
        columns |= {f"{c}_final": np.where(done, runs.q[:, i], np.nan)
                    for i, c in enumerate(mech.coordinate_names)}
        columns |= {f"{c}_dot_final": np.where(done, runs.qd[:, i], np.nan)
                    for i, c in enumerate(mech.coordinate_names)}
    columns["phi_max"] = phi_max
    columns["status"] = np.array(status, dtype=object)
    columns["failed_at"] = np.where(failed, runs.failed_step * dt,
                                    np.where(runs.status < 0, 0.0, np.nan))
    return ChunkResult(columns, _trajectories(study, rows, kept, traces))


def _trajectories(study: Study, rows: Array, kept: Array | None, traces: list[Array],
                  ) -> dict[str, Array] | None:
    """The long table: a row per run and kept time."""
    if kept is None:
        return None
    values = np.concatenate(traces, axis=1)  # (count, len(kept), quantities)
    count = len(rows)
    table = {"run": np.repeat(rows.astype(np.int64), len(kept)),
             "t": np.tile(kept * study.dt, count)}
    for j, name in enumerate(study.trajectories):
        table[name] = values[:, :, j].reshape(-1)
    return table

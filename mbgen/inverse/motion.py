"""What the inverse dynamics methods share: the prescribed motion and its result.

The imposed coordinates (the actuated joints, or a point's x and y for an end-effector
path) act as independent coordinates: the position problem is solved along the path
(each sample from the extrapolation of the ones before, so one assembly branch), then
q̇ and q̈ from the spline derivatives of the imposed coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

import mbgen.columns as columns
from mbgen.errors import TrajectoryError
from mbgen.io.tables import decimated_rows
from mbgen.io.trajectory import Trajectory
from mbgen.runtime.compiled import CompiledMechanism

Array = np.ndarray


@dataclass
class InverseResult:
    """The motion (q, q̇, q̈ per sample) and the forces (N, d) on the actuated coordinates."""

    mechanism: CompiledMechanism
    t: Array
    q: Array
    qd: Array
    qdd: Array
    forces: Array
    imposed: list[int]
    actuated: list[int]
    prescribed: Array  # (N, d): the imposed coordinates as asked
    settings: dict[str, Any] = field(default_factory=dict)
    # (N, d): the forces' marginal standard deviations under the factor graph's noise
    # models (its banded solver); None for the direct method
    force_sigma: Array | None = None

    @property
    def followed(self) -> Array:
        """The imposed coordinates as the solution follows them (N, d)."""
        return self.q[:, self.imposed]

    @property
    def following_error(self) -> Array:
        return self.followed - self.prescribed

    def columns(self, extras: tuple[str, ...] = (), every: int = 1,
                ) -> tuple[list[str], Array]:
        """CSV columns as in a simulation's, so the motion can be drawn and animated: t, q,
        q̇, q̈ (every coordinate, the imposed ones as followed), then force_<coordinate>
        per actuator; every ``every``-th row (the last one always included). An inverse
        run has no extra column sets."""
        if extras:
            raise ValueError(f"inverse dynamics has no extra column sets, got {extras}")
        names = self.mechanism.coordinate_names
        header = [columns.TIME, *columns.state(names),
                  *(columns.force(names[i]) for i in self.actuated)]
        data = np.column_stack([self.t, self.q, self.qd, self.qdd, self.forces])
        if self.force_sigma is not None:
            header += [columns.sigma(columns.force(names[i])) for i in self.actuated]
            data = np.column_stack([data, self.force_sigma])
        return header, data[decimated_rows(len(self.t), every)]


def coordinate_indices(mech: CompiledMechanism, names: list[str] | list[int] | str,
                       what: str) -> list[int]:
    """As many distinct coordinates as the degrees of freedom, by name or index
    (``"theta0"``, ``[20, 21]``, ``"x5,y5"``)."""
    try:
        indices = mech.coordinate_indices(names)
    except (KeyError, IndexError) as exc:
        raise TrajectoryError(f"{what}: {exc.args[0]}") from None
    if len(indices) != mech.dof:
        raise TrajectoryError(f"{what}: name {mech.dof} coordinate{'s' * (mech.dof > 1)} (the "
                              f"degrees of freedom), got {len(indices)}")
    if len(set(indices)) != len(indices):
        raise TrajectoryError(f"{what}: a coordinate is named twice")
    return indices


def path_positions(mech: CompiledMechanism, trajectory: Trajectory, imposed: list[int],
                   q_start: Array | None = None) -> Array:
    """q (N, n) with q[imposed] = the samples, one assembly branch along the whole path;
    the first sample the mechanism cannot reach is an error naming its time."""
    start = mech.q0 if q_start is None else q_start
    q, status = mech.solve_position_path(start, trajectory.values, imposed, errors="status")
    failed = np.flatnonzero(status)
    if failed.size:
        k = int(failed[0])
        raise mech.status_error(int(status[k]), f"{trajectory.source}: the mechanism cannot "
                                f"reach the prescribed motion at t = {trajectory.t[k]:.6g} s "
                                f"(sample {k})", make=TrajectoryError)
    return q


def prescribed_motion(mech: CompiledMechanism, trajectory: Trajectory, imposed: list[int],
                      q_start: Array | None = None) -> tuple[Array, Array, Array]:
    """(q, q̇, q̈), each (N, n), that follow the imposed coordinates exactly."""
    _, zd, zdd = trajectory.derivatives()
    q = path_positions(mech, trajectory, imposed, q_start)
    qd = mech.solve_velocity(q, zd, z=imposed)
    qdd = mech.solve_acceleration(q, qd, zdd, z=imposed)
    return q, qd, qdd

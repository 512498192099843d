"""Inverse dynamics of a prescribed motion, direct method: the kinematic problems along
the whole trajectory (:func:`mbgen.inverse.motion.prescribed_motion`), then the forces u
on the actuated coordinates from B u − Φqᵀ λ = M q̈ − Q, every step batched in C. u is the
generalized force the actuator applies on its coordinate (the reference implementation's
convention: the Q that ``forward_dynamics`` takes; a reaction, as MSC Adams reports it,
has the opposite sign).
"""

from __future__ import annotations

import numpy as np

from mbgen.inverse.motion import InverseResult, prescribed_motion
from mbgen.io.trajectory import Trajectory
from mbgen.runtime.compiled import CompiledMechanism

Array = np.ndarray


def inverse_dynamics_direct(mech: CompiledMechanism, trajectory: Trajectory,
                            imposed: list[int], actuated: list[int] | None = None,
                            q_start: Array | None = None) -> InverseResult:
    """Forces on the ``actuated`` coordinates (default: the imposed ones) along the
    prescribed motion of the ``imposed`` ones."""
    actuated = imposed if actuated is None else actuated
    q, qd, qdd = prescribed_motion(mech, trajectory, imposed, q_start)
    forces, status = mech.inverse_dynamics(q, qd, qdd, actuated, errors="status")[::2]
    failed = np.flatnonzero(status)
    if failed.size:
        k = int(failed[0])
        raise mech.status_error(int(status[k]), f"inverse dynamics failed at t = "
                                f"{trajectory.t[k]:.6g} s", " (can the actuated coordinates "
                                "move the mechanism there?)")
    return InverseResult(mech, trajectory.t, q, qd, qdd, forces, list(imposed),
                         list(actuated), trajectory.values, {"method": "direct"})

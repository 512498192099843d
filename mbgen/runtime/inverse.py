"""Direct inverse dynamics and positions along a path of the independent coordinates: the
bindings of mbgen/csrc/inverse.c (errors as in :mod:`mbgen.runtime.dynamics`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from mbgen.runtime.calls import Core, per_state
from mbgen.runtime.coordinates import Coordinates
from mbgen.runtime.options import SolverOptions
from mbgen.runtime.structure import PlanPart, Structure

Array = np.ndarray


class Inverse(PlanPart):
    """The calls of inverse.c on the mechanism's plan, with its solver options."""

    def __init__(self, core: Core, options: SolverOptions, structure: Structure,
                 coordinates: Coordinates, m: int) -> None:
        super().__init__(core, options, structure, coordinates)
        self._m = m

    def solve_position_path(self, q_start: Any, z_values: Any, z: Any, tol: float | None = None,
                            max_iter: int = 50, params: Any = None, *,
                            errors: str = "raise") -> Any:
        """Positions (N, n) along a path of the independent coordinates ``z`` (N, d).

        Sample 0 starts from ``q_start`` (its assembly branch); every later sample from the
        extrapolation of the ones solved before it, all in one C loop.
        """
        core = self._core
        zfix = self._structure.z_indices(z)
        if len(zfix) == 0:
            raise ValueError("solve_position_path needs the independent coordinates z")
        values = np.ascontiguousarray(z_values, dtype=np.float64)
        if values.ndim != 2 or values.shape[1] != len(zfix):
            raise ValueError(f"z_values must have shape (N, {len(zfix)}), got {values.shape}")
        count = values.shape[0]
        qs = np.empty((count, self._n))
        qs[:] = np.asarray(q_start, dtype=np.float64).reshape(self._n)
        p, p_stride = core.params(params, 1)
        if p_stride:
            raise ValueError("solve_position_path takes one parameter vector")
        status = np.empty(count, dtype=np.int32)
        core.checked(core.lib.mb_solve_position_path(
            self._structure.plan, self._options.struct, count, core.doubles(qs),
            core.doubles(values), p, core.ints(zfix), len(zfix),
            self._options.newton_tol if tol is None else tol, max_iter,
            core.ints(status)))
        core.check_states(status, qs, "position problem along the path", errors,
                          self._coordinates.describe)
        return (qs, status) if errors == "status" else qs

    def inverse_dynamics(self, q: Any, qd: Any, qdd: Any, actuated: Any, params: Any = None,
                         *, jacobians: bool = False, errors: str = "raise") -> Any:
        """Forces u on the ``actuated`` coordinates (as many as the DOF) and λ such that
        (q, q̇, q̈) is a motion: B u − Φqᵀ λ = M q̈ − Q. With ``jacobians``: also ∂u/∂q,
        ∂u/∂q̇, ∂u/∂q̈ (d, n) each. u is the generalized force the actuator applies on its
        coordinate (what ``forward_dynamics(q, qd, Q)`` takes in Q)."""
        core, n = self._core, self._n
        act = self._structure.z_indices(actuated)
        if len(act) == 0:
            raise ValueError("inverse_dynamics needs the actuated coordinates")
        arrays, strides, count, batched = core.batch(q=(q, n), qd=(qd, n), qdd=(qdd, n))
        p, p_stride = core.params(params, count)
        d = len(act)
        u = np.empty((count, d))
        lam = np.empty((count, max(self._m, 1)))
        jac = [np.empty((count, d, n)) for _ in range(3)] if jacobians else []
        ptrs = [core.doubles(j) for j in jac] or [core.null] * 3
        status = np.empty(count, dtype=np.int32)
        core.checked(core.lib.mb_inverse_dynamics(
            self._structure.plan, self._options.struct, count, core.doubles(arrays["q"]),
            strides["q"], core.doubles(arrays["qd"]), strides["qd"],
            core.doubles(arrays["qdd"]), strides["qdd"], p, p_stride, core.ints(act), d,
            core.doubles(u), core.doubles(lam), *ptrs, core.ints(status)))
        core.check_states(status, arrays["q"], "inverse dynamics", errors,
                          self._coordinates.describe)
        return per_state(batched, (u, lam[:, :self._m], *jac), status, errors)

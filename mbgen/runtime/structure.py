"""Which constraint rows the dynamics use, the core's plan for them (``mb_plan_*`` of
mbgen/csrc/model.c), both made on first use since finding the rows evaluates Φq at q0, and
the independent coordinates z, as many as the degrees of freedom those rows leave."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mbgen.redundancy import RANK_TOL, independent_rows
from mbgen.runtime.calls import Core
from mbgen.runtime.coordinates import Coordinates
from mbgen.runtime.options import SolverOptions

Array = np.ndarray
#: How much better conditioned a new set of kept rows must be to replace the current one
RESELECT_GAIN = 2.0


class Structure:
    """The active rows (the independent rows of Φq at q0, file order), the degrees of
    freedom they leave, the plan (factorization structure) every solve shares, and the
    check of a z given for those degrees of freedom."""

    def __init__(self, core: Core, options: SolverOptions, phi_q: Callable[[Any], Array],
                 q0: Array, coordinates: Coordinates) -> None:
        self._core = core
        self._coordinates = coordinates
        self._options = options
        self._phi_q = phi_q
        self._q0 = q0
        self._active_rows: Array | None = None
        self._plan: Any = None

    def independent_constraints(self, q: Any = None, tol: float = RANK_TOL,
                                ) -> tuple[list[int], list[int]]:
        """Split constraint rows into (independent, redundant) at q (default q0).

        Rows are taken in file order and a row is redundant when it is a linear combination
        of the rows kept before it, so the report names the later of two dependent rows.
        """
        return independent_rows(self._phi_q(self._q0 if q is None else q), tol)

    @property
    def active_rows(self) -> Array:
        """Constraint rows used by the dynamics, int32 (r,): the independent rows at q0,
        until :meth:`reselect` chooses others."""
        if self._active_rows is None:
            kept, _ = self.independent_constraints()
            self._active_rows = np.array(kept, dtype=np.int32)
        return self._active_rows

    def kept_rows_condition(self, q: Array) -> float:
        """σ_min / σ_max of the active rows of Φq at one configuration q (n,): how far the
        rows the dynamics use are from losing rank there (1: orthogonal, 0: dependent)."""
        return self._condition(self._phi_q(q), self.active_rows)

    @staticmethod
    def _condition(phi_q: Array, rows: Array) -> float:
        values = np.linalg.svd(phi_q[rows], compute_uv=False)
        return float(values[-1] / values[0]) if values.size and values[0] > 0 else 0.0

    def reselect(self, q: Array) -> bool:
        """Makes the active rows the best-conditioned set of as many rows at q (QR with
        column pivoting of Φqᵀ: each next row the one farthest from those kept), with a
        new plan for them; False when that set is the current one or not RESELECT_GAIN
        times better conditioned: pivoting does not always find a better set, and
        near-ties would flip back and forth (a mechanism whose rows are badly scaled, not
        near dependence, keeps them). A mechanism
        whose redundant row at q0 becomes independent along its motion (the rows kept at
        q0 then lose rank together) goes on with rows that hold there."""
        from scipy.linalg import qr  # here: SciPy's import would slow every CLI start

        phi_q = self._phi_q(q)
        current = self._condition(phi_q, self.active_rows)
        _, _, order = qr(phi_q.T, pivoting=True, mode="economic")
        chosen = np.sort(order[:len(self.active_rows)]).astype(np.int32)
        better = self._condition(phi_q, chosen)
        if np.array_equal(chosen, self.active_rows) or better < RESELECT_GAIN * current:
            return False
        self._active_rows, self._plan = chosen, None  # the old plan is freed with its owner
        return True

    @property
    def rank(self) -> int:
        """Rank of Φq at q0 (numerical, SVD): the number of active rows."""
        return len(self.active_rows)

    @property
    def dof(self) -> int:
        """Degrees of freedom: n minus the rank."""
        return len(self._q0) - len(self.active_rows)

    @property
    def plan(self) -> Any:
        """The core's ``mb_plan`` for the active rows, freed with this object."""
        if self._plan is None:
            core, rows = self._core, self.active_rows
            plan = core.lib.mb_plan_new(core.model, core.ints(rows), len(rows))
            if plan == core.null:
                raise MemoryError("mbgen C core: out of memory while analysing the model")
            self._plan = core.ffi.gc(plan, core.lib.mb_plan_free)
        return self._plan

    @property
    def uses_sparse(self) -> bool:
        """Whether the dynamics run on the sparse KKT path (see options.method)."""
        return bool(self._core.lib.mb_plan_uses_sparse(self.plan, self._options.struct))

    @property
    def linear_algebra(self) -> str:
        """The dynamics' path under the current options: "dense", "sparse" or "unrolled"."""
        if self._core.lib.mb_plan_uses_unrolled(self.plan, self._options.struct):
            return "unrolled"
        return "sparse" if self.uses_sparse else "dense"

    def z_indices(self, z: Any) -> Array:
        """int32 indices of z (names or indices, ``dof`` distinct ones), the file's choice
        when ``z`` is None, or none (0,) when ``z`` is empty or the file names none: the
        core then chooses by full pivoting (as the particle filter's prediction does)."""
        coordinates = self._coordinates
        if z is None:
            z = coordinates.default_independent
        if z is None or len(z) == 0:
            return np.zeros(0, dtype=np.int32)
        try:
            indices = coordinates.indices(z)
        except IndexError as exc:
            raise ValueError(f"z: {exc.args[0]}") from None
        if len(indices) != self.dof:
            raise ValueError(f"z must name {self.dof} coordinates, got {len(indices)}")
        if len(set(indices)) != len(indices):
            raise ValueError(f"z must name distinct coordinates, got {z!r}")
        return np.array(indices, dtype=np.int32)


class PlanPart:
    """What every part that calls the core on the mechanism's plan holds: the core, the
    solver options every solve passes, the plan's structure and the coordinates (n of
    them). A part adds what only it uses."""

    def __init__(self, core: Core, options: SolverOptions, structure: Structure,
                 coordinates: Coordinates) -> None:
        self._core = core
        self._options = options
        self._structure = structure
        self._coordinates = coordinates
        self._n = len(coordinates.names)

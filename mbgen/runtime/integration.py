"""Fixed-step integration of a compiled mechanism in C: the explicit and semi-implicit
Euler, RK4 and trapezoidal steppers (mbgen/csrc/simulate.c), and the variational
integrator and SPOOK (mbgen/csrc/variational.c).

The variational integrator (``variational``: quasi-Newton, ``variational-newton``: exact
Newton, ``variational-4``: fourth order by composition) solves the discrete Euler–Lagrange
equations of the trapezoidal discrete Lagrangian with the constraints enforced by
multipliers at every step, so it needs no
projection: positions satisfy Φ = 0 to the Newton tolerance and velocities Φq q̇ = 0 to
round-off, and energy and momenta stay bounded over long runs (see docs/variational.md).

``spook`` is the regularized stepper of Lacoursière used for identification: one linear
KKT solve per step, constraints with a compliance ε (springs of stiffness 1/ε) and a
damping time τ (see docs/dynamics.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mbgen.errors import SingularConfigurationError
from mbgen.runtime.calls import Core
from mbgen.runtime.coordinates import Coordinates
from mbgen.runtime.options import SolverOptions
from mbgen.runtime.structure import PlanPart, Structure

Array = np.ndarray

STEPPERS = {"euler": 0, "rk4": 1, "trapezoidal": 2, "semi-implicit-euler": 3}
# name: (exact Newton, order)
VARIATIONAL = {"variational": (False, 2), "variational-newton": (True, 2),
               "variational-4": (False, 4)}
INTEGRATORS = (*STEPPERS, *VARIATIONAL, "spook")
PREDICTORS = ("rk4", "euler", "semi-implicit-euler")  # explicit: a particle filter's
FORMULATIONS = ("dependent", "independent")
PROJECTIONS = {"none": 0, "manifold": 1, "energy": 2}


class IntegrationError(SingularConfigurationError):
    """A step of ``integrate`` failed; ``step`` is its index, ``states`` (q, q̇, q̈) so far."""

    def __init__(self, message: str, step: int, states: list[Array]) -> None:
        super().__init__(message)
        self.step = step
        self.states = states


@dataclass(frozen=True)
class SpookRun:
    """States of a SPOOK run, each (steps + 1, n), ``qdd`` None when not asked for;
    ``lam`` (steps + 1, r): the constraint forces on ``active_rows`` of each step (mbgen's
    sign, M q̈ + Φqᵀ λ = Q; the last row is 0)."""

    q: Array
    qd: Array
    qdd: Array | None
    lam: Array


@dataclass(frozen=True)
class VariationalRun:
    """States of a variational run, each (steps + 1, n); ``qdd`` None when not asked for;
    ``iterations`` (steps,): root-finding iterations of each step."""

    q: Array
    qd: Array
    qdd: Array | None
    iterations: Array


@dataclass
class Runs:
    """Many runs of one mechanism, advanced together by :meth:`Integrators.advance_runs`
    (in place): each run's state ``q``, ``qd`` (N, n), parameters ``params`` (N, np),
    constant generalized force ``forces`` (N, n) or None, ``status`` (N,) int32 (0 while
    it runs, else the core's status of the step it could not take) and ``failed_step``
    (N,) int64 (that step, counted from the start; -1 while it runs)."""

    q: Array
    qd: Array
    params: Array
    forces: Array | None
    status: Array
    failed_step: Array
    steps_done: int = 0

    @classmethod
    def start(cls, q: Array, qd: Array, params: Array, forces: Array | None = None) -> Runs:
        def owned(array: Array) -> Array:
            return np.array(array, dtype=np.float64, order="C")

        count = len(q)
        return cls(owned(q), owned(qd), owned(params),
                   None if forces is None else owned(forces), np.zeros(count, np.int32),
                   np.full(count, -1, np.int64))


class Integrators(PlanPart):
    """Time stepping from one consistent state, on the mechanism's plan and options."""

    def __init__(self, core: Core, options: SolverOptions, structure: Structure,
                 coordinates: Coordinates, coefficients: Callable[[], Array],
                 friction: list[dict[str, Any]]) -> None:
        """``coefficients``: the friction bounds (then the actuator gains) at the current
        parameters; ``friction``: the file's dry-friction entries, in the same order."""
        super().__init__(core, options, structure, coordinates)
        self._coefficients = coefficients
        self._friction = friction

    def integrate(self, q0: Any, qd0: Any, dt: float, steps: int, integrator: str = "rk4",
                  coords: str = "dependent", project: str = "manifold", z: Any = None,
                  forces: Array | None = None,
                  spook_options: dict[str, Any] | None = None) -> tuple[Array, Array, Array]:
        """``steps`` fixed steps in C from (q0, q̇0): (q, q̇, q̈), each (steps + 1, n).

        ``forces``: external generalized forces at every half step, (2 steps + 1, n).
        ``spook_options``: ``compliance`` and ``damping`` of :meth:`integrate_spook`.
        The variational integrators work in dependent coordinates and keep the
        constraints themselves (``project`` does not apply to them).
        A failed step raises :class:`IntegrationError` with the step and the states so far.
        """
        if integrator not in INTEGRATORS:
            raise ValueError(f"unknown integrator {integrator!r} (choose from "
                             f"{', '.join(INTEGRATORS)})")
        if coords not in FORMULATIONS:
            raise ValueError(f"coords must be one of {FORMULATIONS}, got {coords!r}")
        if project not in PROJECTIONS:
            raise ValueError(f"project must be one of {', '.join(PROJECTIONS)}, got "
                             f"{project!r}")
        if integrator == "spook":
            if coords != "dependent":
                raise ValueError("SPOOK works in dependent coordinates")
            spook = self.integrate_spook(q0, qd0, dt, steps, forces=forces,
                                         **(spook_options or {}))
            assert spook.qdd is not None
            return spook.q, spook.qd, spook.qdd
        if integrator in VARIATIONAL:
            if coords != "dependent":
                raise ValueError("the variational integrator works in dependent coordinates "
                                 "(--coords dependent)")
            newton, order = VARIATIONAL[integrator]
            run = self.integrate_variational(q0, qd0, dt, steps, newton=newton, order=order,
                                             forces=forces)
            assert run.qdd is not None
            return run.q, run.qd, run.qdd
        return self._step(q0, qd0, dt, steps, integrator, coords, project, z, forces)

    def _step(self, q0: Any, qd0: Any, dt: float, steps: int, integrator: str, coords: str,
              project: str, z: Any, forces: Array | None) -> tuple[Array, Array, Array]:
        """mb_simulate: one of ``STEPPERS``, checked arguments."""
        core = self._core
        q0, qd0, table = self._initial(q0, qd0, steps, forces)
        zfix = (self._structure.z_indices(z) if coords == "independent"
                else np.zeros(0, np.int32))
        out = [np.empty((steps + 1, self._n)) for _ in range(3)]
        failed = core.ffi.new("long *")
        status = core.lib.mb_simulate(
            self._structure.plan, self._options.struct, core.doubles(q0), core.doubles(qd0),
            core.parameters.pointer, core.ints(zfix), len(zfix), STEPPERS[integrator],
            int(coords == "independent"), PROJECTIONS[project], dt, steps,
            core.doubles(table), *(core.doubles(o) for o in out), failed)
        self._raise_failed(status, int(failed[0]), out, q0)
        return out[0], out[1], out[2]

    def advance_runs(self, runs: Runs, dt: float, steps: int, integrator: str = "rk4",
                     coords: str = "dependent", project: str = "manifold",
                     record: bool = True, velocities: bool = True,
                     ) -> tuple[Array, Array | None] | None:
        """``steps`` steps of dt for every run still going (mb_sweep, in C: blocks of runs
        in SIMD lanes where the module has them), ``runs`` updated in place. ``record``:
        return q and q̇ (None without ``velocities``) after every step, (N, steps, n) each
        (NaN where a run has failed)."""
        core = self._core
        if integrator not in STEPPERS:
            raise ValueError(f"a sweep runs the fixed-step integrators "
                             f"({', '.join(STEPPERS)}), not {integrator!r}")
        if project == "energy":
            raise ValueError("a sweep projects onto the manifold or not at all, not onto "
                             "the initial energy")
        count, n, np_ = len(runs.q), self._n, len(core.parameters.values)
        shapes = {"q": (runs.q, (count, n)), "qd": (runs.qd, (count, n)),
                  "params": (runs.params, (count, np_))}
        if runs.forces is not None:
            shapes["forces"] = (runs.forces, (count, n))
        for name, (array, shape) in shapes.items():
            if array.shape != shape or array.dtype != np.float64 or not array.flags.c_contiguous:
                raise ValueError(f"runs.{name} must be a C-contiguous float64 array of shape "
                                 f"{shape}, got {array.dtype} {array.shape}")
        out = [np.empty((count, steps, n)) for _ in range(1 + velocities)] if record else None
        failed = np.full(count, -1, np.int64)
        status = core.lib.mb_sweep(
            self._structure.plan, self._options.struct, count, core.doubles(runs.q),
            core.doubles(runs.qd), core.doubles(runs.params), core.doubles(runs.forces),
            STEPPERS[integrator], int(coords == "independent"), PROJECTIONS[project], dt,
            steps, core.doubles(out[0]) if out else core.null,
            core.doubles(out[1]) if out and velocities else core.null, core.ints(runs.status),
            core.ffi.cast("long *", failed.ctypes.data))
        core.checked(status)
        now_failed = failed >= 0
        runs.failed_step[now_failed] = runs.steps_done + failed[now_failed]
        runs.steps_done += steps
        return (out[0], out[1] if velocities else None) if out else None

    def sweep_uses_lanes(self, integrator: str = "rk4", coords: str = "dependent",
                         project: str = "manifold") -> bool:
        """Whether :meth:`advance_runs` steps blocks of 8 runs side by side."""
        return bool(self._core.lib.mb_sweep_uses_lanes(
            self._structure.plan, self._options.struct, STEPPERS.get(integrator, -1),
            int(coords == "independent"), PROJECTIONS.get(project, 2)))

    def integrate_variational(self, q0: Any, qd0: Any, dt: float, steps: int, *,
                              newton: bool = False, order: int = 2,
                              forces: Array | None = None,
                              accelerations: bool = True) -> VariationalRun:
        """The variational integrator from a consistent (q0, q̇0) (n each).

        ``newton``: exact Newton instead of the quasi-Newton update; the linear algebra is
        sparse or dense as ``options.method`` says. ``order`` 4: Yoshida's composition of
        three steps (energy error ~dt⁴ instead of ~dt², three times the work).
        ``accelerations``: also evaluate q̈ of the dynamics at every state (one more
        factorization per state). A negative dt runs backwards in time.
        """
        core = self._core
        if order not in (2, 4):
            raise ValueError(f"order must be 2 or 4, got {order!r}")
        q0, qd0, table = self._initial(q0, qd0, steps, forces)
        if not (dt != 0 and np.isfinite(dt)):  # negative: backwards in time
            raise ValueError(f"dt must be finite and non-zero, got {dt}")
        out = [np.empty((steps + 1, self._n)) for _ in range(3 if accelerations else 2)]
        iterations = np.zeros(steps, dtype=np.int32)
        failed = core.ffi.new("long *")
        status = core.lib.mb_simulate_variational(
            self._structure.plan, self._options.struct, core.doubles(q0), core.doubles(qd0),
            core.parameters.pointer, int(newton), order, dt, steps, core.doubles(table),
            core.doubles(out[0]), core.doubles(out[1]),
            core.doubles(out[2]) if accelerations else core.null, core.ints(iterations),
            failed)
        self._raise_failed(status, int(failed[0]), out, q0)
        return VariationalRun(out[0], out[1], out[2] if accelerations else None, iterations)

    def integrate_spook(self, q0: Any, qd0: Any, dt: float, steps: int, *,
                        compliance: Any = 0.0, damping: Any = None,
                        forces: Array | None = None, accelerations: bool = True) -> SpookRun:
        """SPOOK from (q0, q̇0) (n each): ``compliance`` ε [per unit of the constraint's
        force] and ``damping`` τ [s], scalars or one per active row (default τ = 2 dt).
        Dry friction (the file's ``friction``) is solved exactly at every step as a bounded
        impulse (see docs/identification.md)."""
        core = self._core
        q0, qd0, table = self._initial(q0, qd0, steps, forces)
        if not (dt > 0 and np.isfinite(dt)):
            raise ValueError(f"dt must be positive and finite, got {dt}")
        r = self._structure.rank
        rows = [self._per_row(name, value, r) for name, value in
                (("compliance", compliance), ("damping", 2 * dt if damping is None else damping))]
        out = [np.empty((steps + 1, self._n)) for _ in range(3 if accelerations else 2)]
        lam = np.empty((steps + 1, r))
        friction = self._friction
        index = np.array([self._coordinates.index(f["coordinate"]) for f in friction],
                         dtype=np.int32)
        bound = np.ascontiguousarray(self._coefficients()[:len(friction)])
        stiction = np.array([f["stiction"] for f in friction], dtype=np.float64)
        failed = core.ffi.new("long *")
        status = core.lib.mb_simulate_spook(
            self._structure.plan, self._options.struct, core.doubles(q0), core.doubles(qd0),
            core.parameters.pointer, core.doubles(rows[0]), core.doubles(rows[1]),
            len(friction), core.ints(index), core.doubles(bound), core.doubles(stiction), dt,
            steps, core.doubles(table), core.doubles(out[0]), core.doubles(out[1]),
            core.doubles(out[2]) if accelerations else core.null, core.doubles(lam), failed)
        self._raise_failed(status, int(failed[0]), out, q0)
        return SpookRun(out[0], out[1], out[2] if accelerations else None, lam)

    @staticmethod
    def _per_row(name: str, value: Any, rows: int) -> Array:
        """A SPOOK setting, one value or one per active row, as (rows,) float64 ≥ 0."""
        row = np.ascontiguousarray(np.broadcast_to(np.asarray(value, dtype=np.float64), rows))
        if not (np.all(np.isfinite(row)) and np.all(row >= 0)):
            raise ValueError(f"{name} must be finite and non-negative, got {value!r}")
        return row

    def variational_residual(self, q0: Any, qd0: Any, dt: float, v: Any, impulse: Any,
                             Q: Any = None) -> tuple[Array, Array]:
        """Residual (n + r) of one variational step at the mean velocity v (n) and the
        constraint impulses (r, on ``active_rows``), and its Jacobian ((n + r)²): what
        Newton solves, exposed to check it against finite differences."""
        core = self._core
        n, r = self._n, self._structure.rank
        args = [np.ascontiguousarray(a, dtype=np.float64).reshape(size)
                for a, size in ((q0, n), (qd0, n), (v, n), (impulse, r))]
        forces = None if Q is None else np.ascontiguousarray(Q, dtype=np.float64).reshape(n)
        residual = np.empty(n + r)
        jacobian = np.empty((n + r, n + r))
        core.checked(core.lib.mb_variational_residual(
            self._structure.plan, self._options.struct, core.doubles(args[0]),
            core.doubles(args[1]), core.doubles(forces), core.parameters.pointer, dt,
            core.doubles(args[2]), core.doubles(args[3]), core.doubles(residual),
            core.doubles(jacobian)))
        return residual, jacobian

    def _initial(self, q0: Any, qd0: Any, steps: int,
                 forces: Array | None) -> tuple[Array, Array, Array | None]:
        """q0, q̇0 as (n,) float64, and the forces table checked against ``steps``."""
        n = self._n
        q0 = np.ascontiguousarray(q0, dtype=np.float64).reshape(n)
        qd0 = np.ascontiguousarray(qd0, dtype=np.float64).reshape(n)
        if int(steps) != steps or steps < 0:
            raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
        if forces is None:
            return q0, qd0, None
        table = np.ascontiguousarray(forces, dtype=np.float64)
        if table.shape != (2 * steps + 1, n):
            raise ValueError(f"forces must have shape {(2 * steps + 1, n)}, got {table.shape}")
        return q0, qd0, table

    def _raise_failed(self, status: int, step: int, out: list[Array], q0: Array) -> None:
        """A run's failure as :class:`IntegrationError`, with the states before it."""
        if status == 0:
            return
        last = out[0][step - 1] if step > 0 else q0
        core = self._core
        hint = (" (a step too long for the mechanism's stiffness fails so: try a smaller dt)"
                if core.is_status(status, "NO_CONVERGENCE") or core.is_status(status,
                                                                              "NOT_FINITE")
                else "")
        raise core.status_error(
            status, f"step {step}", f"{hint}; last state [{self._coordinates.describe(last)}]",
            lambda message: IntegrationError(message, step, [o[:step] for o in out]))

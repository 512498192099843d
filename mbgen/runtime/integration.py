"""Fixed-step integration of a compiled mechanism in C: the explicit and semi-implicit
Euler, RK4 and trapezoidal steppers, and the variational integrator.

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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mbgen.errors import SingularConfigurationError
from mbgen.runtime.dynamics import DynamicsMixin
from mbgen.runtime.parallel import run_split

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


class IntegrationMixin(DynamicsMixin):
    """Time stepping on top of the dynamics calls."""

    coefficients: Callable[..., Array]  # the host's (CompiledMechanism): friction bounds

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
            spook = self.integrate_spook(q0, qd0, dt, steps, forces=forces, **(spook_options or {}))
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
        q0, qd0, table = self._initial(q0, qd0, steps, forces)
        zfix = self._z_indices(z) if coords == "independent" else np.zeros(0, np.int32)
        out = [np.empty((steps + 1, self.n)) for _ in range(3)]
        failed = self.ffi.new("long *")
        status = self.lib.mb_simulate(
            self.plan, self.options.struct, self._dbl(q0), self._dbl(qd0),
            self.parameter_buffer.pointer, self._int_ptr(zfix), len(zfix),
            STEPPERS[integrator], int(coords == "independent"), PROJECTIONS[project], dt,
            steps, self._dbl(table), *(self._dbl(o) for o in out), failed)
        self._raise_failed(status, int(failed[0]), out, q0)
        return out[0], out[1], out[2]

    def predict_particles(self, q: Array, qd: Array, noise: Array, dt: float,
                          integrator: str = "rk4", dq: Array | None = None,
                          dqd: Array | None = None) -> Array:
        """A particle filter's prediction: every consistent state (q, q̇) (N, n each,
        C-contiguous float64, updated in place) moves one step of dt with the acceleration
        noise ``noise`` (N, dof) on its independent coordinates z (chosen per state by
        full pivoting), then moves by ``dq``, ``dqd`` (N, n, optional) taken along the
        constraints (their least-squares part in the tangent space), and the dependent
        coordinates follow from Φ = 0 and Φq q̇ = 0 at the new z, ż. Returns the status
        per state (N,): a state that failed keeps its old values. Large batches run on
        every core.
        """
        if integrator not in PREDICTORS:
            raise ValueError(f"unknown integrator {integrator!r} for the prediction (choose "
                             f"from {', '.join(PREDICTORS)})")
        count = len(q)
        shapes = {"q": (q, self.n), "qd": (qd, self.n), "noise": (noise, self.dof),
                  "dq": (dq, self.n), "dqd": (dqd, self.n)}
        for name, (array, width) in shapes.items():
            if array is None:
                continue
            if (not isinstance(array, np.ndarray) or array.dtype != np.float64
                    or array.shape != (count, width) or not array.flags.c_contiguous):
                raise ValueError(f"{name} must be a C-contiguous float64 array of shape "
                                 f"({count}, {width})")
        status = np.empty(count, dtype=np.int32)

        def chunk(start: int, stop: int) -> int:
            def rows(array: Array | None) -> Any:
                return self._dbl(None if array is None else array[start:stop])
            return self._checked(self.lib.mb_predict_particles(
                self.plan, self.options.struct, stop - start, rows(q), rows(qd), rows(noise),
                rows(dq), rows(dqd), self.parameter_buffer.pointer, STEPPERS[integrator], dt,
                self._int_ptr(status[start:stop])))

        run_split(chunk, count)
        return status

    @property
    def predict_lanes(self) -> bool:
        """Whether predict_particles moves 8 states at once in the generated lane functions
        (small mechanisms without stabilization): the same states, in less time."""
        return bool(self.lib.mb_predict_uses_lanes(self.plan, self.options.struct))

    def weighted_quantiles(self, values: Array, weights: Array,
                           levels: Sequence[float]) -> Array:
        """Per column of values (N, k), the smallest value whose cumulative weight (weights
        (N,), ≥ 0) in ascending order reaches each level times the total, as (L, k) for L
        levels: by selection in C, O(N) where sorting is O(N log N), which is what keeps a
        particle filter's interval cheap. Zero weights and non-finite values are left
        out; a column with no weight gives NaN."""
        values = np.ascontiguousarray(values, dtype=np.float64)
        weights = np.ascontiguousarray(weights, dtype=np.float64)
        level = np.ascontiguousarray(levels, dtype=np.float64).reshape(-1)
        if values.ndim != 2 or weights.shape != (len(values),):
            raise ValueError(f"values must be (N, k) and weights (N,), got {values.shape} "
                             f"and {weights.shape}")
        if not ((level >= 0) & (level <= 1)).all():
            raise ValueError(f"levels must lie in [0, 1], got {list(level)}")
        out = np.empty((len(level), values.shape[1]))
        self._checked(self.lib.mb_weighted_quantiles(
            len(values), values.shape[1], self._dbl(values), self._dbl(weights), len(level),
            self._dbl(level), self._dbl(out)))
        return out

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
        if order not in (2, 4):
            raise ValueError(f"order must be 2 or 4, got {order!r}")
        q0, qd0, table = self._initial(q0, qd0, steps, forces)
        if not (dt != 0 and np.isfinite(dt)):  # negative: backwards in time
            raise ValueError(f"dt must be finite and non-zero, got {dt}")
        out = [np.empty((steps + 1, self.n)) for _ in range(3 if accelerations else 2)]
        iterations = np.zeros(steps, dtype=np.int32)
        failed = self.ffi.new("long *")
        status = self.lib.mb_simulate_variational(
            self.plan, self.options.struct, self._dbl(q0), self._dbl(qd0),
            self.parameter_buffer.pointer, int(newton), order, dt, steps, self._dbl(table),
            self._dbl(out[0]), self._dbl(out[1]),
            self._dbl(out[2]) if accelerations else self.ffi.NULL,
            self._int_ptr(iterations), failed)
        self._raise_failed(status, int(failed[0]), out, q0)
        return VariationalRun(out[0], out[1], out[2] if accelerations else None, iterations)

    def integrate_spook(self, q0: Any, qd0: Any, dt: float, steps: int, *,
                        compliance: Any = 0.0, damping: Any = None,
                        forces: Array | None = None, accelerations: bool = True) -> SpookRun:
        """SPOOK from (q0, q̇0) (n each): ``compliance`` ε [per unit of the constraint's
        force] and ``damping`` τ [s], scalars or one per active row (default τ = 2 dt).
        Dry friction (the file's ``friction``) is solved exactly at every step as a bounded
        impulse (see docs/identification.md)."""
        q0, qd0, table = self._initial(q0, qd0, steps, forces)
        if not (dt > 0 and np.isfinite(dt)):
            raise ValueError(f"dt must be positive and finite, got {dt}")
        r = len(self.active_rows)
        rows = []
        for name, value in (("compliance", compliance),
                            ("damping", 2 * dt if damping is None else damping)):
            row = np.ascontiguousarray(np.broadcast_to(np.asarray(value, dtype=np.float64), r))
            if not (np.all(np.isfinite(row)) and np.all(row >= 0)):
                raise ValueError(f"{name} must be finite and non-negative, got {value!r}")
            rows.append(row)
        out = [np.empty((steps + 1, self.n)) for _ in range(3 if accelerations else 2)]
        lam = np.empty((steps + 1, r))
        friction = self.meta.get("friction", [])
        index = np.array([self.coordinate_index(f["coordinate"]) for f in friction],
                         dtype=np.int32)
        bound = np.ascontiguousarray(self.coefficients()[:len(friction)])
        stiction = np.array([f["stiction"] for f in friction], dtype=np.float64)
        failed = self.ffi.new("long *")
        status = self.lib.mb_simulate_spook(
            self.plan, self.options.struct, self._dbl(q0), self._dbl(qd0),
            self.parameter_buffer.pointer, self._dbl(rows[0]), self._dbl(rows[1]),
            len(friction), self._int_ptr(index), self._dbl(bound), self._dbl(stiction), dt,
            steps, self._dbl(table), self._dbl(out[0]), self._dbl(out[1]),
            self._dbl(out[2]) if accelerations else self.ffi.NULL, self._dbl(lam), failed)
        self._raise_failed(status, int(failed[0]), out, q0)
        return SpookRun(out[0], out[1], out[2] if accelerations else None, lam)

    def variational_residual(self, q0: Any, qd0: Any, dt: float, v: Any, impulse: Any,
                             Q: Any = None) -> tuple[Array, Array]:
        """Residual (n + r) of one variational step at the mean velocity v (n) and the
        constraint impulses (r, on ``active_rows``), and its Jacobian ((n + r)²): what
        Newton solves, exposed to check it against finite differences."""
        n, r = self.n, len(self.active_rows)
        args = [np.ascontiguousarray(a, dtype=np.float64).reshape(size)
                for a, size in ((q0, n), (qd0, n), (v, n), (impulse, r))]
        forces = None if Q is None else np.ascontiguousarray(Q, dtype=np.float64).reshape(n)
        residual = np.empty(n + r)
        jacobian = np.empty((n + r, n + r))
        self._checked(self.lib.mb_variational_residual(
            self.plan, self.options.struct, self._dbl(args[0]), self._dbl(args[1]),
            self._dbl(forces), self.parameter_buffer.pointer, dt, self._dbl(args[2]),
            self._dbl(args[3]), self._dbl(residual), self._dbl(jacobian)))
        return residual, jacobian

    def _initial(self, q0: Any, qd0: Any, steps: int,
                 forces: Array | None) -> tuple[Array, Array, Array | None]:
        n = self.n
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
        if status == 0:
            return
        last = out[0][step - 1] if step > 0 else q0
        state = ", ".join(f"{c}={v:.6g}" for c, v in zip(self.coordinate_names, last,
                                                         strict=True))
        raise self.status_error(status, f"step {step}", f"; last state [{state}]",
                                lambda message: IntegrationError(message, step,
                                                                 [o[:step] for o in out]))

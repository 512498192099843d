"""What a particle filter needs from C: the prediction of every particle
(mbgen/csrc/particles.c, split across cores) and weighted quantiles (mbgen/csrc/stats.c)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mbgen.runtime.calls import Core
from mbgen.runtime.integration import PREDICTORS, STEPPERS
from mbgen.runtime.options import SolverOptions
from mbgen.runtime.parallel import run_split
from mbgen.runtime.structure import Structure

Array = np.ndarray


class Particles:
    """Batched prediction on the mechanism's plan and options, and weighted quantiles."""

    def __init__(self, core: Core, options: SolverOptions, structure: Structure,
                 n: int) -> None:
        self._core = core
        self._options = options
        self._structure = structure
        self._n = n

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
        n = self._n
        shapes = {"q": (q, n), "qd": (qd, n), "noise": (noise, self._structure.dof),
                  "dq": (dq, n), "dqd": (dqd, n)}
        for name, (array, width) in shapes.items():
            if array is None:
                continue
            if (not isinstance(array, np.ndarray) or array.dtype != np.float64
                    or array.shape != (count, width) or not array.flags.c_contiguous):
                raise ValueError(f"{name} must be a C-contiguous float64 array of shape "
                                 f"({count}, {width})")
        status = np.empty(count, dtype=np.int32)
        core, plan, options = self._core, self._structure.plan, self._options.struct
        stepper = STEPPERS[integrator]

        def chunk(start: int, stop: int) -> int:
            def rows(array: Array | None) -> object:
                return core.doubles(None if array is None else array[start:stop])
            return core.checked(core.lib.mb_predict_particles(
                plan, options, stop - start, rows(q), rows(qd), rows(noise), rows(dq),
                rows(dqd), core.parameters.pointer, stepper, dt, core.ints(status[start:stop])))

        run_split(chunk, count)
        return status

    @property
    def predict_lanes(self) -> bool:
        """Whether predict_particles moves 8 states at once in the generated lane functions
        (small mechanisms without stabilization): the same states, in less time."""
        return bool(self._core.lib.mb_predict_uses_lanes(self._structure.plan,
                                                          self._options.struct))

    def weighted_quantiles(self, values: Array, weights: Array,
                           levels: Sequence[float]) -> Array:
        """Per column of values (N, k), the smallest value whose cumulative weight (weights
        (N,), ≥ 0) in ascending order reaches each level times the total, as (L, k) for L
        levels: by selection in C, O(N) where sorting is O(N log N), which is what keeps a
        particle filter's interval cheap. Zero weights and non-finite values are left
        out; a column with no weight gives NaN."""
        core = self._core
        values = np.ascontiguousarray(values, dtype=np.float64)
        weights = np.ascontiguousarray(weights, dtype=np.float64)
        level = np.ascontiguousarray(levels, dtype=np.float64).reshape(-1)
        if values.ndim != 2 or weights.shape != (len(values),):
            raise ValueError(f"values must be (N, k) and weights (N,), got {values.shape} "
                             f"and {weights.shape}")
        if not ((level >= 0) & (level <= 1)).all():
            raise ValueError(f"levels must lie in [0, 1], got {list(level)}")
        out = np.empty((len(level), values.shape[1]))
        core.checked(core.lib.mb_weighted_quantiles(
            len(values), values.shape[1], core.doubles(values), core.doubles(weights),
            len(level), core.doubles(level), core.doubles(out)))
        return out

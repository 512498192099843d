"""The mechanism's generated kernels (Φ, Φq, M, Q, h and their derivatives) evaluated
through the core's ``mb_eval`` and ``mb_eval_dense`` (mbgen/csrc/model.c).

Every method takes one state (n,) or a batch (N, n) and returns the kernel's shape, or
that shape with a leading N; ``params``: one parameter vector, or one per state (default:
the mechanism's current values); ``out``: a C-contiguous float64 array of the result's
shape to write into.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mbgen.runtime.calls import Core, output_array

Array = np.ndarray


@dataclass(frozen=True)
class KernelInfo:
    name: str
    kernel_id: int  # the core's MB_K_* constant
    inputs: tuple[str, ...]
    shape: tuple[int, ...]
    indices: tuple[Array, ...]  # one index array per output dimension

    @property
    def nnz(self) -> int:
        return len(self.indices[0]) if self.indices else 0


def kernel_infos(lib: Any, kernels: dict[str, Any]) -> dict[str, KernelInfo]:
    """meta.json's ``kernels`` with the core's kernel ids and index arrays."""
    return {
        name: KernelInfo(name, getattr(lib, f"MB_K_{name.upper()}"), tuple(info["inputs"]),
                         tuple(info["shape"]),
                         tuple(np.array(info["indices"], dtype=np.intp).reshape(
                             -1, len(info["shape"])).T))
        for name, info in kernels.items()
    }


class Quantities:
    """Every kernel of the model by name (``dense``, ``evaluate``) and by quantity."""

    def __init__(self, core: Core, kernels: dict[str, KernelInfo], sizes: dict[str, int],
                 q0: Array, friction: int) -> None:
        """``sizes``: the width of each kernel input (q, qd, v, lam); ``friction``: how
        many of the coefficients are friction bounds (the actuator gains follow)."""
        self._core = core
        self._kernels = kernels
        self._sizes = sizes
        self._q0 = q0
        self._friction = friction

    def sparsity(self, kernel: str) -> tuple[Array, ...]:
        """Row/column (and parameter) indices of a kernel's nonzeros, in output order."""
        return self._kernels[kernel].indices

    def _arguments(self, info: KernelInfo, params: Any, inputs: dict[str, Any],
                   ) -> tuple[list[Any], int, bool]:
        """(q, q_stride, x, x_stride, p, p_stride) pointers, N, batched."""
        core = self._core
        wanted = {a: (inputs[a], self._sizes[a]) for a in info.inputs if a not in ("p", "k")}
        arrays, strides, count, batched = core.batch(**wanted)
        second = next((a for a in info.inputs if a not in ("q", "p", "k")), None)
        p, p_stride = core.params(params, count)
        if "k" in info.inputs:  # the joint-space kernels read constants computed from p
            sets = np.asarray(params, dtype=float) if params is not None else None
            states = 1 if sets is None or sets.ndim == 1 else len(sets)
            constants, _ = self.evaluate("reduced_constants", params,
                                         q=np.repeat(self._q0[None], states, axis=0))
            p, p_stride = core.doubles(constants), (constants.shape[1] if states > 1 else 0)
        args = [core.doubles(arrays["q"]), strides["q"],
                core.null if second is None else core.doubles(arrays[second]),
                0 if second is None else strides[second], p, p_stride]
        return args, count, batched

    def evaluate(self, kernel: str, params: Any = None, **inputs: Any) -> tuple[Array, bool]:
        """Raw sparse values (N, nnz) of a kernel, in ``sparsity(kernel)`` order (no dense
        scatter); also whether the input was batched."""
        core = self._core
        info = self._kernels[kernel]
        args, count, batched = self._arguments(info, params, inputs)
        out = np.empty((count, info.nnz), dtype=np.float64)
        core.checked(core.lib.mb_eval(core.model, info.kernel_id, count, *args,
                                      core.doubles(out)))
        return out, batched

    def dense(self, kernel: str, params: Any = None, out: Array | None = None,
              **inputs: Any) -> Array:
        """A kernel's output as a dense array of shape kernel.shape, or (N, *shape);
        ``out``: a C-contiguous float64 array of that shape to write into."""
        info = self._kernels[kernel]
        if len(info.shape) > 2:
            values, batched = self.evaluate(kernel, params, **inputs)
            result = np.zeros((values.shape[0], *info.shape))
            if info.nnz:
                every_state: tuple[Any, ...] = (slice(None), *info.indices)
                result[every_state] = values
            return result if batched else result[0]
        core = self._core
        args, count, batched = self._arguments(info, params, inputs)
        shape = (count, *info.shape) if batched else info.shape
        result = output_array(out, shape)
        rows, cols = info.shape[0], info.shape[1] if len(info.shape) == 2 else 1
        core.checked(core.lib.mb_eval_dense(core.model, info.kernel_id, count, *args, rows,
                                            cols, core.doubles(result)))
        return result

    def constraints(self, q: Any, params: Any = None) -> tuple[Array, Array]:
        """(Φ, Φq) in one call: what a constraint factor needs per linearization."""
        return self.phi(q, params), self.phi_q(q, params)

    def sensors_with_jacobians(self, q: Any, qd: Any, params: Any = None,
                               ) -> tuple[Array, Array, Array]:
        """(h, ∂h/∂q, ∂h/∂q̇) in one call."""
        return (self.sensors(q, qd, params), self.sensors_q(q, qd, params),
                self.sensors_qd(q, qd, params))

    def phi(self, q: Any, params: Any = None, out: Array | None = None) -> Array:
        """Φ (m): the position constraints, zero on the manifold."""
        return self.dense("phi", params, out, q=q)

    def phi_q(self, q: Any, params: Any = None, out: Array | None = None) -> Array:
        """Φq (m, n)."""
        return self.dense("phi_q", params, out, q=q)

    def phiq_v_q(self, q: Any, v: Any, params: Any = None,
                 out: Array | None = None) -> Array:
        """(Φq v)_q (m, n): derivative of Φq(q)·v with respect to q, v held fixed."""
        return self.dense("phiq_v_q", params, out, q=q, v=v)

    def dphiq_qd(self, q: Any, qd: Any, params: Any = None,
                 out: Array | None = None) -> Array:
        """Φ̇q q̇ (m); the acceleration right-hand side is c = -Φ̇q q̇."""
        return self.dense("dphiq_qd", params, out, q=q, qd=qd)

    def dphiq_qd_q(self, q: Any, qd: Any, params: Any = None,
                   out: Array | None = None) -> Array:
        """∂(Φ̇q q̇)/∂q (m, n)."""
        return self.dense("dphiq_qd_q", params, out, q=q, qd=qd)

    def dphiq_qd_qd(self, q: Any, qd: Any, params: Any = None,
                    out: Array | None = None) -> Array:
        """∂(Φ̇q q̇)/∂q̇ (m, n)."""
        return self.dense("dphiq_qd_qd", params, out, q=q, qd=qd)

    def phiqT_lam_q(self, q: Any, lam: Any, params: Any = None,
                    out: Array | None = None) -> Array:
        """(Φqᵀ λ)_q (n, n): derivative of Φq(q)ᵀ·λ with respect to q."""
        return self.dense("phiqT_lam_q", params, out, q=q, lam=lam)

    def mass_matrix(self, q: Any, params: Any = None, out: Array | None = None) -> Array:
        """M (n, n)."""
        return self.dense("mass", params, out, q=q)

    def mass_v_q(self, q: Any, v: Any, params: Any = None,
                 out: Array | None = None) -> Array:
        """(M v)_q (n, n): derivative of M(q)·v with respect to q."""
        return self.dense("mass_v_q", params, out, q=q, v=v)

    def generalized_forces(self, q: Any, qd: Any, params: Any = None,
                           out: Array | None = None) -> Array:
        """Q(q, q̇) (n): the generalized forces of everything the file applies."""
        return self.dense("forces", params, out, q=q, qd=qd)

    def generalized_forces_q(self, q: Any, qd: Any, params: Any = None,
                             out: Array | None = None) -> Array:
        """∂Q/∂q (n, n)."""
        return self.dense("forces_q", params, out, q=q, qd=qd)

    def generalized_forces_qd(self, q: Any, qd: Any, params: Any = None,
                              out: Array | None = None) -> Array:
        """∂Q/∂q̇ (n, n)."""
        return self.dense("forces_qd", params, out, q=q, qd=qd)

    def energy(self, q: Any, qd: Any, params: Any = None) -> Array:
        """Kinetic plus potential energy (gravity, springs, constant forces)."""
        return self.dense("energy", params, q=q, qd=qd).sum(axis=-1)

    def energy_parts(self, q: Any, qd: Any, params: Any = None) -> Array:
        """[kinetic, potential] per state."""
        return self.dense("energy", params, q=q, qd=qd)

    def phi_p(self, q: Any, params: Any = None, out: Array | None = None) -> Array:
        """∂Φ/∂p (m, number of parameters)."""
        return self.dense("phi_p", params, out, q=q)

    def mass_p(self, q: Any, params: Any = None, out: Array | None = None) -> Array:
        """∂M/∂p (n, n, number of parameters)."""
        return self.dense("mass_p", params, out, q=q)

    def generalized_forces_p(self, q: Any, qd: Any, params: Any = None,
                             out: Array | None = None) -> Array:
        """∂Q/∂p (n, number of parameters)."""
        return self.dense("forces_p", params, out, q=q, qd=qd)

    def sensors(self, q: Any, qd: Any, params: Any = None,
                out: Array | None = None) -> Array:
        """h(q, q̇) (k): the file's sensors' outputs, in ``sensor_labels`` order."""
        return self.dense("sensors", params, out, q=q, qd=qd)

    def sensors_q(self, q: Any, qd: Any, params: Any = None,
                  out: Array | None = None) -> Array:
        """∂h/∂q (k, n)."""
        return self.dense("sensors_q", params, out, q=q, qd=qd)

    def sensors_qd(self, q: Any, qd: Any, params: Any = None,
                   out: Array | None = None) -> Array:
        """∂h/∂q̇ (k, n)."""
        return self.dense("sensors_qd", params, out, q=q, qd=qd)

    def sensors_p(self, q: Any, qd: Any, params: Any = None,
                  out: Array | None = None) -> Array:
        """∂h/∂p (k, number of parameters)."""
        return self.dense("sensors_p", params, out, q=q, qd=qd)

    def accelerometers(self, q: Any, qdd: Any, params: Any = None,
                       out: Array | None = None) -> Array:
        """The accelerometers' readings Rᵀ(a − g) (k), in ``accelerometer_labels``
        order: functions of q and q̈, not of the state alone, so they are not among the
        sensors the estimators take."""
        return self.dense("accelerometers", params, out, q=q, qdd=qdd)

    def accelerometers_q(self, q: Any, qdd: Any, params: Any = None,
                         out: Array | None = None) -> Array:
        """∂/∂q of the accelerometers' readings (k, n)."""
        return self.dense("accelerometers_q", params, out, q=q, qdd=qdd)

    def accelerometers_qdd(self, q: Any, qdd: Any, params: Any = None,
                           out: Array | None = None) -> Array:
        """∂/∂q̈ of the accelerometers' readings (k, n)."""
        return self.dense("accelerometers_qdd", params, out, q=q, qdd=qdd)

    def coefficients(self, params: Any = None) -> Array:
        """Dry-friction bounds (one per ``meta["friction"]`` entry), then actuator gains."""
        if "coefficients" not in self._kernels:
            return np.zeros(0)
        return self.dense("coefficients", params, q=self._q0)

    def actuator_gains(self, params: Any = None) -> Array:
        """Each actuator's gain, in ``meta["actuators"]`` order: a command u applies the
        generalized force gain·u on the actuator's coordinate."""
        return self.coefficients(params)[self._friction:]

    def coefficients_p(self, params: Any = None) -> Array:
        """∂(coefficients)/∂p, (len(coefficients), number of parameters)."""
        if "coefficients" not in self._kernels:
            return np.zeros((0, self._sizes["p"]))
        return self.dense("coefficients_p", params, q=self._q0)

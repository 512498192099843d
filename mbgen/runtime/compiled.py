"""NumPy face of a compiled mechanism: every method takes one state or a batch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

import numpy as np

from mbgen.errors import MbgenError
from mbgen.redundancy import independent_rows
from mbgen.runtime.calls import ParameterBuffer, output_array
from mbgen.runtime.integration import IntegrationMixin
from mbgen.runtime.options import SolverOptions
from mbgen.runtime.single import StateEvaluator

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


class CompiledMechanism(IntegrationMixin):
    """A mechanism's generated C kernels, callable on states of shape (n,) or (N, n)."""

    def __init__(self, module: ModuleType, meta: dict[str, Any], directory: Path) -> None:
        self.module = module
        self.lib = module.lib
        self.ffi = module.ffi
        self.meta = meta
        self.directory = directory
        self.name: str = meta["name"]
        self.n: int = meta["n"]
        self.m: int = meta["m"]
        self.coordinate_names: list[str] = meta["coordinate_names"]
        self.constraint_labels: list[str] = meta["constraint_labels"]
        self.sensor_labels: list[str] = meta["sensor_labels"]
        self.q0: Array = np.array(meta["q0"], dtype=float)
        self.c_model = self.lib.mb_model_get()
        self.kernels = {
            name: KernelInfo(name, getattr(self.lib, f"MB_K_{name.upper()}"),
                             tuple(info["inputs"]), tuple(info["shape"]),
                             tuple(np.array(info["indices"], dtype=np.intp).reshape(-1, len(
                                 info["shape"])).T))
            for name, info in meta["kernels"].items()
        }
        self._sizes = {"q": self.n, "qd": self.n, "v": self.n, "lam": self.m,
                       "p": len(meta["parameters"])}
        self.options = SolverOptions(self.ffi, self.lib)
        self.set_parameters(**meta["parameters"])
        self._rank: int | None = None

    # -- properties ------------------------------------------------------------------------
    @property
    def parameters(self) -> MappingProxyType:
        """Parameter values by name (read-only: change them with ``set_parameters``)."""
        return MappingProxyType(self._parameters)

    def set_parameters(self, **values: float) -> None:
        """Change the default values of named parameters (every call's ``params``)."""
        current = dict(getattr(self, "_parameters", {}) or self.meta["parameters"])
        for name, value in values.items():
            if name not in current:
                raise KeyError(f"unknown parameter {name!r} (parameters: "
                               f"{', '.join(current)})")
            current[name] = float(value)
        self._parameters = current
        vector = np.fromiter(current.values(), dtype=np.float64, count=len(current))
        if hasattr(self, "parameter_buffer"):
            self.parameter_buffer.values[:] = vector
        else:
            self.parameter_buffer = ParameterBuffer(self.ffi, vector)

    @property
    def parameter_vector(self) -> Array:
        """The parameters' values in file order (the default ``params`` of every call)."""
        return self.parameter_buffer.values.copy()

    @property
    def rank(self) -> int:
        """Rank of Φq at q0 (numerical, SVD)."""
        if self._rank is None:
            self._rank = len(self.independent_constraints()[0])
        return self._rank

    @property
    def dof(self) -> int:
        return self.n - self.rank

    @property
    def coordinate_units(self) -> list[str]:
        """SI unit of each coordinate (for axes and tables): m for the points' x and y,
        rad for the relative angles that follow them."""
        lengths = 2 * sum(not point["fixed"] for point in self.meta["points"])
        return ["m"] * lengths + ["rad"] * (self.n - lengths)

    def sensor_noise(self, override: Any = None, default: float | None = None) -> Array:
        """Standard deviation of each sensor output (S,), in ``sensor_labels`` order:
        ``override`` (one value, or S) when given, else each sensor's ``noise`` from the
        file. A sensor that declares none takes ``default``, or is an error: a noise made
        up for it (estimate used 1e-3) makes every weight and interval meaningless."""
        if override is not None:
            return np.broadcast_to(np.asarray(override, dtype=float),
                                   (len(self.sensor_labels),)).copy()
        declared = self.meta.get("sensor_noise") or [None] * len(self.sensor_labels)
        missing = [label for label, noise in zip(self.sensor_labels, declared, strict=True)
                   if noise is None]
        if missing and default is None:
            raise MbgenError(f"{', '.join(missing)} of {self.name} declare(s) no `noise` (the "
                             "standard deviation of a reading): give it in the file's "
                             "sensors, e.g. {type: gyroscope, body: 1, noise: 0.01}")
        return np.array([default if noise is None else float(noise) for noise in declared])

    @property
    def sensor_units(self) -> list[str]:
        """SI unit of each sensor output, in ``sensor_labels`` order."""
        units: list[str] = []
        for sensor in self.meta["sensors"]:
            if sensor["kind"] == "encoder":
                units.append(self.coordinate_units[self.coordinate_index(sensor["target"])])
            else:
                units += {"gyroscope": ["rad/s"], "position": ["m", "m"],
                          "velocity": ["m/s", "m/s"]}[sensor["kind"]]
        return units

    def independent_constraints(self, q: Any = None, tol: float = 1e-9) -> tuple[list[int],
                                                                                list[int]]:
        """Split constraint rows into (independent, redundant) at q (default q0).

        Rows are taken in file order and a row is redundant when it is a linear combination
        of the rows kept before it, so the report names the later of two dependent rows.
        """
        return independent_rows(self.phi_q(self.q0 if q is None else q), tol)

    def coordinate_index(self, name: str) -> int:
        try:
            return self.coordinate_names.index(name)
        except ValueError:
            raise KeyError(f"unknown coordinate {name!r} (coordinates: "
                           f"{', '.join(self.coordinate_names)})") from None

    def sparsity(self, kernel: str) -> tuple[Array, ...]:
        """Row/column (and parameter) indices of a kernel's nonzeros, in output order."""
        return self.kernels[kernel].indices

    # -- calling kernels ------------------------------------------------------------------
    def _kernel_args(self, info: KernelInfo, params: Any, inputs: dict[str, Any],
                     ) -> tuple[list[Any], int, bool]:
        """(q, q_stride, x, x_stride, p, p_stride) pointers, N, batched."""
        wanted = {a: (inputs[a], self._sizes[a]) for a in info.inputs if a != "p"}
        arrays, strides, count, batched = self._batch(**wanted)
        second = next((a for a in info.inputs if a not in ("q", "p")), None)
        p, p_stride = self._params(params, count)
        args = [self._dbl(arrays["q"]), strides["q"],
                self.ffi.NULL if second is None else self._dbl(arrays[second]),
                0 if second is None else strides[second], p, p_stride]
        return args, count, batched

    def evaluate(self, kernel: str, params: Any = None, **inputs: Any) -> tuple[Array, bool]:
        """Raw sparse values (N, nnz) of a kernel, in ``sparsity(kernel)`` order (no dense
        scatter); also whether the input was batched."""
        info = self.kernels[kernel]
        args, count, batched = self._kernel_args(info, params, inputs)
        out = np.empty((count, info.nnz), dtype=np.float64)
        self._checked(self.lib.mb_eval(self.c_model, info.kernel_id, count, *args,
                                       self._dbl(out)))
        return out, batched

    def dense(self, kernel: str, params: Any = None, out: Array | None = None,
              **inputs: Any) -> Array:
        """A kernel's output as a dense array of shape kernel.shape, or (N, *shape);
        ``out``: a C-contiguous float64 array of that shape to write into."""
        info = self.kernels[kernel]
        if len(info.shape) > 2:
            values, batched = self.evaluate(kernel, params, **inputs)
            result = np.zeros((values.shape[0], *info.shape))
            if info.nnz:
                every_state: tuple[Any, ...] = (slice(None), *info.indices)
                result[every_state] = values
            return result if batched else result[0]
        args, count, batched = self._kernel_args(info, params, inputs)
        shape = (count, *info.shape) if batched else info.shape
        result = output_array(out, shape)
        rows, cols = info.shape[0], info.shape[1] if len(info.shape) == 2 else 1
        self._checked(self.lib.mb_eval_dense(self.c_model, info.kernel_id, count, *args, rows,
                                             cols, self._dbl(result)))
        return result

    def evaluator(self) -> StateEvaluator:
        """Cheap one-state calls for factor callbacks (1-3 µs instead of 15-25 µs): q̈ and
        its Jacobians, (Φ, Φq), sensors with Jacobians. See :class:`StateEvaluator`."""
        return StateEvaluator(self.ffi, self.lib, self.c_model, self.plan, self.options,
                              self.parameter_buffer, self.n, self.m,
                              len(self.sensor_labels))

    def constraints(self, q: Any, params: Any = None) -> tuple[Array, Array]:
        """(Φ, Φq) in one call: what a constraint factor needs per linearization."""
        return self.phi(q, params), self.phi_q(q, params)

    def sensors_with_jacobians(self, q: Any, qd: Any, params: Any = None,
                               ) -> tuple[Array, Array, Array]:
        """(h, ∂h/∂q, ∂h/∂q̇) in one call."""
        return (self.sensors(q, qd, params), self.sensors_q(q, qd, params),
                self.sensors_qd(q, qd, params))

    # -- the compiler's quantities ---------------------------------------------------------
    def phi(self, q: Any, params: Any = None,
            out: Array | None = None) -> Array:
        return self.dense("phi", params, out, q=q)

    def phi_q(self, q: Any, params: Any = None,
            out: Array | None = None) -> Array:
        return self.dense("phi_q", params, out, q=q)

    def phiq_v_q(self, q: Any, v: Any, params: Any = None,
            out: Array | None = None) -> Array:
        """(Φq v)_q: derivative of Φq(q)·v with respect to q, v held fixed."""
        return self.dense("phiq_v_q", params, out, q=q, v=v)

    def dphiq_qd(self, q: Any, qd: Any, params: Any = None,
            out: Array | None = None) -> Array:
        """Φ̇q q̇; the acceleration right-hand side is c = -Φ̇q q̇."""
        return self.dense("dphiq_qd", params, out, q=q, qd=qd)

    def dphiq_qd_q(self, q: Any, qd: Any, params: Any = None,
            out: Array | None = None) -> Array:
        return self.dense("dphiq_qd_q", params, out, q=q, qd=qd)

    def dphiq_qd_qd(self, q: Any, qd: Any, params: Any = None,
            out: Array | None = None) -> Array:
        return self.dense("dphiq_qd_qd", params, out, q=q, qd=qd)

    def phiqT_lam_q(self, q: Any, lam: Any, params: Any = None,
            out: Array | None = None) -> Array:
        """(Φqᵀ λ)_q: derivative of Φq(q)ᵀ·λ with respect to q."""
        return self.dense("phiqT_lam_q", params, out, q=q, lam=lam)

    def mass_matrix(self, q: Any, params: Any = None,
            out: Array | None = None) -> Array:
        return self.dense("mass", params, out, q=q)

    def mass_v_q(self, q: Any, v: Any, params: Any = None,
            out: Array | None = None) -> Array:
        return self.dense("mass_v_q", params, out, q=q, v=v)

    def generalized_forces(self, q: Any, qd: Any, params: Any = None,
            out: Array | None = None) -> Array:
        return self.dense("forces", params, out, q=q, qd=qd)

    def generalized_forces_q(self, q: Any, qd: Any, params: Any = None,
            out: Array | None = None) -> Array:
        return self.dense("forces_q", params, out, q=q, qd=qd)

    def generalized_forces_qd(self, q: Any, qd: Any, params: Any = None,
            out: Array | None = None) -> Array:
        return self.dense("forces_qd", params, out, q=q, qd=qd)

    def energy(self, q: Any, qd: Any, params: Any = None) -> Array:
        """Kinetic plus potential energy (gravity, springs, constant forces)."""
        return self.dense("energy", params, q=q, qd=qd).sum(axis=-1)

    def energy_parts(self, q: Any, qd: Any, params: Any = None) -> Array:
        """[kinetic, potential] per state."""
        return self.dense("energy", params, q=q, qd=qd)

    def phi_p(self, q: Any, params: Any = None,
            out: Array | None = None) -> Array:
        return self.dense("phi_p", params, out, q=q)

    def mass_p(self, q: Any, params: Any = None,
            out: Array | None = None) -> Array:
        return self.dense("mass_p", params, out, q=q)

    def generalized_forces_p(self, q: Any, qd: Any, params: Any = None,
            out: Array | None = None) -> Array:
        return self.dense("forces_p", params, out, q=q, qd=qd)

    def sensors(self, q: Any, qd: Any, params: Any = None,
            out: Array | None = None) -> Array:
        return self.dense("sensors", params, out, q=q, qd=qd)

    def sensors_q(self, q: Any, qd: Any, params: Any = None,
            out: Array | None = None) -> Array:
        return self.dense("sensors_q", params, out, q=q, qd=qd)

    def sensors_qd(self, q: Any, qd: Any, params: Any = None,
            out: Array | None = None) -> Array:
        return self.dense("sensors_qd", params, out, q=q, qd=qd)

    def sensors_p(self, q: Any, qd: Any, params: Any = None,
            out: Array | None = None) -> Array:
        return self.dense("sensors_p", params, out, q=q, qd=qd)

    def coefficients(self, params: Any = None) -> Array:
        """Dry-friction bounds (one per ``meta["friction"]`` entry), then actuator gains."""
        if "coefficients" not in self.kernels:
            return np.zeros(0)
        return self.dense("coefficients", params, q=self.q0)

    def actuator_gains(self, params: Any = None) -> Array:
        """Each actuator's gain, in ``meta["actuators"]`` order: a command u applies the
        generalized force gain·u on the actuator's coordinate."""
        return self.coefficients(params)[len(self.meta.get("friction", [])):]

    def coefficients_p(self, params: Any = None) -> Array:
        """∂(coefficients)/∂p, (len(coefficients), number of parameters)."""
        if "coefficients" not in self.kernels:
            return np.zeros((0, len(self._parameters)))
        return self.dense("coefficients_p", params, q=self.q0)

    def __repr__(self) -> str:
        return (f"<CompiledMechanism {self.name!r}: n={self.n}, m={self.m}, "
                f"dof={self.dof}, parameters={list(self.parameters)}>")

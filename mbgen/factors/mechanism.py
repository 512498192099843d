"""The paper's nonlinear factors for one compiled mechanism, with exact Jacobians.

Each factor is a ``gtsam.CustomFactor`` whose callback makes one call of the mechanism's
one-state path (``mech.evaluator()``, no allocation, no finite differences) and hands
GTSAM the residual and its Jacobians. The callbacks share one evaluator: GTSAM
linearizes the factors of a graph one after another on one thread.

Independent coordinates: the paper's dynamics factor reads the dependent coordinates q
that go with z from an outside ``Values``. Here the factor is attached to q, q̇ (which
the independent-coordinate graph has as variables anyway, tied to z, ż by the position
and velocity factors) and z̈: residual q̈(q, q̇)[z] − z̈, with Jacobians the z rows of
∂q̈/∂q and ∂q̈/∂q̇. So q is always the graph's own estimate, consistent with z through
the constraint factors, and the chain rule through those factors gives GTSAM exactly
∂z̈/∂z along the manifold.

Where mbgen's native module is available (factors/native.py, checked against these
callbacks), the factors get its C++ error functions instead of the Python closures: the
same residuals and Jacobians from the same C kernels, with no Python in ``linearize``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Literal

import gtsam
import numpy as np

from mbgen.factors.native import chosen_module
from mbgen.factors.noise import PAPER, NoiseDefaults, diagonal, isotropic
from mbgen.runtime.compiled import CompiledMechanism

Array = np.ndarray
ErrorFunction = Callable[[Any, gtsam.Values, Any], Array]


class MechanismFactors:
    """Makes the factors of one mechanism; keys are ordinary GTSAM keys (``gtsam.symbol``).

    ``z``: the independent coordinates (names or indices) of the independent-coordinate
    factors; default: the file's ``independent_coordinates`` or the full-pivoting choice
    at q0. ``native``: the native error functions where available (None), never (False),
    or those of a given module (the self-check's).
    """

    def __init__(self, mechanism: CompiledMechanism, noise: NoiseDefaults = PAPER,
                 z: Sequence[str | int] | None = None,
                 native: ModuleType | Literal[False] | None = None) -> None:
        self.mechanism = mechanism
        self.noise = noise
        module = chosen_module(native)
        # the native factors call the C themselves: their evaluator needs no fast path
        self.evaluator = mechanism.evaluator(fast=module is None)
        self.n, self.m = mechanism.n, mechanism.m
        if z is None:
            z = mechanism.default_independent or mechanism.independent_coordinates()
        self.z = mechanism.independent_indices(z).astype(int)
        self.d = len(self.z)
        self._select = np.eye(self.n)[self.z]  # (d, n): q ↦ q[z]
        # constant Jacobian blocks, made once and shared by the factors (GTSAM copies them)
        self._minus_eye_n, self._minus_eye_d = -np.eye(self.n), -np.eye(self.d)
        self._zeros_dn = np.zeros((self.d, self.n))  # the selection rows' zero block
        self._minus_z = np.vstack([np.zeros((self.m, self.d)), -np.eye(self.d)])  # [0; −I]
        self.native = module is not None  # the factors run natively
        self.native_functions = module  # the native module, or None
        self._native = None if module is None else module.Mechanism(
            self.evaluator, *self.evaluator.entry_points(), self.n, self.m,
            len(mechanism.sensor_labels), [int(i) for i in self.z])

    def _noise(self, dim: int, sigma: float | Array | None, default: float,
               ) -> gtsam.noiseModel.Base:
        """The factor's noise: σ for every row, or one σ per row (an array of ``dim``:
        e.g. a redundant constraint row's loose, so that it does not count twice)."""
        if sigma is not None and np.ndim(sigma):
            sigmas = np.asarray(sigma, dtype=float)
            if sigmas.shape != (dim,):
                raise ValueError(f"{sigmas.size} standard deviations for {dim} rows")
            return diagonal(tuple(sigmas.tolist()))
        return isotropic(dim, default if sigma is None else float(sigma))

    def _custom(self, noise: gtsam.noiseModel.Base, keys: Sequence[int],
                function: ErrorFunction, kind: str, forces: Array | None = None,
                actuated: Array | None = None, row: int = 0, measured: float = 0.0,
                ) -> gtsam.CustomFactor:
        """The factor with the Python error ``function``, or with the native one of the
        same ``kind`` (a name in the native module's KINDS) and the data it needs."""
        module, native = self.native_functions, self._native
        if module is None or native is None:
            return gtsam.CustomFactor(noise, list(keys), function)
        factor = gtsam.CustomFactor(noise, list(keys), getattr(module, kind))
        native.register(factor, module.KINDS.index(kind), list(keys),
                        [] if forces is None else [float(f) for f in forces],
                        [] if actuated is None else [int(a) for a in actuated],
                        int(row), float(measured))
        return factor

    # -- dependent coordinates ------------------------------------------------------------
    def position_constraints(self, q: int, sigma: float | Array | None = None,
                             ) -> gtsam.CustomFactor:
        """Φ(q) (the paper's f_pc^d); Jacobian Φq."""
        constraints = self.evaluator.constraints

        def error(_: Any, values: gtsam.Values, H: Any) -> Array:
            phi, phi_q = constraints(values.atVector(q))
            if H is not None:
                H[0] = phi_q
            return phi.copy()

        return self._custom(self._noise(self.m, sigma, self.noise.constraints), [q], error,
                            "position_constraints")

    def velocity_constraints(self, q: int, qd: int, sigma: float | Array | None = None,
                             ) -> gtsam.CustomFactor:
        """Φq(q) q̇ (f_vc^d); Jacobians (Φq q̇)_q and Φq."""
        rates = self.evaluator.velocity_constraints

        def error(_: Any, values: gtsam.Values, H: Any) -> Array:
            rate, rate_q, phi_q = rates(values.atVector(q), values.atVector(qd))
            if H is not None:
                H[0] = rate_q
                H[1] = phi_q
            return rate.copy()

        return self._custom(self._noise(self.m, sigma, self.noise.constraints), [q, qd],
                            error, "velocity_constraints")

    def forward_dynamics(self, q: int, qd: int, qdd: int, forces: Array | None = None,
                         sigma: float | None = None) -> gtsam.CustomFactor:
        """q̈(q, q̇, Q) − q̈ (f_dyn^d) with the external forces Q known (default none)."""
        jacobians = self.evaluator.forward_dynamics_jacobians
        dynamics = self.evaluator.forward_dynamics
        Q = None if forces is None else np.array(forces, dtype=float)
        minus_eye = self._minus_eye_n

        def error(_: Any, values: gtsam.Values, H: Any) -> Array:
            if H is None:  # an error evaluation: no Jacobians needed
                return dynamics(values.atVector(q), values.atVector(qd), Q) - values.atVector(
                    qdd)
            acc, jq, jqd, _jQ = jacobians(values.atVector(q), values.atVector(qd), Q)
            H[0] = jq
            H[1] = jqd
            H[2] = minus_eye
            return acc - values.atVector(qdd)

        return self._custom(self._noise(self.n, sigma, self.noise.dynamics), [q, qd, qdd],
                            error, "forward_dynamics", forces=Q)

    def inverse_dynamics(self, q: int, qd: int, qdd: int, forces: int,
                         actuated: Sequence[int] | None = None, sigma: float | None = None,
                         ) -> gtsam.CustomFactor:
        """q̈(q, q̇, Q) − q̈ (f_idyn^d) with the generalized forces a variable: Q (n), or
        with ``actuated`` coordinates the forces u (one per actuated coordinate), Q = B u
        (the other components are exactly zero, not pinned by priors)."""
        dynamics = self.evaluator.forward_dynamics_jacobians
        minus_eye = self._minus_eye_n
        columns = None if actuated is None else np.array(actuated, dtype=int)
        generalized = np.zeros(self.n)

        def error(_: Any, values: gtsam.Values, H: Any) -> Array:
            applied = values.atVector(forces)
            if columns is not None:
                generalized[:] = 0.0
                generalized[columns] = applied
                applied = generalized
            acc, jq, jqd, jQ = dynamics(values.atVector(q), values.atVector(qd), applied)
            if H is not None:
                H[0] = jq
                H[1] = jqd
                H[2] = minus_eye
                H[3] = jQ if columns is None else jQ[:, columns]
            return acc - values.atVector(qdd)

        return self._custom(self._noise(self.n, sigma, self.noise.dynamics),
                            [q, qd, qdd, forces], error, "inverse_dynamics", actuated=columns)

    # -- independent coordinates ------------------------------------------------------------
    def independent_position(self, q: int, z: int, sigma: float | None = None,
                             ) -> gtsam.CustomFactor:
        """[Φ(q); q[z] − z] (f_pc^i)."""
        constraints = self.evaluator.constraints
        select, zi, m = self._select, self.z, self.m
        minus = self._minus_z

        def error(_: Any, values: gtsam.Values, H: Any) -> Array:
            qv = values.atVector(q)
            phi, phi_q = constraints(qv)
            if H is not None:
                H[0] = np.vstack([phi_q, select])
                H[1] = minus
            return np.concatenate([phi, qv[zi] - values.atVector(z)])

        return self._custom(self._noise(m + self.d, sigma, self.noise.constraints), [q, z],
                            error, "independent_position")

    def independent_velocity(self, q: int, qd: int, zd: int, sigma: float | None = None,
                             ) -> gtsam.CustomFactor:
        """[Φq q̇; q̇[z] − ż] (f_vc^i)."""
        rates = self.evaluator.velocity_constraints
        select, zi, m, d = self._select, self.z, self.m, self.d
        zeros = self._zeros_dn
        minus = self._minus_z

        def error(_: Any, values: gtsam.Values, H: Any) -> Array:
            velocity = values.atVector(qd)
            rate, rate_q, phi_q = rates(values.atVector(q), velocity)
            if H is not None:
                H[0] = np.vstack([rate_q, zeros])
                H[1] = np.vstack([phi_q, select])
                H[2] = minus
            return np.concatenate([rate, velocity[zi] - values.atVector(zd)])

        return self._custom(self._noise(m + d, sigma, self.noise.constraints), [q, qd, zd],
                            error, "independent_velocity")

    def independent_acceleration(self, q: int, qd: int, qdd: int, zdd: int,
                                 sigma: float | Array | None = None) -> gtsam.CustomFactor:
        """[Φ̇q q̇ + Φq q̈; q̈[z] − z̈] (the acceleration problem as a factor)."""
        accelerations = self.evaluator.acceleration_constraints
        select, zi, m, d = self._select, self.z, self.m, self.d
        zeros = self._zeros_dn
        minus = self._minus_z

        def error(_: Any, values: gtsam.Values, H: Any) -> Array:
            acc = values.atVector(qdd)
            res, res_q, res_qd, phi_q = accelerations(values.atVector(q),
                                                      values.atVector(qd), acc)
            if H is not None:
                H[0] = np.vstack([res_q, zeros])
                H[1] = np.vstack([res_qd, zeros])
                H[2] = np.vstack([phi_q, select])
                H[3] = minus
            return np.concatenate([res, acc[zi] - values.atVector(zdd)])

        return self._custom(self._noise(m + d, sigma, self.noise.constraints),
                            [q, qd, qdd, zdd], error, "independent_acceleration")

    def independent_dynamics(self, q: int, qd: int, zdd: int, forces: Array | None = None,
                             sigma: float | None = None) -> gtsam.CustomFactor:
        """q̈(q, q̇, Q)[z] − z̈ (f_dyn^i, attached to q and q̇: see the module docstring)."""
        jacobians = self.evaluator.forward_dynamics_jacobians
        dynamics = self.evaluator.forward_dynamics
        Q = None if forces is None else np.array(forces, dtype=float)
        zi = self.z
        minus_eye = self._minus_eye_d

        def error(_: Any, values: gtsam.Values, H: Any) -> Array:
            if H is None:
                acc = dynamics(values.atVector(q), values.atVector(qd), Q)
                return acc[zi] - values.atVector(zdd)
            acc, jq, jqd, _jQ = jacobians(values.atVector(q), values.atVector(qd), Q)
            H[0] = jq[zi]
            H[1] = jqd[zi]
            H[2] = minus_eye
            return acc[zi] - values.atVector(zdd)

        return self._custom(self._noise(self.d, sigma, self.noise.dynamics), [q, qd, zdd],
                            error, "independent_dynamics", forces=Q)

    # -- sensors ------------------------------------------------------------------------------
    def sensor_noise(self) -> list[float]:
        """The standard deviation of each sensor output: the file's ``noise``, else this
        graph's noise model's (FactorNoise.sensor, the journal's)."""
        return self.mechanism.sensor_noise(default=self.noise.sensor).tolist()

    def observation(self, q: int, qd: int, sensor: str | int, measured: float,
                    sigma: float | None = None) -> gtsam.CustomFactor:
        """h_i(q, q̇) − measured for one sensor output (its label, e.g. ``P1.x``, or row)."""
        labels = self.mechanism.sensor_labels
        if isinstance(sensor, str):
            if sensor not in labels:
                raise KeyError(f"unknown sensor {sensor!r} (sensors: {', '.join(labels)})")
            row = labels.index(sensor)
        else:
            row = int(sensor)
        sensors = self.evaluator.sensors_with_jacobians
        value = float(measured)

        def error(_: Any, values: gtsam.Values, H: Any) -> Array:
            h, h_q, h_qd = sensors(values.atVector(q), values.atVector(qd))
            if H is not None:
                H[0] = h_q[row:row + 1]
                H[1] = h_qd[row:row + 1]
            return np.array([h[row] - value])

        noise = self.sensor_noise()[row] if sigma is None else sigma
        return self._custom(isotropic(1, float(noise)), [q, qd], error, "observation", row=row,
                            measured=value)

    # -- estimation: unknown forces and accelerometers (Python callbacks: no native kind) --
    def independent_input_dynamics(self, q: int, qd: int, zdd: int, forces: int,
                                   actuated: Sequence[int], sigma: float | None = None,
                                   ) -> gtsam.CustomFactor:
        """q̈(q, q̇, B u)[z] − z̈ with u (one per ``actuated`` coordinate) a variable: the
        independent dynamics factor of a graph that estimates unknown forces."""
        jacobians = self.evaluator.forward_dynamics_jacobians
        zi, minus_eye = self.z, self._minus_eye_d
        columns = np.array(actuated, dtype=int)
        generalized = np.zeros(self.n)

        def error(_: Any, values: gtsam.Values, H: Any) -> Array:
            generalized[:] = 0.0
            generalized[columns] = values.atVector(forces)
            acc, jq, jqd, jQ = jacobians(values.atVector(q), values.atVector(qd), generalized)
            if H is not None:
                H[0] = jq[zi]
                H[1] = jqd[zi]
                H[2] = minus_eye
                H[3] = jQ[zi][:, columns]
            return acc[zi] - values.atVector(zdd)

        return gtsam.CustomFactor(self._noise(self.d, sigma, self.noise.dynamics),
                                  [q, qd, zdd, forces], error)

    def accelerometer(self, q: int, qdd: int, row: int, measured: float, sigma: float,
                      ) -> gtsam.CustomFactor:
        """a_i(q, q̈) − measured for one accelerometer output (its row in
        ``accelerometer_labels`` order); Jacobians ∂a/∂q and ∂a/∂q̈."""
        mech, value = self.mechanism, float(measured)

        def error(_: Any, values: gtsam.Values, H: Any) -> Array:
            qv, acc = values.atVector(q), values.atVector(qdd)
            if H is not None:
                H[0] = np.asarray(mech.accelerometers_q(qv, acc)).reshape(-1, self.n)[
                    row:row + 1]
                H[1] = np.asarray(mech.accelerometers_qdd(qv, acc)).reshape(-1, self.n)[
                    row:row + 1]
            return np.array([np.ravel(mech.accelerometers(qv, acc))[row] - value])

        return gtsam.CustomFactor(isotropic(1, sigma), [q, qdd], error)

"""NumPy face of a compiled mechanism: every method takes one state or a batch.

The face describes the mechanism (names, sizes, units, parameters) and shows the members
of its parts as its own. Each part binds the C files of one job of the core (mbgen/csrc/)
and gets what it uses through its constructor:

- ``mech.core`` (calls.Core): the module's ffi, lib and model, the parameter buffer,
  pointer and batch conversions, statuses;
- ``mech.quantities`` (kernels.Quantities): every kernel, model.c's ``mb_eval*``;
- ``mech.structure`` (structure.Structure): active rows, rank, DOF and the plan, model.c's
  ``mb_plan_*``;
- ``mech.dynamics`` (dynamics.Dynamics): dynamics.c;
- ``mech.inverse`` (inverse.Inverse): inverse.c;
- ``mech.integrators`` (integration.Integrators): simulate.c, sweep.c and variational.c;
- ``mech.particles`` (particles.Particles): particles.c and stats.c;
- ``mech.kalman`` (kalman.KalmanFilters): kalman.c;
- ``mech.coordinates`` (coordinates.Coordinates): names, units, the choice of z (no C);
- ``mech.options`` (options.SolverOptions): the settings every solve passes.

``mech.evaluator()`` makes a :class:`~mbgen.runtime.single.StateEvaluator` (one state at
a time, dynamics.c and model.c through a kept workspace). A forwarded member has its
signature and docstring in its part only (:mod:`mbgen.runtime.forwarding`).
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

import numpy as np

from mbgen.errors import MbgenError
from mbgen.runtime.calls import Core, ParameterBuffer
from mbgen.runtime.coordinates import Coordinates
from mbgen.runtime.dynamics import Dynamics
from mbgen.runtime.forwarding import Forward, documented_by
from mbgen.runtime.frames import BodyFrames
from mbgen.runtime.integration import Integrators
from mbgen.runtime.inverse import Inverse
from mbgen.runtime.kalman import KalmanFilters
from mbgen.runtime.kernels import KernelInfo, Quantities, kernel_infos
from mbgen.runtime.options import SolverOptions
from mbgen.runtime.particles import Particles
from mbgen.runtime.single import StateEvaluator
from mbgen.runtime.structure import Structure

Array = np.ndarray


class CompiledMechanism:
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
        self.accelerometer_labels: list[str] = meta.get("accelerometer_labels", [])
        self.q0: Array = np.array(meta["q0"], dtype=float)
        self.kernels: dict[str, KernelInfo] = kernel_infos(self.lib, meta["kernels"])
        self.parameter_buffer = ParameterBuffer(self.ffi, meta["parameters"])
        model = self.lib.mb_model_get()
        self.size: float = float(self.lib.mb_length_scale(model))  # see mb_model_options
        self.options = SolverOptions(self.ffi, self.lib, model)
        self._make_parts()

    def _make_parts(self) -> None:
        """The parts, each given what it uses: nothing reaches into another's insides."""
        meta = self.meta
        self.core = Core(self.ffi, self.lib, self.parameter_buffer)
        self.c_model = self.core.model
        units = meta.get("coordinate_units")
        if units is None:  # a module packaged before meta.json had them: planar, x y first
            lengths = 2 * sum(not point["fixed"] for point in meta["points"])
            units = ["m"] * lengths + ["rad"] * (self.n - lengths)
        self.coordinates = Coordinates(self.coordinate_names, units, meta.get("independent"))
        self.frames = BodyFrames(meta, self.coordinate_names)
        sizes = {"q": self.n, "qd": self.n, "v": self.n, "lam": self.m, "qdd": self.n,
                 "p": len(meta["parameters"])}
        friction = meta.get("friction", [])
        self.quantities = Quantities(self.core, self.kernels, sizes, self.q0, len(friction))
        self.structure = Structure(self.core, self.options, self.quantities.phi_q, self.q0,
                                   self.coordinates)
        parts = (self.core, self.options, self.structure, self.coordinates)
        self.dynamics = Dynamics(*parts, self.m, self.q0)
        self.inverse = Inverse(*parts, self.m)
        self.integrators = Integrators(*parts, self.quantities.coefficients, friction)
        self.particles = Particles(self.core, self.options, self.structure, self.n)
        self.kalman = KalmanFilters(self.core, self.options, self.structure, self.n)

    # -- the mechanism's description ---------------------------------------------------------
    @property
    def parameters(self) -> MappingProxyType:
        """Parameter values by name (read-only: change them with ``set_parameters``)."""
        return MappingProxyType(self.parameter_buffer.named)

    set_parameters = Forward("parameter_buffer", ParameterBuffer.set)

    @property
    def parameter_vector(self) -> Array:
        """The parameters' values in file order (the default ``params`` of every call)."""
        return self.parameter_buffer.values.copy()

    coordinate_index = Forward("coordinates", Coordinates.index)
    coordinate_indices = Forward("coordinates", Coordinates.indices)
    independent_indices = Forward("structure", Structure.z_indices)

    @property
    def coordinate_units(self) -> list[str]:
        """SI unit of each coordinate (for axes and tables): m for points and distances, 1
        for unit vectors' components, rad for angles."""
        return self.coordinates.units

    def mirrored(self, q: Any) -> Array:
        """(N,) True where a spatial body is the mirror image of its placement in the file
        (a solution of the rigidity equations no real body reaches); False for planar
        mechanisms."""
        return self.frames.mirrored(np.asarray(q, dtype=float), self.q0)

    @property
    def span(self) -> float:
        """How far the moving points spread at q0 (the largest spread of the length
        coordinates), else ``size``: the length of the mechanism's moves, where ``size`` (its
        largest coordinate) is the scale of round-off."""
        lengths = self.q0[[unit == "m" for unit in self.coordinate_units]]
        spread = float(np.ptp(lengths)) if lengths.size else 0.0
        return spread if spread > 0 else self.size

    @property
    @documented_by(Coordinates.default_independent)
    def default_independent(self) -> list[int] | None:
        return self.coordinates.default_independent

    def sensor_noise(self, override: Any = None, default: float | None = None) -> Array:
        """Standard deviation of each sensor output (S,), in ``sensor_labels`` order:
        ``override`` (one value, or S) when given, else each sensor's ``noise`` from the
        file. A sensor that declares none takes ``default``, or is an error: a noise made
        up for it (estimate used 1e-3) makes every weight and interval meaningless."""
        return self._noise(self.sensor_labels, "sensor_noise", override, default,
                           "{type: gyroscope, body: 1, noise: 0.01}")

    def accelerometer_noise(self, override: Any = None) -> Array:
        """The same for the accelerometers' outputs, in ``accelerometer_labels`` order."""
        return self._noise(self.accelerometer_labels, "accelerometer_noise", override, None,
                           "{type: accelerometer, body: 1, noise: 0.05}")

    def _noise(self, labels: list[str], key: str, override: Any, default: float | None,
               example: str) -> Array:
        if override is not None:
            return np.broadcast_to(np.asarray(override, dtype=float), (len(labels),)).copy()
        declared = self.meta.get(key) or [None] * len(labels)
        missing = [label for label, noise in zip(labels, declared, strict=True)
                   if noise is None]
        if missing and default is None:
            raise MbgenError(f"{', '.join(missing)} of {self.name} declare(s) no `noise` (the "
                             "standard deviation of a reading): give it in the file's "
                             f"sensors, e.g. {example}")
        return np.array([default if noise is None else float(noise) for noise in declared])

    @property
    def sensor_units(self) -> list[str]:
        """SI unit of each sensor output, in ``sensor_labels`` order."""
        units: list[str] = []
        coordinate_units = self.coordinates.units
        for sensor in self.meta["sensors"]:
            if sensor["kind"] == "encoder":
                units.append(coordinate_units[self.coordinates.index(sensor["target"])])
            else:
                outputs = sensor.get("outputs", 2 if sensor["kind"] != "gyroscope" else 1)
                units += [{"gyroscope": "rad/s", "position": "m",
                           "velocity": "m/s"}[sensor["kind"]]] * outputs
        return units

    # -- the core's statuses (calls.Core) ----------------------------------------------------
    status_error = Forward("core", Core.status_error)
    is_status = Forward("core", Core.is_status)
    status_text = Forward("core", Core.status_text)
    banded_inverse = Forward("core", Core.banded_inverse)

    # -- constraint structure and solver settings (structure.Structure, options) -------------
    independent_constraints = Forward("structure", Structure.independent_constraints)
    kept_rows_condition = Forward("structure", Structure.kept_rows_condition)
    reselect_rows = Forward("structure", Structure.reselect)

    @property
    @documented_by(Structure.active_rows)
    def active_rows(self) -> Array:
        return self.structure.active_rows

    @property
    @documented_by(Structure.rank)
    def rank(self) -> int:
        return self.structure.rank

    @property
    @documented_by(Structure.dof)
    def dof(self) -> int:
        return self.structure.dof

    @property
    @documented_by(Structure.plan)
    def plan(self) -> Any:
        return self.structure.plan

    @property
    @documented_by(Structure.uses_sparse)
    def uses_sparse(self) -> bool:
        return self.structure.uses_sparse

    @property
    @documented_by(Structure.linear_algebra)
    def linear_algebra(self) -> str:
        return self.structure.linear_algebra

    @property
    @documented_by(SolverOptions.baumgarte)
    def baumgarte(self) -> tuple[float, float]:
        return self.options.baumgarte

    @baumgarte.setter
    def baumgarte(self, value: tuple[float, float]) -> None:
        self.options.baumgarte = value

    # -- kernels (kernels.Quantities: model.c) -----------------------------------------------
    sparsity = Forward("quantities", Quantities.sparsity)
    evaluate = Forward("quantities", Quantities.evaluate)
    dense = Forward("quantities", Quantities.dense)
    constraints = Forward("quantities", Quantities.constraints)
    sensors_with_jacobians = Forward("quantities", Quantities.sensors_with_jacobians)
    phi = Forward("quantities", Quantities.phi)
    phi_q = Forward("quantities", Quantities.phi_q)
    phiq_v_q = Forward("quantities", Quantities.phiq_v_q)
    dphiq_qd = Forward("quantities", Quantities.dphiq_qd)
    dphiq_qd_q = Forward("quantities", Quantities.dphiq_qd_q)
    dphiq_qd_qd = Forward("quantities", Quantities.dphiq_qd_qd)
    phiqT_lam_q = Forward("quantities", Quantities.phiqT_lam_q)
    mass_matrix = Forward("quantities", Quantities.mass_matrix)
    mass_v_q = Forward("quantities", Quantities.mass_v_q)
    generalized_forces = Forward("quantities", Quantities.generalized_forces)
    generalized_forces_q = Forward("quantities", Quantities.generalized_forces_q)
    generalized_forces_qd = Forward("quantities", Quantities.generalized_forces_qd)
    energy = Forward("quantities", Quantities.energy)
    energy_parts = Forward("quantities", Quantities.energy_parts)
    phi_p = Forward("quantities", Quantities.phi_p)
    mass_p = Forward("quantities", Quantities.mass_p)
    generalized_forces_p = Forward("quantities", Quantities.generalized_forces_p)
    sensors = Forward("quantities", Quantities.sensors)
    sensors_q = Forward("quantities", Quantities.sensors_q)
    sensors_qd = Forward("quantities", Quantities.sensors_qd)
    sensors_p = Forward("quantities", Quantities.sensors_p)
    accelerometers = Forward("quantities", Quantities.accelerometers)
    accelerometers_q = Forward("quantities", Quantities.accelerometers_q)
    accelerometers_qdd = Forward("quantities", Quantities.accelerometers_qdd)
    coefficients = Forward("quantities", Quantities.coefficients)
    actuator_gains = Forward("quantities", Quantities.actuator_gains)
    coefficients_p = Forward("quantities", Quantities.coefficients_p)

    # -- dynamics and kinematics (dynamics.Dynamics: dynamics.c) -----------------------------
    forward_dynamics = Forward("dynamics", Dynamics.forward_dynamics)
    lagrange_multipliers = Forward("dynamics", Dynamics.lagrange_multipliers)
    forward_dynamics_jacobians = Forward("dynamics", Dynamics.forward_dynamics_jacobians)
    forward_dynamics_parameter_jacobian = Forward(
        "dynamics", Dynamics.forward_dynamics_parameter_jacobian)
    partition = Forward("dynamics", Dynamics.partition)
    independent_coordinates = Forward("dynamics", Dynamics.independent_coordinates)
    independent_dynamics = Forward("dynamics", Dynamics.independent_dynamics)
    solve_position = Forward("dynamics", Dynamics.solve_position)
    solve_velocity = Forward("dynamics", Dynamics.solve_velocity)
    project_velocity = Forward("dynamics", Dynamics.project_velocity)
    solve_acceleration = Forward("dynamics", Dynamics.solve_acceleration)

    # -- inverse problems (inverse.Inverse: inverse.c) ---------------------------------------
    inverse_dynamics = Forward("inverse", Inverse.inverse_dynamics)
    solve_position_path = Forward("inverse", Inverse.solve_position_path)

    # -- time stepping (integration.Integrators: simulate.c, variational.c) ------------------
    integrate = Forward("integrators", Integrators.integrate)
    integrate_variational = Forward("integrators", Integrators.integrate_variational)
    integrate_spook = Forward("integrators", Integrators.integrate_spook)
    variational_residual = Forward("integrators", Integrators.variational_residual)
    advance_runs = Forward("integrators", Integrators.advance_runs)
    sweep_uses_lanes = Forward("integrators", Integrators.sweep_uses_lanes)

    # -- particle filters (particles.Particles: particles.c, stats.c) ------------------------
    predict_particles = Forward("particles", Particles.predict_particles)
    weighted_quantiles = Forward("particles", Particles.weighted_quantiles)

    # -- Kalman filters (kalman.KalmanFilters: kalman.c) --------------------------------------
    kalman_run = Forward("kalman", KalmanFilters.kalman_run)

    @property
    @documented_by(Particles.predict_lanes)
    def predict_lanes(self) -> bool:
        return self.particles.predict_lanes

    # -- one state at a time (single.StateEvaluator) -----------------------------------------
    def evaluator(self, fast: bool = True) -> StateEvaluator:
        """Cheap one-state calls for factor callbacks (0.5-3 µs instead of 15-25 µs): q̈
        and its Jacobians, (Φ, Φq), sensors with Jacobians. See :class:`StateEvaluator`
        (``fast``: through the pybind11 extension where it builds)."""
        core = self.core
        return StateEvaluator(core.ffi, core.lib, core.model, self.structure.plan,
                              self.options, core.parameters, self.n, self.m,
                              len(self.sensor_labels), fast)

    def __repr__(self) -> str:
        return (f"<CompiledMechanism {self.name!r}: n={self.n}, m={self.m}, "
                f"dof={self.dof}, parameters={list(self.parameters)}>")

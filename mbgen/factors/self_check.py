"""The native factors' self-check: every kind of factor, native against Python.

Run by factors/native.py in a subprocess (``python -m mbgen.factors.self_check MODULE``),
so that a module that does not fit the loaded GTSAM can crash without harm. Each kind of
factor of a small mechanism with constraints, a relative angle and sensors
(self_check.yaml) is linearized and evaluated by both paths at a state off the manifold;
the check passes (exit 0, last line "ok") when they agree to ``TOLERANCE``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import gtsam
import numpy as np

from mbgen.codegen.cache import user_cache_dir
from mbgen.factors.linear import linear_factor
from mbgen.factors.mechanism import MechanismFactors
from mbgen.factors.native import load_module
from mbgen.loading import load

TOLERANCE = 1e-12  # relative to the largest entry
MECHANISM = Path(__file__).with_name("self_check.yaml")

Array = np.ndarray


def linearization(factor: gtsam.NonlinearFactor, values: gtsam.Values) -> Array:
    """The whitened linearization's information form, its variables in key order, and the
    error as one more entry (1-D): the same for every equivalent [A | b] (the Python path
    stores a linear factor on four variables in another form and order)."""
    graph = gtsam.GaussianFactorGraph()
    graph.push_back(factor.linearize(values))
    ordering = gtsam.Ordering()
    for key in sorted(factor.keys()):
        ordering.push_back(key)
    information, eta = graph.hessian(ordering)
    return np.concatenate([np.ravel(information), eta, [factor.error(values)]])


def mismatch(native: gtsam.NonlinearFactor, python: gtsam.NonlinearFactor,
             values: gtsam.Values) -> float:
    """The largest difference of the two linearizations, relative to their largest entry."""
    a, b = linearization(native, values), linearization(python, values)
    if a.shape != b.shape:
        return float("inf")
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))


def pairs(native: MechanismFactors, python: MechanismFactors, values: gtsam.Values,
          ) -> list[tuple[str, gtsam.NonlinearFactor, gtsam.NonlinearFactor]]:
    """One factor of each kind from both paths, on the keys of ``values``."""
    S = gtsam.symbol
    q, qd, qdd, Q, u = S("q", 0), S("v", 0), S("a", 0), S("f", 0), S("u", 0)
    z, zd, zdd = S("z", 0), S("y", 0), S("x", 0)
    forces = np.linspace(0.5, -0.5, native.n)
    last = [native.n - 1]  # the actuated coordinate of the inverse dynamics
    made = []
    for name, make in [
            ("position", lambda f: f.position_constraints(q)),
            ("velocity", lambda f: f.velocity_constraints(q, qd)),
            ("forward dynamics", lambda f: f.forward_dynamics(q, qd, qdd)),
            ("forward dynamics with forces", lambda f: f.forward_dynamics(q, qd, qdd, forces)),
            ("inverse dynamics", lambda f: f.inverse_dynamics(q, qd, qdd, Q)),
            ("inverse dynamics, actuated", lambda f: f.inverse_dynamics(q, qd, qdd, u, last)),
            ("independent position", lambda f: f.independent_position(q, z)),
            ("independent velocity", lambda f: f.independent_velocity(q, qd, zd)),
            ("independent acceleration", lambda f: f.independent_acceleration(q, qd, qdd, zdd)),
            ("independent dynamics", lambda f: f.independent_dynamics(q, qd, zdd, forces))]:
        made.append((name, make(native), make(python)))
    for row, label in enumerate(native.mechanism.sensor_labels):
        made.append((f"sensor {label}", native.observation(q, qd, row, 0.25),
                     python.observation(q, qd, row, 0.25)))
    # a linear factor on four variables (the trapezoidal integrator's shape)
    eye = np.eye(native.n)
    blocks, rhs = [-eye, eye, -0.01 * eye, -0.02 * eye], forces
    noise = gtsam.noiseModel.Isotropic.Sigma(native.n, 0.03)
    keys = [q, qd, qdd, Q]
    made.append(("linear", linear_factor(keys, blocks, rhs, noise, native.native_functions),
                 linear_factor(keys, blocks, rhs, noise, False)))
    return made


def check(module: ModuleType) -> list[str]:
    """The kinds whose native factor differs from the Python one (empty: all agree)."""
    mechanism = load(MECHANISM, out_dir=user_cache_dir() / "native" / "mechanism")
    native = MechanismFactors(mechanism, native=module)
    python = MechanismFactors(mechanism, native=False)
    rng = np.random.default_rng(2024)
    n, d = mechanism.n, native.d
    S = gtsam.symbol
    values = gtsam.Values()
    for key, size in ((S("q", 0), n), (S("v", 0), n), (S("a", 0), n), (S("f", 0), n),
                      (S("u", 0), 1), (S("z", 0), d), (S("y", 0), d), (S("x", 0), d)):
        values.insert(key, rng.standard_normal(size))
    values.update(S("q", 0), mechanism.q0 + 1e-2 * rng.standard_normal(n))
    failures = []
    for name, made_native, made_python in pairs(native, python, values):
        difference = mismatch(made_native, made_python, values)
        if not difference <= TOLERANCE:
            failures.append(f"{name} differs by {difference:.3g}")
    return failures


def main(argv: list[str]) -> int:
    module = load_module(Path(argv[1]))
    failures = check(module)
    for failure in failures:
        print(failure)
    print("ok" if not failures else f"{len(failures)} kinds of factor differ: "
          f"{'; '.join(failures)}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Spatial derivations finish (issue 52, item 7): a placement written through derived
parameters (tests/data/rssr_param.yaml) derives in seconds and gives the kernels of the
same geometry written with numbers (rssr.yaml); the shipped mechanisms' derivation agrees
with the plain one (X̄⁻¹ by ``inv``, the mass matrix by ``simplify``); and a derivation
beyond its work budget stops with an error naming the body."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
from click.testing import CliRunner
from conftest import SHIPPED_DIR, bounded_time

from mbgen.errors import DerivationBudgetError
from mbgen.model import Mechanism, parse_mechanism
from mbgen.model.spatial import Element
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.symbolic import build_symbolic_model, spatial
from mbgen.symbolic.kinematics import kinematics

Compiled = Callable[[Path], CompiledMechanism]
DATA = Path(__file__).parent / "data"
RSSR, RSSR_PARAM = DATA / "rssr.yaml", DATA / "rssr_param.yaml"
MBGEN = Path(sys.executable).parent / "mbgen"


def test_the_derived_rssr_checks_in_seconds() -> None:
    """It used to run SymPy's inverse and ``simplify`` for minutes (5 s now, with the C
    compiler's share of a busy machine: the limit here is only generous)."""
    with bounded_time(6000):  # a minute when quiet; it ran for more than ten
        run = subprocess.run([str(MBGEN), "check", str(RSSR_PARAM)], capture_output=True,
                             text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "2 DOF" in run.stdout + run.stderr


def states_on_the_constraints(mech: CompiledMechanism, count: int) -> np.ndarray:
    rng = np.random.default_rng(11)
    guess = mech.q0 + 0.03 * rng.standard_normal((count, mech.n))
    solved, status = mech.solve_position(guess, minimum_norm=True, errors="status")
    assert (status == 0).sum() >= count // 2
    return solved[status == 0]


def test_the_derived_rssr_has_the_kernels_of_the_rssr_in_numbers(compiled: Compiled) -> None:
    numbers, derived = compiled(RSSR), compiled(RSSR_PARAM)
    assert numbers.coordinate_names == derived.coordinate_names
    q = states_on_the_constraints(numbers, 12)
    assert np.abs(derived.phi(q)).max() < 1e-12
    qd = np.random.default_rng(5).standard_normal(q.shape)
    for name, args in [("phi_q", (q,)), ("mass_matrix", (q,)),
                       ("generalized_forces", (q, qd)), ("sensors", (q, qd)),
                       ("sensors_q", (q, qd)), ("energy", (q, qd))]:
        a, b = getattr(numbers, name)(*args), getattr(derived, name)(*args)
        scale = max(float(np.abs(a).max()), 1e-300)
        assert np.abs(a - b).max() <= 1e-12 * scale, name


def plain_derivation(mechanism: Mechanism) -> tuple[list[sp.Expr], dict[tuple[int, int],
                                                                             sp.Expr]]:
    """The rows tying further elements to their bodies, and the mass matrix, as the
    derivation was written before: X̄⁻¹ by ``inv``, every mass entry by ``simplify``."""
    kin = kinematics(mechanism)
    rows: list[sp.Expr] = []
    mass: dict[tuple[int, int], sp.Expr] = {}
    for body in mechanism.spatial_bodies:
        x, inverse = spatial._moving_basis(kin, body), spatial._file_basis(mechanism, body).inv()
        origin = spatial.file_value(mechanism, Element("point", body.origin))
        for element in body.extra:
            offset = spatial.file_value(mechanism, element)
            moving = spatial._value(kin, element)
            if element.kind == "point":
                offset -= origin
                moving -= spatial._value(kin, Element("point", body.origin))
            rows += list(moving - x * inverse * offset)
        rho, tensor = sp.Matrix(body.cog), sp.Matrix(body.inertia)
        second = tensor.trace() / 2 * sp.eye(3) - tensor + body.mass * rho * rho.T
        c, z = inverse * rho, inverse * second * inverse.T
        s = sp.Matrix([1 if e.kind == "point" else 0 for e in body.basis])
        a = sp.zeros(4, 4)
        a[0, 0] = body.mass - 2 * body.mass * s.dot(c) + (s.T * z * s)[0, 0]
        for k in range(3):
            a[0, k + 1] = a[k + 1, 0] = body.mass * c[k] - (z * s)[k]
            for j in range(3):
                a[k + 1, j + 1] = z[k, j]
        slots = [spatial._slot(kin, e) for e in [Element("point", body.origin), *body.basis]]
        for r, row in enumerate(slots):
            for col_index, col in enumerate(slots):
                if row is not None and col is not None:
                    for axis in range(3):
                        key = (row + axis, col + axis)
                        mass[key] = mass.get(key, 0) + sp.simplify(a[r, col_index])
    return rows, {k: v for k, v in mass.items() if v != 0}


@pytest.mark.parametrize("path", [SHIPPED_DIR / "furuta.yaml", SHIPPED_DIR / "bricard.yaml"],
                         ids=lambda p: p.stem)
def test_the_shipped_derivations_agree_with_the_plain_one(path: Path) -> None:
    mechanism = parse_mechanism(path.read_text(), str(path))
    model = build_symbolic_model(mechanism)
    rows, mass = plain_derivation(mechanism)
    tied = [c.expr for c in model.constraints if "fixed to the body" in c.label]
    assert set(model.mass) == set(mass)
    rng = np.random.default_rng(2)
    symbols = [*model.q, *model.params]
    defaults = np.array([*mechanism.initial_coordinates(),
                         *mechanism.parameter_values.values()], dtype=float)
    ours = sp.lambdify(symbols, [*tied, *model.mass.values()], "numpy")
    plain = sp.lambdify(symbols, [*[r for r in rows if r.free_symbols & set(model.q)],
                                  *[mass[k] for k in model.mass]], "numpy")
    for _ in range(20):
        point = defaults * (1 + 0.1 * rng.standard_normal(defaults.size)) + 0.1 * (
            rng.standard_normal(defaults.size))
        a, b = np.array(ours(*point), dtype=float), np.array(plain(*point), dtype=float)
        assert np.abs(a - b).max() <= 1e-14 * max(1.0, float(np.abs(b).max()))


def test_a_derivation_beyond_its_budget_stops_naming_the_body(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A placement nested deep enough that one entry of the coupler's basis holds ~10 000
    operations: refused before SymPy multiplies it out, in bounded time."""
    text = RSSR_PARAM.read_text()
    nest = "".join(f"  g{k}: sqrt(g{k - 1}^2 + g{k - 1}*r + {k})\n" for k in range(1, 12))
    text = text.replace("  sb: ", "  g0: 1 + r\n" + nest + "  sb: ", 1)
    text = text.replace("ex_: (d - r)/l ", "ex_: (d - r)/l + 0*g11 ", 1)
    text = text.replace("points: [B, C]", "points: [B, C, Q]", 1)
    text = text.replace("  - {name: D,", "  - {name: Q, x: r + g11/1000, y: 0.01, z: 0.02}\n"
                        "  - {name: D,", 1)
    mechanism = parse_mechanism(text, "huge.yaml")
    with bounded_time(3000), pytest.raises(DerivationBudgetError,
                                           match="body 'coupler'") as caught:
        build_symbolic_model(mechanism)
    assert "huge.yaml" in str(caught.value) and "operations" in str(caught.value)
    # the command line reports it as bad input, in one line
    monkeypatch.setattr(spatial, "WORK_BUDGET", 200)
    monkeypatch.setattr(spatial, "_PLACEMENTS", {})  # none derived within a larger budget
    from mbgen.cli.main import cli

    result = CliRunner().invoke(cli, ["check", str(RSSR_PARAM)])
    assert result.exit_code == 1
    assert "body 'coupler'" in result.output and "budget of 20 " in result.output

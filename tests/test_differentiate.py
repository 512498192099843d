"""The fast differentiator gives sp.diff's expression, node for node.

Equality here is SymPy's structural ``==``, not a numerical check: the generated C must be
the same as with ``sp.diff`` (the Jacobians' values are checked against finite
differences in test_derivatives.py).
"""

from __future__ import annotations

from collections.abc import Callable

import sympy as sp
from conftest import SHIPPED_DIR
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mbgen.model import load_mechanism
from mbgen.symbolic import build_symbolic_model
from mbgen.symbolic.differentiate import Differentiator, derivative

x, y, z = sp.symbols("x y z", real=True)
p = sp.Symbol("p", positive=True)
LEAVES = [x, y, z, p, sp.Integer(2), sp.Rational(-3, 2), sp.Float(0.25), sp.pi]
UNARY = [sp.sin, sp.cos, sp.tanh, sp.exp, sp.sqrt, sp.Abs, sp.sign, sp.atan, sp.log,
         lambda e: e**2, lambda e: e**-1, lambda e: e**sp.Rational(3, 2), lambda e: -e,
         lambda e: x**e]  # the last: x in the exponent (sp.diff's rule)
BINARY = [sp.Add, sp.Mul, sp.atan2, lambda a, b: a / b, lambda a, b: sp.Max(a, b),
          lambda a, b: sp.Piecewise((a, x > 0), (b, True))]


def built(function: Callable[..., sp.Expr], *args: sp.Expr) -> sp.Expr | None:
    """function(*args), or None where SymPy refuses to build it (Max of a complex
    constant such as sqrt(-3/2))."""
    try:
        return function(*args)
    except (TypeError, ValueError):
        return None


def expressions() -> st.SearchStrategy[sp.Expr]:
    leaves = st.sampled_from(LEAVES)
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.tuples(st.sampled_from(UNARY), inner).map(lambda t: built(*t)),
            st.tuples(st.sampled_from(BINARY), inner, inner).map(lambda t: built(*t)),
        ).filter(lambda e: e is not None),
        max_leaves=8)


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(expressions(), st.sampled_from([x, y, p]))
def test_equals_sympy_on_random_expressions(expr: sp.Expr, symbol: sp.Symbol) -> None:
    assert derivative(expr, symbol) == sp.diff(expr, symbol)


def test_shared_memo_gives_the_same_derivatives() -> None:
    """One Differentiator reused across expressions sharing subexpressions."""
    diff = Differentiator()
    shared = sp.sin(x * y) * sp.sqrt(x**2 + z**2)
    for expr in (shared, shared + x * y, shared * sp.cos(shared), shared**3):
        for symbol in (x, y, z):
            assert diff(expr, symbol) == sp.diff(expr, symbol)


def test_equals_sympy_on_a_spatial_mechanism() -> None:
    """Every constraint, sensor and energy term of the Furuta pendulum (sines, cosines,
    products of direction cosines) and the pendulum with dry friction (tanh)."""
    for name in ("furuta.yaml", "actuated-double-pendulum.yaml"):
        model = build_symbolic_model(load_mechanism(SHIPPED_DIR / name))
        exprs = [c.expr for c in model.constraints] + list(model.sensors) + list(
            model.potential_terms) + list(model.dissipative_forces)
        diff = Differentiator()
        for expr in exprs:
            for symbol in sorted(expr.free_symbols, key=str):
                assert diff(expr, symbol) == sp.diff(expr, symbol), (name, expr, symbol)

"""∂expr/∂x by SymPy's own rules, without the cost of ``sp.diff`` around them.

``sp.diff`` wraps every node's derivative in ``Derivative.__new__``, which asks the
assumption system whether each partial result is zero; on mechanism models (polynomials,
sin, cos, sqrt) those queries were ~80 % of a cold build's derivation. Here Add, Mul,
Pow with a constant exponent and functions whose derivative is the chain rule over
``fdiff`` are differentiated by the rules SymPy itself applies to them (Add term by term,
Mul by Leibniz as ``Mul._eval_derivative_n_times``, Pow as ``Pow._eval_derivative``,
functions as ``Function._eval_derivative``), so the result is the same expression as
``sp.diff``'s and the generated C is the same, byte for byte. Every other node (Abs,
Piecewise, a power with x in its exponent, ...) is left to ``sp.diff``.
"""

from __future__ import annotations

import sympy as sp
from sympy.core.function import Function


class Differentiator:
    """Derivatives that share one memo of (subexpression, symbol) → derivative: the
    kernels differentiate the same subexpressions many times (rows of Φq, then Φq v, ...).
    Keep one per derivation; the memo grows with every expression it has seen."""

    def __init__(self) -> None:
        self._memo: dict[tuple[sp.Basic, sp.Basic], sp.Expr] = {}

    def __call__(self, expr: sp.Basic, x: sp.Symbol) -> sp.Expr:
        key = (expr, x)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self._derivative(expr, x)
        return found

    def _derivative(self, expr: sp.Basic, x: sp.Symbol) -> sp.Expr:
        zero = sp.S.Zero
        if expr.is_Atom:
            return sp.S.One if expr == x else zero
        if expr.is_Add:
            return expr.func(*[self(a, x) for a in expr.args])
        if expr.is_Mul:
            factors = expr.args
            return sp.Add(*[sp.Mul(*factors[:i], da, *factors[i + 1:])
                            for i, da in enumerate(self(a, x) for a in factors)
                            if da is not zero])
        if expr.is_Pow and x not in expr.exp.free_symbols:
            dbase = self(expr.base, x)
            return zero if dbase is zero else expr * (dbase * expr.exp / expr.base)
        if isinstance(expr, Function) and type(expr)._eval_derivative is Function._eval_derivative:
            return sp.Add(*[expr.fdiff(i + 1) * da
                            for i, da in enumerate(self(a, x) for a in expr.args)
                            if da is not zero])
        return sp.diff(expr, x)


def derivative(expr: sp.Basic, x: sp.Symbol) -> sp.Expr:
    """∂expr/∂x, equal to ``sp.diff(expr, x)`` (see the module's docstring)."""
    return Differentiator()(expr, x)

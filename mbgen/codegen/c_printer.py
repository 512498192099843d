"""SymPy → C statements with common-subexpression elimination.

Symbols are printed as elements of the kernel's input arrays; C identifiers come from
mbgen (``q[3]``, ``t12``), never from user text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sympy as sp
from sympy.printing.c import C99CodePrinter


class KernelPrinter(C99CodePrinter):
    """C99 printer that maps symbols to array elements and expands small integer powers."""

    def __init__(self, names: Mapping[sp.Symbol, str]) -> None:
        super().__init__()
        self.names = dict(names)

    def _print_Symbol(self, expr: sp.Symbol) -> str:
        name = self.names.get(expr)
        if name is None:
            raise KeyError(f"symbol {expr} has no C name")
        return name

    def _print_Integer(self, expr: sp.Integer) -> str:
        """Integers beyond 2^53 as double literals: a C integer literal overflows its type
        (``mass: 1e15*1e15`` became a wrong constant, the warning hidden by ``-w``)."""
        if abs(int(expr)) > 2**53:
            return repr(float(expr))
        return super()._print_Integer(expr)

    def _print_Pow(self, expr: sp.Pow) -> str:
        base, exp = expr.base, expr.exp
        if exp.is_Integer and 1 < abs(int(exp)) <= 4:
            b = self.parenthesize(base, 100)
            product = "*".join([b] * abs(int(exp)))
            return f"({product})" if exp > 0 else f"(1.0/({product}))"
        if exp == -1:
            return f"(1.0/{self.parenthesize(base, 100)})"
        if exp == sp.Rational(1, 2):
            return f"sqrt({self._print(base)})"
        if exp == -sp.Rational(1, 2):
            return f"(1.0/sqrt({self._print(base)}))"
        return super()._print_Pow(expr)


def kernel_body(exprs: Sequence[sp.Expr], names: Mapping[sp.Symbol, str],
                out: str = "out") -> list[str]:
    """C statements computing ``out[k] = exprs[k]`` after CSE."""
    temporaries = sp.numbered_symbols("t")
    replacements, reduced = sp.cse(list(exprs), symbols=temporaries, order="none")
    printer_names = dict(names)
    lines: list[str] = []
    for symbol, _ in replacements:
        printer_names[symbol] = str(symbol)
    printer = KernelPrinter(printer_names)
    for symbol, value in replacements:
        lines.append(f"const double {symbol} = {printer.doprint(value)};")
    for k, value in enumerate(reduced):
        lines.append(f"{out}[{k}] = {printer.doprint(value)};")
    return lines

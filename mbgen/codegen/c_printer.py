"""SymPy → C expressions with common-subexpression elimination.

Symbols are printed as elements of the kernel's input arrays; C identifiers come from
mbgen (``q[3]``, ``t12``), never from user text. Only expressions are printed here: the
statements around them are written by the templates (templates/c.j2, kernel_body).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy as sp
from sympy.printing.c import C99CodePrinter


class KernelPrinter(C99CodePrinter):
    """C99 printer that maps symbols to array elements and expands small integer powers.

    Terms and factors are printed in SymPy's own (canonical, deterministic) order of the
    expression's arguments, not re-sorted for reading ("order": "none"): sorting them was
    40 % of printing a cold build's kernels."""

    def __init__(self, names: Mapping[sp.Symbol, str]) -> None:
        super().__init__({"order": "none"})
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


@dataclass
class Temporary:
    name: str
    value: str  # C expression
    stored: bool = False  # a lane array's element name[l] rather than a const double


@dataclass
class KernelBody:
    """What a kernel computes, as printed expressions: the temporaries in order, then
    out[k] = outputs[k]. In lanes, a loop over the lanes calling a libm function does not
    vectorize: such calls are made first, in a loop of their own (``prelude``: the calls,
    stored in the lane arrays ``calls``, and the temporaries their arguments need), and
    the main loop reads their values."""

    temporaries: list[Temporary]
    outputs: list[str]
    prelude: list[Temporary] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)


def calls_out_of_line(expr: sp.Basic) -> bool:
    """Whether the printed C of ``expr`` (itself, not its arguments) is a libm call: any
    function but fabs, and powers other than KernelPrinter's products and square roots."""
    if isinstance(expr, sp.Function):
        return not isinstance(expr, sp.Abs)
    if isinstance(expr, sp.Pow):
        exp = expr.exp
        return not ((exp.is_Integer and abs(int(exp)) <= 4)
                    or exp in (sp.Rational(1, 2), -sp.Rational(1, 2)))
    return False


@dataclass
class Eliminated:
    """A kernel's expressions after common-subexpression elimination (printable with any
    names for the input arrays' elements)."""

    replacements: list[tuple[sp.Symbol, sp.Expr]]
    reduced: list[sp.Expr]

    def printed(self, names: Mapping[sp.Symbol, str]) -> KernelBody:
        """The expressions printed with ``names`` for the inputs' symbols."""
        printer = KernelPrinter({**names, **{s: str(s) for s, _ in self.replacements}})
        return KernelBody([Temporary(str(s), printer.doprint(v)) for s, v in self.replacements],
                          [printer.doprint(v) for v in self.reduced])

    def printed_in_lanes(self, names: Mapping[sp.Symbol, str]) -> KernelBody:
        """The expressions printed for lanes (``names``: element k of lane l): each libm
        call hoisted into the prelude as the one-state printer writes it, and read where
        that printer writes it, so every lane computes what the one-state code does, bit
        for bit (a call substituted in SymPy instead is re-sorted among its factors, and
        x/pow(y, 3/2) became pow(y, -3/2)*x: another rounding)."""
        printer = LanePrinter({**names, **{s: str(s) for s, _ in self.replacements}})
        # (symbol, printed value, what it reads) in the order computed: each call before
        # the temporary or output whose printing met it first
        items: list[tuple[str, str, set[sp.Basic]]] = []
        temporaries = []
        for symbol, value in self.replacements:
            text = printer.doprint(value)
            items += printer.take_calls()
            items.append((str(symbol), text, set(value.free_symbols)))
            temporaries.append(Temporary(str(symbol), text))
        outputs = []
        for value in self.reduced:
            outputs.append(printer.doprint(value))
            items += printer.take_calls()
        calls = [name for name, _, _ in items if name in printer.call_names]
        needed: set[str] = set(calls)
        for name, _, reads in reversed(items):  # what the calls' arguments read
            if name in needed:
                needed |= {str(symbol) for symbol in reads}
        return KernelBody(
            temporaries, outputs,
            [Temporary(name, text, stored=name in printer.call_names)
             for name, text, _ in items if name in needed],
            calls)


class LanePrinter(KernelPrinter):
    """KernelPrinter that prints each libm call (:func:`calls_out_of_line`) as its lane
    array's element f<k>[l], keeping the call's own text (innermost calls registered
    first) for the prelude."""

    def __init__(self, names: Mapping[sp.Symbol, str]) -> None:
        super().__init__(names)
        self.call_names: dict[str, sp.Basic] = {}
        self._calls: dict[sp.Basic, str] = {}
        self._new: list[tuple[str, str, set[sp.Basic]]] = []

    def _print(self, expr: Any, **kwargs: Any) -> str:
        if isinstance(expr, sp.Basic) and calls_out_of_line(expr):
            name = self._calls.get(expr)
            if name is None:
                text = super()._print(expr, **kwargs)  # registers the calls inside first
                name = self._calls[expr] = f"f{len(self._calls)}"
                self.call_names[name] = expr
                self._new.append((name, text, set(expr.free_symbols)))
            return f"{name}[l]"
        return str(super()._print(expr, **kwargs))

    def take_calls(self) -> list[tuple[str, str, set[sp.Basic]]]:
        """The calls registered since the last take: (name, C, symbols read)."""
        new, self._new = self._new, []
        return new


def element_names(elements: Mapping[sp.Symbol, tuple[str, int]],
                  lane_arrays: Collection[str] = ()) -> dict[sp.Symbol, str]:
    """How symbols print: element k of their array, or for an array in ``lane_arrays``
    element k of lane l in a [entry][lane] array (k * MB_LANES + l, see lanes.py)."""
    return {symbol: f"{array}[{k} * MB_LANES + l]" if array in lane_arrays else f"{array}[{k}]"
            for symbol, (array, k) in elements.items()}


def eliminate(exprs: Sequence[sp.Expr]) -> Eliminated:
    """Common subexpressions of ``exprs`` as temporaries t0, t1, ..."""
    replacements, reduced = sp.cse(list(exprs), symbols=sp.numbered_symbols("t"),
                                   order="none")
    return Eliminated(list(replacements), list(reduced))


def kernel_body(exprs: Sequence[sp.Expr], names: Mapping[sp.Symbol, str]) -> KernelBody:
    """out[k] = exprs[k] after CSE, as printed expressions."""
    return eliminate(exprs).printed(names)

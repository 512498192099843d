"""Whitelist parser for the arithmetic expressions found in mechanism files.

User text never reaches ``eval`` or ``sympify``: it is tokenized and parsed by a small
recursive-descent grammar, and only the names in a given scope plus a fixed set of
functions and constants may appear.

Grammar::

    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "/") unary)*
    unary  := ("+" | "-") unary | power
    power  := atom (("^" | "**") unary)?
    atom   := NUMBER | NAME | NAME "(" expr ("," expr)* ")" | "(" expr ")"
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy as sp


class ExpressionError(ValueError):
    """Raised with a message that quotes the expression and the offending token."""


def _deg2rad(x: sp.Expr) -> sp.Expr:
    return x * sp.pi / 180


FUNCTIONS: dict[str, tuple[int, Callable[..., sp.Expr]]] = {
    "sin": (1, sp.sin),
    "cos": (1, sp.cos),
    "tan": (1, sp.tan),
    "sqrt": (1, sp.sqrt),
    "atan2": (2, sp.atan2),
    "abs": (1, sp.Abs),
    "deg2rad": (1, _deg2rad),
}
CONSTANTS: dict[str, sp.Expr] = {"pi": sp.pi}

_TOKEN = re.compile(
    r"\s*(?:(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<name>[A-Za-z_][A-Za-z_0-9]*)"
    r"|(?P<op>\*\*|[-+*/^(),]))"
)


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    pos: int


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise ExpressionError(f"unexpected character {text[pos:].strip()[0]!r} "
                                  f"at column {pos + 1} in {text!r}")
        kind = match.lastgroup or "op"
        tokens.append(_Token(kind, match.group(kind), match.start(kind)))
        pos = match.end()
    tokens.append(_Token("end", "", len(text)))
    return tokens


# Limits that no real mechanism reaches, checked before SymPy sees anything (so bad input
# is an error in bounded time, never a hang, a RecursionError or a wrong C literal).
MAX_LENGTH = 2000  # characters of one expression
MAX_DEPTH = 50  # nesting of parentheses, signs, powers and calls
MAX_MAGNITUDE = 1e15  # absolute value of any number written in the file
MAX_EXPONENT = 100  # absolute value of a numeric exponent
# Limits on what an expression becomes once the names it uses (derived parameters, point
# coordinates) are substituted: exact arithmetic and shared subtrees must not run away.
MAX_DIGITS = 100  # digits of an exact number (numerator or denominator)
MAX_NODES = 20_000  # size of the expression tree, shared subtrees counted each time
MAX_TREE_DEPTH = 200  # depth of that tree (SymPy recurses on it)


def check_number(value: float, what: str) -> None:
    """Rejects non-finite and absurdly large numbers, by name."""
    if not math.isfinite(value):
        raise ExpressionError(f"{what} is not a finite number")
    if abs(value) > MAX_MAGNITUDE:
        raise ExpressionError(f"{what} is larger than {MAX_MAGNITUDE:g} in magnitude")


def check_size(expr: sp.Expr, text: str) -> None:
    """Refuses an expression whose tree or exact numbers run away, in time proportional
    to its distinct subtrees: derived parameters that each use the previous one twice
    double the tree (SymPy then compares and prints it for ever), a chain of sin() nests it
    past Python's recursion limit, and a product of literals kept 4 300 digits (which
    SymPy's C printer cannot convert)."""
    shown = text if len(text) <= 60 else text[:60] + "…"
    measured: dict[int, tuple[int, int]] = {}  # id(node) -> (size, depth), capped
    stack: list[tuple[sp.Basic, bool]] = [(expr, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in measured:
            continue
        if node.args and not ready:
            stack.append((node, True))
            stack.extend((arg, False) for arg in node.args if id(arg) not in measured)
            continue
        children = [measured[id(arg)] for arg in node.args]
        size = min(1 + sum(c[0] for c in children), MAX_NODES + 1)
        depth = min(1 + max((c[1] for c in children), default=0), MAX_TREE_DEPTH + 1)
        measured[id(node)] = (size, depth)
        if isinstance(node, sp.Rational) and max(abs(node.p), node.q).bit_length() > \
                MAX_DIGITS * math.log2(10):
            raise ExpressionError(f"{shown!r} makes an exact number of more than "
                                  f"{MAX_DIGITS} digits")
    size, depth = measured[id(expr)]
    if size > MAX_NODES:
        raise ExpressionError(f"{shown!r} grows to more than {MAX_NODES} terms once the "
                              "names it uses are substituted")
    if depth > MAX_TREE_DEPTH:
        raise ExpressionError(f"{shown!r} is nested deeper than {MAX_TREE_DEPTH} levels "
                              "once the names it uses are substituted")


class _Parser:
    def __init__(self, text: str, scope: Mapping[str, sp.Expr]) -> None:
        if len(text) > MAX_LENGTH:
            raise ExpressionError(f"expression longer than {MAX_LENGTH} characters")
        self.text = text
        self.scope = scope
        self.tokens = _tokenize(text)
        self.i = 0
        self.depth = 0

    def deeper(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExpressionError(f"expression nested deeper than {MAX_DEPTH} levels in "
                                  f"{self.text[:60]!r}…")

    def peek(self) -> _Token:
        return self.tokens[self.i]

    def take(self) -> _Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def expect(self, text: str) -> None:
        token = self.take()
        if token.text != text:
            self.fail(token, f"expected {text!r}")

    def fail(self, token: _Token, message: str) -> None:
        shown = token.text or "end of expression"
        raise ExpressionError(f"{message}, found {shown!r} at column {token.pos + 1} "
                              f"in {self.text!r}")

    def parse(self) -> sp.Expr:
        value = self.expr()
        if self.peek().kind != "end":
            self.fail(self.peek(), "expected an operator")
        check_size(value, self.text)
        if value.has(sp.zoo, sp.oo, -sp.oo, sp.nan):
            raise ExpressionError(f"{self.text!r} is not finite (a division by zero?)")
        return value

    def expr(self) -> sp.Expr:
        value = self.term()
        while self.peek().text in ("+", "-"):
            op = self.take().text
            rhs = self.term()
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self) -> sp.Expr:
        value = self.unary()
        while self.peek().text in ("*", "/"):
            op = self.take().text
            rhs = self.unary()
            value = value * rhs if op == "*" else value / rhs
        return value

    def unary(self) -> sp.Expr:
        self.deeper()
        try:
            if self.peek().text in ("+", "-"):
                op = self.take().text
                value = self.unary()
                return -value if op == "-" else value
            return self.power()
        finally:
            self.depth -= 1

    def power(self) -> sp.Expr:
        base = self.atom()
        if self.peek().text in ("^", "**"):
            token = self.take()
            exponent = self.unary()
            if exponent.is_number:
                size = abs(float(exponent))
                if size > MAX_EXPONENT:
                    self.fail(token, f"exponent {size:g} is larger than {MAX_EXPONENT}")
                # signed: 10^-16 is small, not large
                if base.is_number and float(abs(base)) > 0 and float(exponent) * math.log10(
                        float(abs(base))) > math.log10(MAX_MAGNITUDE):
                    self.fail(token, f"a power larger than {MAX_MAGNITUDE:g}")
            return base ** exponent
        return base

    def atom(self) -> sp.Expr:
        token = self.take()
        if token.kind == "number":
            check_number(float(token.text), f"{token.text[:30]!r}")
            return sp.Rational(token.text) if any(c in token.text for c in ".eE") \
                else sp.Integer(token.text)
        if token.text == "(":
            self.deeper()
            value = self.expr()
            self.expect(")")
            self.depth -= 1
            return value
        if token.kind == "name":
            if self.peek().text == "(":
                return self.call(token)
            if token.text in self.scope:
                return self.scope[token.text]
            if token.text in CONSTANTS:
                return CONSTANTS[token.text]
            known = ", ".join(sorted(self.scope)) or "none"
            self.fail(token, f"unknown name (known here: {known})")
        self.fail(token, "expected a number, a name or '('")
        raise AssertionError  # unreachable: fail() raises

    def call(self, name: _Token) -> sp.Expr:
        if name.text not in FUNCTIONS:
            self.fail(name, f"unknown function (allowed: {', '.join(sorted(FUNCTIONS))})")
        arity, function = FUNCTIONS[name.text]
        self.expect("(")
        args = [self.expr()]
        while self.peek().text == ",":
            self.take()
            args.append(self.expr())
        self.expect(")")
        if len(args) != arity:
            raise ExpressionError(f"{name.text}() takes {arity} argument(s), got {len(args)} "
                                  f"in {self.text!r}")
        return function(*args)


def parse_expression(text: str | int | float, scope: Mapping[str, sp.Expr]) -> sp.Expr:
    """Parse ``text`` into a SymPy expression; only names in ``scope`` may appear."""
    if isinstance(text, bool):
        raise ExpressionError(f"expected a number or an expression, got {text!r}")
    if isinstance(text, int):
        check_number(float(text) if abs(text) < 10**300 else math.inf, f"{text}")
        return sp.Integer(text)
    if isinstance(text, float):
        check_number(text, f"{text!r}")
        return sp.Rational(repr(text))
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError(f"expected a number or an expression, got {text!r}")
    return _Parser(text, scope).parse()


TIME = sp.Symbol("t", real=True)


class FunctionOfTime:
    """An expression in t alone (the whitelist parser's grammar), evaluated on arrays of
    times: forces and prescribed motions. ``what`` names it in the error raised where
    it is not finite (``1/t`` at t = 0)."""

    def __init__(self, expr: sp.Expr, what: str) -> None:
        self.expr, self.what = expr, what
        # lambdify prints the already-parsed SymPy expression; no user text reaches it
        self._function = sp.lambdify(TIME, expr, "numpy")

    @classmethod
    def parse(cls, text: str, what: str) -> FunctionOfTime:
        return cls(parse_expression(text, {"t": TIME}), what)

    def __call__(self, times: Any) -> Any:
        """Values at ``times`` (any shape), all finite."""
        with np.errstate(all="ignore"):
            values = np.broadcast_to(np.asarray(self._function(times), dtype=float),
                                     np.shape(times))
        bad = ~np.isfinite(values)
        if bad.any():
            when = float(np.broadcast_to(times, values.shape)[bad].flat[0])
            raise ExpressionError(f"{self.what}, {self.expr}, is not finite at t = "
                                  f"{when:g} s")
        return values

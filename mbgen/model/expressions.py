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

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

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


class _Parser:
    def __init__(self, text: str, scope: Mapping[str, sp.Expr]) -> None:
        self.text = text
        self.scope = scope
        self.tokens = _tokenize(text)
        self.i = 0

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
        if self.peek().text in ("+", "-"):
            op = self.take().text
            value = self.unary()
            return -value if op == "-" else value
        return self.power()

    def power(self) -> sp.Expr:
        base = self.atom()
        if self.peek().text in ("^", "**"):
            self.take()
            return base ** self.unary()
        return base

    def atom(self) -> sp.Expr:
        token = self.take()
        if token.kind == "number":
            return sp.Rational(token.text) if any(c in token.text for c in ".eE") \
                else sp.Integer(token.text)
        if token.text == "(":
            value = self.expr()
            self.expect(")")
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
        return sp.Integer(text)
    if isinstance(text, float):
        return sp.Rational(repr(text))
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError(f"expected a number or an expression, got {text!r}")
    return _Parser(text, scope).parse()

"""The whitelist expression parser: grammar, functions, and rejection of everything else."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import sympy as sp

from mbgen.errors import MechanismError
from mbgen.model import load_mechanism
from mbgen.model.expressions import ExpressionError, parse_expression

X, Y = sp.symbols("x y", real=True)
SCOPE = {"x": X, "y": Y}


def ev(text: str) -> sp.Expr:
    return sp.simplify(parse_expression(text, SCOPE))


@pytest.mark.parametrize(("text", "expected"), [
    ("2+3*4", 14),
    ("(2+3)*4", 20),
    ("10-4-3", 3),             # left associative
    ("12/3/2", 2),             # left associative
    ("2^3^2", 512),            # ^ is right associative: 2^(3^2)
    ("2**3**2", 512),
    ("(2^3)^2", 64),
    ("-2^2", -4),              # unary minus binds looser than power
    ("-2**2", -4),
    ("(-2)^2", 4),
    ("2^-1", sp.Rational(1, 2)),  # unary minus allowed in an exponent
    ("2*-3", -6),
    ("--3", 3),
    ("+4", 4),
    ("2*3^2", 18),             # power before product
    ("1/2^2", sp.Rational(1, 4)),
    (" 1 +  2 ", 3),
    ("1.5e1", 15),
    ("2E-1", sp.Rational(1, 5)),
    (".5", sp.Rational(1, 2)),
    ("3.", 3),
    ("0.1+0.2", sp.Rational(3, 10)),  # decimal literals are exact
])
def test_numeric_precedence(text: str, expected: sp.Expr) -> None:
    assert ev(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("-x^2", -X**2),
    ("x^y^2", X**(Y**2)),
    ("x*y+x/y", X*Y + X/Y),
    ("-(x-y)", Y - X),
    ("x^-y", X**(-Y)),
])
def test_symbolic_structure(text: str, expected: sp.Expr) -> None:
    assert sp.simplify(parse_expression(text, SCOPE) - expected) == 0


@pytest.mark.parametrize(("text", "expected"), [
    ("pi", sp.pi),
    ("deg2rad(180)", sp.pi),
    ("deg2rad(45.0)", sp.pi / 4),
    ("2.0*cos(deg2rad(45.0))", sp.sqrt(2)),
    ("sin(pi/2)", 1),
    ("cos(0)", 1),
    ("tan(pi/4)", 1),
    ("sqrt(16)", 4),
    ("abs(-3)", 3),
    ("atan2(1, 1)", sp.pi / 4),
    ("atan2(0, -1)", sp.pi),
    ("45*pi/180", sp.pi / 4),
])
def test_functions_and_constants(text: str, expected: sp.Expr) -> None:
    assert sp.simplify(ev(text) - expected) == 0


def test_python_numbers_are_accepted_exactly() -> None:
    assert parse_expression(3, {}) == 3
    assert parse_expression(0.1, {}) == sp.Rational(1, 10)


@pytest.mark.parametrize("value", [True, False, None, "", "   ", [1], {"a": 1}])
def test_non_expressions_rejected(value: object) -> None:
    with pytest.raises(ExpressionError, match="expected a number or an expression"):
        parse_expression(value, SCOPE)  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "arity", "got"), [
    ("sin(1, 2)", 1, 2),
    ("sqrt(1, 2, 3)", 1, 3),
    ("atan2(1)", 2, 1),
    ("atan2(1, 2, 3)", 2, 3),
    ("deg2rad(1, 2)", 1, 2),
])
def test_function_arity(text: str, arity: int, got: int) -> None:
    name = text.split("(")[0]
    with pytest.raises(ExpressionError,
                       match=rf"{name}\(\) takes {arity} argument\(s\), got {got}"):
        parse_expression(text, SCOPE)


def test_call_without_arguments_rejected() -> None:
    with pytest.raises(ExpressionError, match=r"found '\)' at column 5"):
        parse_expression("sin()", SCOPE)


@pytest.mark.parametrize(("text", "token", "column"), [
    ("2*foo + 1", "foo", 3),
    ("  bar", "bar", 3),
    ("x + y + z", "z", 9),
    ("L", "L", 1),                 # a parameter not in this scope
    ("length*2", "length", 1),
])
def test_unknown_name_names_token_and_column(text: str, token: str, column: int) -> None:
    with pytest.raises(ExpressionError) as info:
        parse_expression(text, SCOPE)
    message = str(info.value)
    assert "unknown name" in message
    assert f"{token!r} at column {column}" in message
    assert "known here: x, y" in message


@pytest.mark.parametrize(("text", "token", "column"), [
    ("foo(1)", "foo", 1),
    ("1 + exp(2)", "exp", 5),
    ("eval(1)", "eval", 1),
    ("exec(1)", "exec", 1),
    ("open(1)", "open", 1),
    ("x + getattr(x, y)", "getattr", 5),
])
def test_unknown_function_names_token_and_column(text: str, token: str, column: int) -> None:
    with pytest.raises(ExpressionError) as info:
        parse_expression(text, SCOPE)
    message = str(info.value)
    assert "unknown function" in message
    assert f"{token!r} at column {column}" in message
    assert "allowed: abs, atan2, cos, deg2rad, sin, sqrt, tan" in message


@pytest.mark.parametrize(("text", "fragment"), [
    ("1 2", "expected an operator, found '2' at column 3"),
    ("(1+2", "expected ')', found 'end of expression' at column 5"),
    ("1+", "found 'end of expression' at column 3"),
    ("2^^3", "found '^' at column 3"),
    ("3!", "unexpected character '!' at column 2"),
    ("0x10", "found 'x10' at column 2"),
    ("x y", "expected an operator, found 'y' at column 3"),
])
def test_syntax_errors_are_located(text: str, fragment: str) -> None:
    with pytest.raises(ExpressionError) as info:
        parse_expression(text, SCOPE)
    assert fragment in str(info.value)
    assert repr(text) in str(info.value)  # the message quotes the whole expression


INJECTIONS = [
    "__import__('os').system('touch pwned')",
    '__import__("os").system("touch pwned")',
    "lambda: __import__('os').system('touch pwned')",
    "(lambda: 1)()",
    "x.__class__",
    "a.b",
    "().__class__.__bases__[0].__subclasses__()",
    "[c for c in ()]",
    "[1, 2]",
    "'touch pwned'",
    '"x"',
    "eval('1')",
    "eval(\"__import__('os').system('touch pwned')\")",
    "exec('import os')",
    "open('pwned', 'w')",
    "__import__",
    "x; import os",
    "x if y else 0",
    "{1: 2}",
    "x == y",
    "`ls`",
    "$(touch pwned)",
    "os.system",
]


@pytest.mark.parametrize("text", INJECTIONS)
def test_injection_rejected_and_nothing_runs(text: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ExpressionError) as info:
        parse_expression(text, SCOPE)
    assert "column" in str(info.value)
    assert not (tmp_path / "pwned").exists()
    assert list(tmp_path.iterdir()) == []


def test_injection_in_mechanism_file_is_a_located_error(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "evil.yaml"
    path.write_text(textwrap.dedent("""\
        %YAML 1.2
        ---
        points:
          - x: 0
            y: 0
            fixed: true
          - x: __import__('os').system('touch pwned')
            y: 1
        planar_bodies:
          - points: [0, 1]
            mass: 1.0
        """))
    with pytest.raises(MechanismError) as info:
        load_mechanism(path)
    err = info.value
    assert err.file == str(path)
    assert err.line == 7
    assert err.key == "points[1].x"
    assert str(err).startswith(f"{path}:7 [points[1].x]: ")
    assert "unexpected character" in str(err)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(("value", "line"), [
    ("!!python/object/apply:os.system ['touch pwned']", 5),
    ("!!python/name:os.system", 5),
    ("!!python/object/new:os.system [touch pwned]", 5),
])
def test_python_yaml_tags_are_located_errors(value: str, line: int, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """YAML tags that a full loader would execute must fail as MechanismError, run nothing."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "tagged.yaml"
    path.write_text(textwrap.dedent(f"""\
        points:
          - x: 0
            y: 0
            fixed: true
          - x: {value}
            y: 1
        planar_bodies:
          - points: [0, 1]
            mass: 1.0
        """))
    with pytest.raises(MechanismError) as info:
        load_mechanism(path)
    assert info.value.file == str(path)
    assert info.value.line == line
    assert info.value.key == "points[1].x"
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(("text", "value"), [
    ("10^-16", 1e-16),
    ("(1/3)^30", 3.0**-30),
    ("0.001^-5", 1e15),
])
def test_small_powers_are_not_refused_as_large(text: str, value: float) -> None:
    """The magnitude check read 10^-16 as 10^16."""
    assert float(parse_expression(text, SCOPE)) == pytest.approx(value)


def test_large_integers_are_printed_as_c_doubles(tmp_path: Path) -> None:
    """An integer beyond 2^53 was printed as a C integer literal, which overflows (the
    warning hidden by -w): mass: 1e15*1e15 became a wrong constant in the mass matrix."""
    import subprocess

    from mbgen.codegen.c_printer import kernel_body
    from mbgen.codegen.templates import template_environment

    mass = parse_expression("1e15*1e15*3", SCOPE)
    macros = template_environment().get_template("c.j2").module
    lines = macros.kernel_body(kernel_body([mass * X, 7 * X], {X: "q[0]"}), False,
                               "").splitlines()
    assert lines == ["out[0] = 3e+30*q[0];", "out[1] = 7*q[0];"]
    program = tmp_path / "literal.c"
    program.write_text("#include <stdio.h>\nint main(void) { double q[1] = {2.0}, out[2];\n"
                       + "\n".join(lines) + '\nprintf("%.17g", out[0]); return 0; }\n')
    subprocess.run(["cc", "-w", "-o", str(tmp_path / "literal"), str(program)], check=True)
    printed = subprocess.run([str(tmp_path / "literal")], capture_output=True, text=True)
    assert float(printed.stdout) == 6e30

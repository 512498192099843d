"""The lane functions come from the same template macros as the one-state code, with
every array index made per lane (templates/c.j2, kkt.c.j2): checked here statement by
statement on a small program. The generated lane functions themselves are checked bit for
bit against the one-state code in test_predict_particles.py."""

from __future__ import annotations

import re
from dataclasses import replace

import sympy as sp

from mbgen.codegen.c_printer import element_names, eliminate, kernel_body
from mbgen.codegen.kkt import KktProgram, kkt_program
from mbgen.codegen.kkt_jacobians import JACOBIAN_TERMS
from mbgen.codegen.kkt_steps import SolveStep
from mbgen.codegen.lanes import LANE_ARRAYS, LANE_STATEMENTS, kkt_has_lanes
from mbgen.codegen.templates import template_environment

KERNELS = {term.kernel for terms in JACOBIAN_TERMS.values() for term in terms}
# a pendulum on a slider: x, y, θ held by one row (coordinate 1 and 2)
PATTERNS = {**{kernel: [] for kernel in KERNELS},
            "mass": [(0, 0), (1, 1), (2, 2), (1, 2)], "phi_q": [(0, 1), (0, 2)]}


def program() -> KktProgram:
    kkt = kkt_program(3, [0], [0, 1, 2], PATTERNS)
    assert kkt is not None
    return kkt


def factor_lines(kkt: KktProgram, lanes: bool) -> list[str]:
    macros = template_environment().get_template("kkt.c.j2").module
    text = macros.prologue(kkt.prologue, lanes, "") + "".join(
        macros.factor_column(column, lanes, "")
        for body in kkt.factor for column in body)
    return text.splitlines()


def per_lane(line: str, arrays: str) -> str:
    """The oracle: every constant index into `arrays` made k * MB_LANES + l."""
    return re.sub(rf"\b({arrays})\[(\d+)\]", r"\1[\2 * MB_LANES + l]", line)


def test_lane_statements_are_the_one_state_statements_per_lane() -> None:
    kkt = program()
    one, lanes = factor_lines(kkt, False), factor_lines(kkt, True)
    assert len(one) == len(lanes) == kkt.prologue.statements + sum(
        column.statements for body in kkt.factor for column in body)
    for single, lane in zip(one, lanes, strict=True):
        check = re.fullmatch(r"if \(!\((.*)\)\) return [^;]*;", single)
        if check:  # a failed check marks the lane instead of returning
            assert lane == f"bad |= !({per_lane(check[1], 'mv|a|L|D|E')});"
        elif single.startswith("if (mv["):  # the running maximum as a select
            value = per_lane(single.split("(")[1].split(" >")[0], "mv")
            assert lane == f"h = {value} > h ? {value} : h;"
        elif "if (s > r2)" in single:
            assert lane == per_lane(single.replace("if (s > r2) r2 = s;",
                                                   "r2 = s > r2 ? s : r2;"), "a")
        elif single == "*gamma = g;":
            assert lane == "gamma[l] = g;"
        else:
            assert lane == per_lane(single, "mv|a|L|D|E")
    assert not any("return" in line for line in lanes)
    assert any("E[" in line for line in one) and any("g * a[0] * a[1]" in line for line in one)


def test_the_solve_in_lanes_indexes_every_array_per_lane() -> None:
    macros = template_environment().get_template("kkt.c.j2").module
    for body in program().solve:
        for step in body:
            single = macros.solve_step(step, False)
            assert macros.solve_step(step, True) == per_lane(
                single, "x|L|D")


def test_a_kernel_reads_every_input_per_lane() -> None:
    """Parameters too: the runs of a sweep, each its own parameter set, share a block."""
    q1, x0, p0 = sp.symbols("q1 x0 p0")
    elements = {q1: ("q", 1), x0: ("x", 0), p0: ("p", 0)}
    macros = template_environment().get_template("c.j2").module
    body = kernel_body([0, 0, p0 * sp.sin(q1) + x0], element_names(elements, LANE_ARRAYS))
    lines = macros.kernel_body(body, True, "").splitlines()
    assert lines[2] == ("out[2 * MB_LANES + l] = "
                        "x[0 * MB_LANES + l] + p[0 * MB_LANES + l]*sin(q[1 * MB_LANES + l]);")


def test_libm_calls_in_lanes_come_first_in_a_loop_of_their_own() -> None:
    """A loop over the lanes that calls libm does not vectorize: each call (innermost
    first, once) is stored per lane in the prelude with the temporaries its argument
    reads and nothing else; the main loop reads the stored values and calls nothing."""
    q1, q2, x0, p0 = sp.symbols("q1 q2 x0 p0")
    elements = {q1: ("q", 1), q2: ("q", 2), x0: ("x", 0), p0: ("p", 0)}
    inner = sp.sin(q1 * x0)
    exprs = [p0 * sp.tanh(2 * inner * x0) + q2 ** 2 * (q2 + 1), inner * (q2 + 1) ** 2,
             sp.sqrt(q2) + sp.Abs(q1)]
    eliminated = eliminate(exprs)
    body = eliminated.printed_in_lanes(element_names(elements, LANE_ARRAYS))
    assert body.calls == ["f0", "f1"]
    stored = [t for t in body.prelude if t.stored]
    assert [t.name for t in stored] == ["f0", "f1"]
    assert stored[0].value.startswith("sin(") and stored[1].value.startswith("tanh(")
    # tanh reads sin's value (through CSE's t0), not a call of its own
    assert "sin(" not in stored[1].value
    assert [(t.name, t.value) for t in body.prelude if not t.stored] == [("t0", "f0[l]")]
    main = [t.value for t in body.temporaries] + body.outputs
    assert not any(re.search(r"\b(sin|tanh)\(", text) for text in main)
    assert any("sqrt(" in text for text in main) and any("fabs(" in text for text in main)
    # every temporary of the one-state body is computed, with the same expression
    one = eliminated.printed(element_names(elements, LANE_ARRAYS))
    assert [t.name for t in body.temporaries] == [t.name for t in one.temporaries]


def test_long_programs_have_no_lanes() -> None:
    kkt = program()
    assert kkt_has_lanes(kkt)
    long = replace(kkt, solve=[[SolveStep(0, -1, 0)] * (LANE_STATEMENTS + 1)])
    assert not kkt_has_lanes(long)

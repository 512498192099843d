"""The same straight-line C for MB_LANES states at once: each array [entry][lane].

A particle filter moves thousands of states through the same few statements. One state at
a time, the unrolled KKT factorization is a chain of divisions and the CPU waits on each;
MB_LANES states side by side in one loop give the C compiler independent lanes to put in
SIMD registers (the four-bar's factorization: 39 ns per state alone, 9.5 ns in lanes of 8
with AVX2). The statements are those of the one-state code with every array index k
rewritten to k * MB_LANES + l, so each lane computes exactly what the one-state code
would: the same operations in the same order, bit for bit. A failed check cannot return
from the middle of a lane; it marks the lane bad and the caller redoes that state alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mbgen.codegen.kkt import KktProgram

# Kernels the batched prediction evaluates in lanes (particles.c)
LANE_KERNELS = ("forces", "dphiq_qd", "phi", "phi_q", "mass")
# Statements of the factor and solve above which there are no KKT lanes (the five-bar has
# ~190, the pick-and-place robot over 1 000)
LANE_STATEMENTS = 1000

CHECK = re.compile(r"^if \(!\((?P<condition>.*)\)\) return [^;]*;$")
# `if (x > m) m = x;` as a select, which the vectorizer takes where it stops at a branch
RUNNING_MAX = re.compile(r"if \((?P<x>[^()]+) > (?P<m>\w+)\) (?P=m) = (?P=x);")


def in_lanes(lines: Sequence[str], arrays: Sequence[str]) -> list[str]:
    """The statements with every constant index into `arrays` made per lane."""
    index = re.compile(r"\b(" + "|".join(arrays) + r")\[(\d+)\]")
    return [index.sub(r"\1[\2 * MB_LANES + l]", line) for line in lines]


def kernel_lanes(body: Sequence[str]) -> list[str]:
    """A kernel body (inputs q, x; output out; parameters p shared by all lanes)."""
    return in_lanes(body, ("q", "x", "out"))


def kkt_lanes(kkt: KktProgram) -> tuple[list[str], list[str]] | None:
    """The factor (prologue and every column) and the solve as one lane body each, or None
    past LANE_STATEMENTS (one loop body that long would slow the C compiler more than the
    lanes gain; such mechanisms run the one-state code)."""
    columns = [line for body in kkt.factor for line in body]
    solve = [line for body in kkt.solve for line in body]
    if len(columns) + len(solve) > LANE_STATEMENTS:
        return None
    factor = []
    for line in kkt.prologue + columns:
        check = CHECK.match(line)
        if check:
            line = f"bad |= !({check['condition']});"
        line = RUNNING_MAX.sub(r"\g<m> = \g<x> > \g<m> ? \g<x> : \g<m>;", line)
        factor.append(line.replace("*gamma = g;", "gamma[l] = g;"))
    if any("return" in line for line in factor + solve):
        return None  # a statement of a kind this rewrite does not know: no lanes
    return (in_lanes(factor, ("mv", "a", "L", "D", "E")),
            in_lanes(solve, ("L", "D", "x")))

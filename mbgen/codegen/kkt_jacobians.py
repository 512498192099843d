"""∂q̈/∂q and ∂q̈/∂q̇ from the unrolled inverse, as data for templates/kkt.c.j2.

The core forms them as [P G][X; Y] (dynamics.c, jacobian_terms) with generic loops; for a
small mechanism the compiler lists the products instead: per output column, the terms on
one KKT node are summed first, then each entry of the column is one dot product over
those nodes with the q rows of K⁻¹ (Z, node order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple


class Term(NamedTuple):
    """One sparse term of a Jacobian's right-hand side (dynamics.c, jacobian_terms)."""

    kernel: str                # whose pattern it has (its values: kv[MB_K_<KERNEL>])
    sign: str
    constraint_rows: bool      # rows index constraints (Y) rather than coordinates (X)
    switch: str = ""           # the Baumgarte parameter it is scaled by (2α or β²)
    reads_aux: bool = False    # its values are in aux (Φq q̇ differentiated at q̇)


JACOBIAN_TERMS = {
    "Jq": (Term("forces_q", "+", False),
           Term("mass_v_q", "-", False),
           Term("phiqT_lam_q", "-", False),
           Term("dphiq_qd_q", "-", True),
           Term("phiq_v_q", "-", True),  # at q̈
           Term("phiq_v_q", "-", True, "alpha", reads_aux=True),  # at q̇
           Term("phi_q", "-", True, "beta")),
    "Jqd": (Term("forces_qd", "+", False),
            Term("dphiq_qd_qd", "-", True),
            Term("phi_q", "-", True, "alpha")),
}
BAUMGARTE = ("", "alpha", "beta")  # terms without, then those scaled by each parameter


class Part(NamedTuple):
    """Value `entry` of a term's kernel, in one node's sum."""

    term: Term
    entry: int


@dataclass
class JacobianColumn:
    column: int
    sums: list[tuple[int, list[Part]]]          # s_node = Σ parts, per KKT node
    outputs: list[tuple[int, list[tuple[int, int]]]]  # J[index] = Σ s_node Z[z] over (node, z)


@dataclass
class JacobianBlock:
    """The columns of `output` from the terms of one Baumgarte switch (added to those
    without one, and only while that parameter is nonzero)."""

    output: str
    switch: str
    columns: list[JacobianColumn]


def jacobian_operations(n: int, patterns: dict[str, list[tuple[int, ...]]]) -> int:
    return n * sum(len(patterns[term.kernel])
                   for terms in JACOBIAN_TERMS.values() for term in terms)


def node_sums(n: int, terms: Sequence[Term], position_of_row: dict[int, int],
              patterns: dict[str, list[tuple[int, ...]]]) -> dict[int, dict[int, list[Part]]]:
    """column -> KKT node -> the terms' values on it."""
    columns: dict[int, dict[int, list[Part]]] = {}
    for term in terms:
        for e, (row, col) in enumerate(patterns[term.kernel]):
            if term.constraint_rows:
                if row not in position_of_row:
                    continue
                row = n + position_of_row[row]
            columns.setdefault(col, {}).setdefault(row, []).append(Part(term, e))
    return columns


def jacobian_blocks(n: int, active: Sequence[int],
                    patterns: dict[str, list[tuple[int, ...]]]) -> list[JacobianBlock]:
    """Every output's blocks: all its columns without Baumgarte terms, then the columns
    each Baumgarte parameter adds to (blocks adding nothing left out)."""
    size = n + len(active)
    position_of_row = {row: k for k, row in enumerate(active)}
    blocks = []
    for output, terms in JACOBIAN_TERMS.items():
        for switch in BAUMGARTE:
            sums = node_sums(n, [t for t in terms if t.switch == switch], position_of_row,
                             patterns)
            if switch and not sums:
                continue
            columns = [JacobianColumn(j, list(sums.get(j, {}).items()),
                                      [(a * n + j, [(node, node * size + a)
                                                    for node in sums.get(j, {})])
                                       for a in range(n)])
                       for j in range(n) if j in sums or not switch]
            blocks.append(JacobianBlock(output, switch, columns))
    return blocks

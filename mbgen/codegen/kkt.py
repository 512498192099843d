"""Straight-line LDLᵀ of a small mechanism's KKT matrix, unrolled for its fixed pattern.

The core factors K = [M + γAᵀA, Aᵀ; A, 0] (mbgen/csrc/sparse.c) with loops over a pattern
analysed at run time. For a small mechanism those loops cost more than the arithmetic
(the double pendulum's 6 x 6 system: ~70 % of q̈ with Jacobians went to index handling).
Its pattern is known when compiling, so the compiler writes the factorization, the solve
and the inverse as plain C statements over constant indices, as SymForce or CasADi do
for their expressions. Same elimination order, pivots, checks and γ as the generic code;
only the loops are gone. Emitted for the constraint rows independent at q0 (those the
runtime's dynamics use, see mbgen/redundancy.py): the factor and the solve (O(n) on chains
and trees) while they stay below FACTOR_BUDGET multiply-adds, the inverse (O(n²)) below
OPERATION_BUDGET for all three. Without an unrolled inverse the core's generic Takahashi
loop reads the unrolled factor through the pattern emitted with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

# Multiply-adds of factor + solve above which nothing is unrolled, keeping code size and
# compile time bounded: a chain of 200 bars (N = 600, ~22 500) stays below.
FACTOR_BUDGET = 30000
# ... and of factor + solve + inverse above which the inverse is not: the pick-and-place
# robot (N = 42, ~9 700) and a chain of 20 bars (N = 60, ~9 500) stay below, a chain of
# 50 bars does not.
OPERATION_BUDGET = 12000
# ... and of the Jacobian products, whose generic loops cost little once n is not tiny
JACOBIAN_BUDGET = 4000
# Statements per generated function (see chunks)
FUNCTION_STATEMENTS = 100


class Term(NamedTuple):
    """One sparse term of a Jacobian's right-hand side (dynamics.c, jacobian_terms)."""

    kernel: str                # whose pattern it has
    values: str                # where the generated code reads its values
    sign: str
    constraint_rows: bool      # rows index constraints (Y) rather than coordinates (X)
    coefficient: str = ""      # a Baumgarte factor, the term present when it is nonzero
    switch: str = ""           # the Baumgarte parameter it depends on


JACOBIAN_TERMS = {
    "Jq": (Term("forces_q", "kv[MB_K_FORCES_Q]", "+", False),
           Term("mass_v_q", "kv[MB_K_MASS_V_Q]", "-", False),
           Term("phiqT_lam_q", "kv[MB_K_PHIQT_LAM_Q]", "-", False),
           Term("dphiq_qd_q", "kv[MB_K_DPHIQ_QD_Q]", "-", True),
           Term("phiq_v_q", "kv[MB_K_PHIQ_V_Q]", "-", True),  # at q̈
           Term("phiq_v_q", "aux", "-", True, "2.0 * alpha", "alpha"),  # at q̇
           Term("phi_q", "kv[MB_K_PHI_Q]", "-", True, "beta * beta", "beta")),
    "Jqd": (Term("forces_qd", "kv[MB_K_FORCES_QD]", "+", False),
            Term("dphiq_qd_qd", "kv[MB_K_DPHIQ_QD_QD]", "-", True),
            Term("phi_q", "kv[MB_K_PHI_Q]", "-", True, "2.0 * alpha", "alpha")),
}


@dataclass
class KktProgram:
    """C statements of the four functions (bodies only), the factor's size, the constraint
    rows it is for and the pattern of L (compressed columns by elimination position)."""

    size: int
    rows: list[int]
    perm: list[int]                 # node at each elimination position
    column_starts: list[int]        # size + 1
    row_indices: list[int]          # nnz_l, ascending within a column
    prologue: list[str]             # γ and the scaled tolerance
    factor: list[list[str]]         # functions run in turn, see chunks()
    solve: list[list[str]]          # x <- K⁻¹ x in node order
    inverse: list[list[str]] | None  # None: the core's generic inverse
    jacobians: list[str] | None     # None: the core's generic products

    @property
    def nnz_l(self) -> int:
        return len(self.row_indices)


def chunks(groups: Sequence[list[str]]) -> list[list[str]]:
    """Statement groups packed into function bodies of about FUNCTION_STATEMENTS lines:
    the C compiler's passes grow faster than linearly with a function's length (a chain
    of 100 bars in one solve function took 15 s to compile)."""
    bodies: list[list[str]] = [[]]
    for group in groups:
        if len(bodies[-1]) + len(group) > FUNCTION_STATEMENTS and bodies[-1]:
            bodies.append([])
        bodies[-1].extend(group)
    return bodies


def elimination_order(n: int, m: int, order: Sequence[int],
                      a_entries: Sequence[tuple[int, int]]) -> list[int]:
    """KKT nodes (coordinates 0..n-1, rows n..n+m-1) by elimination position: the
    coordinates in `order`, each row right after the last coordinate it involves (as
    elimination_order in sparse.c); `a_entries` are (row, coordinate) of the m rows."""
    position = {coordinate: t for t, coordinate in enumerate(order)}
    last = [-1] * m
    for row, col in a_entries:
        last[row] = max(last[row], position[col])
    perm = [n + k for k in range(m) if last[k] < 0]
    for t, coordinate in enumerate(order):
        perm.append(coordinate)
        perm.extend(n + k for k in range(m) if last[k] == t)
    return perm


def jacobian_products(n: int, active: Sequence[int],
                      patterns: dict[str, list[tuple[int, ...]]]) -> list[str]:
    """∂q̈/∂q = [P G][X; Y] and ∂q̈/∂q̇ alike (see dynamics.c) with the q rows of K⁻¹ in Z
    (node order, rows of N): per output column, the terms on one KKT node are summed
    first, then each entry of the column is one dot product over those nodes."""
    size = n + len(active)
    position_of_row = {row: k for k, row in enumerate(active)}
    lines: list[str] = []
    for output, terms in JACOBIAN_TERMS.items():
        for baumgarte in ("", "alpha", "beta"):
            # column -> node -> C terms
            columns: dict[int, dict[int, list[str]]] = {}
            for term in (t for t in terms if t.switch == baumgarte):
                factor = f"{term.coefficient} * " if term.coefficient else ""
                for e, (row, col) in enumerate(patterns[term.kernel]):
                    if term.constraint_rows:
                        if row not in position_of_row:
                            continue
                        row = n + position_of_row[row]
                    columns.setdefault(col, {}).setdefault(row, []).append(
                        f"{term.sign} {factor}{term.values}[{e}]")
            if not baumgarte:
                lines.append(f"if ({output}) {{")
            elif columns:
                lines.append(f"if ({output} && {baumgarte} != 0.0) {{")
            else:
                continue
            for j in range(n):
                nodes = columns.get(j, {})
                if not nodes and baumgarte:
                    continue
                lines.append(f"    {{ /* column {j} */")
                for node, parts in nodes.items():
                    total = " ".join(parts)
                    lines.append(f"        const double s{node} = {total.removeprefix('+ ')};")
                assign = "+=" if baumgarte else "="
                for a in range(n):
                    product = " + ".join(f"s{node} * Z[{node * size + a}]" for node in nodes)
                    lines.append(f"        {output}[{a * n + j}] {assign} {product or '0.0'};")
                lines.append("    }")
            lines.append("}")
    return lines


def kkt_program(n: int, active: Sequence[int], order: Sequence[int],
                patterns: dict[str, list[tuple[int, ...]]]) -> KktProgram | None:
    """The unrolled functions for the constraint rows `active`, or None when the system
    exceeds the budgets. The factor leaves the pivots' inverses in D (the solve and the
    inverse multiply by them; nothing else reads D after it).

    `patterns`: the (row, col) of the nonzeros, in kernel order, of the mass and Φq
    kernels (the generated factor reads their values as mv[e] and a[e]) and of those in
    JACOBIAN_TERMS (read from kv[MB_K_...]).
    """
    mass_entries, phi_q_entries = patterns["mass"], patterns["phi_q"]
    position_of_row = {row: k for k, row in enumerate(active)}
    m = len(active)
    a_entries = {e: (position_of_row[row], col) for e, (row, col) in enumerate(phi_q_entries)
                 if row in position_of_row}
    perm = elimination_order(n, m, order, list(a_entries.values()))
    size = n + m
    pos = {node: p for p, node in enumerate(perm)}
    values: dict[tuple[int, int], list[str]] = {}  # (lower pos, upper pos) -> C terms

    def add(node_i: int, node_j: int, term: str) -> None:
        a, b = sorted((pos[node_i], pos[node_j]))
        values.setdefault((a, b), []).append(term)

    for entry_index, (i, j) in enumerate(mass_entries):
        if pos[i] <= pos[j]:  # one triangle, as the core's mass_map
            add(i, j, f"mv[{entry_index}]")
    by_row: dict[int, list[int]] = {}
    for entry_index, (row, col) in a_entries.items():
        by_row.setdefault(row, []).append(entry_index)
        add(n + row, col, f"a[{entry_index}]")
    for entries in by_row.values():
        for s, e1 in enumerate(entries):
            for e2 in entries[s:]:
                add(a_entries[e1][1], a_entries[e2][1], f"g * a[{e1}] * a[{e2}]")

    # symbolic factorization: column patterns of L (positions below the diagonal)
    below: list[set[int]] = [set() for _ in range(size)]
    for a, b in values:
        if a != b:
            below[a].add(b)
    columns: list[list[int]] = []
    children: list[list[int]] = [[] for _ in range(size)]
    for j in range(size):
        pattern = set(below[j])
        for c in children[j]:
            pattern.update(i for i in columns[c] if i != j)
        columns.append(sorted(pattern))
        if pattern:
            children[min(pattern)].append(j)
    rows: list[list[int]] = [[] for _ in range(size)]  # row i of L: its columns k < i
    slot: dict[tuple[int, int], int] = {}
    for j, column in enumerate(columns):
        for i in column:
            slot[(i, j)] = len(slot)
            rows[i].append(j)

    row_sets = [set(r) for r in rows]
    factor_ops = sum(2 * len(rows[j]) + sum(len(row_sets[i] & row_sets[j]) for i in columns[j])
                     for j in range(size))
    inverse_ops = sum((size - j) * len(columns[j]) for j in range(size))
    if factor_ops + 2 * len(slot) > FACTOR_BUDGET:
        return None
    with_inverse = factor_ops + 2 * len(slot) + inverse_ops <= OPERATION_BUDGET
    jacobian_ops = n * sum(len(patterns[term.kernel])
                           for terms in JACOBIAN_TERMS.values() for term in terms)

    def entry(a: int, b: int) -> str:
        return " + ".join(values.get((a, b), [])) or "0.0"

    def lx(i: int, j: int) -> str:
        return f"L[{slot[(i, j)]}]"

    # γ = (largest diagonal mass entry, or 1) / (largest squared row norm of Φq), as sparse.c
    prologue = ["double h = 0.0, r2 = 0.0;"]
    prologue.extend(f"if (mv[{e}] > h) h = mv[{e}];"
                    for e, (i, j) in enumerate(mass_entries) if i == j)
    prologue.append("const double scale = h > 0.0 ? h : 1.0;")
    for entries in by_row.values():
        norm2 = " + ".join(f"a[{e}] * a[{e}]" for e in entries)
        prologue.append(f"{{ const double s = {norm2}; if (s > r2) r2 = s; }}")
    if m:
        prologue.append("if (!(r2 > 0.0)) return MB_SINGULAR_PHIQ;")
    prologue.append(f"const double g = {'scale / r2' if m else '0.0 * r2'};")
    prologue.append("*gamma = g;")
    prologue.append("mass_tol *= scale;")
    # one column per group. E holds the numerators L_ij d_j (as sparse.c's up-looking
    # loop, which reduces with them): no product by the pivot, and the division stays off
    # the path from one pivot to the next but for one multiplication
    def e(i: int, j: int) -> str:
        return f"E[{slot[(i, j)]}]"

    columns_code: list[list[str]] = []
    for j in range(size):
        code = [f"/* position {j}: {'coordinate' if perm[j] < n else 'row'} "
                f"{perm[j] if perm[j] < n else perm[j] - n} */"]
        reduction = "".join(f" - {lx(j, k)} * {e(j, k)}" for k in rows[j])
        code.append(f"const double d{j} = {entry(j, j)}{reduction};")
        if perm[j] < n:
            code.append(f"if (!(d{j} > mass_tol)) "
                        f"return d{j} != d{j} ? MB_NOT_FINITE : MB_SINGULAR_MASS;")
        else:
            code.append(f"if (!(-d{j} * g > pivot_tol)) "
                        f"return d{j} != d{j} ? MB_NOT_FINITE : MB_SINGULAR_PHIQ;")
        code.append(f"D[{j}] = 1.0 / d{j};")
        for i in columns[j]:
            reduction = "".join(f" - {lx(i, k)} * {e(j, k)}"
                                for k in sorted(row_sets[i] & row_sets[j]))
            code.append(f"{e(i, j)} = {entry(j, i)}{reduction};")
            code.append(f"{lx(i, j)} = {e(i, j)} * D[{j}];")
        columns_code.append(code)

    # in place on x (node order): x[perm[p]] is the unknown at elimination position p
    def y(p: int) -> str:
        return f"x[{perm[p]}]"

    solve: list[str] = []
    for j in range(size):
        solve.extend(f"{y(i)} -= {lx(i, j)} * {y(j)};" for i in columns[j])
    solve.extend(f"{y(j)} *= D[{j}];" for j in range(size))
    for j in reversed(range(size)):
        solve.extend(f"{y(j)} -= {lx(i, j)} * {y(i)};" for i in columns[j])

    # Takahashi: Z_ij = δ_ij / D_i - Σ_{k>i} L_ki Z_kj (D[i] holds 1 / D_i), rows from the
    # last; Z is written in node order (both triangles) and read back from it
    def z(a: int, b: int) -> str:
        return f"Z[{perm[a] * size + perm[b]}]"

    inverse: list[list[str]] | None = None
    if with_inverse:
        lines = []
        for i in reversed(range(size)):
            for j in range(size - 1, i, -1):
                terms = " - ".join(f"{lx(k, i)} * {z(k, j) if k <= j else z(j, k)}"
                                   for k in columns[i])
                lines.append(f"{z(i, j)} = {z(j, i)} = {'-' + terms if terms else '0.0'};")
            reduction = "".join(f" - {lx(k, i)} * {z(k, i)}" for k in columns[i])
            lines.append(f"{z(i, i)} = D[{i}]{reduction};")
        inverse = chunks([[line] for line in lines])
    column_starts = [0]
    for column in columns:
        column_starts.append(column_starts[-1] + len(column))
    jacobians = (jacobian_products(n, active, patterns) if jacobian_ops <= JACOBIAN_BUDGET
                 else None)
    return KktProgram(size, list(active), perm, column_starts,
                      [i for column in columns for i in column], prologue,
                      chunks(columns_code), chunks([[line] for line in solve]), inverse,
                      jacobians)

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

This module decides what is unrolled; kkt_pattern.py, kkt_steps.py and kkt_jacobians.py
give the statements as data and templates/kkt.c.j2 writes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mbgen.codegen.kkt_jacobians import JacobianBlock, jacobian_blocks, jacobian_operations
from mbgen.codegen.kkt_pattern import KktPattern, kkt_pattern
from mbgen.codegen.kkt_steps import (
    FactorColumn,
    InverseEntry,
    Prologue,
    SolveStep,
    chunks,
    factor_columns,
    inverse_entries,
    prologue,
    solve_steps,
)

# Multiply-adds of factor + solve above which nothing is unrolled, keeping code size and
# compile time bounded: a chain of 200 bars (N = 600, ~22 500) stays below.
FACTOR_BUDGET = 30000
# ... and of factor + solve + inverse above which the inverse is not: the pick-and-place
# robot (N = 42, ~9 700) and a chain of 20 bars (N = 60, ~9 500) stay below, a chain of
# 50 bars does not.
OPERATION_BUDGET = 12000
# ... and of the Jacobian products, whose generic loops cost little once n is not tiny
JACOBIAN_BUDGET = 4000


@dataclass
class KktProgram:
    """The four functions' statements as data (functions run in turn: see chunks), the
    factor's size, the constraint rows it is for and the pattern of L (compressed columns
    by elimination position)."""

    size: int
    rows: list[int]
    perm: list[int]                 # node at each elimination position
    column_starts: list[int]        # size + 1
    row_indices: list[int]          # nnz_l, ascending within a column
    prologue: Prologue              # γ and the scaled tolerance
    factor: list[list[FactorColumn]]
    solve: list[list[SolveStep]]    # x <- K⁻¹ x in node order
    inverse: list[list[InverseEntry]] | None  # None: the core's generic inverse
    jacobians: list[JacobianBlock] | None     # None: the core's generic products

    @property
    def nnz_l(self) -> int:
        return len(self.row_indices)

    @property
    def factor_and_solve_statements(self) -> int:
        return (self.prologue.statements
                + sum(column.statements for body in self.factor for column in body)
                + sum(len(body) for body in self.solve))


def compressed_columns(pattern: KktPattern) -> tuple[list[int], list[int]]:
    """L's pattern as column starts and row indices."""
    starts = [0]
    for column in pattern.columns:
        starts.append(starts[-1] + len(column))
    return starts, [i for column in pattern.columns for i in column]


def kkt_program(n: int, active: Sequence[int], order: Sequence[int],
                patterns: dict[str, list[tuple[int, ...]]]) -> KktProgram | None:
    """The unrolled functions for the constraint rows `active`, or None when the system
    exceeds the budgets. The factor leaves the pivots' inverses in D (the solve and the
    inverse multiply by them; nothing else reads D after it).

    `patterns`: the (row, col) of the nonzeros, in kernel order, of the mass and Φq
    kernels (the generated factor reads their values as mv[e] and a[e]) and of those in
    kkt_jacobians.JACOBIAN_TERMS (read from kv[MB_K_...]).
    """
    pattern = kkt_pattern(n, active, order, patterns["mass"], patterns["phi_q"])
    factor_and_solve = pattern.factor_operations() + 2 * pattern.nnz_l
    if factor_and_solve > FACTOR_BUDGET:
        return None
    with_inverse = factor_and_solve + pattern.inverse_operations() <= OPERATION_BUDGET
    with_jacobians = jacobian_operations(n, patterns) <= JACOBIAN_BUDGET

    def one(_: object) -> int:
        return 1

    column_starts, row_indices = compressed_columns(pattern)
    return KktProgram(
        pattern.size, list(active), pattern.perm, column_starts, row_indices,
        prologue(pattern), chunks(factor_columns(pattern), lambda c: c.statements),
        chunks(solve_steps(pattern), one),
        chunks(inverse_entries(pattern), one) if with_inverse else None,
        jacobian_blocks(n, active, patterns) if with_jacobians else None)

"""The statements of the unrolled KKT code as data, for templates/kkt.c.j2 to write.

From the pattern (kkt_pattern.py): γ's prologue, the factor's columns, the solve's
updates and the inverse's entries, each naming the slots of L, D, E, x and Z it reads and
writes by constant index. The elimination is sparse.c's: same order, pivots and checks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from mbgen.codegen.kkt_pattern import KktPattern, KktValue

# Statements per generated function (see chunks)
FUNCTION_STATEMENTS = 100

Item = TypeVar("Item")


@dataclass
class Prologue:
    """γ = (largest diagonal mass entry, or 1) / (largest squared row norm of Φq), and the
    mass tolerance scaled by the same largest entry, as sparse.c."""

    mass_diagonal: list[int]  # mass entries whose largest is the scale
    row_entries: list[list[int]]  # Φq entries of each row, for its squared norm
    rows: int                 # active rows (none: γ = 0)

    @property
    def statements(self) -> int:
        return 5 + len(self.mass_diagonal) + len(self.row_entries) + (1 if self.rows else 0)


class BelowPivot(NamedTuple):
    """E[slot] = K entry - Σ L[l] E[e] over `reduction` (l, e); then L[slot] = E[slot] D[j].
    E holds the numerators L_ij d_j (as sparse.c's up-looking loop, which reduces with
    them): no product by the pivot, and the division stays off the path from one pivot to
    the next but for one multiplication."""

    slot: int
    values: list[KktValue]
    reduction: list[tuple[int, int]]


@dataclass
class FactorColumn:
    """Elimination position j: its pivot d_j = K_jj - Σ L[l] E[e] over `reduction`, checked
    (a coordinate's against the mass tolerance, a row's against the pivot tolerance), its
    inverse into D[j], then the column of L below it."""

    position: int
    coordinate: bool
    node: int                 # the coordinate or the constraint row
    values: list[KktValue]
    reduction: list[tuple[int, int]]
    below: list[BelowPivot]

    @property
    def statements(self) -> int:
        return 4 + 2 * len(self.below)


class SolveStep(NamedTuple):
    """x[target] -= L[slot] x[source] or, for a pivot (slot < 0), x[target] *= D[source]."""

    target: int
    slot: int
    source: int


class InverseEntry(NamedTuple):
    """Takahashi: Z[target] = Z[mirror] = -Σ L[l] Z[z] off the diagonal (mirror >= 0), or
    Z[target] = D[pivot] - Σ L[l] Z[z] on it; `terms` are the (l, z)."""

    target: int
    mirror: int
    pivot: int
    terms: list[tuple[int, int]]


def chunks(items: Sequence[Item], statements: Callable[[Item], int]) -> list[list[Item]]:
    """Items packed into function bodies of about FUNCTION_STATEMENTS statements: the C
    compiler's passes grow faster than linearly with a function's length (a chain of 100
    bars in one solve function took 15 s to compile)."""
    bodies: list[list[Item]] = [[]]
    length = 0
    for item in items:
        if length + statements(item) > FUNCTION_STATEMENTS and bodies[-1]:
            bodies.append([])
            length = 0
        bodies[-1].append(item)
        length += statements(item)
    return bodies


def prologue(pattern: KktPattern) -> Prologue:
    return Prologue(pattern.mass_diagonal, pattern.row_entries, pattern.size - pattern.n)


def factor_columns(pattern: KktPattern) -> list[FactorColumn]:
    """One column per elimination position, up-looking as sparse.c."""
    slot, rows = pattern.slot, pattern.rows
    row_sets = [set(r) for r in rows]
    columns = []
    for j, node in enumerate(pattern.perm):
        below = [BelowPivot(slot[(i, j)], pattern.entry(j, i),
                            [(slot[(i, k)], slot[(j, k)])
                             for k in sorted(row_sets[i] & row_sets[j])])
                 for i in pattern.columns[j]]
        columns.append(FactorColumn(j, node < pattern.n, node if node < pattern.n
                                    else node - pattern.n, pattern.entry(j, j),
                                    [(slot[(j, k)], slot[(j, k)]) for k in rows[j]], below))
    return columns


def solve_steps(pattern: KktPattern) -> list[SolveStep]:
    """x <- K⁻¹ x in place (node order): forward by L, by D, back by Lᵀ."""
    perm, slot, size = pattern.perm, pattern.slot, pattern.size
    steps = [SolveStep(perm[i], slot[(i, j)], perm[j])
             for j in range(size) for i in pattern.columns[j]]
    steps.extend(SolveStep(perm[j], -1, j) for j in range(size))
    steps.extend(SolveStep(perm[j], slot[(i, j)], perm[i])
                 for j in reversed(range(size)) for i in pattern.columns[j])
    return steps


def inverse_entries(pattern: KktPattern) -> list[InverseEntry]:
    """Z_ij = δ_ij / D_i - Σ_{k>i} L_ki Z_kj (D[i] holds 1 / D_i), rows from the last; Z is
    written in node order (both triangles) and read back from it."""
    perm, slot, size = pattern.perm, pattern.slot, pattern.size

    def z(a: int, b: int) -> int:
        return perm[a] * size + perm[b]

    entries = []
    for i in reversed(range(size)):
        for j in range(size - 1, i, -1):
            entries.append(InverseEntry(z(i, j), z(j, i), -1, [
                (slot[(k, i)], z(k, j) if k <= j else z(j, k)) for k in pattern.columns[i]]))
        entries.append(InverseEntry(z(i, i), -1, i,
                                    [(slot[(k, i)], z(k, i)) for k in pattern.columns[i]]))
    return entries

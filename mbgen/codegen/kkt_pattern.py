"""The KKT matrix of a mechanism and the pattern of its LDLᵀ factor, known when compiling.

K = [M + γAᵀA, Aᵀ; A, 0] over the nodes (coordinates 0..n-1, then the active constraint
rows), in sparse.c's elimination order. Each entry of K is a sum of kernel values (mass
values mv[e], Φq values a[e], products γ a[e1] a[e2]); the factor's pattern follows by
symbolic elimination. kkt_steps.py turns the pattern into the statements' data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple


class KktValue(NamedTuple):
    """One term of an entry of K: mv[entry], a[entry] or, with a partner, g a[entry] a[partner]."""

    array: str         # "mv" (mass values) or "a" (Φq values)
    entry: int
    partner: int = -1  # >= 0: the term is γ a[entry] a[partner]


@dataclass
class KktPattern:
    """K's entries and L's pattern, by elimination position."""

    n: int
    perm: list[int]                               # node at each elimination position
    values: dict[tuple[int, int], list[KktValue]]  # (lower, upper position) -> terms
    columns: list[list[int]]                      # rows below the diagonal of each column
    rows: list[list[int]]                         # columns k < i of each row i
    slot: dict[tuple[int, int], int]              # (row, column) -> index into L
    mass_diagonal: list[int]                      # mass entries on the diagonal
    row_entries: list[list[int]]                  # Φq entries of each active row that has any

    @property
    def size(self) -> int:
        return len(self.perm)

    @property
    def nnz_l(self) -> int:
        return len(self.slot)

    def entry(self, a: int, b: int) -> list[KktValue]:
        return self.values.get((min(a, b), max(a, b)), [])

    def factor_operations(self) -> int:
        """Multiply-adds of the factor alone."""
        row_sets = [set(r) for r in self.rows]
        return sum(2 * len(self.rows[j])
                   + sum(len(row_sets[i] & row_sets[j]) for i in self.columns[j])
                   for j in range(self.size))

    def inverse_operations(self) -> int:
        return sum((self.size - j) * len(self.columns[j]) for j in range(self.size))


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


def kkt_values(n: int, perm: Sequence[int], mass_entries: Sequence[tuple[int, ...]],
               a_entries: dict[int, tuple[int, int]]
               ) -> tuple[dict[tuple[int, int], list[KktValue]], list[list[int]]]:
    """K's upper triangle by elimination positions, and the Φq entries of each row (in
    the order rows first appear); `a_entries`: Φq entry -> (active row, coordinate)."""
    pos = {node: p for p, node in enumerate(perm)}
    values: dict[tuple[int, int], list[KktValue]] = {}

    def add(node_i: int, node_j: int, term: KktValue) -> None:
        a, b = sorted((pos[node_i], pos[node_j]))
        values.setdefault((a, b), []).append(term)

    for entry_index, (i, j) in enumerate(mass_entries):
        if pos[i] <= pos[j]:  # one triangle, as the core's mass_map
            add(i, j, KktValue("mv", entry_index))
    by_row: dict[int, list[int]] = {}
    for entry_index, (row, col) in a_entries.items():
        by_row.setdefault(row, []).append(entry_index)
        add(n + row, col, KktValue("a", entry_index))
    for entries in by_row.values():
        for s, e1 in enumerate(entries):
            for e2 in entries[s:]:
                add(a_entries[e1][1], a_entries[e2][1], KktValue("a", e1, e2))
    return values, list(by_row.values())


def factor_pattern(values: dict[tuple[int, int], list[KktValue]], size: int
                   ) -> tuple[list[list[int]], list[list[int]], dict[tuple[int, int], int]]:
    """Symbolic factorization: the rows below the diagonal of each column of L, the
    columns of each row, and each entry's slot (by columns)."""
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
    rows: list[list[int]] = [[] for _ in range(size)]
    slot: dict[tuple[int, int], int] = {}
    for j, column in enumerate(columns):
        for i in column:
            slot[(i, j)] = len(slot)
            rows[i].append(j)
    return columns, rows, slot


def kkt_pattern(n: int, active: Sequence[int], order: Sequence[int],
                mass_entries: Sequence[tuple[int, ...]],
                phi_q_entries: Sequence[tuple[int, ...]]) -> KktPattern:
    """K and L for the constraint rows `active`; the coordinates eliminated in `order`."""
    position_of_row = {row: k for k, row in enumerate(active)}
    a_entries = {e: (position_of_row[row], col) for e, (row, col) in enumerate(phi_q_entries)
                 if row in position_of_row}
    perm = elimination_order(n, len(active), order, list(a_entries.values()))
    values, row_entries = kkt_values(n, perm, mass_entries, a_entries)
    columns, rows, slot = factor_pattern(values, len(perm))
    mass_diagonal = [e for e, (i, j) in enumerate(mass_entries) if i == j]
    return KktPattern(n, perm, values, columns, rows, slot, mass_diagonal, row_entries)

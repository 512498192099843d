"""A fill-reducing elimination order of the coordinates, chosen when compiling.

The sparse dynamics factor [M + γΦqᵀΦq, Φqᵀ; Φq, 0] in a fixed order (mbgen/csrc/sparse.c);
the coordinates' order is chosen here by minimum degree on the graph of M + ΦqᵀΦq (two
coordinates are neighbours when they share a mass entry or a constraint). On a chain or a
tree this eliminates from the leaves and the factor keeps O(n) nonzeros.
"""

from __future__ import annotations

from collections.abc import Iterable


def coupling_graph(n: int, mass: Iterable[tuple[int, ...]],
                   constraint_rows: Iterable[Iterable[int]]) -> list[set[int]]:
    graph: list[set[int]] = [set() for _ in range(n)]
    for i, j in mass:
        if i != j:
            graph[i].add(j)
            graph[j].add(i)
    for columns in constraint_rows:
        columns = list(columns)
        for a in columns:
            graph[a].update(c for c in columns if c != a)
    return graph


def minimum_degree_order(graph: list[set[int]]) -> list[int]:
    """Eliminate the node of least current degree (ties: lowest index); elimination joins
    its neighbours into a clique, as Gaussian elimination does."""
    graph = [set(neighbours) for neighbours in graph]
    remaining = set(range(len(graph)))
    order: list[int] = []
    while remaining:
        node = min(remaining, key=lambda k: (len(graph[k]), k))
        neighbours = graph[node]
        for a in neighbours:
            graph[a].discard(node)
            graph[a].update(b for b in neighbours if b != a)
        remaining.remove(node)
        order.append(node)
    return order

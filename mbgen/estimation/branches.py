"""Assembly branches: the separate pieces of a mechanism's configuration manifold.

A four-bar whose crank turns fully can be assembled in two ways, and no motion takes one
into the other: the solutions of Φ(q) = 0 form two closed curves. A state observer must
know these pieces to say which one the mechanism is in, and a user should not have to
hand-code them. They are found by sampling: random configurations over a box are
projected onto Φ = 0 (minimum-norm Newton, batched in C), thinned to about even spacing,
and split where the samples leave gaps far wider than their spacing and a sizeable part
of the region (single linkage on a nearest-neighbour graph). Branch 0 is the one the
file's q0 lies in.

The relative-angle constraints fix an angle only modulo π, so a mechanism with relative
coordinates also shows pieces where an angle is off by π: real solutions of its
equations, listed like the others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components, minimum_spanning_tree
from scipy.spatial import cKDTree

from mbgen.runtime.compiled import CompiledMechanism

Array = np.ndarray
GAP = 10.0  # a gap this many grid cells wide separates two branches ...
FRACTION = 0.05  # ... if it is also this fraction of the sampled region's extent
NEIGHBOURS = 8  # edges per sample of the nearest-neighbour graph
SAMPLES_PER_CELL = 20  # raw samples per grid cell of a d-dimensional manifold
MAX_SAMPLES = 60_000


@dataclass(frozen=True)
class Branches:
    """Configurations spread over the sampled region of Φ = 0, each with its branch."""

    samples: Array  # (K, n) on Φ = 0, about evenly spaced
    label: Array  # (K,) branch of each sample; 0 holds q0
    count: int  # number of branches
    embed: Callable[[Array], Array]  # (N, n) -> (N, D): how configurations are compared
    tree: cKDTree  # of the embedded samples

    def of(self, q: Array, eps: float = 0.0) -> Array:
        """The branch (N,) of configurations q (N, n) near the samples: the nearest one's
        (``eps`` > 0: a sample within 1 + eps times the nearest distance, far cheaper in
        many dimensions, and the same branch for a configuration near the samples, which
        gaps of GAP cells separate: the particle filter's moves)."""
        return self.label[self.tree.query(self.embed(q), eps=eps)[1]]

    def representatives(self, q0: Array) -> Array:
        """Each branch's sample nearest q0 (count, n)."""
        distance = np.abs(self.samples - q0).sum(axis=1)
        return np.array([self.samples[self.label == b][np.argmin(distance[self.label == b])]
                         for b in range(self.count)])


def _embedding(mech: CompiledMechanism) -> Callable[[Array], Array]:
    """Coordinates in which distances mean the same everywhere: lengths over the
    mechanism's size, unit vectors' components as they are, angles as (cos, sin) so that
    −π and π meet."""
    units = np.array(mech.coordinate_units)
    angle = units == "rad"
    scale = np.where(units == "m", mech.span, 1.0)[~angle]

    def embed(q: Array) -> Array:
        q = np.atleast_2d(q)
        return np.hstack([q[:, ~angle] / scale, np.cos(q[:, angle]), np.sin(q[:, angle])])

    return embed


def sample_configurations(mech: CompiledMechanism, count: int, rng: np.random.Generator,
                          spread: float | None = None) -> Array:
    """Up to ``count`` configurations (K, n) on Φ = 0 from q0 and random starts: within
    ±spread of q0 in every coordinate, or (None) over the whole region the mechanism can
    reach (lengths within twice its size of q0, unit vectors' components in [-1, 1],
    angles over a full turn). Mirror images of spatial bodies are left out."""
    units = np.array(mech.coordinate_units)
    half = 2.0 * mech.span if spread is None else float(spread)
    start = mech.q0 + half * rng.uniform(-1.0, 1.0, (count, mech.n))
    if spread is None:
        for unit, low in (("rad", -np.pi), ("1", -1.0)):
            start[:, units == unit] = rng.uniform(low, -low, (count, int((units == unit).sum())))
    start[0] = mech.q0  # the file's own assembly is always among them
    q, status = mech.solve_position(start, minimum_norm=True, errors="status")
    q = q[status == 0]
    return q[~mech.mirrored(q)]


def find_branches(mech: CompiledMechanism, seed: int = 0, samples: int | None = None,
                  ) -> Branches:
    """Sample the configurations over the mechanism's whole reach and split them into
    branches (branches are global: a small region would split one by its own gaps).
    Raises ValueError when no configuration could be assembled."""
    rng = np.random.default_rng(seed)
    dof = max(mech.dof, 1)
    total = samples or min(MAX_SAMPLES, 20_000 * dof)
    q = sample_configurations(mech, total, rng)
    if len(q) == 0:
        raise ValueError(f"{mech.name}: no configuration could be assembled: check the "
                         "file's q0 and lengths")
    embed = _embedding(mech)
    x = embed(q)
    # a grid fine enough to hold SAMPLES_PER_CELL samples per cell of the manifold
    extent = max(float(np.ptp(x, axis=0).max()), 1e-9)
    cell = extent * (SAMPLES_PER_CELL / len(x)) ** (1.0 / dof)
    _, first = np.unique(np.floor(x / cell).astype(np.int64), axis=0, return_index=True)
    keep = np.sort(first)
    q, x = q[keep], x[keep]
    label = _components(x, max(GAP * cell, FRACTION * extent))
    # branch 0 holds q0; the others by their distance from it
    distance = np.linalg.norm(x - embed(mech.q0), axis=1)
    nearest = [distance[label == b].min() for b in range(label.max() + 1)]
    order = np.argsort(nearest)
    label = np.argsort(order)[label]
    return Branches(q, label, len(order), embed, cKDTree(x))


def _components(x: Array, gap: float) -> Array:
    """Labels (K,) of the groups of points x (K, D) that gaps wider than ``gap`` split."""
    if len(x) == 1:
        return np.zeros(1, dtype=int)
    k = min(NEIGHBOURS, len(x) - 1)
    distance, neighbour = cKDTree(x).query(x, k + 1)
    rows = np.repeat(np.arange(len(x)), k)
    graph = coo_matrix((distance[:, 1:].ravel() + 1e-300, (rows, neighbour[:, 1:].ravel())),
                       shape=(len(x), len(x)))
    tree = minimum_spanning_tree(graph).tocoo()
    short = tree.data <= gap
    linked = coo_matrix((tree.data[short], (tree.row[short], tree.col[short])),
                        shape=graph.shape)
    return connected_components(linked, directed=False)[1]

"""Which way round each spatial body is: the sign of det X, X its three basis directions.

The rigidity equations of a spatial body (its basis directions keep their lengths and
angles, XᵀX constant) are also met by its mirror image, X → −X̄-like reflections with
det X of the other sign: real solutions of the equations that no real body reaches. Branch
finding and the particle filter sample configurations from random starts, so they must
tell these apart; the file's placement gives the right sign.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = np.ndarray


class BodyFrames:
    """det X of each spatial body at states q (N, n), from meta.json's ``frames``."""

    def __init__(self, meta: dict[str, Any], names: list[str]) -> None:
        self.frames = meta.get("frames", [])  # none for planar mechanisms
        position = {name: k for k, name in enumerate(names)}
        fixed = {("point", p["index"]): [p["x"], p["y"], p.get("z", 0.0)]
                 for p in meta["points"]}
        fixed.update({("vector", v["index"]): [v["x"], v["y"], v["z"]]
                      for v in meta.get("vectors", [])})
        self.columns: list[list[Any]] = []  # per body: origin and 3 ends, slot or value
        for frame in self.frames:
            ends = []
            for kind, index in [frame["origin"], *frame["basis"]]:
                first = f"x{index}" if kind == "point" else f"ux{index}"
                ends.append((kind, position[first] if first in position
                             else np.array(fixed[(kind, index)])))
            self.columns.append(ends)

    def determinants(self, q: Array) -> Array:
        """det X (N, bodies) at configurations q (N, n)."""
        q = np.atleast_2d(q)
        out = np.empty((len(q), len(self.columns)))
        for b, ends in enumerate(self.columns):
            values = [np.broadcast_to(q[:, where:where + 3] if isinstance(where, int)
                                      else where, (len(q), 3)) for _, where in ends]
            origin = values[0]
            x = np.stack([v - origin if kind == "point" else v
                          for (kind, _), v in zip(ends[1:], values[1:], strict=True)], axis=2)
            out[:, b] = np.linalg.det(x)
        return out

    def mirrored(self, q: Array, q0: Array) -> Array:
        """(N,) True where some body is the mirror image of its placement at q0."""
        if not self.columns:
            return np.zeros(len(np.atleast_2d(q)), dtype=bool)
        reference = np.sign(self.determinants(q0)[0])
        return np.any(np.sign(self.determinants(q)) != reference, axis=1)

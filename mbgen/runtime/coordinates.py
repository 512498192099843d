"""A mechanism's coordinates by name: what calls that name them resolve against, their
units, and how a failed state is worded."""

from __future__ import annotations

import numpy as np

Array = np.ndarray


class Coordinates:
    """The n coordinates in file order: the points' x and y first (``lengths`` of them),
    then the relative angles; ``independent``: the names the file gives for z, if any."""

    def __init__(self, names: list[str], lengths: int, independent: list[str] | None,
                 ) -> None:
        self.names = names
        self.lengths = lengths
        self.independent = independent or None

    def index(self, name: str) -> int:
        """The position of a coordinate in q; KeyError naming the choices."""
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"unknown coordinate {name!r} (coordinates: "
                           f"{', '.join(self.names)})") from None

    @property
    def default_independent(self) -> list[int] | None:
        """Indices of the file's independent coordinates, or None when it names none."""
        return None if not self.independent else [self.names.index(n) for n in self.independent]

    @property
    def units(self) -> list[str]:
        """SI unit of each coordinate (for axes and tables): m for the points' x and y,
        rad for the relative angles that follow them."""
        return ["m"] * self.lengths + ["rad"] * (len(self.names) - self.lengths)

    def describe(self, q: Array) -> str:
        """One state q (n,) as "name=value, ..." for an error message."""
        return ", ".join(f"{n}={v:.6g}" for n, v in zip(self.names, q, strict=True))

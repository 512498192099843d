"""A mechanism's coordinates by name: what calls that name them resolve against, their
units, and how a failed state is worded."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Array = np.ndarray


class Coordinates:
    """The n coordinates in file order with their SI ``units`` (``mbgen.model``'s
    ``Mechanism.coordinate_units``); ``independent``: the names the file gives for z, if
    any."""

    def __init__(self, names: list[str], units: list[str], independent: list[str] | None,
                 ) -> None:
        self.names = names
        self.units = units
        self.independent = independent or None

    def index(self, name: str) -> int:
        """The position of a coordinate in q; KeyError naming the choices."""
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"unknown coordinate {name!r} (coordinates: "
                           f"{', '.join(self.names)})") from None

    def indices(self, items: str | Sequence[str | int]) -> list[int]:
        """Coordinates by name or position: ``"theta0"``, ``["x5", "y5"]``, ``[20, 21]``,
        ``"x5,y5"`` or ``"20,21"`` (the one lookup every caller uses). KeyError for an
        unknown name, IndexError for a position out of range, both naming the choices."""
        if isinstance(items, str):
            items = [part.strip() for part in items.split(",") if part.strip()]
        found = []
        for item in items:
            if isinstance(item, str) and not (item.isascii() and item.lstrip("-").isdigit()
                                              and len(item) < 10):
                found.append(self.index(item))
                continue
            position = int(item)
            if not 0 <= position < len(self.names):
                raise IndexError(f"coordinate index {position} is out of range "
                                 f"(0..{len(self.names) - 1})")
            found.append(position)
        return found

    @property
    def default_independent(self) -> list[int] | None:
        """Indices of the file's independent coordinates, or None when it names none."""
        return None if not self.independent else [self.names.index(n) for n in self.independent]

    def describe(self, q: Array) -> str:
        """One state q (n,) as "name=value, ..." for an error message."""
        return ", ".join(f"{n}={v:.6g}" for n, v in zip(self.names, q, strict=True))

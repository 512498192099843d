"""The core's solver settings (mb_options in mbgen/csrc/mbgen.h), settable from Python."""

from __future__ import annotations

from typing import Any

METHODS = {"auto": 0, "dense": 1, "sparse": 2, "unrolled": 3}


class SolverOptions:
    """Tolerances, iteration limit, Baumgarte terms and linear-algebra path of every call.

    ``method``: "auto" (the KKT factorization unrolled for the mechanism's pattern where
    the module has it, i.e. small mechanisms without redundant constraints; else the
    sparse KKT factorization from 4 coordinates on, the dense null-space method below),
    "dense", "sparse" (the generic sparse code) or "unrolled" (sparse where there is no
    unrolled code). All give the same results to round-off.
    """

    _FIELDS = ("pivot_tol", "mass_tol", "newton_tol", "max_iter", "refine")

    def __init__(self, ffi: Any, lib: Any, model: Any) -> None:
        """The core's defaults for ``model`` (its tolerance on Φ scaled by its size²)."""
        object.__setattr__(self, "struct", ffi.new("mb_options *"))
        object.__setattr__(self, "_lib", lib)
        # counts the changes of the method: a workspace laid out for one is kept only while
        # this stays (runtime/calls.py Workspaces; a plain attribute: read on every call)
        object.__setattr__(self, "layout", 0)
        lib.mb_model_options(model, self.struct)

    def __getattr__(self, name: str) -> Any:
        if name in self._FIELDS:
            return getattr(self.struct, name)
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._FIELDS:
            if name in ("max_iter", "refine") and (int(value) != value or value < 0):
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
            if name not in ("max_iter", "refine") and not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
            setattr(self.struct, name, value)
        elif name in ("method", "baumgarte"):
            object.__setattr__(self, name, value)  # the properties' setters below
        else:
            raise AttributeError(f"unknown solver option {name!r}")

    @property
    def projection_tol(self) -> float:
        """The max |Φ| at which the integrators' manifold projection stops (the core's
        mb_projection_tol: a tenth of ``newton_tol``, within ``max_iter`` iterations)."""
        return float(self._lib.mb_projection_tol(self.struct))

    @property
    def method(self) -> str:
        return next(k for k, v in METHODS.items() if v == self.struct.method)

    @method.setter
    def method(self, value: str) -> None:
        if value not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {value!r}")
        self.struct.method = METHODS[value]
        object.__setattr__(self, "layout", self.layout + 1)

    @property
    def baumgarte(self) -> tuple[float, float]:
        """(α, β) of the Baumgarte-stabilized acceleration constraint:
        c = -Φ̇q q̇ - 2α Φq q̇ - β² Φ in every dynamics call (default 0, 0)."""
        return self.struct.alpha, self.struct.beta

    @baumgarte.setter
    def baumgarte(self, value: tuple[float, float]) -> None:
        alpha, beta = value
        self.struct.alpha, self.struct.beta = float(alpha), float(beta)

    def __repr__(self) -> str:
        fields = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._FIELDS)
        return f"SolverOptions({fields}, method={self.method!r}, baumgarte={self.baumgarte})"

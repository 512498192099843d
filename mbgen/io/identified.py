"""The identified-parameters file `mbgen identify --out` writes: YAML whose ``parameters``
mapping a mechanism file's ``parameters`` can take as it is, each value with its standard
deviation as a comment, then the fit's diagnostics (correlations, combinations the data
cannot see, the residuals against their stated noise) as comments.

The result is read through the fields below (structural types: io sits below
`estimation`, whose `Identification` and `FitTest` have them)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from mbgen.files import atomic_write_text


class FitGroup(Protocol):
    """One group of normalized residuals against the χ² bound on their mean square
    (read-only: estimation/verdict.FitTest is frozen)."""

    @property
    def what(self) -> str: ...

    @property
    def mean_square(self) -> float: ...

    @property
    def bound(self) -> float: ...

    @property
    def passed(self) -> bool: ...


class IdentifiedParameters(Protocol):
    """What the file says of an identification (estimation/identify.Identification)."""

    names: list[str]
    values: np.ndarray  # (P,)
    std: np.ndarray  # (P,) inf: not identifiable
    correlation: np.ndarray  # (P, P)
    step_change: np.ndarray  # (P,) NaN: not checked
    undetermined: list[str]
    problems: list[str]
    cost: float
    iterations: int
    converged: bool

    @property
    def fit(self) -> Sequence[FitGroup]: ...


def identified_text(result: IdentifiedParameters, source: Path, data: Path) -> str:
    """The file's text; its first line names the mechanism file and the data, as JSON
    strings (a name holding a newline cannot start a YAML key)."""
    lines = [f"# mbgen identify {json.dumps(str(source))} --data {json.dumps(str(data))}",
             f"# {result.iterations} iterations, cost {result.cost:.6g}"
             + ("" if result.converged else " (NOT converged)"),
             "parameters:"]
    for name, value, std in zip(result.names, result.values, result.std, strict=True):
        note = f"± {std:.3g} (1 sigma)" if np.isfinite(std) else "not identifiable"
        lines.append(f"  {name}: {value:.10g}  # {note}")
    if np.isfinite(result.step_change).any():
        lines.append("# moved at half the step (in each sigma): " + " ".join(
            f"{name} {moved:.3g}" for name, moved in zip(result.names, result.step_change,
                                                        strict=True)))
    lines.append("# correlation (rows and columns in the order above; nan: not identifiable):")
    lines += ["#   " + " ".join(f"{c:+.3f}" for c in row) for row in result.correlation]
    lines += [f"# not determined by the data: {combination}"
              for combination in result.undetermined]
    lines += [f"# fit, {test.what}: RMS {np.sqrt(test.mean_square):.4g} sigma of the stated "
              f"noise (bound {np.sqrt(test.bound):.4g}){'' if test.passed else ' FAILED'}"
              for test in result.fit]
    lines += [f"# impossible: {problem}" for problem in result.problems]
    return "\n".join(lines) + "\n"


def write_identified(path: Path, result: IdentifiedParameters, source: Path,
                     data: Path) -> Path:
    """Writes :func:`identified_text` to ``path``, whole or not at all."""
    atomic_write_text(path, identified_text(result, source, data))
    return path

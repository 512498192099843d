"""io/identified: the file `mbgen identify --out` writes is YAML whose ``parameters`` are
the identified values to 10 digits, each with its σ or "not identifiable", and whose
comments say what the run found (not converged, a failed fit, correlations)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from mbgen.io.identified import write_identified


@dataclass(frozen=True)
class Group:
    what: str
    mean_square: float
    bound: float

    @property
    def passed(self) -> bool:
        return self.mean_square <= self.bound


@dataclass
class Result:
    names: list[str]
    values: np.ndarray
    std: np.ndarray
    correlation: np.ndarray
    step_change: np.ndarray
    undetermined: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    cost: float = 0.5
    iterations: int = 7
    converged: bool = True
    fit: list[Group] = field(default_factory=list)


def result(**changes: object) -> Result:
    base = Result(["b1", "I1"], np.array([0.0312345678912, 1.5e-4]), np.array([1e-4, np.inf]),
                  np.array([[1.0, np.nan], [np.nan, 1.0]]), np.full(2, np.nan))
    for name, value in changes.items():
        setattr(base, name, value)
    return base


def test_the_parameters_read_back_as_yaml(tmp_path: Path) -> None:
    source, data = Path("mech\nanisms/pend.yaml"), Path("rec.csv")  # a newline in a name
    path = write_identified(tmp_path / "id.yaml", result(), source, data)
    text = path.read_text(encoding="utf-8")
    document = yaml.safe_load(text)
    assert document == {"parameters": {"b1": 0.03123456789, "I1": 1.5e-4}}
    first = text.splitlines()[0]
    assert first.startswith("# mbgen identify ")
    after = first[len("# mbgen identify "):]
    named, end = json.JSONDecoder().raw_decode(after)
    assert named == str(source) and json.loads(after[end:].split("--data ")[1]) == "rec.csv"
    assert "  b1: 0.03123456789  # ± 0.0001 (1 sigma)" in text
    assert "  I1: 0.00015  # not identifiable" in text
    assert "# 7 iterations, cost 0.5\n" in text and "NOT converged" not in text
    assert "#   +1.000 +nan" in text


def test_what_went_wrong_is_written_beside_the_values(tmp_path: Path) -> None:
    found = result(converged=False, undetermined=["0.71 I1 - 0.70 b1"],
                   problems=["I1 < 0"], step_change=np.array([0.5, np.nan]),
                   fit=[Group("readings of enc", 4.0, 1.2), Group("impulses", 1.0, 1.2)])
    text = write_identified(tmp_path / "id.yaml", found, Path("m.yaml"),
                            Path("d.csv")).read_text()
    assert "(NOT converged)" in text.splitlines()[1]
    assert "# not determined by the data: 0.71 I1 - 0.70 b1" in text
    assert "# impossible: I1 < 0" in text
    assert "# moved at half the step (in each sigma): b1 0.5 I1 nan" in text
    assert "# fit, readings of enc: RMS 2 sigma of the stated noise (bound 1.095) FAILED" in text
    assert "# fit, impulses: RMS 1 sigma of the stated noise (bound 1.095)\n" in text
    assert yaml.safe_load(text)["parameters"]["b1"] == 0.03123456789


def test_nothing_half_written_when_the_text_fails(tmp_path: Path) -> None:
    path = tmp_path / "id.yaml"
    path.write_text("kept\n")
    broken = result(std=np.array([1e-4]))  # one σ for two names: zip(strict) refuses
    try:
        write_identified(path, broken, Path("m.yaml"), Path("d.csv"))
    except ValueError:
        pass
    else:
        raise AssertionError("a result whose lengths disagree was written")
    assert path.read_text() == "kept\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "id.yaml"]

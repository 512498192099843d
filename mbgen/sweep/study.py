"""The study file of ``mbgen sweep``: what to vary, how to run, what to record.

Read with the mechanism loader's located YAML (every error names the file, line and key)
and checked twice: its own shape here, on reading, and its names against the compiled
mechanism (:meth:`Study.check_names`), still pointing at the study file's lines. The keys
and choices below are the one home of the format: the reader, the JSON Schema
(:func:`study_schema`) and docs/sweep.md follow them.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

import mbgen.columns as columns
from mbgen.errors import MechanismError
from mbgen.model.yaml_nodes import Node, read_document, read_yaml_file
from mbgen.runtime.integration import STEPPERS
from mbgen.simulation.integrators import step_count

#: Sections of quantities a study sets or varies: parameters by name, initial positions
#: and velocities by coordinate name, constant generalized forces by coordinate name.
QUANTITY_SECTIONS = ("parameters", "initial", "velocity", "forces")
#: A varied quantity's keys per kind; a plain number fixes it for every run.
DISTRIBUTIONS = {"normal": ("mean", "std", "low", "high"),
                 "uniform": ("mean", "tolerance", "low", "high")}
GRID_KEYS = ("from", "to", "count")
STATISTICS = ("min", "max", "mean", "rms")
COORDS = ("dependent", "independent")
PROJECTIONS = ("manifold", "none")
#: What a figure or a trajectory may be of, besides coordinates, velocities and sensors
DERIVED = ("energy", "phi_norm")
RUN_KEYS = ("integrator", "dt", "t_end", "coords", "projection")
RECORD_KEYS = ("final", "figures", "trajectories")
TOP_KEYS = ("mechanism", "samples", "seed", "chunk", *QUANTITY_SECTIONS, "run", "record",
            "dask")
DEFAULT_CHUNK = 512  # runs per chunk: the unit of progress, of resuming and of Dask tasks
MAX_RUNS = 10_000_000
#: Chunks of a study: each is a file written (two with trajectories) and a task, about
#: 5 ms of its own, so `chunk: 1` over 20 000 short runs spent a minute writing files.
#: The default chunk grows beyond DEFAULT_CHUNK to stay within it.
MAX_CHUNKS = 4096
#: Steps of one run: t_end / dt beyond it is not a count of steps a double holds exactly
MAX_RUN_STEPS = 2**53


@dataclass(frozen=True)
class Spec:
    """How one quantity is set: ``value`` (fixed), a ``distribution`` with its keys, or a
    ``grid`` of values; ``line`` is its line in the study file, for errors."""

    section: str
    name: str
    line: int
    value: float | None = None
    distribution: str | None = None
    keys: tuple[tuple[str, float], ...] = ()
    grid: tuple[float, ...] = ()  # a grid's values as listed
    span: tuple[float, float, int] | None = None  # a grid from, to, count (not expanded)

    @property
    def varied(self) -> bool:
        return self.value is None

    @property
    def grid_size(self) -> int:
        """The grid's values, counted without making them (0: not a grid)."""
        return self.span[2] if self.span is not None else len(self.grid)

    def grid_values(self) -> np.ndarray:
        """The grid's values: as listed, or ``count`` from ``from`` to ``to`` evenly (the
        ends exactly, and without overflow: ±1e308 gives -1e308, 0, 1e308)."""
        if self.span is None:
            return np.array(self.grid, dtype=float)
        start, stop, count = self.span
        if count == 1:
            return np.array([start])
        values = between(start, stop, np.arange(count) / (count - 1))
        values[-1] = stop
        return values

    def key(self, name: str) -> float | None:
        return dict(self.keys).get(name)


@dataclass(frozen=True)
class Figure:
    """A recorded figure: ``stats`` of the quantity ``of`` over each run."""

    of: str
    stats: tuple[str, ...]
    line: int
    key: str  # where it is in the file, for errors


@dataclass(frozen=True)
class Study:
    """A study file, read and checked (its names against a mechanism: check_names)."""

    file: str
    mechanism: Path
    samples: int
    seed: int
    chunk: int
    specs: tuple[Spec, ...]
    integrator: str
    dt: float
    t_end: float
    coords: str
    projection: str
    final: bool
    figures: tuple[Figure, ...]
    trajectories: tuple[str, ...]
    trajectory_every: int
    trajectory_line: int
    scheduler: str | None  # the study's dask: scheduler (used only when asked: docs/sweep.md)
    digest: str = ""  # SHA-256 of the file's text as read
    grid_size: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid_size", math.prod(s.grid_size for s in self.specs
                                                        if s.grid_size))

    @property
    def runs(self) -> int:
        """Every grid point (the grids' product) times ``samples`` draws."""
        return self.grid_size * self.samples

    @property
    def steps(self) -> int:
        return int(round(self.t_end / self.dt))

    @property
    def chunks(self) -> int:
        return -(-self.runs // self.chunk)

    def error(self, message: str, line: int | None, key: str | None = None) -> MechanismError:
        return MechanismError(message, self.file, line, key)

    def check_names(self, parameters: list[str], coordinates: list[str],
                    sensors: list[str]) -> None:
        """Every name the study uses is the mechanism's (a located error otherwise)."""
        known = {"parameters": parameters, "initial": coordinates, "velocity": coordinates,
                 "forces": coordinates}
        for spec in self.specs:
            names = known[spec.section]
            what = "parameters" if spec.section == "parameters" else "coordinates"
            if spec.name not in names:
                raise self.error(f"{spec.name!r} is not one of the mechanism's {what} "
                                 f"({', '.join(names) or 'none'})", spec.line,
                                 f"{spec.section}.{spec.name}")
        quantities = recordable(coordinates, sensors)
        for figure in self.figures:
            if figure.of not in quantities:
                raise self.error(f"no quantity {figure.of!r} to record (coordinates, their "
                                 f"velocities <name>_dot, sensors, {', '.join(DERIVED)}: "
                                 f"{', '.join(quantities)})", figure.line,
                                 f"{figure.key}.of")
        for name in self.trajectories:
            if name not in quantities:
                raise self.error(f"no quantity {name!r} to record ({', '.join(quantities)})",
                                 self.trajectory_line, "record.trajectories")


def recordable(coordinates: list[str], sensors: list[str]) -> list[str]:
    """What a figure or a trajectory may be of, in this order."""
    return [*coordinates, *map(columns.velocity, coordinates), *sensors, *DERIVED]


def between(low: float, high: float, u: np.ndarray) -> np.ndarray:
    """``low + (high - low) u`` for u in [0, 1], computed as NumPy's uniform draws are
    (to the bit) when ``high - low`` is finite, else by halves, so that ±1e308 does not
    overflow (each partial sum stays between low and high)."""
    width = high - low
    if math.isfinite(width):
        return low + width * u
    half = high / 2 - low / 2
    return (low + half * u) + half * u


def read_study(path: Path) -> Study:
    """The study file at ``path``, checked; its mechanism path is taken relative to it."""
    text = read_yaml_file(path, "a study file")
    root = read_document(text, str(path))
    keys = root.mapping(set(TOP_KEYS), {"mechanism", "run"})
    mechanism = Path(keys["mechanism"].string())
    if not mechanism.is_absolute():
        mechanism = path.parent / mechanism
    if not mechanism.is_file():
        raise keys["mechanism"].error(f"no mechanism file {mechanism}")
    specs = tuple(spec for section in QUANTITY_SECTIONS if section in keys
                  for spec in _specs(keys[section], section))
    run = keys["run"].mapping(set(RUN_KEYS), {"dt", "t_end"})
    dt, t_end = (_positive(run[k]) for k in ("dt", "t_end"))
    if not t_end / dt < MAX_RUN_STEPS:  # inf when dt is tiny: no count of steps
        raise run["t_end"].error(f"t_end / dt = {t_end / dt:.4g} steps, more than a run can "
                                 f"count ({MAX_RUN_STEPS:.4g})")
    try:
        step_count(t_end, dt)  # simulate's rule: a run ends at t_end
    except ValueError as error:
        raise run["t_end"].error(str(error)) from None
    record = (keys["record"].mapping(set(RECORD_KEYS)) if "record" in keys else {})
    figures = tuple(_figure(node) for node in record["figures"].sequence()) \
        if "figures" in record else ()
    trajectories: tuple[str, ...] = ()
    every, trajectory_line = 1, 0
    if "trajectories" in record:
        node = record["trajectories"]
        entry = node.mapping({"of", "every"}, {"of"})
        trajectories = tuple(item.string() for item in entry["of"].sequence())
        every = _count(entry["every"]) if "every" in entry else 1
        trajectory_line = node.line
    study = Study(
        file=str(path), mechanism=mechanism,
        samples=_count(keys["samples"]) if "samples" in keys else 1,
        seed=_seed(keys["seed"]) if "seed" in keys else 0,
        chunk=_count(keys["chunk"]) if "chunk" in keys else DEFAULT_CHUNK,
        specs=specs,
        integrator=_choice(run["integrator"], tuple(STEPPERS)) if "integrator" in run
        else "rk4",
        dt=dt, t_end=t_end,
        coords=_choice(run["coords"], COORDS) if "coords" in run else "dependent",
        projection=(_choice(run["projection"], PROJECTIONS) if "projection" in run
                    else "manifold"),
        final=record["final"].boolean() if "final" in record else True,
        figures=figures, trajectories=trajectories, trajectory_every=every,
        trajectory_line=trajectory_line,
        scheduler=(keys["dask"].mapping({"scheduler"}, {"scheduler"})["scheduler"].string()
                   if "dask" in keys else None),
        digest=hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest())
    if study.runs > MAX_RUNS:  # counted from the grids' sizes: nothing made yet
        raise root.error(f"{study.runs:,} runs ({study.grid_size:,} grid points x "
                         f"{study.samples:,} samples), more than {MAX_RUNS:,}")
    if study.chunks > MAX_CHUNKS:
        smallest = -(-study.runs // MAX_CHUNKS)
        if "chunk" in keys:
            raise keys["chunk"].error(
                f"chunk: {study.chunk:,} makes {study.chunks:,} chunks of the {study.runs:,} "
                f"runs, more than {MAX_CHUNKS:,} (each is a file and a task): give chunk "
                f"≥ {smallest:,}")
        study = replace(study, chunk=smallest)
    return study


def _specs(node: Node, section: str) -> list[Spec]:
    """Any names (checked against the mechanism later)."""
    return [_spec(child, section, name) for name, child in node.children().items()]


def _spec(node: Node, section: str, name: str) -> Spec:
    if node.is_scalar():
        return Spec(section, name, node.line, value=_number(node))
    if not node.is_mapping():
        raise node.error("expected a number, a distribution or a grid")
    keys = node.mapping({"distribution", "grid", *{k for v in DISTRIBUTIONS.values() for k in v}})
    if "grid" in keys:
        if len(keys) > 1:
            raise node.error(f"a grid takes no other keys ({', '.join(sorted(keys))} given)")
        return _grid(keys["grid"], section, name, node.line)
    if "distribution" not in keys:
        raise node.error("expected `distribution: normal` or `uniform`, or `grid:`")
    kind = _choice(keys["distribution"], tuple(DISTRIBUTIONS))
    values = {key: _number(child) for key, child in keys.items() if key != "distribution"}
    for key in values.keys() - set(DISTRIBUTIONS[kind]):
        raise keys[key].error(f"a {kind} distribution takes {', '.join(DISTRIBUTIONS[kind])}"
                              f", not {key!r}")
    low, high = values.get("low"), values.get("high")
    if kind == "normal":
        if "std" not in values or not values["std"] > 0:
            raise node.error("a normal distribution needs std > 0")
    elif "tolerance" in values:
        if low is not None or high is not None:
            raise node.error("give a uniform distribution low and high, or a tolerance about "
                             "its mean, not both")
        if not values["tolerance"] > 0:
            raise keys["tolerance"].error("tolerance must be > 0")
    elif low is None or high is None:
        raise node.error("a uniform distribution needs low and high, or a tolerance")
    elif "mean" in values:
        raise keys["mean"].error("a uniform distribution between low and high has no mean "
                                 "to give")
    if low is not None and high is not None and not low < high:
        raise node.error(f"low ({low:g}) must be below high ({high:g})")
    return Spec(section, name, node.line, distribution=kind, keys=tuple(values.items()))


def _grid(node: Node, section: str, name: str, line: int) -> Spec:
    if node.is_sequence():
        if len(node.raw.value) > MAX_RUNS:  # counted before any value is read
            raise node.error(f"a grid of {len(node.raw.value):,} values, more than the "
                             f"{MAX_RUNS:,} runs of a study")
        values = tuple(_number(item) for item in node.sequence())
        if not values:
            raise node.error("a grid needs at least one value")
        return Spec(section, name, line, grid=values)
    keys = node.mapping(set(GRID_KEYS), set(GRID_KEYS))
    start, stop, count = _number(keys["from"]), _number(keys["to"]), _count(keys["count"])
    if count > MAX_RUNS:  # refused before its values are made
        raise keys["count"].error(f"a grid of {count:,} values, more than the {MAX_RUNS:,} "
                                  "runs of a study")
    return Spec(section, name, line, span=(start, stop, count))


def _figure(node: Node) -> Figure:
    keys = node.mapping({"of", "stats"}, {"of"})
    stats = (tuple(_choice(item, STATISTICS) for item in keys["stats"].sequence())
             if "stats" in keys else ("min", "max"))
    if not stats or len(set(stats)) != len(stats):
        raise keys["stats"].error(f"list each of {', '.join(STATISTICS)} at most once, and "
                                  "one at least")
    return Figure(keys["of"].string(), stats, node.line, node.key)


def _number(node: Node) -> float:
    value = node.scalar()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
            value):
        raise node.error(f"expected a finite number, got {value!r}")
    return float(value)


def _positive(node: Node) -> float:
    value = _number(node)
    if not value > 0:
        raise node.error(f"expected a number > 0, got {value:g}")
    return value


def _count(node: Node) -> int:
    value = node.integer()
    if value < 1:
        raise node.error(f"expected a whole number ≥ 1, got {value}")
    return value


def _seed(node: Node) -> int:
    value = node.integer()
    if not 0 <= value < 2**63:
        raise node.error(f"a seed is a whole number from 0 to 2^63 - 1, got {value}")
    return value


def _choice(node: Node, allowed: tuple[str, ...]) -> str:
    value = node.string()
    if value not in allowed:
        raise node.error(f"unknown value {value!r} (choose from {', '.join(allowed)})")
    return value


def study_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of the study file, from the constants above: what an
    editor can check as it is typed (the reader checks the rest, at the same keys)."""
    number = {"type": "number"}
    distribution = {"type": "object", "required": ["distribution"], "additionalProperties":
                    False, "properties": {
                        "distribution": {"enum": list(DISTRIBUTIONS)},
                        **{k: number for v in DISTRIBUTIONS.values() for k in v}}}
    grid = {"type": "object", "required": ["grid"], "additionalProperties": False,
            "properties": {"grid": {"oneOf": [
                {"type": "array", "items": number, "minItems": 1},
                {"type": "object", "required": list(GRID_KEYS), "additionalProperties": False,
                 "properties": {"from": number, "to": number,
                                "count": {"type": "integer", "minimum": 1}}}]}}}
    quantities = {"type": "object", "additionalProperties": {"oneOf": [number, distribution,
                                                                       grid]}}
    whole = {"type": "integer", "minimum": 1}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "mbgen sweep study", "type": "object",
        "required": ["mechanism", "run"], "additionalProperties": False,
        "properties": {
            "mechanism": {"type": "string", "description": "The mechanism file, relative to "
                          "the study file."},
            "samples": whole, "seed": {"type": "integer", "minimum": 0}, "chunk": whole,
            **{section: quantities for section in QUANTITY_SECTIONS},
            "run": {"type": "object", "required": ["dt", "t_end"], "additionalProperties":
                    False, "properties": {
                        "integrator": {"enum": list(STEPPERS)},
                        "dt": {"type": "number", "exclusiveMinimum": 0},
                        "t_end": {"type": "number", "exclusiveMinimum": 0},
                        "coords": {"enum": list(COORDS)},
                        "projection": {"enum": list(PROJECTIONS)}}},
            "record": {"type": "object", "additionalProperties": False, "properties": {
                "final": {"type": "boolean"},
                "figures": {"type": "array", "items": {
                    "type": "object", "required": ["of"], "additionalProperties": False,
                    "properties": {"of": {"type": "string"}, "stats": {
                        "type": "array", "items": {"enum": list(STATISTICS)},
                        "minItems": 1, "uniqueItems": True}}}},
                "trajectories": {"type": "object", "required": ["of"],
                                 "additionalProperties": False, "properties": {
                                     "of": {"type": "array", "items": {"type": "string"}},
                                     "every": whole}}}},
            "dask": {"type": "object", "required": ["scheduler"], "additionalProperties": False,
                     "properties": {"scheduler": {"type": "string"}}},
        },
    }

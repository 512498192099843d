"""An FMI 2.0 unit (FMU) of a mechanism, for co-simulation and model exchange.

The unit is the exported C library (codegen/ship.py) with mbgen's generic FMI wrapper
(mbgen/csrc/fmi2/fmu.c) compiled into one shared library, and a ``modelDescription.xml``
built here with xml.etree from the build's meta.json (every name from the mechanism file
is XML text or an attribute, escaped by ElementTree; none reaches the C, which gets
numbers only, through templates/fmu_model.h.j2). The zip holds the binary for this
platform and every source it was built from, so the unit can be rebuilt elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import uuid
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import mbgen.columns as columns
from mbgen.codegen.cache import csrc_dir
from mbgen.codegen.ship import export_files, prefixed_names
from mbgen.codegen.staging import CHILD_OPTIONS
from mbgen.codegen.templates import render
from mbgen.errors import MbgenError
from mbgen.files import atomic_write, same_file

#: the integrators a unit can step with, and their codes in mbgen.h (MB_EULER, ...)
FMU_INTEGRATORS = {"euler": 0, "rk4": 1, "trapezoidal": 2, "semi-implicit-euler": 3}
PROJECTION_MANIFOLD = 1  # MB_PROJECT_MANIFOLD: dependent coordinates back onto Φ = 0
FMI2_HEADERS = ("fmi2Functions.h", "fmi2FunctionTypes.h", "fmi2TypesPlatform.h")
WRAPPER = "fmu.c"
STEP_NAME = "mbgen.step"  # a dot is in no name of a mechanism file: no clash
BUILD_FLAGS = ["-std=c99", "-O1", "-fPIC", "-shared", "-fvisibility=hidden",
               "-ffp-contract=off"]

# SI base-unit exponents of the units a unit's variables carry (FMI 2.0 BaseUnit)
BASE_UNITS = {
    "m": {"m": 1}, "m/s": {"m": 1, "s": -1}, "m/s2": {"m": 1, "s": -2},
    "rad": {"rad": 1}, "rad/s": {"rad": 1, "s": -1}, "rad/s2": {"rad": 1, "s": -2},
    "1/s": {"s": -1}, "1/s2": {"s": -2}, "s": {"s": 1},
    "N": {"kg": 1, "m": 1, "s": -2}, "N.m": {"kg": 1, "m": 2, "s": -2},
    "J": {"kg": 1, "m": 2, "s": -2},
}
RATE = {"m": ("m/s", "m/s2", "N"), "rad": ("rad/s", "rad/s2", "N.m"),
        "1": ("1/s", "1/s2", "J")}


@dataclass(frozen=True)
class FmuSettings:
    """What the unit is made with: the integrator and formulation of its co-simulation
    steps, the internal step [s] (the parameter mbgen.step's start), the independent
    coordinates z (indices into q: the continuous states of model exchange and the start
    values of both) and the coordinates its inputs act on (indices)."""

    integrator: str
    independent: bool
    step: float
    z: Sequence[int]
    inputs: Sequence[int]


def platform_folder() -> str:
    """The FMI 2.0 binaries folder of this platform (linux64, darwin64, win64)."""
    bits = "64" if sys.maxsize > 2**32 else "32"
    system = {"Linux": "linux", "Darwin": "darwin", "Windows": "win"}.get(platform.system())
    if system is None:
        raise MbgenError(f"--fmu: no FMI 2.0 platform name for {platform.system()}")
    return system + bits


def library_suffix() -> str:
    return {"darwin": ".dylib", "win": ".dll"}.get(platform_folder()[:-2], ".so")


def _layout(meta: dict, inputs: Sequence[int]) -> dict[str, int]:
    """The first value reference of each block of Real variables, in this order."""
    n = meta["n"]
    sizes = [("q", n), ("qd", n), ("qdd", n), ("sensors", len(meta["sensor_labels"])),
             ("accelerometers", len(meta.get("accelerometer_labels", []))),
             ("phi_norm", 1), ("energy", 1), ("inputs", len(inputs)),
             ("parameters", len(meta["parameters"])), ("step", 1)]
    references, vr = {}, 0
    for block, size in sizes:
        references[block] = vr
        vr += size
    references["count"] = vr
    return references


def input_name(coordinate: str) -> str:
    """An input's variable: the generalized force on the coordinate (simulate's CSV name)."""
    return columns.force(coordinate)


@dataclass(frozen=True)
class _Variable:
    name: str
    vr: int
    causality: str
    variability: str
    initial: str | None
    start: float | None = None
    unit: str | None = None
    description: str = ""
    derivative: str | None = None  # the name of the state it is the derivative of


def _variables(meta: dict, settings: FmuSettings) -> list[_Variable]:
    names, units = meta["coordinate_names"], meta["coordinate_units"]
    refs = _layout(meta, settings.inputs)
    z = set(settings.z)
    out: list[_Variable] = []
    for i, (name, unit) in enumerate(zip(names, units, strict=True)):
        start = float(meta["q0"][i]) if i in z else None
        out.append(_Variable(name, refs["q"] + i, "output", "continuous",
                             "exact" if i in z else "calculated", start, unit,
                             "independent coordinate (start value)" if i in z
                             else "coordinate"))
    for i, (name, unit) in enumerate(zip(names, units, strict=True)):
        out.append(_Variable(columns.velocity(name), refs["qd"] + i, "output", "continuous",
                             "exact" if i in z else "calculated", 0.0 if i in z else None,
                             RATE[unit][0], "velocity", name if i in z else None))
    for i, (name, unit) in enumerate(zip(names, units, strict=True)):
        out.append(_Variable(columns.acceleration(name), refs["qdd"] + i, "output", "continuous",
                             "calculated", None, RATE[unit][1], "acceleration",
                             columns.velocity(name) if i in z else None))
    for k, label in enumerate(meta["sensor_labels"]):
        out.append(_Variable(label, refs["sensors"] + k, "output", "continuous", "calculated",
                             description="sensor"))
    for k, label in enumerate(meta.get("accelerometer_labels", [])):
        out.append(_Variable(label, refs["accelerometers"] + k, "output", "continuous",
                             "calculated", description="accelerometer"))
    out.append(_Variable(columns.CONSTRAINT_NORM, refs["phi_norm"], "output", "continuous",
                         "calculated", description="constraint error ‖Φ(q)‖₂"))
    out.append(_Variable(columns.ENERGY, refs["energy"], "output", "continuous", "calculated",
                         unit="J", description="kinetic + potential energy"))
    for k, i in enumerate(settings.inputs):
        out.append(_Variable(input_name(names[i]), refs["inputs"] + k, "input", "continuous",
                             None, 0.0, RATE[units[i]][2],
                             f"generalized force on {names[i]}"))
    for k, (name, value) in enumerate(meta["parameters"].items()):
        out.append(_Variable(name, refs["parameters"] + k, "parameter", "fixed", "exact",
                             float(value), description="mechanism parameter"))
    out.append(_Variable(STEP_NAME, refs["step"], "parameter", "fixed", "exact",
                         settings.step, "s", f"internal step of the {settings.integrator} "
                         "integrator (co-simulation)"))
    seen: dict[str, int] = {}
    for variable in out:
        if variable.name in seen:
            raise MbgenError(f"--fmu: two of the unit's variables would be named "
                             f"{variable.name!r}: rename a coordinate, sensor or parameter")
        seen[variable.name] = variable.vr
    return out


def model_description(meta: dict, name: str, guid: str, settings: FmuSettings) -> bytes:
    """modelDescription.xml (FMI 2.0, co-simulation and model exchange)."""
    from mbgen.version import __version__

    variables = _variables(meta, settings)
    index = {v.name: k + 1 for k, v in enumerate(variables)}  # FMI's 1-based indices
    root = ET.Element("fmiModelDescription", {
        "fmiVersion": "2.0", "modelName": meta["name"], "guid": guid,
        "description": f"mbgen mechanism {meta['name']}", "generationTool":
        f"mbgen {__version__}", "variableNamingConvention": "flat",
        "numberOfEventIndicators": "0"})
    sources = [WRAPPER, f"{name}.c"]
    for kind, extra in (("ModelExchange", {"completedIntegratorStepNotNeeded": "true"}),
                        ("CoSimulation", {"canHandleVariableCommunicationStepSize": "true"})):
        element = ET.SubElement(root, kind, {
            "modelIdentifier": name, "canNotUseMemoryManagementFunctions": "true",
            "canGetAndSetFMUstate": "false", "canSerializeFMUstate": "false",
            "providesDirectionalDerivative": "false", **extra})
        files = ET.SubElement(element, "SourceFiles")
        for source in sources:
            ET.SubElement(files, "File", {"name": source})
    used = sorted({v.unit for v in variables if v.unit})
    units = ET.SubElement(root, "UnitDefinitions")
    for unit in used:
        element = ET.SubElement(units, "Unit", {"name": unit})
        if unit in BASE_UNITS:
            ET.SubElement(element, "BaseUnit", {k: str(e) for k, e in BASE_UNITS[unit].items()})
    categories = ET.SubElement(root, "LogCategories")
    ET.SubElement(categories, "Category", {"name": "logStatusError",
                                           "description": "why a call or a step failed"})
    ET.SubElement(categories, "Category", {"name": "logAll"})
    ET.SubElement(root, "DefaultExperiment", {"startTime": "0", "stepSize": repr(settings.step)})
    model_variables = ET.SubElement(root, "ModelVariables")
    for v in variables:
        attributes = {"name": v.name, "valueReference": str(v.vr), "causality": v.causality,
                      "variability": v.variability}
        if v.initial is not None:
            attributes["initial"] = v.initial
        if v.description:
            attributes["description"] = v.description
        element = ET.SubElement(model_variables, "ScalarVariable", attributes)
        real = {} if v.start is None else {"start": repr(v.start)}
        if v.unit:
            real["unit"] = v.unit
        if v.derivative is not None:
            real["derivative"] = str(index[v.derivative])
        ET.SubElement(element, "Real", real)
    structure = ET.SubElement(root, "ModelStructure")
    outputs = ET.SubElement(structure, "Outputs")
    for v in variables:
        if v.causality == "output":
            ET.SubElement(outputs, "Unknown", {"index": str(index[v.name])})
    names = meta["coordinate_names"]
    derivatives = ET.SubElement(structure, "Derivatives")  # the states' order: z, then ż
    for derivative in (columns.velocity, columns.acceleration):
        for i in settings.z:
            ET.SubElement(derivatives, "Unknown", {"index": str(index[derivative(names[i])])})
    initial = ET.SubElement(structure, "InitialUnknowns")
    for v in variables:
        if v.causality == "output" and v.initial == "calculated":
            ET.SubElement(initial, "Unknown", {"index": str(index[v.name])})
    ET.indent(root)
    return ET.tostring(root, encoding="UTF-8", xml_declaration=True) + b"\n"


def unit_guid(build: Path, name: str, settings: FmuSettings) -> str:
    """A GUID fixed by the build's content hash, the unit's name and its settings."""
    text = json.dumps([build.name, name, settings.integrator, settings.independent,
                       settings.step, list(settings.z), list(settings.inputs)])
    return "{" + str(uuid.UUID(hashlib.sha256(text.encode()).hexdigest()[:32])) + "}"


def fmu_sources(build: Path, name: str, active_rows: list[int], settings: FmuSettings,
                guid: str) -> dict[str, str]:
    """Every source file of the unit: the exported library, the wrapper, its data header
    and the FMI 2.0 headers (with their licence)."""
    meta = json.loads((build / "meta.json").read_text())
    library = export_files(build, name, active_rows)
    wrapper_dir = csrc_dir() / "fmi2"
    wrapper = (wrapper_dir / WRAPPER).read_text()
    files = {f"{name}.h": library[f"{name}.h"], f"{name}.c": library[f"{name}.c"],
             WRAPPER: wrapper}
    files["fmu_model.h"] = render(
        "fmu_model.h.j2", name=name, mechanism=meta["name"], version=meta["mbgen_version"],
        digest=build.name, names=prefixed_names([wrapper]), guid=guid, n=meta["n"],
        m=meta["m"], parameters=list(meta["parameters"].values()), active_rows=active_rows,
        z=list(settings.z), sensors=len(meta["sensor_labels"]),
        accelerometers=len(meta.get("accelerometer_labels", [])),
        inputs=list(settings.inputs), integrator=FMU_INTEGRATORS[settings.integrator],
        independent=int(settings.independent), project=0 if settings.independent
        else PROJECTION_MANIFOLD, step=settings.step, q0=meta["q0"],
        references={k: v for k, v in _layout(meta, settings.inputs).items() if k != "count"})
    for header in FMI2_HEADERS:
        files[header] = (wrapper_dir / header).read_text()
    files["LICENSE-fmi2.txt"] = (wrapper_dir / "LICENSE.txt").read_text()
    return files


def compile_binary(sources: Path, name: str, target: Path) -> None:
    """The unit's shared library for this platform from its sources; a failed build is
    an MbgenError with the compiler's words."""
    compiler = os.environ.get("CC", "cc")
    command = [compiler, *BUILD_FLAGS, f"-I{sources}", str(sources / WRAPPER),
               str(sources / f"{name}.c"), "-lm", "-o", str(target)]
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=600,
                             **CHILD_OPTIONS)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MbgenError(f"--fmu: the unit could not be built ({compiler}: {exc}); nothing "
                         "written") from None
    if run.returncode != 0:
        words = (run.stderr or run.stdout).strip().splitlines()[-12:]
        raise MbgenError(f"--fmu: the unit could not be built ({compiler} exited with "
                         f"{run.returncode}); nothing written:\n" + "\n".join(words))


def made_by_mbgen(path: Path) -> bool:
    """``path`` is a unit that mbgen wrote (its modelDescription.xml says so)."""
    try:
        with zipfile.ZipFile(path) as archive:
            root = ET.fromstring(archive.read("modelDescription.xml"))
    except (OSError, KeyError, zipfile.BadZipFile, ET.ParseError):
        return False
    return root.get("generationTool", "").startswith("mbgen ")


def write_fmu(build: Path, target: Path, name: str, active_rows: list[int],
              settings: FmuSettings, force: bool = False,
              protected: Iterable[Path] = ()) -> Path:
    """``target`` (.fmu): modelDescription.xml, binaries/<platform>/name<suffix> and
    sources/. Built in a temporary directory; nothing is written unless the build
    succeeds, never over a ``protected`` path, and over an existing file only when mbgen
    made it or with ``force``."""
    for item in protected:
        if same_file(target, item):
            raise MbgenError(f"--fmu: {target} is an input: choose another file")
    if target.exists() and not force and not made_by_mbgen(target):
        raise MbgenError(f"--fmu: {target} exists and is not a unit mbgen made: choose "
                         "another file, or --force to replace it")
    if settings.integrator not in FMU_INTEGRATORS:
        raise MbgenError(f"--integrator {settings.integrator}: a unit steps with "
                         f"{', '.join(FMU_INTEGRATORS)}")
    meta = json.loads((build / "meta.json").read_text())
    guid = unit_guid(build, name, settings)
    description = model_description(meta, name, guid, settings)
    sources = fmu_sources(build, name, active_rows, settings, guid)
    binary = f"binaries/{platform_folder()}/{name}{library_suffix()}"
    with tempfile.TemporaryDirectory(prefix="mbgen-fmu-") as work:
        folder = Path(work) / "sources"
        folder.mkdir()
        for file, text in sources.items():
            (folder / file).write_text(text)
        library = Path(work) / f"{name}{library_suffix()}"
        compile_binary(folder, name, library)

        def write(path: Path) -> None:
            with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
                archive.writestr("modelDescription.xml", description)
                archive.write(library, binary)
                for file in sources:
                    archive.write(folder / file, f"sources/{file}")

        atomic_write(target, write)
    return target

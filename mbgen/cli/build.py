"""`mbgen compile` and `mbgen export`: a mechanism's module, its package, its standalone
C library and its FMI unit."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.panel import Panel

from mbgen.cli import (
    BUILD_DIR,
    MECHANISM_FILE,
    console,
    key_value_grid,
    load_with_status,
    status_console,
)
from mbgen.cli.conventions import POSITIVE, Command
from mbgen.errors import MbgenError


@click.command("compile", cls=Command,
               example="mbgen compile mechanisms/fourbar.yaml --package dist")
@click.argument("file", type=MECHANISM_FILE)
@BUILD_DIR
@click.option("--force", is_flag=True, help="Rebuild even if the cached module is current, "
              "and let --package replace a directory mbgen did not make (never one that "
              "holds an input).")
@click.option("--package", "package_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Also write an importable Python package into this "
              "directory (`import NAME`; needs no SymPy, C compiler or YAML file).")
@click.option("--name", default=None, help="Package name (default: from the file name).")
def compile_(file: Path, build_dir: Path | None, force: bool, package_dir: Path | None,
             name: str | None) -> None:
    """Compile FILE (a mechanism .yaml) into a C extension module."""
    from mbgen.codegen.ship import write_package

    start = time.perf_counter()
    mech, fresh = load_with_status(file, build_dir, force)
    elapsed = time.perf_counter() - start
    if package_dir is not None:
        written = write_package(mech.directory, package_dir, _package_name(name, file),
                                force=force, protected=[file])
    grid = key_value_grid()
    grid.add_row("mechanism", f"[bold]{escape(mech.name)}[/]")
    grid.add_row("coordinates n", str(mech.n))
    grid.add_row("constraints m", str(mech.m))
    grid.add_row("DOF", str(mech.dof))
    grid.add_row("output", escape(str(mech.directory)))
    if fresh:
        steps = [f"{k} {v:.2f} s" for k, v in mech.meta.get("timings", {}).items()]
        grid.add_row("timings", ", ".join([*steps, f"total {elapsed:.2f} s"]))
    if package_dir is not None:
        grid.add_row("package", escape(f"{written} (import {written.name})"))
    title = "[green]compiled[/]" if fresh else "[cyan]up to date[/] (cached build)"
    console.print(Panel(grid, title=title, title_align="left", expand=False))


@click.command("export", cls=Command, example="mbgen export mechanisms/fourbar.yaml --c fourbar_c")
@click.argument("file", type=MECHANISM_FILE)
@click.option("--c", "c_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Directory for the standalone C library.")
@click.option("--fmu", "fmu_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Also (or instead) write an FMI 2.0 unit (.fmu) for "
              "co-simulation and model exchange, built for this platform, with its sources "
              "(docs/fmu.md).")
@click.option("--integrator", type=click.Choice(["rk4", "trapezoidal", "euler",
                                                 "semi-implicit-euler"]),
              default="rk4", show_default=True,
              help="--fmu: the co-simulation's integrator (as `simulate --integrator`).")
@click.option("--step", type=POSITIVE, default=1e-3, show_default=True,
              help="--fmu: the co-simulation's internal step [s] (the parameter "
              "mbgen.step, changeable before a run).")
@click.option("--coords", type=click.Choice(["dependent", "independent"]),
              default="dependent", show_default=True,
              help="--fmu: the co-simulation integrates all q (projected onto the "
              "constraints after each step) or only z (as `simulate --coords`).")
@click.option("--input", "inputs", multiple=True, metavar="COORDINATE",
              help="--fmu: an input (a generalized force force_COORDINATE) on this "
              "coordinate, besides the actuated ones'; repeat for more.")
@click.option("--name", default=None, help="Prefix of the C API and the unit's model "
              "identifier (default: from the file name).")
@click.option("--force", is_flag=True, help="Write into a directory (or over a file) mbgen "
              "did not make (replacing files of the same names; never an input).")
@BUILD_DIR
def export(file: Path, c_dir: Path | None, fmu_path: Path | None, integrator: str,
           step: float, coords: str, inputs: tuple[str, ...], name: str | None, force: bool,
           build_dir: Path | None) -> None:
    """Write FILE's mechanism as a standalone C library (--c) and/or an FMI 2.0 unit
    (--fmu).

    --c DIR: NAME.h, NAME.c, an example program, a Makefile and a README; C99 and libm
    only (docs/generated-code.md).

    --fmu OUT.fmu: the same library as a Functional Mock-up Unit for system simulators
    (FMPy, Modelica tools, Simulink): co-simulation by mbgen's integrators (--integrator,
    --step, --coords) and model exchange in the independent coordinates; inputs are
    generalized forces (the actuated coordinates' and --input's), outputs every q, q̇,
    q̈, sensor, ‖Φ‖ and the energy, the file's parameters tunable before a run. The unit
    holds modelDescription.xml, a binary for this platform built at export
    (binaries/PLATFORM/NAME.so, .dylib or .dll) and its sources (sources/: the library,
    mbgen's FMI wrapper fmu.c, its data fmu_model.h, the FMI headers). For another
    platform, build sources/fmu.c and sources/NAME.c into a shared library there (cc
    -std=c99 -shared -fPIC -Isources sources/fmu.c sources/NAME.c -lm) and add it under
    binaries/. A unit that does not build is not written (exit 1). See docs/fmu.md."""
    from mbgen.codegen.ship import EXAMPLE_PROGRAM, EXAMPLE_SOURCE, export_c

    if c_dir is None and fmu_path is None:
        raise click.UsageError("give --c DIR, --fmu FILE.fmu or both")
    if fmu_path is not None and fmu_path.suffix != ".fmu":
        raise click.BadParameter(f"{fmu_path}: a unit's file ends in .fmu",
                                 param_hint="--fmu")
    mech, _ = load_with_status(file, build_dir)
    prefix = _package_name(name, file)
    if fmu_path is not None:
        _export_fmu(mech, file, fmu_path, prefix, integrator, step, coords, inputs, force)
    if c_dir is None:
        return
    export_c(mech.directory, c_dir, prefix, [int(r) for r in mech.active_rows], force=force,
             protected=[file])
    console.print(f"[green]✓[/] {escape(mech.name)}: {escape(str(c_dir))}/{prefix}.h, "
                  f"{prefix}.c, {EXAMPLE_SOURCE}, Makefile, README.md (`make` builds "
                  f"lib{prefix}.a and ./{EXAMPLE_PROGRAM}: q̈ at q0, or `./"
                  f"{EXAMPLE_PROGRAM} FILE` for FILE's states)")


def _export_fmu(mech: Any, file: Path, target: Path, prefix: str, integrator: str,
                step: float, coords: str, inputs: tuple[str, ...], force: bool) -> None:
    """The FMI 2.0 unit: z from the file (or chosen at q0), inputs on the actuated
    coordinates and those of --input."""
    from mbgen.codegen.fmu import FmuSettings, write_fmu

    acted = [a["coordinate"] for a in mech.meta.get("actuators", [])]
    names = list(dict.fromkeys([*acted, *inputs]))
    unknown = [c for c in names if c not in mech.coordinate_names]
    if unknown:
        raise click.BadParameter(f"{', '.join(unknown)}: not a coordinate of {file} (its "
                                 f"coordinates: {', '.join(mech.coordinate_names)})",
                                 param_hint="--input")
    with status_console.status("building the FMU"):
        z = [mech.coordinate_index(c) for c in mech.independent_coordinates()]
        settings = FmuSettings(integrator, coords == "independent", float(step), z,
                               [mech.coordinate_index(c) for c in names])
        write_fmu(mech.directory, target, prefix, [int(r) for r in mech.active_rows],
                  settings, force=force, protected=[file])
    states = ", ".join(mech.coordinate_names[i] for i in z)
    console.print(f"[green]✓[/] {escape(mech.name)}: {escape(str(target))} (FMI 2.0, "
                  f"co-simulation by {integrator} at {step:g} s and model exchange in "
                  f"{escape(states)}; inputs: "
                  f"{escape(', '.join(f'force_{c}' for c in names)) or 'none'})")


def _package_name(name: str | None, file: Path) -> str:
    """--name, or the file's stem made an identifier; a malformed --name is a usage error."""
    from mbgen.codegen.ship import package_name

    try:
        return package_name(name, Path(file).stem)
    except MbgenError as exc:
        raise click.BadParameter(str(exc), param_hint="--name") from None

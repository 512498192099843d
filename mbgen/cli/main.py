"""The ``mbgen`` command: compile, inspect and generate mechanism files.

To add a command, decorate a function with ``@cli.command()`` here, or, for a larger
command in its own module, register it in the section at the bottom of this file.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mbgen.cli import (
    BUILD_DIR,
    Verbosity,
    console,
    err_console,
    load_with_status,
    status_console,
)
from mbgen.cli.conventions import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_UNTRUSTED,
    POSITIVE,
    Command,
)
from mbgen.errors import MbgenError, MbgenWarning, UntrustedResultError
from mbgen.redundancy import off_constraints
from mbgen.version import __version__

MECHANISM_FILE = click.Path(dir_okay=False, path_type=Path)


def _one_line_warning(message: Warning | str, category: type[Warning], *args: Any,
                      **kwargs: Any) -> None:
    """mbgen's own warnings as one yellow line (no source line); others as Python's."""
    if issubclass(category, MbgenWarning):
        err_console.print(f"[yellow]warning:[/] {escape(str(message))}")
    else:
        _python_warning(message, category, *args, **kwargs)


_python_warning = warnings.showwarning


class MbgenGroup(click.Group):
    """Reports errors as one red line instead of a traceback, for every subcommand
    (``--debug`` adds the traceback), with the exit codes of docs/cli.md."""

    command_class = Command
    group_class = type  # subgroups (cache, generate) are MbgenGroups too

    def invoke(self, ctx: click.Context) -> Any:
        # SIGTERM ends the command like Ctrl-C would: cleanup code runs, so a file being
        # written leaves no temporary behind
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
        warnings.showwarning = _one_line_warning
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # usage errors and exits: click reports them itself
        except UntrustedResultError as exc:  # ran, but the result is not to be trusted
            _fail(str(exc), ctx, code=EXIT_UNTRUSTED)
        except MbgenError as exc:  # bad input: the message already names file:line [key]
            _fail(str(exc), ctx, code=EXIT_BAD_INPUT)
        except OSError as exc:  # unreadable input, unwritable output directory, ...
            where = f": {exc.filename}" if exc.filename else ""
            _fail(f"{exc.strerror or exc}{where}", ctx, code=EXIT_BAD_INPUT)
        except Exception as exc:  # a bug in mbgen: say so, in one line
            _fail(f"internal error ({type(exc).__name__}: {exc}); please report it with "
                  "the command and input (--debug shows the traceback)", ctx,
                  code=EXIT_INTERNAL)


def _fail(message: str, ctx: click.Context, code: int) -> None:
    if Verbosity.debug:
        err_console.print_exception()
    err_console.print(Text.assemble(("error: ", "bold red"), (message, "red")))
    ctx.exit(code)


@click.group(cls=MbgenGroup)
@click.version_option(__version__, prog_name="mbgen")
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr: no status lines, "
              "progress bars or summaries (results on stdout and files are unchanged).")
@click.option("-v", "--verbose", is_flag=True, help="Also the build steps with their "
              "timings and the settings each command resolved.")
@click.option("--debug", is_flag=True, help="Show the Python traceback with an error.")
def cli(quiet: bool, verbose: bool, debug: bool) -> None:
    """mbgen: symbolic code generation for multibody mechanisms, planar and spatial."""
    Verbosity.set(quiet, verbose, debug)


@cli.command("compile", example="mbgen compile mechanisms/fourbar.yaml --package dist")
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
    grid = _grid()
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


@cli.command("export", example="mbgen export mechanisms/fourbar.yaml --c fourbar_c")
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


@cli.command(example="mbgen info mechanisms/fourbar.yaml")
@click.argument("file", type=MECHANISM_FILE)
@BUILD_DIR
def info(file: Path, build_dir: Path | None) -> None:
    """Describe FILE: coordinates, constraints, rank and DOF, parameters, I/O."""
    mech, _ = load_with_status(file, build_dir)
    kept, redundant = mech.independent_constraints()
    labels = mech.constraint_labels

    summary = _grid()
    summary.add_row("source", escape(str(mech.meta.get("source", file))))
    summary.add_row("coordinates n", str(mech.n))
    summary.add_row("constraints m", str(mech.m))
    summary.add_row("rank Φq(q0)", str(len(kept)))
    summary.add_row("DOF", f"[bold]{mech.n - len(kept)}[/]")
    phi = mech.phi(mech.q0)
    residual = float(abs(phi).max(initial=0.0))
    style = "red" if off_constraints(phi, mech.size) is not None else ""  # check lengths
    summary.add_row("max |Φ(q0)|", Text(f"{residual:.3g}", style=style))
    summary.add_row("redundant",
                    escape("; ".join(f"{i}: {labels[i]}" for i in redundant)) or "none")
    if mech.meta.get("independent"):
        summary.add_row("independent", ", ".join(mech.meta["independent"]))
    joint_space = mech.meta.get("joint_space")
    if mech.meta.get("dimension") == 3 and joint_space is not None:
        summary.add_row("joint-space dynamics", escape(
            "in " + ", ".join(mech.coordinate_names[i] for i in joint_space)
            if isinstance(joint_space, list) else f"none: {joint_space}"))
    console.print(Panel(summary, title=f"[bold]{escape(mech.name)}[/]", title_align="left",
                        expand=False))

    coordinates = _table("Coordinates", "#", "name", "q0")
    for i, (name, value) in enumerate(zip(mech.coordinate_names, mech.q0, strict=True)):
        coordinates.add_row(str(i), name, f"{value:.6g}")
    constraints = _table("Constraints", "#", "equation", "status")
    for i, label in enumerate(labels):
        constraints.add_row(str(i), escape(label), "[yellow]redundant[/]" if i in redundant else "")
    parameters = _table("Parameters", "name", "value")
    for name, value in mech.parameters.items():
        parameters.add_row(name, f"{value:.6g}")
    sensors = _table("Sensors", "#", "output")
    for i, label in enumerate(mech.sensor_labels):
        sensors.add_row(str(i), escape(label))
    for label in mech.accelerometer_labels:  # read with q̈: `simulate --with sensors`
        sensors.add_row("-", f"{escape(label)} (accelerometer)")
    coefficients = mech.coefficients()
    frictions = mech.meta.get("friction", [])
    actuators = _table("Actuators", "#", "name", "coordinate", "gain")
    for i, (actuator, gain) in enumerate(zip(mech.meta.get("actuators", []),
                                             mech.actuator_gains(), strict=True)):
        actuators.add_row(str(i), actuator["name"], actuator["coordinate"], f"{gain:.6g}")
    friction = _table("Dry friction", "name", "coordinate", "bound", "stiction rate")
    for i, item in enumerate(frictions):
        friction.add_row(item["name"], item["coordinate"], f"{coefficients[i]:.6g}",
                         f"{item['stiction']:.3g}")
    for table in (coordinates, constraints, parameters, sensors, actuators, friction):
        console.print(table if table.row_count else Text(f"{table.title}: none", style="dim"))
    limits = _limits_table(file, mech)
    if limits.row_count:
        console.print(limits)
    console.print(_branch_table(mech))


def _limits_table(file: Path, mech: Any) -> Table:
    """The joint limits the file records (a URDF's ``<limit>``), with q0: reported, not
    enforced. Read from the model (the compiled module does not carry them)."""
    from mbgen.model.parser import load_mechanism

    table = _table("Limits (not enforced)", "coordinate", "lower", "upper",
                   "q0")
    for name, (lower, upper) in load_mechanism(file).limits.items():
        value = float(mech.q0[mech.coordinate_index(name)])
        shown = f"{value:.6g}" if lower <= value <= upper else f"[yellow]{value:.6g} (outside)[/]"
        table.add_row(escape(name), f"{lower:.6g}", f"{upper:.6g}", shown)
    return table


def _branch_table(mech: Any) -> Table | Text:
    """The assembly branches (found by sampling, as the particle filter does), each by its
    configuration nearest q0."""
    import numpy as np

    from mbgen.estimation.branches import find_branches

    with status_console.status("finding the assembly branches"):
        try:
            branches = find_branches(mech)
        except ValueError as exc:
            return Text(f"Assembly branches: {exc}", style="yellow")
    table = _table("Assembly branches", "#", "share of samples", "configuration nearest q0")
    nearest = branches.representatives(mech.q0)
    for b in range(branches.count):
        share = float(np.mean(branches.label == b))
        shown = ", ".join(f"{name}={value:.4g}" for name, value in zip(
            mech.coordinate_names, nearest[b], strict=True))
        table.add_row(str(b) + (" (q0)" if b == 0 else ""), f"{share:.0%}", escape(shown))
    return table


def _grid() -> Table:
    """Two-column key/value grid; long values (paths) fold instead of being cut."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    return grid


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold", expand=False)
    for column in columns:
        table.add_column(column, justify="right" if column in ("#", "q0", "value") else "left")
    return table


@cli.command(example="mbgen schema --out mechanism.schema.json")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the schema to this file instead of printing it.")
@click.option("--study", is_flag=True, help="The schema of `mbgen sweep`'s study files "
              "instead of the mechanism format's.")
def schema(out: Path | None, study: bool) -> None:
    """Print the JSON Schema of the mechanism format, for editors with a YAML language
    server (`# yaml-language-server: $schema=<file>` as a file's first line)."""
    from mbgen.model.schema import schema_text

    text = schema_text()
    if study:
        from mbgen.sweep.study import study_schema

        text = json.dumps(study_schema(), indent=2) + "\n"
    if out is None:
        click.echo(text, nl=False)
        return
    _write_atomic(out, text)
    status_console.print(f"wrote [bold]{escape(str(out))}[/]")


@cli.group()
def cache() -> None:
    """The build cache: compiled modules under --build-dir."""


def _builds(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """(directory, meta) of every finished build under root that the cache made (a user's
    directory holding a meta.json is not one)."""
    import json

    from mbgen.codegen.cache import is_build

    found = []
    for meta_path in sorted(root.glob("*/*/meta.json")):
        if is_build(meta_path.parent):
            found.append((meta_path.parent, json.loads(meta_path.read_text())))
    return found


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@cache.command("list", example="mbgen cache list")
@BUILD_DIR
def cache_list(build_dir: Path | None) -> None:
    """Every compiled module: mechanism, content hash, mbgen version, size, age."""
    from mbgen.loading import default_out_dir

    root = build_dir or default_out_dir()
    table = Table(title=f"builds in {escape(str(root))}", title_justify="left")
    for column in ("mechanism", "hash", "mbgen", "size", "built"):
        table.add_column(column)
    total = 0
    for directory, meta in _builds(root):
        size = _size(directory)
        total += size
        age = time.time() - directory.stat().st_mtime
        table.add_row(escape(meta.get("name", directory.parent.name)), directory.name,
                      str(meta.get("mbgen_version", "?")), f"{size / 1e6:.1f} MB",
                      f"{age / 3600:.1f} h ago")
    console.print(table)
    console.print(f"{len(table.rows)} builds, {total / 1e6:.1f} MB")


@cache.command("clean", example="mbgen cache clean")
@BUILD_DIR
@click.option("--all", "everything", is_flag=True, help="Remove every build, not only "
              "stale ones.")
def cache_clean(build_dir: Path | None, everything: bool) -> None:
    """Remove builds of other mbgen versions and interrupted compiles (or, with --all,
    every build). Only what the cache made is touched: builds it recognises, staging
    directories of compiles that are gone (a running compile's is its lock) and the C
    core's archives that earlier versions kept there; a directory that holds none of them
    is refused. The installation's core (docs/generated-code.md) is not touched."""
    import shutil

    from mbgen.codegen.build import CORE_ARCHIVE
    from mbgen.codegen.staging import stale_staging
    from mbgen.loading import default_out_dir

    root = build_dir or default_out_dir()
    if not root.is_dir():
        raise MbgenError(f"{root}: no such build directory")
    builds = _builds(root)
    staging = [p for stem in root.iterdir() if stem.is_dir() and not stem.is_symlink()
               for p in stale_staging(stem)]
    archives = [p for p in (root / "_core").glob("*.a") if CORE_ARCHIVE.fullmatch(p.name)
                and p.is_file() and not p.is_symlink()]
    if not builds and not staging and not archives and any(root.iterdir()):
        raise MbgenError(f"{root} is not an mbgen build cache (no build, staging directory "
                         "or core archive that mbgen made): nothing removed")
    removed = [d for d, meta in builds if everything or meta.get("mbgen_version") != __version__]
    removed += staging
    freed = 0
    for directory in removed:
        freed += _size(directory)
        shutil.rmtree(directory, ignore_errors=True)
    for archive in archives if everything else []:
        freed += archive.stat().st_size
        archive.unlink(missing_ok=True)
    console.print(f"removed {len(removed)} build(s), {freed / 1e6:.1f} MB from "
                  f"{escape(str(root))}")


@cli.group()
def generate() -> None:
    """Write mechanism files for tests and benchmarks."""


@generate.command(example="mbgen generate chain --bodies 20")
@click.option("--bodies", "-n", type=click.IntRange(min=1), required=True,
              help="Number of bars in the chain.")
@click.option("--spatial", is_flag=True, help="A spatial chain: rods joined by revolute "
              "joints whose axes alternate between y and z (dimension: 3).")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Output file (default: chain<N>.yaml, spatial-chain<N>.yaml).")
def chain(bodies: int, spatial: bool, out: Path | None) -> None:
    """A pendulum chain of N bars hanging from a fixed pivot."""
    from mbgen.model.chain import chain_yaml, spatial_chain_yaml

    target = out or Path(f"{'spatial-' if spatial else ''}chain{bodies}.yaml")
    _write_atomic(target, (spatial_chain_yaml if spatial else chain_yaml)(bodies))
    console.print(f"wrote [bold]{escape(str(target))}[/] ({bodies} bodies)")


def _write_atomic(target: Path, text: str) -> None:
    """Readers (or a concurrent `mbgen compile`) never see a half-written file."""
    from mbgen.files import atomic_write_text

    atomic_write_text(target, text, parents=False)


# -- commands defined in their own modules ---------------------------------------------------
# Each is a plain ``@click.command()``; shared helpers come from ``mbgen.cli``.
from mbgen.cli.check import check  # noqa: E402
from mbgen.cli.estimate import estimate  # noqa: E402
from mbgen.cli.identify import identify  # noqa: E402
from mbgen.cli.inverse import inverse  # noqa: E402
from mbgen.cli.pictures import animate, draw  # noqa: E402
from mbgen.cli.simulate import simulate  # noqa: E402
from mbgen.cli.sweep import sweep  # noqa: E402

cli.add_command(simulate)
cli.add_command(inverse)
cli.add_command(draw)
cli.add_command(animate)
cli.add_command(check)
cli.add_command(estimate)
cli.add_command(identify)
cli.add_command(sweep)

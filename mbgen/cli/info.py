"""`mbgen info` and `mbgen schema`: what a mechanism file holds, and the formats'
JSON Schemas for editors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mbgen.cli import (
    BUILD_DIR,
    MECHANISM_FILE,
    console,
    key_value_grid,
    load_with_status,
    status_console,
    titled_table,
)
from mbgen.cli.conventions import Command
from mbgen.files import atomic_write_text
from mbgen.redundancy import off_constraints


@click.command(cls=Command, example="mbgen info mechanisms/fourbar.yaml")
@click.argument("file", type=MECHANISM_FILE)
@BUILD_DIR
def info(file: Path, build_dir: Path | None) -> None:
    """Describe FILE: coordinates, constraints, rank and DOF, parameters, I/O."""
    mech, _ = load_with_status(file, build_dir)
    kept, redundant = mech.independent_constraints()
    labels = mech.constraint_labels

    summary = key_value_grid()
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

    coordinates = titled_table("Coordinates", "#", "name", "q0")
    for i, (name, value) in enumerate(zip(mech.coordinate_names, mech.q0, strict=True)):
        coordinates.add_row(str(i), name, f"{value:.6g}")
    constraints = titled_table("Constraints", "#", "equation", "status")
    for i, label in enumerate(labels):
        constraints.add_row(str(i), escape(label), "[yellow]redundant[/]" if i in redundant else "")
    parameters = titled_table("Parameters", "name", "value")
    for name, value in mech.parameters.items():
        parameters.add_row(name, f"{value:.6g}")
    sensors = titled_table("Sensors", "#", "output")
    for i, label in enumerate(mech.sensor_labels):
        sensors.add_row(str(i), escape(label))
    for label in mech.accelerometer_labels:  # read with q̈: `simulate --with sensors`
        sensors.add_row("-", f"{escape(label)} (accelerometer)")
    coefficients = mech.coefficients()
    frictions = mech.meta.get("friction", [])
    actuators = titled_table("Actuators", "#", "name", "coordinate", "gain")
    for i, (actuator, gain) in enumerate(zip(mech.meta.get("actuators", []),
                                             mech.actuator_gains(), strict=True)):
        actuators.add_row(str(i), actuator["name"], actuator["coordinate"], f"{gain:.6g}")
    friction = titled_table("Dry friction", "name", "coordinate", "bound", "stiction rate")
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

    table = titled_table("Limits (not enforced)", "coordinate", "lower", "upper",
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
    table = titled_table("Assembly branches", "#", "share of samples", "configuration nearest q0")
    nearest = branches.representatives(mech.q0)
    for b in range(branches.count):
        share = float(np.mean(branches.label == b))
        shown = ", ".join(f"{name}={value:.4g}" for name, value in zip(
            mech.coordinate_names, nearest[b], strict=True))
        table.add_row(str(b) + (" (q0)" if b == 0 else ""), f"{share:.0%}", escape(shown))
    return table


@click.command(cls=Command, example="mbgen schema --out mechanism.schema.json")
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
    atomic_write_text(out, text, parents=False)  # never seen half-written
    status_console.print(f"wrote [bold]{escape(str(out))}[/]")

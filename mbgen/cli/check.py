"""`mbgen check`: validate a mechanism file without compiling it (well under a second)."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np
from rich.markup import escape

from mbgen.cli import status_console
from mbgen.cli.conventions import Command
from mbgen.redundancy import independent_rows, off_constraints


@click.command(cls=Command, example="mbgen check mechanisms/fourbar.yaml")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def check(file: Path) -> None:
    """Validate FILE: format, names and expressions (as compile would), q0 on the
    constraints, rank and degrees of freedom, the named independent coordinates."""
    import sympy as sp

    from mbgen.errors import MechanismError
    from mbgen.model.parser import load_mechanism
    from mbgen.symbolic.model import build_symbolic_model

    mechanism = load_mechanism(file)  # a located MechanismError on bad input
    model = build_symbolic_model(mechanism)
    values = {symbol: sp.Float(parameter.value) for symbol, parameter in zip(
        model.params, mechanism.parameters, strict=True)}
    q0 = np.array(mechanism.initial_coordinates(), dtype=float)
    if not np.all(np.isfinite(q0)):
        raise MechanismError("the initial coordinates q0 are not finite", str(file))
    point = {**values, **dict(zip(model.q, (sp.Float(v) for v in q0), strict=True))}
    phi = sp.Matrix([c.expr for c in model.constraints])
    residual = np.array([float(e.xreplace(point)) for e in phi], dtype=float)
    phi_q = np.array([[float(phi[i].diff(x).xreplace(point)) for x in model.q]
                      for i in range(model.m)], dtype=float).reshape(model.m, model.n)
    rank = len(independent_rows(phi_q)[0])  # the rows the compiled dynamics will keep
    dof = model.n - rank
    if mechanism.independent is not None and len(mechanism.independent) != dof:
        raise MechanismError(f"independent_coordinates names {len(mechanism.independent)} "
                             f"coordinate(s) but the mechanism has {dof} degree(s) of "
                             "freedom at q0", str(file), key="independent_coordinates")
    console = status_console
    worst = off_constraints(residual, mechanism.length_scale())
    if worst is not None:
        console.print(f"[yellow]![/] q0 is off the constraints: |Φ| = "
                      f"{abs(residual[worst]):.3g} at row {worst} "
                      f"({model.constraints[worst].label}); the position problem will move "
                      "it (see --q0 of simulate)")
    names = list(model.coordinate_names)
    for name, (lower, upper) in mechanism.limits.items():  # recorded, not enforced
        value = float(q0[names.index(name)])
        outside = not lower <= value <= upper
        console.print(f"{'[yellow]![/]' if outside else ' '} limit {escape(name)}: "
                      f"{escape(f'[{lower:g}, {upper:g}]')} (recorded, not enforced)"
                      + (f"; q0 is {value:g}, outside it" if outside else ""))
    console.print(f"[green]✓[/] {escape(str(file))}: n = {model.n} coordinates, m = {model.m} "
                  f"constraints, rank {rank}, {dof} DOF, "
                  f"{len(mechanism.sensors) + len(mechanism.accelerometers)} sensor(s); "
                  "max |Φ(q0)| = "
                  f"{float(np.abs(residual).max(initial=0.0)):.1e}")

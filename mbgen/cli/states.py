"""Initial states from the command line: ``--q0``/``--qd0``/``--guess``/``--q`` parsed,
assembled (mbgen.simulation.assembly) and every change said, for every command that takes
one (simulate, draw)."""

from __future__ import annotations

import click
import numpy as np
from rich.markup import escape

from mbgen.cli import status_console
from mbgen.runtime.compiled import CompiledMechanism


def parse_state(text: str | None, mech: CompiledMechanism, option: str) -> dict[int, float]:
    """``"1,0,1,2"`` (all coordinates) or ``"x1=0.9,theta0=0.1"`` (some, by name) as
    coordinate index → value; empty for no text."""
    if text is None:
        return {}
    items = [item.strip() for item in text.split(",") if item.strip()]
    try:
        if items and all("=" in item for item in items):
            pairs = [tuple(part.strip() for part in item.split("=", 1)) for item in items]
            values = {mech.coordinate_index(name): float(value) for name, value in pairs}
            if len(values) != len(pairs):
                raise ValueError("a coordinate is named twice")
        else:
            numbers = [float(item) for item in items]
            if len(numbers) != mech.n:
                raise ValueError(f"expected {mech.n} values ({', '.join(mech.coordinate_names)}"
                                 f") or NAME=VALUE pairs, got {len(numbers)} values")
            values = dict(enumerate(numbers))
    except (KeyError, ValueError) as exc:
        raise click.BadParameter(str(exc.args[0]), param_hint=option) from None
    if not all(np.isfinite(list(values.values()))):
        raise click.BadParameter("values must be finite", param_hint=option)
    return values


def initial_state(mech: CompiledMechanism, q0: str | None, qd0: str | None,
                  guess: str | None = None, strict: bool = False, q_option: str = "--q0",
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Assembled q and admissible q̇ (n,) from the file's q0 and the options (see
    :mod:`mbgen.simulation.assembly`). Every change to what was given is printed as one
    line, or refused with ``strict``; ``q_option`` names the positions' option in
    messages (``--q`` in draw)."""
    from mbgen.simulation.assembly import (
        AssemblyError,
        assemble,
        refuse_singular_start,
        velocities,
    )

    named_q = parse_state(q0, mech, q_option)
    start = mech.q0.copy()
    for index, value in parse_state(guess, mech, "--guess").items():
        start[index] = value
    try:  # a starting guess is not a value to meet: its change is no news
        q, changes = assemble(mech, start, named_q, None if guess else
                              "the file's initial positions")
    except AssemblyError as exc:
        if q0 is None and guess is None:
            raise
        raise click.BadParameter(str(exc), param_hint="--guess" if guess and not q0
                                 else q_option) from None
    refuse_singular_start(mech, q)
    qd, velocity_changes = velocities(mech, q, np.zeros(mech.n),
                                      parse_state(qd0, mech, "--qd0"))
    changes += velocity_changes
    if changes and strict:
        raise AssemblyError("--strict: the initial state is not as given: "
                            + "; ".join(changes))
    for line in changes:
        status_console.print(f"[yellow]![/] {escape(line)}")
    return q, qd

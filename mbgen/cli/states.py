"""Initial states from the command line: ``--q0``/``--qd0``/``--guess``/``--q`` parsed,
assembled (mbgen.dynamics.assembly) and every change said, for every command that takes
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
                  guess: str | None = None, strict: bool = False,
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Assembled q and admissible q̇ (n,) from the file's q0 and the options (see
    :mod:`mbgen.dynamics.assembly`). Every change to what was given is printed as one
    line, or refused with ``strict``."""
    from mbgen.dynamics.assembly import AssemblyError, assemble, velocities

    named_q = parse_state(q0, mech, "--q0")
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
                                 else "--q0") from None
    singular_start(mech, q)
    qd, velocity_changes = velocities(mech, q, np.zeros(mech.n),
                                      parse_state(qd0, mech, "--qd0"))
    changes += velocity_changes
    if changes and strict:
        raise AssemblyError("--strict: the initial state is not as given: "
                            + "; ".join(changes))
    for line in changes:
        status_console.print(f"[yellow]![/] {escape(line)}")
    return q, qd


def singular_start(mech: CompiledMechanism, q: np.ndarray, step: float = 1e-3) -> None:
    """Refuses a mechanism whose file positions are a singular configuration (a dead or
    change point, where Φq loses rank): the rows dropped there as redundant only look
    redundant, and a run either ignores them (the rocker of a collinear parallelogram
    stretched to 5 m) or stops saying the model is over-constrained. Told apart from true
    redundancy by moving the start q a little along the kept rows: a truly redundant row
    still holds, a spurious one does not."""
    redundant = np.setdiff1d(np.arange(mech.m), mech.active_rows)
    if not redundant.size:
        return
    size = max(1.0, float(np.abs(q).max(initial=0.0)))
    tolerance = 1e-4 * (step * size) ** 2  # a spurious row is off by about (step·size)²
    _, _, vt = np.linalg.svd(mech.phi_q(q)[mech.active_rows])
    null = vt[len(mech.active_rows):]
    rng = np.random.default_rng(0)
    offsets = [np.abs(mech.phi(q)[redundant])]
    for _ in range(3 if len(null) else 0):
        direction = rng.standard_normal(len(null)) @ null
        guess = q + step * size * direction / np.linalg.norm(direction)
        solved, statuses = mech.solve_position(guess, minimum_norm=True, errors="status")
        status = int(statuses[0])
        if mech.is_status(status, "INCONSISTENT"):  # the C core's check of those rows
            offsets.append(np.abs(mech.phi(guess)[redundant]))
        elif not status:
            offsets.append(np.abs(mech.phi(solved)[redundant]))
    for off in offsets:
        if off.max() > tolerance:
            from mbgen.errors import SingularConfigurationError

            row = int(redundant[int(off.argmax())])
            raise SingularConfigurationError(
                f"constraint row {row} ({mech.constraint_labels[row]}) is redundant at the "
                "file's initial positions but not next to them: they are a singular "
                "configuration (a dead point or change point, where the constraint "
                "Jacobian Φq loses rank), not an over-constrained model; give the points "
                "initial positions away from it")

"""Initial states a user asked for, assembled without surprises.

A mechanism's coordinates must satisfy Φ(q) = 0 and Φq q̇ = 0, so what a user gives (the
file's q0, ``--q0``, ``--qd0``) is often changed before a run. Every change is returned as
one line of text, so the caller can print it or refuse it (``--strict``); nothing is
changed silently.

Named values, as many as the degrees of freedom, are met exactly on the assembly branch
of the starting positions: the named coordinates are moved from their starting values to
the asked ones in small steps (continuation), each step solved from the one before. A
direct Newton solve from the start could land on another branch: the crank angle's
constraint u·sinφ − v·cosφ = 0 also holds with the crank turned by π.
"""

from __future__ import annotations

import numpy as np

from mbgen.errors import SingularConfigurationError
from mbgen.runtime.compiled import CompiledMechanism

Array = np.ndarray
STEP = 0.02  # continuation step: rad, or this fraction of the mechanism's span in m
MAX_STEPS = 20_000


class AssemblyError(SingularConfigurationError):
    """The asked initial state cannot be assembled (or, with ``strict``, not as asked)."""


def assemble(mech: CompiledMechanism, start: Array, named: dict[int, float],
             what: str | None = "the file's initial positions") -> tuple[Array, list[str]]:
    """Positions q (n,) with Φ(q) = 0 from ``start`` (n,) and the coordinates ``named``
    (index → value), and the lines saying what changed.

    ``start`` is assembled with the least change; then, with as many named values as the
    DOF, the named coordinates are carried to their values along the start's branch, or
    the reason they cannot be is raised. With fewer or more, the named values are part of
    the start and may move (said in the lines). ``what`` names the start in the lines;
    None for a mere starting guess, whose change is no news.
    """
    tolerance = 1e-9 * mech.size  # round-off in coordinates this large
    names = mech.coordinate_names
    exact = bool(named) and len(named) == mech.dof
    guess = np.array(start, dtype=float)
    label = what or "the starting guess"
    if named and not exact:
        guess[list(named)] = list(named.values())
        label += " with the values asked"
    q = _least_change(mech, guess, label)
    changes = []
    moved = np.abs(q - guess)
    if what is not None and moved.max(initial=0.0) > tolerance:
        k = int(moved.argmax())
        changes.append(f"{label} are off the constraints by up to "
                       f"{np.abs(mech.phi(guess)).max():.3g}: assembled with the least "
                       f"change, {names[k]} by {q[k] - guess[k]:+.6g} "
                       f"(the largest of {int((moved > tolerance).sum())} changes)")
    if len(named) < mech.n and not exact:  # a full vector is the line above
        changes += [f"{names[index]} = {value:g} asked, assembled at {q[index]:.6g}: name "
                    f"as many coordinates as the degrees of freedom ({mech.dof}) to have "
                    "them met exactly" for index, value in named.items()
                    if abs(q[index] - value) > tolerance]
    if exact:
        q, line = _continue(mech, q, named, mech.span)
        changes += [line] if line else []
    return q, changes


def velocities(mech: CompiledMechanism, q: Array, start: Array, named: dict[int, float],
               ) -> tuple[Array, list[str]]:
    """Velocities q̇ (n,) with Φq q̇ = 0 at ``q``: the named ones exactly when they are as
    many as the DOF, else the nearest to ``start`` (n,) with the named values in it."""
    names = mech.coordinate_names
    if named and len(named) == mech.dof:
        indices = list(named)
        z_dot = [named[i] for i in indices]
        return mech.solve_velocity(q, z_dot, z=[names[i] for i in indices]), []
    asked = np.array(start, dtype=float)
    asked[list(named)] = list(named.values())
    qd = mech.project_velocity(q, asked)
    moved = np.abs(qd - asked)
    scale = max(1.0, float(np.abs(asked).max(initial=0.0)))
    if moved.max(initial=0.0) <= 1e-9 * scale:
        return qd, []
    k = int(moved.argmax())
    return qd, [f"the initial velocities asked do not satisfy Φq q̇ = 0: the nearest that do "
                f"change {names[k]} by {qd[k] - asked[k]:+.6g} (the largest change)"]


def assemble_runs(mech: CompiledMechanism, starts: Array, named: dict[int, Array],
                  params: Array | None = None) -> tuple[Array, Array]:
    """Positions (R, n) of many runs, each as :func:`assemble` places one, and a status
    per run (R,) (0 or the core's code). ``starts`` (R, n): each run's starting positions;
    ``named``: coordinate index → its value in every run (R,); ``params`` (R, np).

    The same rule, batched: the least change of each start (with the named values in it
    when they are fewer than the DOF); with as many as the DOF, every run's named
    coordinates carried to their values in steps of at most STEP along its own branch
    (one batched solve per step, the runs side by side), and where a run's path stops,
    Newton from the last point it reached, as :func:`assemble` does. A sweep's runs start
    where ``simulate`` starts the same named values, not on whichever branch a direct
    Newton solve falls into."""
    starts = np.array(starts, dtype=float)
    exact = bool(named) and len(named) == mech.dof
    indices = list(named)
    targets = (np.column_stack([named[i] for i in indices]) if named
               else np.zeros((len(starts), 0)))
    if named and not exact:
        starts[:, indices] = targets
    q, status = mech.solve_position(starts, minimum_norm=True, params=params,
                                    errors="status")
    q = np.where(status[:, None] == 0, q, starts)
    if not exact:
        return q, status
    names = [mech.coordinate_names[i] for i in indices]
    scale = np.array([1.0 if mech.coordinate_units[i] == "rad" else mech.span
                      for i in indices])
    begin = q[:, indices].copy()
    spans = (np.abs(targets - begin) / scale).max(axis=1, initial=0.0)
    steps = np.clip(np.ceil(spans / STEP), 1, MAX_STEPS)
    steps[status != 0] = 0  # not assembled: nothing to carry
    moving = status == 0
    stopped = np.zeros(len(q), dtype=bool)
    for step in range(1, int(steps.max(initial=0)) + 1):
        rows = np.flatnonzero(moving & ~stopped & (step <= steps))
        if not rows.size:
            continue
        guess = q[rows].copy()
        guess[:, indices] = begin[rows] + (step / steps[rows])[:, None] * (
            targets[rows] - begin[rows])
        solved, codes = mech.solve_position(
            guess, z=names, params=None if params is None else params[rows],
            errors="status")
        good = codes == 0
        q[rows[good]] = solved[good]
        stopped[rows[~good]] = True
    rows = np.flatnonzero(stopped)  # Newton from the last point reached
    if rows.size:
        guess = q[rows].copy()
        guess[:, indices] = targets[rows]
        solved, codes = mech.solve_position(
            guess, z=names, params=None if params is None else params[rows],
            errors="status")
        q[rows] = np.where(codes[:, None] == 0, solved, q[rows])
        status[rows] = codes
    return q, status


def _least_change(mech: CompiledMechanism, guess: Array, what: str) -> Array:
    solved, statuses = mech.solve_position(guess, minimum_norm=True, errors="status")
    status = int(statuses[0])
    if not status:
        return np.asarray(solved)
    off = np.abs(mech.phi(guess))
    row = int(off.argmax()) if off.size else 0
    raise AssemblyError(
        f"no assembly found for {what}, q = [{', '.join(f'{v:g}' for v in guess)}]: they "
        f"are off the constraints by up to {off.max(initial=0.0):.3g} (row {row}: "
        f"{mech.constraint_labels[row] if off.size else '-'}), and the position problem "
        f"failed: {mech.status_text(status)}")


def _continue(mech: CompiledMechanism, q: Array, named: dict[int, float],
              size: float) -> tuple[Array, str | None]:
    """Carries the named coordinates from their values in ``q`` to ``named`` in steps of
    at most STEP (rad) or STEP·size (m), each solved from the previous one.

    Where the path stops (the named coordinates cannot be independent there, e.g. a
    crank's x at the crank's dead centre), Newton goes straight to the asked values from
    the last point reached, which is said in the returned line; if that fails too, the
    reason is raised.
    """
    indices = list(named)
    target = np.array([named[i] for i in indices])
    scale = np.array([1.0 if mech.coordinate_units[i] == "rad" else size for i in indices])
    span = np.abs(target - q[indices]) / scale
    steps = int(min(MAX_STEPS, max(1, np.ceil(span.max(initial=0.0) / STEP))))
    path = q[indices] + np.linspace(0.0, 1.0, steps + 1)[1:, None] * (target - q[indices])
    names = [mech.coordinate_names[i] for i in indices]
    solved, status = mech.solve_position_path(q, path, z=names, errors="status")
    bad = np.flatnonzero(status)
    if not bad.size:
        return np.asarray(solved[-1]), None
    k = int(bad[0])
    last = np.asarray(solved[k - 1]) if k else q
    reached = ", ".join(f"{n} = {v:.6g}" for n, v in zip(names, last[indices], strict=True))
    asked = ", ".join(f"{n} = {v:g}" for n, v in zip(names, target, strict=True))
    guess = last.copy()
    guess[indices] = target
    direct, direct_status = mech.solve_position(guess, z=names, errors="status")
    if not int(direct_status[0]):
        return np.asarray(direct), (
            f"{asked}: the path from the starting positions stops at {reached} "
            f"({mech.status_text(int(status[k]))}); assembled by Newton from there, whose "
            "branch may differ from the start's: check it (mbgen draw --q)")
    off = np.abs(mech.phi(guess))
    row = int(off.argmax())
    raise AssemblyError(
        f"{asked} cannot be reached from the starting positions on their assembly branch: "
        f"with the other coordinates where the path stops, the constraints are off by up "
        f"to {off[row]:.3g} (row {row}: {mech.constraint_labels[row]}). Moving "
        f"{', '.join(names)} there stops after {reached}, where the position problem "
        f"failed: {mech.status_text(int(status[k]))}. There is a dead point, the end of "
        "the mechanism's range, or a place where the named coordinates cannot be "
        "independent; give --guess to start from other positions")


def refuse_singular_start(mech: CompiledMechanism, q: np.ndarray, step: float = 1e-3) -> None:
    """Refuses a mechanism whose file positions are a singular configuration (a dead or
    change point, where Φq loses rank): the rows dropped there as redundant only look
    redundant, and a run either ignores them (the rocker of a collinear parallelogram
    stretched to 5 m) or stops saying the model is over-constrained. Told apart from true
    redundancy by moving the start q a little along the kept rows: a truly redundant row
    still holds, a spurious one does not."""
    redundant = np.setdiff1d(np.arange(mech.m), mech.active_rows)
    if not redundant.size:
        return
    tolerance = 1e-4 * (step * mech.span) ** 2  # a spurious row is off by about (step·span)²
    _, _, vt = np.linalg.svd(mech.phi_q(q)[mech.active_rows])
    null = vt[len(mech.active_rows):]
    rng = np.random.default_rng(0)
    offsets = [np.abs(mech.phi(q)[redundant])]
    for _ in range(3 if len(null) else 0):
        direction = rng.standard_normal(len(null)) @ null
        guess = q + step * mech.span * direction / np.linalg.norm(direction)
        solved, statuses = mech.solve_position(guess, minimum_norm=True, errors="status")
        status = int(statuses[0])
        if mech.is_status(status, "INCONSISTENT"):  # the C core's check of those rows
            offsets.append(np.abs(mech.phi(guess)[redundant]))
        elif not status:
            offsets.append(np.abs(mech.phi(solved)[redundant]))
    for off in offsets:
        if off.max() > tolerance:
            row = int(redundant[int(off.argmax())])
            raise SingularConfigurationError(
                f"constraint row {row} ({mech.constraint_labels[row]}) is redundant at the "
                "file's initial positions but not next to them: they are a singular "
                "configuration (a dead point or change point, where the constraint "
                "Jacobian Φq loses rank), not an over-constrained model; give the points "
                "initial positions away from it")

"""Writing simulation results: CSV (atomic) and PNG plots next to it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mbgen.dynamics.simulation import SimulationResult
from mbgen.escaping import mathtext
from mbgen.files import atomic_write

if TYPE_CHECKING:  # importing it would import SciPy's splines: 0.5 s of every simulate
    from matplotlib.figure import Figure

    from mbgen.dynamics.inverse import InverseResult


def write_csv(result: SimulationResult | InverseResult, path: str | Path,
              extras: tuple[str, ...] = (), every: int = 1) -> Path:
    """The result's columns as CSV with a header line. Simulation: t, q (coordinate
    names), q̇ (<name>_dot), q̈ (<name>_ddot), energy, phi_norm, then ``extras``, every
    ``every``-th row. Inverse dynamics: t, q, q̇, q̈, force_<coordinate> per actuator."""
    header, data = (result.columns(extras, every) if isinstance(result, SimulationResult)
                    else result.columns())
    return write_table(path, header, data)


def write_table(path: str | Path, header: list[str], data: np.ndarray) -> Path:
    """A CSV with one header line and full-precision rows, written atomically."""
    path = Path(path)
    atomic_write(path, lambda tmp: np.savetxt(tmp, data, delimiter=",", header=",".join(header),
                                              comments="", fmt="%.12g"))
    return path


def save_figure(fig: Figure, target: Path, dpi: int = 110) -> Path:
    """A Matplotlib figure (atomically), then closed; the suffix names the format (png, jpg,
    svg, pdf: the temporary file's name has none)."""
    import matplotlib.pyplot as plt

    kind = Path(target).suffix.lower().lstrip(".") or "png"
    atomic_write(target, lambda tmp: fig.savefig(tmp, dpi=dpi, format=kind))
    plt.close(fig)
    return target


#: Above this many curves a panel colours them by index (with a colour bar) instead of
#: listing them in a legend that would cover the plot.
LEGEND_LIMIT = 10
#: Unit of a generalized force on a coordinate of each unit.
FORCE_UNITS = {"m": "force [N]", "rad": "torque [N·m]"}


def coordinate_panels(units: list[str]) -> list[tuple[str, list[int]]]:
    """(axis label, column indices) of the panels of a plot over all coordinates: positions
    [m] (x and y apart when there are many), then angles [rad]."""
    lengths = [k for k, unit in enumerate(units) if unit == "m"]
    angles = [k for k, unit in enumerate(units) if unit == "rad"]
    panels = ([("x [m]", lengths[0::2]), ("y [m]", lengths[1::2])]
              if len(lengths) > LEGEND_LIMIT else [("position [m]", lengths)])
    return [panel for panel in [*panels, ("angle [rad]", angles)] if panel[1]]


def panel_figure(t: np.ndarray, data: np.ndarray, names: list[str],
                 panels: list[tuple[str, list[int]]], title: str) -> Figure:
    """One panel per (axis label, columns of ``data`` (K, columns)) against t (K,), legends
    beside the panels, or a colour bar for panels with many curves."""
    import matplotlib.pyplot as plt
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    fig, axes = plt.subplots(len(panels), 1, sharex=True, squeeze=False, layout="constrained",
                             figsize=(9.5, 1.2 + 2.6 * len(panels)))
    for ax, (label, columns) in zip(axes[:, 0], panels, strict=True):
        if len(columns) > LEGEND_LIMIT:
            colours = plt.get_cmap("viridis")(np.linspace(0, 1, len(columns)))
            for colour, k in zip(colours, columns, strict=True):
                ax.plot(t, data[:, k], color=colour, lw=0.8)
            bar = fig.colorbar(ScalarMappable(Normalize(0, len(columns) - 1), "viridis"), ax=ax)
            ticks = np.unique(np.linspace(0, len(columns) - 1, 5).round().astype(int))
            bar.set_ticks(ticks.tolist(), labels=[names[columns[k]] for k in ticks])
        else:
            for k in columns:
                ax.plot(t, data[:, k], label=names[k])
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("t [s]")
    axes[0, 0].set_title(title)
    return fig


def plot(result: SimulationResult, csv_path: str | Path) -> list[Path]:
    """coordinates, energy and constraint-error PNGs named after the CSV file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mech = result.mechanism
    settings = result.settings
    title = f"{mathtext(mech.name)}: {settings.get('integrator')}, dt = {settings.get('dt')} s"
    written = [_save(panel_figure(result.t, result.q, result.coordinate_names,
                                  coordinate_panels(mech.coordinate_units), title),
                     csv_path, "coordinates")]

    energy = result.energy
    fig, ax = plt.subplots(figsize=(9, 4), layout="constrained")
    ax.plot(result.t, energy - energy[0])
    ax.set(xlabel="t [s]", ylabel="E(t) − E(0) [J]",
           title=f"{title}: total energy change (E(0) = {energy[0]:.6g} J)")
    ax.grid(alpha=0.3)
    written.append(_save(fig, csv_path, "energy"))

    written.append(_save(constraint_figure(result, title), csv_path, "constraints"))
    return written


def constraint_figure(result: SimulationResult, title: str) -> Figure:
    """‖Φ‖ on a log scale that spans several decades above the round-off level, so a run at
    round-off shows as a flat band at the bottom and a drifting one as a rising curve."""
    import matplotlib.pyplot as plt

    error = np.asarray(result.constraint_error, dtype=float)
    size = max(1.0, float(np.abs(result.q).max(initial=0.0)))
    roundoff = 10 * np.finfo(float).eps * size**2  # Φ rows are products of two lengths
    fig, ax = plt.subplots(figsize=(9, 4), layout="constrained")
    ax.semilogy(result.t, np.maximum(error, roundoff * 1e-3), lw=0.8, label="‖Φ(q)‖")
    ax.axhline(roundoff, color="grey", ls="--", lw=1, label=f"round-off ≈ {roundoff:.0e}")
    if result.settings.get("project") in ("manifold", "energy"):
        tolerance = float(result.mechanism.options.newton_tol)
        ax.axhline(tolerance, color="tab:green", ls=":", lw=1,
                   label=f"projection tolerance {tolerance:.0e}")
    worst = int(np.argmax(error)) if error.size else 0
    top = max(float(error.max(initial=0.0)) * 10, roundoff * 1e6)
    ax.set_ylim(roundoff * 1e-3, top)
    ax.set(xlabel="t [s]", ylabel="‖Φ(q)‖ [m², m]",
           title=f"{title}: constraint error (max {error[worst]:.2e} at t = "
           f"{result.t[worst]:.3g} s)" if error.size else title)
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(alpha=0.3, which="both")
    return fig


def plot_inverse(result: InverseResult, csv_path: str | Path) -> list[Path]:
    """forces and following-error PNGs named after the CSV file."""
    import matplotlib

    matplotlib.use("Agg")

    mech = result.mechanism
    names, units = mech.coordinate_names, mech.coordinate_units
    title = f"{mathtext(mech.name)}: inverse dynamics ({result.settings.get('method')})"
    forces = panel_figure(result.t, result.forces, [f"on {names[i]}" for i in result.actuated],
                          _by_unit([units[i] for i in result.actuated], FORCE_UNITS), title)
    following = panel_figure(result.t, result.following_error,
                             [names[i] for i in result.imposed],
                             _by_unit([units[i] for i in result.imposed],
                                      {"m": "followed − prescribed [m]",
                                       "rad": "followed − prescribed [rad]"}),
                             f"{title}: following error")
    return [_save(forces, csv_path, "forces"), _save(following, csv_path, "following_error")]


def _by_unit(units: list[str], labels: dict[str, str]) -> list[tuple[str, list[int]]]:
    """One panel per unit present, labelled from ``labels``."""
    return [(label, [k for k, u in enumerate(units) if u == unit])
            for unit, label in labels.items() if unit in units]


def _save(fig: Figure, csv_path: str | Path, suffix: str) -> Path:
    return save_figure(fig, plot_path(csv_path, suffix))


#: The pictures ``--plot`` writes next to a command's CSV, by command.
PLOTS = {"simulate": ("coordinates", "energy", "constraints"),
         "inverse": ("forces", "following_error"), "estimate": ("estimate", "branches"),
         "identify": ("fit",)}


def plot_path(csv_path: str | Path, suffix: str) -> Path:
    """``<csv stem>_<suffix>.png`` next to the CSV: where ``--plot`` writes a picture."""
    base = Path(csv_path).with_suffix("")
    return base.parent / f"{base.name}_{suffix}.png"


def plot_paths(csv_path: str | Path, command: str) -> list[Path]:
    """Every picture ``command --plot`` writes next to ``csv_path``."""
    return [plot_path(csv_path, suffix) for suffix in PLOTS[command]]

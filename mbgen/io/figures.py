"""Pictures next to a command's CSV: panels of curves over time, saved whole (PNG)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mbgen.files import atomic_write

if TYPE_CHECKING:  # importing it would import SciPy's splines: 0.5 s of every simulate
    from matplotlib.figure import Figure


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


def panels_by_unit(units: list[str], labels: dict[str, str]) -> list[tuple[str, list[int]]]:
    """One panel per unit present, labelled from ``labels``."""
    return [(label, [k for k, u in enumerate(units) if u == unit])
            for unit, label in labels.items() if unit in units]


def save_beside(fig: Figure, csv_path: str | Path, suffix: str) -> Path:
    """The figure as ``<csv stem>_<suffix>.png`` beside the CSV (see :data:`PLOTS`)."""
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

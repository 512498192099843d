"""The pictures of a study (``mbgen sweep --plot``), beside its results: histograms of the
recorded figures, the envelope of the recorded trajectories, and how strongly each figure
follows each varied quantity (Spearman's rank correlation, which catches any monotone
dependence, not only a linear one). Runs that failed are left out of all three."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mbgen.io.figures import plot_path, save_figure
from mbgen.sweep.runner import OK

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Array = np.ndarray
PICTURES = ("histograms", "envelope", "sensitivity")
MAX_PANELS = 24  # histograms drawn; a study recording more is summed up by the first ones


def picture_paths(out: Path, trajectories: bool, varied: bool) -> list[Path]:
    """Every picture --plot writes beside ``out``."""
    wanted = {"histograms": True, "envelope": trajectories, "sensitivity": varied}
    return [plot_path(out, name) for name in PICTURES if wanted[name]]


def write_pictures(runs: dict[str, Array], figure_columns: list[str], varied: list[str],
                   trajectories: dict[str, Array] | None, paths: list[Path], title: str,
                   ) -> list[Path]:
    """The pictures of a finished study from its tables (columns as NumPy arrays), to
    ``paths`` (as :func:`picture_paths` gives them)."""
    ok = runs["status"] == OK
    targets = iter(paths)
    written = [save_figure(histograms({c: runs[c][ok] for c in figure_columns}, title),
                           next(targets))]
    if trajectories is not None:
        written.append(save_figure(envelope(trajectories, set(runs["run"][ok].tolist()),
                                            title), next(targets)))
    if varied:
        written.append(save_figure(sensitivity({c: runs[c][ok] for c in varied},
                                               {c: runs[c][ok] for c in figure_columns},
                                               title), next(targets)))
    return written


def histogram_bins(values: Array) -> tuple[int, tuple[float, float] | None]:
    """Bins (about √n, 10 to 60) and range (None: the values') of a histogram of the
    finite ``values``. Values whose spread is within rounding of their size (the same
    figure in every run up to the last digits) get one bin over a range a little wider
    than theirs: NumPy cannot cut a range a few ulps wide into bins ("Too many bins for
    data range"), not even into one at 1e308."""
    low, high = float(values.min()), float(values.max())
    size = max(abs(low), abs(high))
    bins = min(60, max(10, int(np.sqrt(values.size))))
    with np.errstate(over="ignore"):  # the spacing of the largest double is inf
        if high - low > 1e3 * bins * np.spacing(size):
            return bins, None
    pad = size * 1e-9 or 1.0
    largest = float(np.finfo(float).max)
    return 1, (max(low - pad, -largest), min(high + pad, largest))


def histograms(columns: dict[str, Array], title: str) -> Figure:
    import matplotlib.pyplot as plt

    names = list(columns)[:MAX_PANELS] or ["(no figures recorded)"]
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, squeeze=False, layout="constrained",
                             figsize=(3.6 * cols, 2.6 * rows + 0.6))
    for ax, name in zip(axes.flat, names, strict=False):
        values = columns.get(name, np.zeros(0))
        values = values[np.isfinite(values)]
        if values.size:
            bins, span = histogram_bins(values)
            ax.hist(values, bins=bins, range=span, color="C0")
        ax.set_title(f"{name} ({values.size} runs)", fontsize="small")
        ax.ticklabel_format(useOffset=True, style="sci", scilimits=(-3, 4))
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    fig.suptitle(f"{title}: recorded figures")
    return fig


def envelope(trajectories: dict[str, Array], kept_runs: set[int], title: str) -> Figure:
    """Per recorded quantity: the median over runs with its min–max and 5–95 % bands, and
    the same bands about the median (how far the runs wander from it)."""
    import matplotlib.pyplot as plt

    run = trajectories["run"]
    runs = np.unique(run)
    length = len(run) // max(len(runs), 1)
    t = trajectories["t"][:length]
    keep = np.isin(runs, list(kept_runs))
    names = [name for name in trajectories if name not in ("run", "t")]
    fig, axes = plt.subplots(len(names), 2, squeeze=False, sharex=True, layout="constrained",
                             figsize=(10, 2.4 * len(names) + 0.8))
    for (absolute, spread), name in zip(axes, names, strict=True):
        values = trajectories[name].reshape(len(runs), length)[keep]
        if not values.size:
            continue
        low, p05, median, p95, high = np.nanpercentile(values, [0, 5, 50, 95, 100], axis=0)
        for ax, centre in ((absolute, 0.0), (spread, median)):
            ax.fill_between(t, low - centre, high - centre, color="C0", alpha=0.25,
                            lw=0, label="min–max")
            ax.fill_between(t, p05 - centre, p95 - centre, color="C0", alpha=0.5, lw=0,
                            label="5–95 %")
            ax.grid(alpha=0.3)
        absolute.plot(t, median, color="C1", lw=1, label="median")
        absolute.set_ylabel(name)
        spread.set_ylabel(f"{name} − median")
    axes[0, 0].legend(fontsize="small", loc="upper right")
    axes[0, 0].set_title("over the runs")
    axes[0, 1].set_title("about the median run")
    for ax in axes[-1]:
        ax.set_xlabel("t [s]")
    fig.suptitle(f"{title}: {int(keep.sum())} runs")
    return fig


def rank_correlations(inputs: dict[str, Array], outputs: dict[str, Array]) -> Array:
    """Spearman's ρ of each output (rows) with each input (columns); NaN where either is
    constant or too few runs are finite."""
    from scipy.stats import spearmanr

    table = np.full((len(outputs), len(inputs)), np.nan)
    for i, y in enumerate(outputs.values()):
        for j, x in enumerate(inputs.values()):
            finite = np.isfinite(x) & np.isfinite(y)
            if finite.sum() > 2 and np.ptp(x[finite]) > 0 and np.ptp(y[finite]) > 0:
                table[i, j] = spearmanr(x[finite], y[finite]).statistic
    return table


def sensitivity(inputs: dict[str, Array], outputs: dict[str, Array], title: str) -> Figure:
    import matplotlib.pyplot as plt

    table = rank_correlations(inputs, outputs)
    fig, ax = plt.subplots(layout="constrained", figsize=(1.6 + 1.1 * len(inputs),
                                                          1.4 + 0.45 * max(len(outputs), 1)))
    image = ax.imshow(table if table.size else np.zeros((1, 1)), cmap="RdBu_r", vmin=-1,
                      vmax=1, aspect="auto")
    ax.set_xticks(range(len(inputs)), list(inputs), rotation=30, ha="right")
    ax.set_yticks(range(len(outputs)), list(outputs))
    for (i, j), value in np.ndenumerate(table):
        ax.text(j, i, "–" if np.isnan(value) else f"{value:+.2f}", ha="center",
                va="center", fontsize="small")
    fig.colorbar(image, ax=ax, label="Spearman's ρ")
    ax.set_title(f"{title}: rank correlation of each figure with each varied quantity",
                 fontsize="small")
    return fig

"""The pictures of a simulation: coordinates, energy change and constraint error."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mbgen.escaping import mathtext
from mbgen.io.figures import coordinate_panels, panel_figure, save_beside
from mbgen.simulation.integrators import SimulationResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plot(result: SimulationResult, csv_path: str | Path) -> list[Path]:
    """coordinates, energy and constraint-error PNGs named after the CSV file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mech = result.mechanism
    settings = result.settings
    title = f"{mathtext(mech.name)}: {settings.get('integrator')}, dt = {settings.get('dt')} s"
    written = [save_beside(panel_figure(result.t, result.q, result.coordinate_names,
                                  coordinate_panels(mech.coordinate_units), title),
                     csv_path, "coordinates")]

    energy = result.energy
    fig, ax = plt.subplots(figsize=(9, 4), layout="constrained")
    ax.plot(result.t, energy - energy[0])
    ax.set(xlabel="t [s]", ylabel="E(t) − E(0) [J]",
           title=f"{title}: total energy change (E(0) = {energy[0]:.6g} J)")
    ax.grid(alpha=0.3)
    written.append(save_beside(fig, csv_path, "energy"))

    written.append(save_beside(constraint_figure(result, title), csv_path, "constraints"))
    return written


def constraint_figure(result: SimulationResult, title: str) -> Figure:
    """‖Φ‖ on a log scale that spans several decades above the round-off level, so a run at
    round-off shows as a flat band at the bottom and a drifting one as a rising curve."""
    import matplotlib.pyplot as plt

    error = np.asarray(result.constraint_error, dtype=float)
    roundoff = 10 * np.finfo(float).eps * result.mechanism.size**2  # Φ: products of lengths
    fig, ax = plt.subplots(figsize=(9, 4), layout="constrained")
    ax.semilogy(result.t, np.maximum(error, roundoff * 1e-3), lw=0.8, label="‖Φ(q)‖")
    ax.axhline(roundoff, color="grey", ls="--", lw=1, label=f"round-off ≈ {roundoff:.0e}")
    if result.settings.get("project") in ("manifold", "energy"):
        tolerance = result.mechanism.options.projection_tol
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

"""The pictures of an inverse dynamics run: the forces and the following error."""

from __future__ import annotations

from pathlib import Path

from mbgen.escaping import mathtext
from mbgen.inverse.motion import InverseResult
from mbgen.io.figures import FORCE_UNITS, panel_figure, panels_by_unit, save_beside


def plot_inverse(result: InverseResult, csv_path: str | Path) -> list[Path]:
    """forces and following-error PNGs named after the CSV file."""
    import matplotlib

    matplotlib.use("Agg")

    mech = result.mechanism
    names, units = mech.coordinate_names, mech.coordinate_units
    title = f"{mathtext(mech.name)}: inverse dynamics ({result.settings.get('method')})"
    forces = panel_figure(result.t, result.forces, [f"on {names[i]}" for i in result.actuated],
                          panels_by_unit([units[i] for i in result.actuated], FORCE_UNITS), title)
    following = panel_figure(result.t, result.following_error,
                             [names[i] for i in result.imposed],
                             panels_by_unit([units[i] for i in result.imposed],
                                      {"m": "followed − prescribed [m]",
                                       "rad": "followed − prescribed [rad]"}),
                             f"{title}: following error")
    return [save_beside(forces, csv_path, "forces"),
            save_beside(following, csv_path, "following_error")]

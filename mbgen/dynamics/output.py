"""Writing simulation results: CSV (atomic) and PNG plots next to it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from mbgen.dynamics.inverse import InverseResult
from mbgen.dynamics.simulation import SimulationResult


def atomic_write(path: Path, write: callable) -> None:  # type: ignore[valid-type]
    """Run ``write(tmp_path)`` then rename over ``path``: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(handle)
    try:
        write(Path(tmp))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results are the user's files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_csv(result: SimulationResult | InverseResult, path: str | Path,
              **columns: object) -> Path:
    """The result's columns (``result.columns(**columns)``) as CSV with a header line.
    Simulation: t, q (coordinate names), q̇ (<name>_dot), q̈ (<name>_ddot), energy,
    phi_norm (and extras). Inverse dynamics: t, the imposed coordinates as followed,
    force_<coordinate> per actuator."""
    header, data = result.columns(**columns)  # type: ignore[arg-type]
    return write_table(path, header, data)


def write_table(path: str | Path, header: list[str], data: np.ndarray) -> Path:
    """A CSV with one header line and full-precision rows, written atomically."""
    path = Path(path)
    atomic_write(path, lambda tmp: np.savetxt(tmp, data, delimiter=",", header=",".join(header),
                                              comments="", fmt="%.12g"))
    return path


def save_figure(fig: object, target: Path, dpi: int = 110) -> Path:
    """A Matplotlib figure as PNG (atomically), then closed."""
    import matplotlib.pyplot as plt

    atomic_write(target, lambda tmp: fig.savefig(tmp, dpi=dpi, format="png"))  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]
    return target


def plot(result: SimulationResult, csv_path: str | Path) -> list[Path]:
    """coordinates, energy and constraint-error PNGs named after the CSV file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = Path(csv_path).with_suffix("")
    written: list[Path] = []

    def save(fig: object, suffix: str) -> None:
        written.append(_save(fig, base, suffix))

    title = f"{result.mechanism.name}: {result.settings.get('integrator')}, " \
            f"dt = {result.settings.get('dt')} s"
    fig, ax = plt.subplots(figsize=(9, 5))
    for k, name in enumerate(result.coordinate_names):
        ax.plot(result.t, result.q[:, k], label=name)
    ax.set(xlabel="t [s]", ylabel="q", title=title)
    ax.legend(ncol=max(1, len(result.coordinate_names) // 8), fontsize="small")
    ax.grid(alpha=0.3)
    save(fig, "coordinates")

    energy = result.energy
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.plot(result.t, energy - energy[0])
    ax.set(xlabel="t [s]", ylabel="E(t) − E(0) [J]", title=f"{title}: total energy change")
    ax.grid(alpha=0.3)
    save(fig, "energy")

    fig, ax = plt.subplots(figsize=(9, 4))
    ax.semilogy(result.t, np.maximum(result.constraint_error, 1e-17))
    ax.set(xlabel="t [s]", ylabel="‖Φ(q)‖", title=f"{title}: constraint error")
    ax.grid(alpha=0.3)
    save(fig, "constraints")
    return written


def plot_inverse(result: InverseResult, csv_path: str | Path) -> list[Path]:
    """forces and following-error PNGs named after the CSV file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = Path(csv_path).with_suffix("")
    names = result.mechanism.coordinate_names
    title = f"{result.mechanism.name}: inverse dynamics ({result.settings.get('method')})"
    written = []
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for k, index in enumerate(result.actuated):
        ax.plot(result.t, result.forces[:, k], label=f"on {names[index]}")
    ax.set(xlabel="t [s]", ylabel="actuator force / torque", title=title)
    ax.legend()
    ax.grid(alpha=0.3)
    written.append(_save(fig, base, "forces"))
    fig, ax = plt.subplots(figsize=(9, 4))
    for k, index in enumerate(result.imposed):
        ax.plot(result.t, result.following_error[:, k], label=names[index])
    ax.set(xlabel="t [s]", ylabel="followed − prescribed", title=f"{title}: following error")
    ax.legend()
    ax.grid(alpha=0.3)
    written.append(_save(fig, base, "following_error"))
    return written


def _save(fig: object, base: Path, suffix: str) -> Path:
    return save_figure(fig, base.parent / f"{base.name}_{suffix}.png")

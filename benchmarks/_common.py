"""Shared plumbing for the benchmark scripts: figures, machine info, table, JSON.

Kept deliberately tiny so that each benchmark script reads as "what is measured" and
the printing / result-file format stays identical between scripts (results of different
runs and machines can then be diffed or collected by the same tool).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
"""Repository root, so the scripts work from any current directory."""
RESULTS = REPO / "benchmarks" / "results"
MECHANISMS = REPO / "mechanisms"
#: The shipped four-bar's coupler gyroscope, as its file writes it.
GYRO = "  - {type: gyroscope, body: 1, name: coupler_gyro, noise: 0.0175}\n"


def fourbar_imu() -> Path:
    """The shipped four-bar with an accelerometer on the coupler beside its gyroscope."""
    text = (MECHANISMS / "fourbar.yaml").read_text()
    assert GYRO in text
    path = Path(tempfile.mkdtemp()) / "fourbar-imu.yaml"
    path.write_text(text.replace(GYRO, GYRO + "  - {type: accelerometer, body: 1, "
                                 "name: imu, noise: 0.5}\n"))
    return path


@dataclass
class Figure:
    """One measured number with its (optional) target ``value <= target``.

    Figures without a target are context (e.g. a stage breakdown); ``met`` is then None
    so a reader of the JSON can tell "no target" from "target missed".
    """

    name: str
    value: float
    unit: str
    target: float | None = None
    note: str = ""

    @property
    def met(self) -> bool | None:
        return None if self.target is None else self.value <= self.target

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "met": self.met}


def best_time(function: Callable[[], Any], repeat: int, number: int = 1) -> float:
    """Best (minimum) wall time in seconds of ``number`` calls, over ``repeat`` trials.

    The minimum is the least noisy estimate of what the code costs on an otherwise idle
    machine; anything above it is interference from other processes.
    """
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            function()
        best = min(best, time.perf_counter() - start)
    return best / number


def loglog_slope(sizes: Sequence[float], seconds: Sequence[float], smallest: float) -> float:
    """Least-squares slope p of time ∝ size^p over the sizes ≥ ``smallest`` (the shortest
    ones measure per-call overhead, not growth); NaN with fewer than two points."""
    import numpy as np

    points = [(math.log(n), math.log(s)) for n, s in zip(sizes, seconds, strict=True)
              if n >= smallest]
    if len(points) < 2:
        return float("nan")
    x, y = np.array(points).T
    return float(np.polyfit(x, y, 1)[0])


POSITION_NOISE = 0.02  # rad / m; small enough that Newton stays on the assembly branch


def manifold_states(mech: Any, count: int, seed: int = 0,
                    noise: float = POSITION_NOISE) -> tuple[Any, Any]:
    """``count`` consistent states (Φ = 0, Φq q̇ = 0) near q0, generated batched.

    Benchmarking off-manifold states would time a physically meaningless problem (and
    could hit singular configurations), so perturb q0, project back, then project a
    random velocity onto the constraint tangent space.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    q = mech.solve_position(mech.q0 + noise * rng.standard_normal((count, mech.n)),
                            minimum_norm=True)
    qd = mech.project_velocity(q, rng.standard_normal((count, mech.n)))
    return q, qd


def mbgen_executable() -> Path:
    """The venv's ``mbgen`` console script (next to the running interpreter)."""
    return Path(sys.executable).parent / "mbgen"


def chain_file(bodies: int, out_dir: Path, group: str) -> Path:
    """``mbgen generate chain --bodies N`` into ``out_dir/group`` (unchanged content →
    mbgen's compile cache is reused between runs)."""
    target = out_dir / group / f"chain{bodies}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(mbgen_executable()), "generate", "chain", "--bodies", str(bodies),
                    "--out", str(target)], check=True, capture_output=True, timeout=120)
    return target


def fresh_dir(prefix: str) -> Path:
    """A new empty temporary directory, so builds inside it are really cold."""
    return Path(tempfile.mkdtemp(prefix=f"mbgen-bench-{prefix}-"))


def remove_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def machine_info() -> dict[str, Any]:
    """Enough about the host to judge whether two results are comparable."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "cpu_count": os.cpu_count(),
    }
    try:
        info["usable_cpus"] = len(os.sched_getaffinity(0))
        # Other jobs on the host inflate timings; record how busy it was.
        info["load_average_1_5_15min"] = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):  # not on Linux
        pass
    compiler = os.environ.get("CC", "cc")
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                             timeout=10)
        info["c_compiler"] = out.stdout.splitlines()[0] if out.stdout else compiler
    except (OSError, subprocess.SubprocessError):
        info["c_compiler"] = None
    try:
        import numpy

        info["numpy"] = numpy.__version__
    except ImportError:
        pass
    return info


def _fmt(value: float | None) -> str:
    if value is None:
        return "—"
    if value == 0 or 1e-3 <= abs(value) < 1e5:
        return f"{value:.4g}"
    return f"{value:.3e}"


def print_table(title: str, figures: Sequence[Figure], console: Console | None = None) -> None:
    """Print figures as one rich table: value, target and a ✓/✗ verdict."""
    table = Table(title=title, title_justify="left")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("unit")
    table.add_column("target", justify="right")
    table.add_column("met", justify="center")
    table.add_column("note", style="dim")
    for fig in figures:
        verdict = {None: "", True: "[green]✓[/]", False: "[red]✗[/]"}[fig.met]
        target = "" if fig.target is None else f"≤ {_fmt(fig.target)}"
        table.add_row(fig.name, _fmt(fig.value), fig.unit, target, verdict, fig.note)
    # Piped output (CI logs, `| tee`) would otherwise be wrapped at 80 columns.
    (console or Console(width=None if sys.stdout.isatty() else 160)).print(table)


def write_results(script: str, figures: Sequence[Figure],
                  extra: dict[str, Any] | None = None) -> Path:
    """Write ``benchmarks/results/<script>.json`` atomically (temp file + os.replace).

    Atomic so that a reader (or a second concurrent run) never sees a half-written file.
    """
    RESULTS.mkdir(parents=True, exist_ok=True)
    target = RESULTS / f"{script}.json"
    payload = {
        "script": f"benchmarks/{script}.py",
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "target_rule": "met = value <= target (null target: context figure, met is null)",
        "figures": [fig.as_dict() for fig in figures],
        "all_targets_met": all(fig.met for fig in figures if fig.met is not None),
        **(extra or {}),
    }
    fd, tmp = tempfile.mkstemp(prefix=f".{script}-", suffix=".json", dir=RESULTS)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(payload, handle, indent=1)
            handle.write("\n")
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def save_png(figure: Any, name: str, dpi: int = 110) -> Path:
    """Write a Matplotlib figure to benchmarks/results/<name>.png and close it."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    target = RESULTS / f"{name}.png"
    figure.savefig(target, dpi=dpi)
    plt.close(figure)
    return target


def parameter_figures(names: Sequence[str], values: Any, std: Any, truth: dict[str, float],
                      initial: dict[str, float]) -> list[Figure]:
    """An identification's figures per parameter: its error against the truth (target
    ≤ 2 %) and that error in its linearized standard deviations (target ≤ 3)."""
    figures = []
    for name, value, sigma in zip(names, values, std, strict=True):
        error = float(abs(value / truth[name] - 1)) * 100
        figures.append(Figure(f"{name}: error", error, "%", 2.0,
                              f"truth {truth[name]:.5g}, start {initial[name]:.5g}, "
                              f"identified {value:.5g}"))
        figures.append(Figure(f"{name}: |error| / std", float(abs(value - truth[name]) / sigma),
                              "σ", 3.0, f"std {sigma:.3g}"))
    return figures


def plot_fit(t: Any, readings: Any, fitted: Any, labels: Sequence[str], name: str) -> Path:
    """Measured (N, S) against fitted readings, one panel per sensor output, as
    ``benchmarks/results/<name>.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(labels), 1, figsize=(9, 5), sharex=True)
    for k, (ax, label) in enumerate(zip(axes, labels, strict=True)):
        ax.plot(t, readings[:, k], ".", ms=2, label="measured")
        ax.plot(t, fitted[:, k], lw=1, label="identified model")
        ax.set_ylabel(f"{label} [rad]")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper right")
    axes[-1].set_xlabel("t [s]")
    target = RESULTS / f"{name}.png"
    fig.savefig(target, dpi=100)
    plt.close(fig)
    return target

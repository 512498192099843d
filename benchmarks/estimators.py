"""Kalman filters in independent coordinates: time per step of the errorEKF and the UKF.

Why these figures: the issue's targets are a step of the errorEKF in ≤ 10 µs and of the
UKF in ≤ 50 µs on the four-bar at 1 ms steps, covariance included (≥ 100× and ≥ 20× real
time). Each filter runs a whole readings file in one C call (mb_kalman_run, mb_ukf_run in
mbgen/csrc/kalman.c); timed here is that call from Python over 10 s of readings (10 000
steps), best of a few runs, divided by the steps. The readings are the shipped four-bar's
coupler gyroscope on a simulation released from q0 at rest, with the file's noise; with an
accelerometer on the coupler too (the update then needs q̈'s Jacobians) and with the
generalized force at x1 estimated (state size 3). Context, without a target: the share of
(step, coordinate) pairs whose truth lies in the reported 95 % interval (the model is the
truth's here, so this says only that the intervals are not far off).

Second section (``--accuracy`` alone): the "three-simulation" protocol of the
Kalman-filter papers (Sanjurjo et al. 2017): the truth is a simulation of the mechanism,
the estimators run on a model whose parameters are off (masses +5 %, friction ×2), the
readings are the truth's sensors plus Gaussian noise at each sensor's declared noise.
Set-ups of 10 s at 1 ms: (a) the four-bar driven by a crank torque the estimators do not
know (estimated as an unknown force, except by the particle filter, which cannot), an
encoder on the crank; (b) the four-bar with a gyroscope and an accelerometer on the
coupler, released at rest; (c) the Furuta pendulum swinging, its two encoders, without
and with an accelerometer at the pendulum's tip. Methods: particle filter, errorEKF, UKF,
factor-graph smoother (lag 50 steps), each at its defaults (nothing tuned to the
set-ups); and the errorEKF and the UKF "auto": a model-error force at each independent
coordinate with --noise-force auto (estimation/filter_tuning.py, chosen from the readings
by the innovation tests; its µs per step counts every run of the choice). Per method
and set-up: RMSE of q, of the main angle, of q̇, q̈ and of the
estimated force, the share of (step, coordinate) pairs whose truth is inside the 95 %
interval, its worst 1-s window, µs per step (wall, the whole run). Also the errorEKF on
the truth's own model, to measure what the parameter error costs.

Run: ``.venv/bin/python benchmarks/estimators.py [--quick] [--timing | --accuracy]
[--methods particle,ekf,ukf,smoother,ekf-auto,ukf-auto]``. Writes
``benchmarks/results/estimators.json`` and (with the accuracy section)
``estimators_accuracy.png``; ``--quick``: 2 s, 200 particles, nothing written. Rows of
methods not in ``--methods`` are kept from the committed JSON, each with ``kept_from``
(its date); with ``--accuracy`` the time-per-step figures are kept from it, with
``--timing`` the accuracy section; the PNG shows the methods run.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    GYRO,
    MECHANISMS,
    RESULTS,
    Figure,
    best_time,
    fourbar_imu,
    print_table,
    write_results,
)
from rich.console import Console
from rich.table import Table

import mbgen
from mbgen.estimation import filter_defaults as defaults
from mbgen.estimation.filter_tuning import tune_noise_force
from mbgen.estimation.kalman import ErrorEKF, KalmanTrack
from mbgen.estimation.particle_filter import ParticleFilter
from mbgen.estimation.smoother import FactorSmoother
from mbgen.estimation.ukf import UnscentedKF
from mbgen.runtime.compiled import CompiledMechanism

DT, SECONDS = 1e-3, 10.0
TARGETS = {"errorEKF": 10.0, "UKF": 50.0}  # µs per step


def readings(mech: CompiledMechanism, steps: int) -> tuple[np.ndarray, np.ndarray,
                                                           np.ndarray]:
    """t (N,), the truth's q (N, n) and noisy readings (N, labels) from q0 at rest."""
    q, qd, qdd = mech.integrate(mech.q0, np.zeros(mech.n), DT, steps - 1)
    rng = np.random.default_rng(0)
    parts = [mech.sensors(q, qd).reshape(steps, -1) + mech.sensor_noise()
             * rng.standard_normal((steps, len(mech.sensor_labels)))]
    if mech.accelerometer_labels:
        parts.append(mech.accelerometers(q, qdd).reshape(steps, -1)
                     + mech.accelerometer_noise()
                     * rng.standard_normal((steps, len(mech.accelerometer_labels))))
    return DT * np.arange(steps), q, np.hstack(parts)


def measure(mech: CompiledMechanism, kind: type[ErrorEKF], forces: list[str], steps: int,
            repeat: int) -> tuple[float, float]:
    """µs per step of the whole run in C (best of ``repeat``) and the 95 % coverage."""
    t, truth, y = readings(mech, steps)

    def run() -> object:
        return kind(mech, unknown_forces=forces).run(t, y, DT)

    seconds = best_time(run, repeat)
    track = kind(mech, unknown_forces=forces).run(t, y, DT)
    assert not track.failed and len(track.t) == steps
    moving = track.sigma_q > 1e-9 * (1 + np.abs(track.q))
    inside = np.abs(truth - track.q) <= 1.959963984540054 * track.sigma_q
    return 1e6 * seconds / steps, float(inside[moving].mean())


def timing(quick: bool) -> list[Figure]:
    """The first section: µs per step of the errorEKF and the UKF in one C call."""
    steps = 1000 if quick else int(round(SECONDS / DT))
    repeat = 2 if quick else 5
    shipped = mbgen.load(str(MECHANISMS / "fourbar.yaml"))
    imu = mbgen.load(str(fourbar_imu()))
    figures = []
    for kind in (ErrorEKF, UnscentedKF):
        for mech, sensors, forces in ((shipped, "gyroscope", []),
                                      (shipped, "gyroscope", ["x1"]),
                                      (imu, "gyroscope + accelerometer", [])):
            per_step, coverage = measure(mech, kind, forces, steps, repeat)
            extra = f", force at {forces[0]} estimated" if forces else ""
            main_case = sensors == "gyroscope" and not forces
            figures.append(Figure(f"four-bar, {kind.label}, {sensors}{extra}", per_step,
                                  "µs/step", TARGETS[kind.label] if main_case else None,
                                  f"{steps} steps of {DT * 1e3:g} ms in one C call; 95 % "
                                  f"interval holds the truth {100 * coverage:.1f} %"))
    print_table("Kalman filters: time per step", figures, Console(width=190))
    return figures

# ---------------------------------------------------------------------------------------
# Accuracy: the "three-simulation" protocol of the Kalman-filter papers
# ---------------------------------------------------------------------------------------
Z95 = 1.959963984540054
MASS_FACTOR, FRICTION_FACTOR = 1.05, 2.0  # the estimator's model: masses +5 %, friction ×2
CRANK_VISCOUS = 0.1  # the truth's crank friction [N m s/rad] (the shipped file has none)
ENCODER_NOISE = 1e-3  # the four-bar's crank encoder [rad] (the shipped file has none)
ACCEL_NOISE = 0.5  # the coupler's accelerometer [m/s²], as in the timing section
TIP_NOISE = 0.1  # the Furuta pendulum's tip accelerometer [m/s²]
FURUTA_RATE = (1.0, 2.0)  # the truth's initial (θ̇1, θ̇2) [rad/s]; the estimators start at rest


def fourbar_text(mass: float, friction: float) -> str:
    """The shipped four-bar with its crank angle as a coordinate (an encoder on it, viscous
    friction at it), the coupler's gyroscope and an accelerometer on the coupler; masses
    times ``mass``, friction ``friction`` [N m s/rad]."""
    text = (MECHANISMS / "fourbar.yaml").read_text()
    for m in ("1.0", "2.0", "4.0"):
        assert f"    mass: {m}\n" in text
        text = text.replace(f"    mass: {m}\n", f"    mass: {float(m) * mass!r}\n")
    text = text.replace(GYRO, GYRO + "  - {type: accelerometer, body: 1, name: imu, noise: "
                        f"{ACCEL_NOISE}}}\n  - {{type: encoder, coordinate: crank, name: enc, "
                        f"noise: {ENCODER_NOISE}}}\n")
    return text + ("relative_coordinates:\n  - {type: RelativeAngleAbsoluteDOF, points: [0, 1],"
                   " name: crank}\nfriction:\n  - {coordinate: crank, viscous: "
                   f"{friction!r}}}\nindependent_coordinates: [crank]\n")


def furuta_text(mass: float, friction: float) -> str:
    """The shipped Furuta pendulum with an accelerometer at the pendulum's tip; its
    masses m1, m2 times ``mass``, its damping b1, b2 times ``friction``."""
    text = (MECHANISMS / "furuta.yaml").read_text()
    for name, factor in (("m1", mass), ("m2", mass), ("b1", friction), ("b2", friction)):
        line = next(x for x in text.splitlines() if x.startswith(f"  {name}: "))
        value = float(line.split(":")[1].split("#")[0])
        text = text.replace(line, f"  {name}: {value * factor!r}")
    sensor = "  - {type: encoder, coordinate: theta2, name: enc2, noise: 1e-4, offset: offset2}\n"
    assert sensor in text
    return text.replace(sensor, sensor + "  - {type: accelerometer, body: pendulum, point: T, "
                        f"name: tip, noise: {TIP_NOISE}}}\n")


@dataclass
class Setup:
    """One set-up: the truth's and the estimator's mechanisms, the truth's run and the
    readings (NaN in the columns this set-up does not read)."""

    name: str
    truth: CompiledMechanism
    model: CompiledMechanism
    t: np.ndarray  # (N,)
    q: np.ndarray  # (N, n) the truth
    qd: np.ndarray
    qdd: np.ndarray
    y: np.ndarray  # (N, labels)
    forces: list[str]  # coordinates whose force the estimators estimate
    force: np.ndarray  # (N, len(forces)) the truth's force there
    z: int  # the coordinate reported as "crank" / main angle


def crank_torque(t: np.ndarray) -> np.ndarray:
    """The truth's crank torque [N m], unknown to the estimators: two sines, a drive the
    crank follows without reaching a dead point."""
    return 6.0 * np.sin(2 * np.pi * 0.4 * t) + 3.0 * np.sin(2 * np.pi * 1.1 * t + 1.0)


def make_setup(name: str, truth: CompiledMechanism, model: CompiledMechanism, steps: int,
               keep: list[str], qd0: np.ndarray | None = None, torque: str | None = None,
               seed: int = 0) -> Setup:
    """Simulate the truth (RK4, 1 ms) and make its readings of the labels ``keep``."""
    n = truth.n
    qd0 = np.zeros(n) if qd0 is None else qd0
    forces = None
    if torque is not None:
        half = DT / 2 * np.arange(2 * steps + 1)
        forces = np.zeros((2 * steps + 1, n))
        forces[:, truth.coordinate_index(torque)] = crank_torque(half)
    q, qd, qdd = truth.integrate(truth.q0, qd0, DT, steps - 1, forces=None if forces is None
                                 else forces[:2 * steps - 1])
    rng = np.random.default_rng(seed)
    state = truth.sensors(q, qd).reshape(steps, -1)
    acc = (truth.accelerometers(q, qdd).reshape(steps, -1) if truth.accelerometer_labels
           else np.zeros((steps, 0)))
    clean = np.hstack([state, acc])
    noise = np.concatenate([truth.sensor_noise(), truth.accelerometer_noise()
                            if truth.accelerometer_labels else np.zeros(0)])
    y = clean + noise * rng.standard_normal(clean.shape)
    labels = [*truth.sensor_labels, *truth.accelerometer_labels]
    for j, label in enumerate(labels):
        if not any(label == k or label.startswith(k + ".") for k in keep):
            y[:, j] = np.nan
    t = DT * np.arange(steps)
    f = (crank_torque(t)[:, None] if torque is not None else np.zeros((steps, 0)))
    return Setup(name, truth, model, t, q, qd, qdd, y, [torque] if torque else [], f,
                 truth.coordinate_index("crank" if "crank" in truth.coordinate_names
                                        else "theta2"))


@dataclass
class Outcome:
    """One method on one set-up."""

    q: np.ndarray | None  # (N, n) estimate (None: the method failed)
    inside: np.ndarray | None  # (N, n) bool: the truth in the 95 % interval
    qd: np.ndarray | None = None
    qdd: np.ndarray | None = None
    sigma_z: np.ndarray | None = None  # (N,) σ of the main coordinate
    force: np.ndarray | None = None
    seconds: float = float("nan")
    note: str = ""
    trusted: bool | None = None  # the Kalman methods' verdict (None: not said)
    sigma_f: float | None = None  # the intensity an "auto" method chose
    runs: int = 1  # the filter runs the method made (its choice's)


def run_method(method: str, s: Setup, particles: int, sigma_f: float = defaults.NOISE_FORCE
               ) -> Outcome:
    """Run one estimator on the model with the set-up's readings; time the whole run
    (``sigma_f``: the unknown forces' random-walk intensity, the default unless said;
    the "auto" methods choose it from the readings, estimation/filter_tuning.py, with a
    model-error force at each independent coordinate, and time the whole choice)."""
    mech = s.model
    start = time.perf_counter()
    try:
        if method.endswith(" auto"):
            kind = ErrorEKF if method.startswith("errorEKF") else UnscentedKF
            tuned = tune_noise_force(
                lambda sf: kind(mech, unknown_forces=s.forces, sigma_f=sf, model_error=True),
                lambda kalman: kalman.run(s.t, s.y, DT))
            ktrack = tuned.track
            auto_note = (f"σf {tuned.sigma_f:.3g} chosen of {len(tuned.tried)} runs; "
                         f"forces at {','.join(tuned.kalman.force_names)}")
            return finish(s, ktrack, time.perf_counter() - start, auto_note,
                          tuned.sigma_f, len(tuned.tried))
        if method == "particle":
            if s.forces:
                note = "no force estimation (the particle filter has no --unknown-forces)"
            else:
                note = ""
            track = ParticleFilter(mech, particles=particles).run(s.t, s.y, DT)
            seconds = time.perf_counter() - start
            N = len(track.t)
            inside = (s.q[:N] >= track.low) & (s.q[:N] <= track.high)
            return Outcome(track.mean, inside, sigma_z=track.sigma[:, s.z], seconds=seconds,
                           note=note + ("" if track.recovered else "; not recovered"))
        if method == "smoother":
            est = FactorSmoother(mech, unknown_forces=s.forces, sigma_f=sigma_f)
            ktrack = est.run(s.t, s.y, DT, lag=50)
        else:
            kind = ErrorEKF if method == "errorEKF" else UnscentedKF
            ktrack = kind(mech, unknown_forces=s.forces, sigma_f=sigma_f).run(s.t, s.y, DT)
    except Exception as exc:  # a method that cannot run a set-up: record why
        return Outcome(None, None, seconds=time.perf_counter() - start,
                       note=f"{type(exc).__name__}: {exc}"[:200])
    return finish(s, ktrack, time.perf_counter() - start)


def finish(s: Setup, ktrack: KalmanTrack, seconds: float, note: str = "",
           sigma_f: float | None = None, runs: int = 1) -> Outcome:
    """A Kalman method's outcome: the truth inside the 95 % interval, trusted or why not
    (the first set-up's force column is the set-up's own unknown force)."""
    N = len(ktrack.t)
    moving = ktrack.sigma_q > 1e-9 * (1 + np.abs(ktrack.q))
    inside = np.abs(s.q[:N] - ktrack.q) <= Z95 * ktrack.sigma_q
    inside = np.where(moving, inside, np.abs(s.q[:N] - ktrack.q) < 1e-9)
    if ktrack.failed:
        note += ("; " if note else "") + f"failed at t = {ktrack.t[-1]:.3g} s"
    why = ktrack.distrust()
    if why:
        note += ("; " if note else "") + "untrusted: " + why[:300]
    return Outcome(ktrack.q, inside, ktrack.qd, ktrack.qdd, ktrack.sigma_q[:, s.z],
                   ktrack.force[:, :1] if s.forces else None, seconds, note,
                   trusted=why is None, sigma_f=sigma_f, runs=runs)


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.nanmean(np.square(x)))) if x.size else float("nan")


def scores(s: Setup, o: Outcome) -> dict[str, Any]:
    """RMSEs, coverage over all (step, coordinate) pairs and in its worst second, µs/step."""
    row: dict[str, Any] = {"setup": s.name, "note": o.note}
    N = 0 if o.q is None else len(o.q)
    row["steps"] = N
    row["us_per_step"] = 1e6 * o.seconds / max(N, 1)  # the whole method (its choice's runs)
    row["runs"] = o.runs
    row["us_per_step_per_run"] = row["us_per_step"] / max(o.runs, 1)
    if o.trusted is not None:
        row["trusted"] = o.trusted
    if o.sigma_f is not None:
        row["sigma_f_chosen"] = o.sigma_f
    if o.q is None or o.inside is None or N == 0:
        return row
    row["complete"] = len(s.t) == N
    row["rmse_q"] = rms(o.q - s.q[:N])
    row["rmse_main"] = rms(o.q[:, s.z] - s.q[:N, s.z])
    row["rmse_qd"] = rms(o.qd - s.qd[:N]) if o.qd is not None else None
    row["rmse_qdd"] = rms(o.qdd - s.qdd[:N]) if o.qdd is not None else None
    if s.forces and o.force is not None:
        peak = float(np.max(np.abs(s.force)))
        row["rmse_force"] = rms(o.force[:, 0] - s.force[:N, 0])
        row["force_rms_over_peak"] = row["rmse_force"] / peak
    row["coverage"] = float(o.inside.mean())
    per = int(round(1.0 / DT))
    windows = [o.inside[k:k + per].mean() for k in range(0, N - per + 1, per)]
    row["worst_second"] = float(min(windows)) if windows else None
    row["worst_second_at"] = float(np.argmin(windows)) if windows else None
    return row


METHODS = ("particle", "errorEKF", "UKF", "smoother", "errorEKF auto", "UKF auto")
#: --methods' names of METHODS.
METHOD_OPTIONS = dict(zip(("particle", "ekf", "ukf", "smoother", "ekf-auto", "ukf-auto"),
                          METHODS, strict=True))


def compile_pair(text: Callable[[float, float], str], base: float, name: str,
                 folder: Path) -> tuple[CompiledMechanism, CompiledMechanism]:
    """The truth's and the perturbed model's mechanisms (YAML copies in ``folder``)."""
    mechs = []
    for role, mass, friction in (("truth", 1.0, base), ("model", MASS_FACTOR,
                                                         FRICTION_FACTOR * base)):
        path = folder / f"{name}-{role}.yaml"
        path.write_text(text(mass, friction))
        mechs.append(mbgen.load(str(path)))
    return mechs[0], mechs[1]


def setups(steps: int, folder: Path) -> list[Setup]:
    """The issue's set-ups (a), (b), (c) without and (c) with the tip accelerometer."""
    four_truth, four_model = compile_pair(fourbar_text, CRANK_VISCOUS, "fourbar", folder)
    fur_truth, fur_model = compile_pair(lambda m, f: furuta_text(m, f), 1.0, "furuta",
                                        folder)
    rates = np.zeros(fur_truth.n)
    zf = [fur_truth.coordinate_index(c) for c in ("theta1", "theta2")]
    rates[zf] = FURUTA_RATE
    qd0 = fur_truth.solve_velocity(fur_truth.q0, rates[zf], z=zf)
    return [
        make_setup("(a) four-bar, crank torque unknown, encoder", four_truth, four_model,
                   steps, ["enc"], torque="crank"),
        make_setup("(b) four-bar, coupler gyroscope + accelerometer", four_truth,
                   four_model, steps, ["coupler_gyro", "imu"], seed=1),
        make_setup("(c) Furuta, two encoders", fur_truth, fur_model, steps,
                   ["enc1", "enc2"], qd0=qd0, seed=2),
        make_setup("(c') Furuta, two encoders + tip accelerometer", fur_truth, fur_model,
                   steps, ["enc1", "enc2", "tip"], qd0=qd0, seed=2),
    ]


def cause(s: Setup) -> dict[str, Any]:
    """The errorEKF on the truth's own model: what the parameter error costs (the same
    readings, the same filter settings, only masses and friction right); with an unknown
    force, also with its random walk's intensity at the truth's RMS torque rate (what the
    default 1 N m/√s leaves uncovered)."""
    exact = Setup(**{**s.__dict__, "model": s.truth})
    row = scores(exact, run_method("errorEKF", exact, 0))
    if s.forces:
        rate = float(np.sqrt(np.mean(np.square(np.diff(s.force[:, 0]) / DT))))
        for model, key in ((exact, "truth_model"), (s, "perturbed_model")):
            wide = scores(model, run_method("errorEKF", model, 0, sigma_f=rate))
            row[f"{key}_sigma_f_{rate:.3g}"] = {k: wide.get(k) for k in (
                "coverage", "worst_second", "rmse_main", "force_rms_over_peak")}
    return row


def fmt(x: Any, scale: float = 1.0, digits: str = ".3g") -> str:
    return "—" if x is None or (isinstance(x, float) and np.isnan(x)) else \
        format(float(x) * scale, digits)


def accuracy(quick: bool, methods: tuple[str, ...] = METHODS
             ) -> tuple[list[Figure], dict[str, Any]]:
    """The ``methods`` on every set-up, with the committed rows of the others (said in
    their ``kept_from``): the table, the figures with targets, the rows."""
    steps = 2000 if quick else int(round(SECONDS / DT))
    particles = 200 if quick else defaults.PARTICLES
    folder = Path(tempfile.mkdtemp(prefix="mbgen-bench-estimators-"))
    rows: list[dict[str, Any]] = []
    tracks: dict[tuple[str, str], Outcome] = {}
    cases = setups(steps, folder)
    for s in cases:
        for method in methods:
            outcome = run_method(method, s, particles)
            tracks[(s.name, method)] = outcome
            row = {"method": method, **scores(s, outcome)}
            rows.append(row)
            print(f"{s.name[:4]} {method:9s} {row.get('rmse_main', float('nan')):.3g} "
                  f"cov {row.get('coverage', float('nan')):.3f} "
                  f"{row['us_per_step']:.1f} µs/step {row['note']}", flush=True)
    rows = merged_rows(rows, methods, quick)
    causes = {s.name: cause(s) for s in cases}
    table = Table(title=f"Estimators on a model with masses ×{MASS_FACTOR:g} and friction "
                  f"×{FRICTION_FACTOR:g} ({steps} steps of {DT * 1e3:g} ms)",
                  title_justify="left")
    for col in ("set-up", "method", "RMSE q", "RMSE main°", "RMSE q̇", "RMSE q̈",
                "force RMS/peak", "95 % cov.", "worst 1 s", "µs/step", "note"):
        table.add_column(col)
    for row in rows:
        table.add_row(str(row["setup"])[:4], str(row["method"]), fmt(row.get("rmse_q")),
                      fmt(row.get("rmse_main"), 180 / np.pi), fmt(row.get("rmse_qd")),
                      fmt(row.get("rmse_qdd")), fmt(row.get("force_rms_over_peak")),
                      fmt(row.get("coverage"), 100, ".1f"),
                      fmt(row.get("worst_second"), 100, ".1f"),
                      fmt(row.get("us_per_step"), 1, ".4g"), str(row["note"])[:70])
    Console(width=190).print(table)
    for name, row in causes.items():
        print(f"cause check, errorEKF on the truth's own model, {name[:4]}: coverage "
              f"{fmt(row.get('coverage'), 100, '.1f')} %, worst second "
              f"{fmt(row.get('worst_second'), 100, '.1f')} %, main RMSE "
              f"{fmt(row.get('rmse_main'), 180 / np.pi)}°, torque RMS/peak "
              f"{fmt(row.get('force_rms_over_peak'))}")
        for key, value in row.items():
            if "sigma_f" in key:
                print(f"    {key}: {value}")
    figures = target_figures(rows)
    plot(cases[0], tracks, quick, methods)
    return figures, {"protocol": {
        "truth": "RK4 simulation at 1 ms of the mechanism (mbgen's integrator)",
        "model": f"masses x{MASS_FACTOR}, friction/damping x{FRICTION_FACTOR} (four-bar: "
                 f"truth crank viscous {CRANK_VISCOUS} N m s/rad, model "
                 f"{FRICTION_FACTOR * CRANK_VISCOUS}; Furuta: b1, b2)",
        "readings": "the truth's sensors + Gaussian noise at each sensor's file noise "
                    f"(encoder on the crank {ENCODER_NOISE} rad, coupler accelerometer "
                    f"{ACCEL_NOISE} m/s², Furuta tip accelerometer {TIP_NOISE} m/s²)",
        "estimators": "defaults (sigma_a 1, particle filter "
                      f"{particles} particles, smoother lag 50 steps); 'auto': the "
                      "Kalman filter with a model-error force at each independent "
                      "coordinate and --noise-force auto (estimation/filter_tuning.py)",
        "methods_rerun": list(methods),
        "steps": steps, "dt": DT}, "rows": rows, "cause_truth_model_errorEKF": causes}


def merged_rows(rows: list[dict[str, Any]], methods: tuple[str, ...], quick: bool
                ) -> list[dict[str, Any]]:
    """``rows`` and, for the methods not rerun, the committed JSON's rows of them (with
    ``kept_from``: that file's date), in METHODS' order per set-up."""
    kept: list[dict[str, Any]] = []
    committed = RESULTS / "estimators.json"
    if not quick and committed.exists() and set(methods) != set(METHODS):
        old = json.loads(committed.read_text())
        for row in old.get("accuracy", {}).get("rows", []):
            if row.get("method") not in methods:
                kept.append({**row, "kept_from": row.get("kept_from", old.get("created"))})
    order = {name: k for k, name in enumerate(METHODS)}
    setups_seen = list(dict.fromkeys(r["setup"] for r in rows + kept))
    return sorted(rows + kept, key=lambda r: (setups_seen.index(r["setup"]),
                                              order.get(r["method"], len(order))))


def target_figures(rows: list[dict[str, Any]]) -> list[Figure]:
    """The issue's targets as ``value <= target`` figures."""
    figures = []
    by = {(str(r["setup"])[:4], str(r["method"])): r for r in rows}
    for r in rows:
        label = f"{str(r['setup'])[:4]} {r['method']}"
        if r.get("kept_from"):
            label += f" (kept from {str(r['kept_from'])[:10]})"
        cov, worst = r.get("coverage"), r.get("worst_second")
        if cov is None:
            figures.append(Figure(f"{label}: ran", 1.0, "", 0.0, str(r["note"])[:80]))
            continue
        figures.append(Figure(f"{label}: |95 % coverage - 94 %|", abs(float(cov) - 0.94),
                              "", 0.04, f"coverage {100 * float(cov):.1f} % (target 90-98)"))
        if worst is not None:
            figures.append(Figure(f"{label}: 80 % - worst second", 0.8 - float(worst), "",
                                  0.0, f"worst 1-s coverage {100 * float(worst):.1f} %"))
        if r.get("force_rms_over_peak") is not None:
            figures.append(Figure(f"{label}: torque RMS error / peak",
                                  float(r["force_rms_over_peak"]), "", 0.05))
    a: dict[str, Any] = {m: by.get(("(a) ", m), {}).get("rmse_main") for m in METHODS}
    for num, den in (("errorEKF", "particle"), ("smoother", "errorEKF")):
        top, bottom = a[num], a[den]
        if top is not None and bottom is not None:
            figures.append(Figure(f"(a) crank RMSE {num} / {den}", top / bottom, "", 1.0,
                                  f"{np.degrees(top):.3g}° vs {np.degrees(bottom):.3g}°"))
    return figures


def plot(s: Setup, tracks: dict[tuple[str, str], Outcome], quick: bool,
         methods: tuple[str, ...] = METHODS) -> None:
    """Set-up (a): each method run's crank-angle error with its 95 % band, and the
    estimated torque against the truth's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    for method, colour in zip(METHODS, ("C0", "C1", "C2", "C3", "C4", "C5"), strict=True):
        if method not in methods:
            continue
        o = tracks[(s.name, method)]
        if o.q is None:
            continue
        N = len(o.q)
        err = np.degrees(o.q[:, s.z] - s.q[:N, s.z])
        top.plot(s.t[:N], err, colour, lw=0.7, label=method)
        if o.sigma_z is not None and method != "particle":
            band = np.degrees(Z95 * o.sigma_z)
            top.fill_between(s.t[:N], -band, band, color=colour, alpha=0.12, lw=0)
        if o.force is not None:
            bottom.plot(s.t[:N], o.force[:, 0], colour, lw=0.8, label=method)
    bottom.plot(s.t, s.force[:, 0], "k--", lw=1.0, label="truth")
    top.set_ylabel("crank angle error [deg]\n(band: 95 % of each Kalman method)")
    spans = [np.percentile(np.abs(o.q[:, s.z] - s.q[:len(o.q), s.z]), 99.5)
             for m in methods if m != "particle" and (o := tracks[(s.name, m)]).q is not None]
    lim = np.degrees(4 * max(spans)) if spans else 3.0
    top.set_ylim(-lim, lim)  # the Kalman methods' scale (the particle filter's is clipped)
    top.legend(loc="upper right", fontsize=8, ncol=4)
    bottom.set_ylabel("crank torque [N m]")
    bottom.set_xlabel("t [s]")
    bottom.legend(loc="upper right", fontsize=8, ncol=4)
    fig.suptitle(f"{s.name}; model masses ×{MASS_FACTOR:g}, friction ×{FRICTION_FACTOR:g}"
                 + ("" if set(methods) == set(METHODS) else
                    f"\n(this run: {', '.join(m for m in METHODS if m in methods)})"),
                 fontsize=10)
    fig.tight_layout()
    out = (Path(tempfile.mkdtemp()) if quick else RESULTS) / "estimators_accuracy.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def kept_timing() -> list[Figure]:
    """The committed JSON's time-per-step figures (an --accuracy run does not redo
    them), their notes saying so."""
    committed = RESULTS / "estimators.json"
    if not committed.exists():
        return []
    old = json.loads(committed.read_text())
    return [Figure(f["name"], f["value"], f["unit"], f["target"],
                   f"{f.get('note', '')} (kept from {old.get('created', '?')[:10]})"
                   if "kept from" not in f.get("note", "") else f.get("note", ""))
            for f in old.get("figures", []) if f.get("unit") == "µs/step"]


def kept_accuracy() -> tuple[list[Figure], dict[str, Any]]:
    """The committed JSON's three-simulation figures and rows (a --timing run does not
    redo them), as they were."""
    committed = RESULTS / "estimators.json"
    if not committed.exists():
        return [], {}
    old = json.loads(committed.read_text())
    return ([Figure(f["name"], f["value"], f["unit"], f["target"], f.get("note", ""))
             for f in old.get("figures", []) if f.get("unit") != "µs/step"],
            old.get("accuracy", {}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke check, nothing written")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--timing", action="store_true", help="the time-per-step section only")
    only.add_argument("--accuracy", action="store_true",
                      help="the three-simulation section only")
    parser.add_argument("--methods", default=",".join(METHOD_OPTIONS),
                        help="the three-simulation section's methods, comma-separated, of "
                        f"{', '.join(METHOD_OPTIONS)} (the others' rows are kept from the "
                        "committed JSON) [default: all]")
    args = parser.parse_args(argv)
    names = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in names if m not in METHOD_OPTIONS]
    if unknown or not names:
        parser.error(f"--methods: {', '.join(unknown) or 'none given'}; choose of "
                     f"{', '.join(METHOD_OPTIONS)}")
    methods = tuple(METHOD_OPTIONS[m] for m in names)
    figures = [] if args.accuracy else timing(args.quick)
    extra: dict[str, Any] = {}
    if not args.timing:
        found, extra = accuracy(args.quick, methods)
        print_table("Three-simulation protocol: the issue's targets", found,
                    Console(width=190))
        figures += found
    if not args.quick:
        if args.accuracy:  # the timing section's figures kept from the committed file
            figures = kept_timing() + figures
        if args.timing:  # the accuracy section's figures and rows kept likewise
            kept_figures, extra = kept_accuracy()
            figures += kept_figures
        print(f"wrote {write_results('estimators', figures, {'accuracy': extra})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

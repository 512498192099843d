"""The innovation consistency test (estimation/consistency.py) and the Kalman filters'
trust rule built on it: white standard normal innovations pass; too large ones in one
window, over the run, or correlated in time fail, named; a filter whose model lacks a
force the readings feel (an overconfident filter whose mean normalized innovation squared
stays under the former limit of 2) is untrusted, from Python and from the command line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import SHIPPED_DIR

from mbgen.cli.conventions import EXIT_UNTRUSTED, untrusted_path
from mbgen.estimation.consistency import (
    FIT_LEVEL,
    chi2_bound,
    innovation_tests,
    lag_one_correlation,
)
from mbgen.estimation.kalman import NIS_LIMIT, ErrorEKF
from mbgen.estimation.ukf import UnscentedKF
from mbgen.runtime.compiled import CompiledMechanism

Compiled = Callable[[Path], CompiledMechanism]
FOURBAR = SHIPPED_DIR / "fourbar.yaml"


def test_white_innovations_pass_and_each_misfit_is_named() -> None:
    rng = np.random.default_rng(3)
    steps = 5000
    t = 1e-3 * np.arange(steps)
    white = rng.standard_normal((steps, 2))
    white[::7, 1] = np.nan  # an output without a reading at some steps
    assert innovation_tests(white, t, ["a", "b"]) == []

    wide = white.copy()
    wide[2000:3000, 0] *= 1.5  # the third second's innovations 1.5 times their σ
    failed = innovation_tests(wide, t, ["a", "b"])
    assert [f.what for f in failed] == ["a"] * len(failed) and failed
    assert any("from t = 2 s to 3 s" in f.message for f in failed)

    slow = white.copy()  # an AR(1) sequence of unit variance, ρ = 0.2
    for k in range(1, steps):
        slow[k, 0] = 0.2 * slow[k - 1, 0] + np.sqrt(1 - 0.04) * white[k, 0]
    failed = innovation_tests(slow, t, ["a", "b"])
    assert [f.what for f in failed] == ["a"] and "correlated" in failed[0].message
    assert innovation_tests(slow, t, ["a", "b"], whiteness=False) == []
    # anti-correlated innovations (a gain larger than needed) leave the intervals wide
    alternating = white.copy()
    alternating[1:, 0] = -0.3 * white[:-1, 0] + np.sqrt(1 - 0.09) * white[1:, 0]
    assert innovation_tests(alternating, t, ["a", "b"]) == []


def test_the_chi2_bound_and_the_autocorrelation_against_their_definitions() -> None:
    from scipy.stats import chi2

    # the bound is exceeded with probability FIT_LEVEL / tests: chi2's survival there
    bound = chi2_bound(400, 5)
    np.testing.assert_allclose(chi2.sf(bound * 400, 400), FIT_LEVEL / 5, rtol=1e-9)
    x = np.array([1.0, 2.0, -1.0, 0.5])
    expected = (1 * 2 - 2 * 1 - 0.5) / np.sqrt((1 + 4 + 1) * (4 + 1 + 0.25))
    assert lag_one_correlation(x) == pytest.approx(expected, rel=1e-12)


def blind_readings(mech: CompiledMechanism, steps: int, force: float
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """t (N,), the truth's q (N, n) and its gyroscope readings (σ 1e-3) when a constant
    generalized force ``force`` acts at x1, which the filter's model does not have."""
    forces = np.zeros((2 * steps - 1, mech.n))
    forces[:, mech.coordinate_index("x1")] = force
    q, qd, _ = mech.integrate(mech.q0, np.zeros(mech.n), 1e-3, steps - 1, forces=forces)
    rng = np.random.default_rng(0)
    y = mech.sensors(q, qd).reshape(steps, -1) + 1e-3 * rng.standard_normal((steps, 1))
    return 1e-3 * np.arange(steps), q, y


@pytest.mark.parametrize("kind", [ErrorEKF, UnscentedKF], ids=["ekf", "ukf"])
def test_an_overconfident_filter_is_untrusted(compiled: Compiled,
                                              kind: type[ErrorEKF]) -> None:
    """A force of 0.3 at x1 the model lacks and an acceleration noise far too small for
    it (0.1): the 95 % interval holds the truth well under 90 % of the time while the
    mean normalized innovation squared stays under 2 (the former rule's ✓)."""
    mech = compiled(FOURBAR)
    t, truth, y = blind_readings(mech, 2000, 0.3)
    track = kind(mech, sigma_a=0.1, sigma_s=1e-3).run(t, y)
    moving = track.sigma_q > 1e-9 * (1 + np.abs(track.q))
    coverage = (np.abs(truth - track.q) <= 1.96 * track.sigma_q)[moving].mean()
    assert coverage < 0.8, coverage
    assert np.nansum(track.nis) / track.readings.sum() < NIS_LIMIT
    why = track.distrust()
    assert why is not None and "inconsistent with its covariance" in why, why
    # the same filter with an acceleration noise that covers the force: trusted
    honest = kind(mech, sigma_a=1.0, sigma_s=1e-3).run(t, y)
    inside = (np.abs(truth - honest.q) <= 1.96 * honest.sigma_q)[moving].mean()
    assert inside > 0.9 and honest.distrust() is None, (inside, honest.distrust())


def test_an_overconfident_filter_exits_4_from_the_command_line(
        run, tmp_path: Path, out_dir: Path) -> None:
    """Readings of a four-bar whose coupler is 10 % heavier than the file's, at σ 1e-3,
    estimated with --noise-accel 0.3: the interval holds the truth under 90 % of the
    time, with a mean normalized innovation squared under 2 per reading (the former
    rule's ✓); exit 4, no ✓, the table kept as .untrusted.csv."""
    text = FOURBAR.read_text()
    assert text.count("    mass: 2.0\n") == 1
    text = text.replace("    mass: 2.0\n", "    mass: 2.2\n")
    heavy = tmp_path / "heavy.yaml"
    heavy.write_text(text)
    truth, readings, out = (tmp_path / f"{n}.csv" for n in ("truth", "readings", "e"))
    code, output = run("simulate", str(heavy), "--t-end", "2", "--dt", "1e-3", "--out",
                       str(truth), "--sensors-out", str(readings), "--noise-sensor", "1e-3",
                       "--build-dir", str(out_dir))
    assert code == 0, output
    code, output = run("estimate", str(FOURBAR), "--data", str(readings), "--method", "ekf",
                       "--noise-sensor", "1e-3", "--noise-accel", "0.3", "--out", str(out),
                       "--build-dir", str(out_dir))
    said = " ".join(output.split())
    assert code == EXIT_UNTRUSTED and "✓" not in said, said
    assert "inconsistent with its covariance" in said, said
    assert not out.exists() and untrusted_path(out).exists()
    header, est = read_table(untrusted_path(out))
    names, true_q = read_table(truth)
    inside = [(true_q[:, names.index(c)] >= est[:, header.index(f"{c}_lo")])
              & (true_q[:, names.index(c)] <= est[:, header.index(f"{c}_hi")])
              for c in names[1:] if f"{c}_lo" in header]
    assert np.mean(inside) < 0.9, np.mean(inside)
    assert est[:, header.index("nis")].mean() < NIS_LIMIT


def read_table(path: Path) -> tuple[list[str], np.ndarray]:
    header = path.read_text().split("\n", 1)[0].split(",")
    return header, np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)


def test_noise_force_auto_is_one_grid_step_above_the_smallest_that_passes(
        compiled: Compiled, tmp_path: Path) -> None:
    """Readings of a four-bar whose coupler is 20 % heavier than the model's, with a
    model-error force at the independent coordinate: the chosen σf passes, the grid value
    below it passes (the smallest that does), the one below that fails; the result holds
    the truth in its 95 % interval at least 90 % of the time."""
    from mbgen.estimation.filter_tuning import STEP, tune_noise_force

    mech = compiled(FOURBAR)
    heavy = tmp_path / "heavy.yaml"
    heavy.write_text(FOURBAR.read_text().replace("    mass: 2.0\n", "    mass: 2.4\n"))
    truth_mech = compiled(heavy)
    steps = 2000
    q, qd, _ = truth_mech.integrate(truth_mech.q0, np.zeros(mech.n), 1e-3, steps - 1)
    rng = np.random.default_rng(0)
    y = truth_mech.sensors(q, qd).reshape(steps, -1) + 1e-3 * rng.standard_normal((steps, 1))
    t = 1e-3 * np.arange(steps)

    def make(sigma_f: float) -> ErrorEKF:
        return ErrorEKF(mech, sigma_a=0.1, sigma_s=1e-3, sigma_f=sigma_f, model_error=True)

    tuned = tune_noise_force(make, lambda kalman: kalman.run(t, y))
    z = mech.coordinate_names[int(mech.partition(mech.q0)[0][0])]
    assert tuned.kalman.force_names == [z]
    passed = dict(tuned.tried)
    assert passed[tuned.sigma_f] and tuned.track.distrust() is None
    smallest = min(s for s, ok in passed.items() if ok)
    assert tuned.sigma_f == pytest.approx(smallest * STEP), tuned.tried
    assert not passed[min(passed, key=lambda s: abs(s - smallest / STEP))], tuned.tried
    moving = tuned.track.sigma_q > 1e-9 * (1 + np.abs(tuned.track.q))
    inside = (np.abs(q - tuned.track.q) <= 1.96 * tuned.track.sigma_q)[moving].mean()
    assert inside >= 0.9, inside
    assert "one step of √10 above the smallest" in tuned.describe()


@pytest.mark.parametrize(("extra", "message"), [
    (["--method", "ekf", "--noise-force", "auto"], "needs forces to estimate"),
    (["--model-error"], "options of --method ekf, ukf, smoother only"),
    (["--method", "smoother", "--model-error"], "options of --method ekf and ukf only"),
    (["--method", "ekf", "--noise-force", "often"], "--noise-force"),
])
def test_model_error_and_noise_force_auto_refuse_what_they_cannot_do(
        run, tmp_path: Path, out_dir: Path, extra: list[str], message: str) -> None:
    readings = tmp_path / "readings.csv"
    readings.write_text("t,coupler_gyro\n0,0\n0.001,0\n")
    out = tmp_path / "e.csv"
    code, output = run("estimate", str(FOURBAR), "--data", str(readings), "--out", str(out),
                       "--noise-sensor", "1e-3", "--build-dir", str(out_dir), *extra)
    assert code in (1, 2) and message in " ".join(output.split()), output
    assert not out.exists() and not untrusted_path(out).exists()

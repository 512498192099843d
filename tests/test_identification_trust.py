"""No ✓ on a wrong answer (issue 52): identification checks its fit against the stated
noise, calls a weakly determined set undetermined at any setting, and its defaults find
the truth on a mechanism the project does not ship (a Whitworth quick-return whose
spring-damper the constraints carry). Data come from RK4 runs of the same files, read
with each sensor's stated noise."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import REPO, SHIPPED_DIR

from mbgen.cli.conventions import EXIT_UNTRUSTED
from mbgen.cli.main import cli
from mbgen.estimation.identify import Recording, Settings, identify
from mbgen.estimation.verdict import chi2_bound, fit_tests, weakly_determined
from mbgen.model.parser import load_mechanism
from mbgen.runtime.compiled import CompiledMechanism

WHITWORTH = REPO / "tests" / "data" / "whitworth.yaml"
PENDULUM = SHIPPED_DIR / "actuated-double-pendulum.yaml"
PERIOD = 0.01  # readings at 100 Hz of an RK4 run at 1 ms


def readings(mech: CompiledMechanism, seconds: float, seed: int = 5) -> Recording:
    """The sensors of a free RK4 run from the file's state, each with its stated noise."""
    fine = PERIOD / 10
    steps = int(round(seconds / fine))
    q, qd, _ = mech.integrate(mech.q0, np.zeros(mech.n), fine, steps, "rk4")
    clean = mech.sensors(q[::10], qd[::10])
    noise = mech.sensor_noise()
    rng = np.random.default_rng(seed)
    return Recording(np.arange(len(clean)) * PERIOD,
                     clean + noise * rng.standard_normal(clean.shape))


def within(result, truth: dict[str, float], sigmas: float = 3.0) -> bool:
    return all(abs(value - truth[name]) <= sigmas * std for name, value, std in
               zip(result.names, result.values, result.std, strict=True))


@pytest.fixture(scope="module")
def whitworth(compiled: Callable[[Path], CompiledMechanism]) -> CompiledMechanism:
    return compiled(WHITWORTH)


def test_defaults_find_the_spring_and_dependent_coordinates_say_they_do_not(
        whitworth: CompiledMechanism) -> None:
    """The defaults (auto: the file's independent coordinate, with the step check) find
    k and c within 3σ, trusted. The paper's dependent coordinates at the default
    compliance land many σ off (the compliance's give on the spring's force, which the
    constraints carry): not trusted, and the fit test says why and what to try."""
    recording = readings(whitworth, 4.0)
    truth = {"k": 200.0, "c": 5.0}
    model = load_mechanism(WHITWORTH)
    start = {"k": 150.0, "c": 3.0}
    result = identify(whitworth, recording, ["k", "c"], initial=start, model=model)
    assert result.coordinates == "independent"
    assert result.trusted and within(result, truth), (result.values, result.std)
    assert all(test.passed for test in result.fit)
    assert {test.what for test in result.fit} == {
        "readings of enc", "readings of ram.x", "readings of ram.y", "readings of gyro",
        "impulses"}

    dependent = identify(whitworth, recording, ["k", "c"], initial=start, model=model,
                         settings=Settings(coordinates="dependent"))
    assert dependent.converged and not within(dependent, truth)  # the bias, many σ
    assert not dependent.trusted
    failed = {test.what for test in dependent.misfit}
    assert "readings of enc" in failed and "impulses" in failed
    advice = dependent.misfit_advice
    assert advice.index("compliance") < advice.index("impulse noise") < advice.index(
        "cannot fit")
    assert "--coordinates independent" in advice


@pytest.mark.parametrize("settings", [
    {}, {"substeps": 2, "impulse_noise": 2e-5},  # the defaults, the docs' settings
    {"coordinates": "dependent", "step_check": False},  # the compliance's near-null
    {"coordinates": "dependent", "step_check": False, "substeps": 2,
     "impulse_noise": 2e-5}])
def test_a_weakly_determined_set_is_undetermined_at_any_setting(
        compiled: Callable[[Path], CompiledMechanism], settings: dict) -> None:
    """The double pendulum swinging freely with its inertias, centre-of-mass offsets and
    frictions free (masses known): never trusted, with the combination named, whether
    the information has an exact null direction (independent coordinates) or the
    compliance keeps it just above the exact test (dependent: correlations of +1.000,
    σ larger than the values)."""
    mech = compiled(PENDULUM)
    names = ["I1", "I2", "a1", "a2", "b1", "b2", "c1", "c2"]
    result = identify(mech, readings(mech, 3.0), names, settings=Settings(**settings),
                      model=load_mechanism(PENDULUM))
    assert not result.trusted
    assert result.undetermined
    named = " ".join(result.undetermined).split()
    assert {"a1", "I1"} <= set(named), result.undetermined


def test_independent_coordinates_without_commands(
        compiled: Callable[[Path], CompiledMechanism]) -> None:
    """The guide's example: an actuated file, no commands recorded (zero inputs), in
    independent coordinates: the frictions found within 3σ, trusted."""
    mech = compiled(PENDULUM)
    truth = {"b1": 0.02, "b2": 0.004}
    result = identify(mech, readings(mech, 3.0), list(truth),
                      initial={"b1": 0.03, "b2": 0.006},
                      settings=Settings(coordinates="independent", substeps=2,
                                        impulse_noise=2e-5))
    assert result.coordinates == "independent"
    assert result.trusted and within(result, truth), (result.values, result.std)


def test_the_fit_test_holds_its_level_and_fails_a_stated_noise_too_small() -> None:
    """Standard normal residuals pass at the stated level (their mean square's 1 − 1e-3
    quantile); the same residuals 1.2 times larger (a noise stated 20 % small) fail, as do
    a NaN and an infinite residual."""
    rng = np.random.default_rng(0)
    output = np.repeat([0, 1], 2000)
    passed = [all(t.passed for t in fit_tests(["a", "b"], output, rng.standard_normal(4000),
                                               rng.standard_normal(500)))
              for _ in range(200)]
    assert sum(passed) >= 198  # each run fails with probability ≤ 1e-3
    bound = chi2_bound(2000, 3)
    assert 1.0 < bound < 1.0 + 5 * np.sqrt(2 / 2000)
    wide = rng.standard_normal(4000)
    wide[2000:] *= 1.2
    tests = fit_tests(["a", "b"], output, wide, rng.standard_normal(500))
    assert [t.passed for t in tests] == [True, False, True]
    assert 1.15 < np.sqrt(tests[1].mean_square) < 1.25
    assert tests[1].describe().startswith("readings of b: RMS 1.")
    assert "(at most 1.05 σ for 2000 residuals)" in tests[1].describe()
    for bad in (np.nan, np.inf):
        residuals = rng.standard_normal(4000)
        residuals[7] = bad
        assert not fit_tests(["a", "b"], output, residuals, np.zeros(3))[0].passed


def test_weakly_determined_names_groups_and_wide_parameters() -> None:
    """A pair correlated at 0.9995 is named as the direction it moves along; a σ of 150 %
    of the larger of the value and its start is named on its own; a parameter at 0 that
    started at 0 is not judged by its relative σ; 0.99 is not a group."""
    names = ["I1", "a1", "b", "tilt", "K"]
    correlation = np.eye(5)
    correlation[0, 1] = correlation[1, 0] = 0.9995
    correlation[3, 4] = correlation[4, 3] = 0.99
    values = np.array([0.02, 0.12, 0.01, 0.0, 0.5])
    initial = np.array([0.02, 0.12, 0.005, 0.0, 0.6])
    std = np.array([0.001, 0.01, 0.015, 0.3, 0.01])
    found = weakly_determined(names, values, initial, std, correlation)
    assert found == ["0.71 I1 + 0.71 a1 (correlated at |ρ| up to 0.9995)",
                     "b (σ 150 % of its value)"]


def test_cli_refuses_a_fit_inconsistent_with_its_noise(whitworth: CompiledMechanism,
                                                       tmp_path: Path) -> None:
    """A noise stated ten times too small: exit 4, the untrusted file with the failed
    test as a comment, the causes in the message, no ✓, nothing under --out."""
    text = WHITWORTH.read_text().replace("name: enc, noise: 1e-3", "name: enc, noise: 1e-4")
    source = tmp_path / "whitworth.yaml"
    source.write_text(text)
    recording = readings(whitworth, 2.0)  # the readings at the true 1e-3
    data = tmp_path / "readings.csv"
    header = ",".join(["t", *whitworth.sensor_labels])
    np.savetxt(data, np.column_stack([recording.t, recording.readings]), delimiter=",",
               header=header, comments="", fmt="%.12g")
    out = tmp_path / "identified.yaml"
    result = CliRunner().invoke(cli, [
        "identify", str(source), "--data", str(data), "--params", "k,c", "--out", str(out),
        "--build-dir", str(whitworth.directory.parent.parent)])
    assert result.exit_code == EXIT_UNTRUSTED, result.output
    output = " ".join(result.output.split())
    assert "✓" not in output and "inconsistent with its noise model" in output
    assert "readings of enc: RMS" in output and "likely causes" in output
    assert not out.exists()
    written = (tmp_path / "identified.untrusted.yaml").read_text()
    assert "# fit, readings of enc: RMS" in written and "FAILED" in written


def test_a_spatial_spring_and_mass_are_never_trusted_wrong(
        compiled: Callable[[Path], CompiledMechanism]) -> None:
    """The spatial RSSR with a spring-held rocker (ks = 30, mk = 1) at the defaults: the
    values land within 3σ of the truth, and the two encoders see little but ks/mk, so the
    pair is named undetermined (|ρ| ≥ 0.999) instead of a ✓."""
    path = REPO / "tests" / "data" / "rssr-spring.yaml"
    mech = compiled(path)
    truth = {"ks": 30.0, "mk": 1.0}
    result = identify(mech, readings(mech, 4.0), list(truth), initial={"ks": 20, "mk": 1.5},
                      model=load_mechanism(path))
    assert result.coordinates == "independent" and result.converged
    assert within(result, truth), (result.values, result.std)
    assert not result.trusted
    assert any({"ks", "mk"} <= set(text.split()) for text in result.undetermined)


def test_cli_compliance_is_never_ignored(whitworth: CompiledMechanism, tmp_path: Path
                                         ) -> None:
    """--compliance with independent coordinates would be ignored: refused (exit 2) before
    any work, nothing written; with auto it asks for dependent coordinates, said with !."""
    recording = readings(whitworth, 1.0)
    data = tmp_path / "readings.csv"
    np.savetxt(data, np.column_stack([recording.t, recording.readings]), delimiter=",",
               header=",".join(["t", *whitworth.sensor_labels]), comments="", fmt="%.12g")
    out = tmp_path / "identified.yaml"
    args = ["identify", str(WHITWORTH), "--data", str(data), "--params", "k",
            "--compliance", "1e-7", "--no-step-check", "--out", str(out),
            "--build-dir", str(whitworth.directory.parent.parent)]
    refused = CliRunner().invoke(cli, [*args, "--coordinates", "independent"])
    assert refused.exit_code == 2 and "no compliance to set" in refused.output
    assert not list(tmp_path.glob("identified*"))
    auto = CliRunner().invoke(cli, args)
    assert "! --compliance holds dependent coordinates" in auto.output, auto.output
    assert "in dependent coordinates" in auto.output


def test_an_encoder_without_readings_leaves_the_start_to_the_model(
        compiled: Callable[[Path], CompiledMechanism]) -> None:
    """The first joint's encoder column empty (it was an internal error: the start
    interpolated no readings): the states start from a run of the model, and the second
    encoder alone finds both frictions within 3σ (the solve at half the step creeps to its
    iteration limit here: then not trusted, never a ✓)."""
    mech = compiled(PENDULUM)
    recording = readings(mech, 3.0)
    blind = recording.readings.copy()
    blind[:, mech.sensor_labels.index("enc1")] = np.nan
    truth = {"b1": 0.02, "b2": 0.004}
    result = identify(mech, Recording(recording.t, blind), list(truth),
                      initial={"b1": 0.03, "b2": 0.006})
    assert [test.what for test in result.fit] == ["readings of enc2", "impulses"]
    assert within(result, truth), (result.values, result.std)
    assert result.trusted == (result.converged and not result.misfit)

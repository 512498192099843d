"""FMI 2.0 units from `mbgen export --fmu`, checked by FMPy (another library's importer and
validator) against `mbgen simulate` of the same file: co-simulation, model exchange,
parameters, inputs, failing steps and what a failed export leaves behind."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import SHIPPED_DIR

from mbgen.runtime.compiled import CompiledMechanism
from mbgen.simulation import simulate
from mbgen.simulation.integrators import RunStopped

fmpy = pytest.importorskip("fmpy")
from fmpy.validation import validate_fmu  # noqa: E402

Compiled = Callable[[Path], CompiledMechanism]
Run = Callable[..., tuple[int, str]]
FOURBAR = SHIPPED_DIR / "fourbar.yaml"


@pytest.fixture(scope="session")
def units(tmp_path_factory: pytest.TempPathFactory, out_dir: Path) -> Callable[..., Path]:
    """``units(file, *options)``: the unit exported once per session for these options."""
    from click.testing import CliRunner

    from mbgen.cli.main import cli

    made: dict[tuple[str, ...], Path] = {}
    folder = tmp_path_factory.mktemp("units")

    def get(path: Path, *options: str) -> Path:
        key = (str(path), *options)
        if key not in made:
            target = folder / f"{Path(path).stem}-{len(made)}.fmu"
            result = CliRunner().invoke(cli, ["export", str(path), "--fmu", str(target),
                                              "--build-dir", str(out_dir), *options],
                                        catch_exceptions=False)
            assert result.exit_code == 0, result.output
            made[key] = target
        return made[key]

    return get


def positions(result: Any, mech: CompiledMechanism) -> np.ndarray:
    return np.column_stack([result[name] for name in mech.coordinate_names])


class Log:
    """FMPy's logger callback: the unit's messages."""

    def __init__(self) -> None:
        self.messages: list[tuple[int, str]] = []

    def __call__(self, env: Any, name: bytes, status: int, category: bytes,
                 message: bytes) -> None:
        self.messages.append((status, message.decode()))


def torque(name: str, values: list[tuple[float, float]]) -> np.ndarray:
    return np.array(values, dtype=[("time", float), (name, float)])


def test_fourbar_unit_validates_and_steps_as_simulate(units: Callable[..., Path],
                                                      compiled: Compiled) -> None:
    unit = units(FOURBAR)
    assert validate_fmu(str(unit)) == []
    with zipfile.ZipFile(unit) as archive:
        names = set(archive.namelist())
    assert {"sources/fmu.c", "sources/fourbar.c", "sources/fmu_model.h",
            "sources/fmi2Functions.h"} <= names
    assert any(n.startswith("binaries/") and n.endswith("fourbar.so") for n in names)
    mech = compiled(FOURBAR)
    run = simulate(mech, t_end=1.0, dt=1e-3, integrator="rk4")
    result = fmpy.simulate_fmu(str(unit), stop_time=1.0, output_interval=1e-3,
                               fmi_type="CoSimulation")
    np.testing.assert_allclose(result["time"], run.t, atol=1e-12)
    assert np.abs(positions(result, mech) - run.q).max() <= 1e-9
    assert np.abs(np.column_stack([result[f"{c}_dot"] for c in mech.coordinate_names])
                  - run.qd).max() <= 1e-8
    # the outputs besides q: the gyroscope, ‖Φ‖ and the energy, as the runtime has them
    np.testing.assert_allclose(result["coupler_gyro"], mech.sensors(run.q, run.qd)[:, 0],
                               atol=1e-8)
    np.testing.assert_allclose(result["energy"], run.energy, atol=1e-8)
    assert np.abs(result["phi_norm"] - run.constraint_error).max() <= 1e-12
    # ten internal steps per communication step, and another internal step
    coarse = fmpy.simulate_fmu(str(unit), stop_time=1.0, output_interval=1e-2,
                               fmi_type="CoSimulation")
    assert np.abs(positions(coarse, mech) - run.q[::10]).max() <= 1e-9
    longer = fmpy.simulate_fmu(str(unit), stop_time=1.0, output_interval=1e-2,
                               start_values={"mbgen.step": 1e-2}, fmi_type="CoSimulation")
    other = simulate(mech, t_end=1.0, dt=1e-2, integrator="rk4")
    assert np.abs(positions(longer, mech) - other.q).max() <= 1e-9
    assert np.abs(other.q[-1] - run.q[-1]).max() > 1e-7  # the step was taken


def test_a_parameter_set_through_fmpy_acts_as_in_the_file(units: Callable[..., Path],
                                                          compiled: Compiled,
                                                          tmp_path: Path) -> None:
    text = FOURBAR.read_text()
    assert "xb: 4.0" in text
    changed = tmp_path / "fourbar.yaml"
    changed.write_text(text.replace("xb: 4.0", "xb: 3.7"))
    run = simulate(compiled(changed), t_end=0.5, dt=1e-3)
    mech = compiled(FOURBAR)
    result = fmpy.simulate_fmu(str(units(FOURBAR)), stop_time=0.5, output_interval=1e-3,
                               start_values={"xb": 3.7}, fmi_type="CoSimulation")
    assert np.abs(positions(result, mech) - run.q).max() <= 1e-9
    assert np.abs(run.q - simulate(mech, t_end=0.5, dt=1e-3).q).max() > 1e-3


def test_model_exchange_integrates_z_as_simulate_and_a_dead_point_is_an_error(
        units: Callable[..., Path], compiled: Compiled) -> None:
    """The four-bar's z (y2, chosen at q0: its file names none) reaches a turning point
    near 0.55 s: simulate in y2 stops there, and the unit says why with fmi2Error."""
    mech = compiled(FOURBAR)
    unit = str(units(FOURBAR))
    assert mech.independent_coordinates() == ["y2"]
    run = simulate(mech, t_end=0.5, dt=1e-3, integrator="euler", coords="independent",
                   z=["y2"])
    result = fmpy.simulate_fmu(unit, stop_time=0.5, output_interval=1e-3, solver="Euler",
                               step_size=1e-3, fmi_type="ModelExchange")
    assert np.abs(positions(result, mech) - run.q).max() <= 1e-9
    with pytest.raises(RunStopped) as stopped:
        simulate(mech, t_end=1.0, dt=1e-3, integrator="euler", coords="independent",
                 z=["y2"])
    log = Log()
    with pytest.raises(fmpy.fmi1.FMICallException, match="status 3"):
        fmpy.simulate_fmu(unit, stop_time=1.0, output_interval=1e-3, solver="Euler",
                          step_size=1e-3, fmi_type="ModelExchange", logger=log)
    errors = [m for status, m in log.messages if status == 3]
    assert len(errors) == 1 and "could not be solved" in errors[0], log.messages
    failed_at = float(errors[0].split("t = ")[1].split(" s")[0])
    assert abs(failed_at - stopped.value.result.t[-1]) <= 2e-3


def test_an_input_table_drives_the_slider_crank_as_simulate_force(
        units: Callable[..., Path], compiled: Compiled) -> None:
    path = SHIPPED_DIR / "slider-crank.yaml"
    mech = compiled(path)
    unit = str(units(path, "--input", "phi"))
    assert validate_fmu(unit) == []
    free = simulate(mech, t_end=1.0, dt=1e-3)
    # a constant torque: the same numbers
    constant = fmpy.simulate_fmu(unit, stop_time=1.0, output_interval=1e-3,
                                 input=torque("force_phi", [(0.0, 0.02), (1.0, 0.02)]))
    driven = simulate(mech, t_end=1.0, dt=1e-3, forces={"phi": lambda t: 0.02 + 0 * t})
    assert np.abs(positions(constant, mech) - driven.q).max() <= 1e-9
    assert np.abs(driven.q - free.q).max() > 0.1
    # a torque table that varies: held over each communication step, where simulate
    # samples it at half steps, so they agree to first order in the step
    times = np.linspace(0.0, 1.0, 101)
    table = torque("force_phi", [(t, 0.02 * np.sin(2 * np.pi * t)) for t in times])
    held = fmpy.simulate_fmu(unit, stop_time=1.0, output_interval=1e-3, input=table)
    sampled = simulate(mech, t_end=1.0, dt=1e-3, forces={
        "phi": lambda t: np.interp(t, times, table["force_phi"])})
    effect = np.abs(sampled.q - free.q).max()
    assert effect > 0.05
    assert np.abs(positions(held, mech) - sampled.q).max() <= 1e-2 * effect
    # a torque the slider-crank cannot follow: a step fails, fmi2Error with the reason
    with pytest.raises(RunStopped) as stopped:
        simulate(mech, t_end=0.1, dt=1e-3, forces={"phi": lambda t: 1e6 + 0 * t})
    log = Log()
    with pytest.raises(fmpy.fmi1.FMICallException, match="fmi2DoStep"):
        fmpy.simulate_fmu(unit, stop_time=0.1, output_interval=1e-3, logger=log,
                          input=torque("force_phi", [(0.0, 1e6), (1.0, 1e6)]))
    at = str(stopped.value).split("stopped at t = ")[1].split(" s")[0]
    assert [m for s, m in log.messages if s == 3] == [
        f"the step from t = 0 s failed at t = {at} s: the constraint Jacobian Φq loses "
        "rank (dead point, bifurcation, or a chosen z that cannot parametrize the mechanism "
        "here)"]


def test_the_furuta_pendulum_unit_runs(units: Callable[..., Path],
                                       compiled: Compiled) -> None:
    path = SHIPPED_DIR / "furuta.yaml"
    mech = compiled(path)
    unit = str(units(path))  # its motor's coordinate is the input
    assert validate_fmu(unit) == []
    result = fmpy.simulate_fmu(unit, stop_time=0.5, output_interval=1e-3,
                               start_values={"theta2": 0.3},
                               input=torque("force_theta1", [(0.0, 0.01), (1.0, 0.01)]))
    start = mech.q0.copy()
    start[mech.coordinate_index("theta2")] = 0.3
    start = mech.solve_position(start, z=["theta1", "theta2"])
    run = simulate(mech, t_end=0.5, dt=1e-3, q0=start,
                   forces={"theta1": lambda t: 0.01 + 0 * t})
    assert np.abs(positions(result, mech) - run.q).max() <= 1e-9
    np.testing.assert_allclose(result["enc2"], run.q[:, mech.coordinate_index("theta2")],
                               atol=1e-9)
    me = fmpy.simulate_fmu(unit, stop_time=0.5, output_interval=1e-3, solver="Euler",
                           step_size=1e-3, fmi_type="ModelExchange",
                           start_values={"theta2": 0.3},
                           input=torque("force_theta1", [(0.0, 0.01), (1.0, 0.01)]))
    euler = simulate(mech, t_end=0.5, dt=1e-3, q0=start, integrator="euler",
                     coords="independent", forces={"theta1": lambda t: 0.01 + 0 * t})
    assert np.abs(positions(me, mech) - euler.q).max() <= 1e-9


def test_a_unit_that_cannot_be_built_writes_nothing(run: Run, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from mbgen.codegen import fmu

    target = tmp_path / "fourbar.fmu"
    monkeypatch.setattr(fmu, "BUILD_FLAGS", [*fmu.BUILD_FLAGS, "--no-such-flag"])
    code, output = run("export", str(FOURBAR), "--fmu", str(target))
    assert code == 1 and "could not be built" in output and "nothing written" in output
    assert "--no-such-flag" in output  # the compiler's own words
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    target.write_text("a file of the user's")
    code, output = run("export", str(FOURBAR), "--fmu", str(target))
    assert code == 1 and "not a unit mbgen made" in output
    assert target.read_text() == "a file of the user's"
    code, output = run("export", str(FOURBAR), "--fmu", str(tmp_path / "fourbar.zip"))
    assert code == 2 and ".fmu" in output
    code, output = run("export", str(FOURBAR), "--fmu", str(target.with_name("x.fmu")),
                       "--input", "nothing")
    assert code == 2 and "nothing: not a coordinate" in output


def test_a_reset_unit_steps_again_from_its_new_parameters(units: Callable[..., Path],
                                                          compiled: Compiled,
                                                          tmp_path: Path) -> None:
    """The co-simulation's integrator is kept from step to step and made anew at each
    initialization: after fmi2Reset and another xb, 1 ms steps give simulate's run of
    the changed file."""
    from fmpy import extract, read_model_description
    from fmpy.fmi2 import FMU2Slave

    changed = tmp_path / "fourbar.yaml"
    changed.write_text(FOURBAR.read_text().replace("xb: 4.0", "xb: 3.7"))
    mech = compiled(FOURBAR)
    unit = str(units(FOURBAR))
    description = read_model_description(unit)
    vr = {v.name: v.valueReference for v in description.modelVariables}
    names = [vr[c] for c in mech.coordinate_names]
    fmu = FMU2Slave(guid=description.guid, unzipDirectory=extract(unit),
                    modelIdentifier=description.coSimulation.modelIdentifier)
    fmu.instantiate()
    runs = []
    for xb in (4.0, 3.7):
        fmu.reset()
        fmu.setupExperiment(startTime=0.0)
        fmu.setReal([vr["xb"]], [xb])
        fmu.enterInitializationMode()
        fmu.exitInitializationMode()
        rows = [fmu.getReal(names)]
        for k in range(300):
            fmu.doStep(currentCommunicationPoint=k * 1e-3, communicationStepSize=1e-3)
            rows.append(fmu.getReal(names))
        runs.append(np.array(rows))
    fmu.terminate()
    fmu.freeInstance()
    for run, path in zip(runs, (FOURBAR, changed), strict=True):
        assert np.abs(run - simulate(compiled(path), t_end=0.3, dt=1e-3).q).max() <= 1e-9
    assert np.abs(runs[0] - runs[1]).max() > 1e-3

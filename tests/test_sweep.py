"""mbgen sweep: many runs of one mechanism in C (mb_sweep), the study file, its results.

The runs of a sweep are checked against ``simulate`` run one by one with the same
parameters (an independent path through the core: one run at a time, its own
projection), and against each other: a run's numbers may not depend on which runs share
its block or its chunk."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result
from conftest import REPO, SHIPPED, SHIPPED_DIR, bounded_time

from mbgen.cli.conventions import EXIT_BAD_INPUT, EXIT_UNTRUSTED, untrusted_path
from mbgen.cli.main import cli
from mbgen.errors import MbgenError
from mbgen.io.chunks import read_parquet_columns
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.runtime.integration import Runs
from mbgen.simulation.integrators import simulate
from mbgen.sweep.study import study_schema

FOURBAR = SHIPPED_DIR / "fourbar.yaml"


def varied_starts(mech: CompiledMechanism, count: int, seed: int = 1,
                  spread: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """Parameter sets around the file's (count, np) and their assembled starts (count, n)."""
    rng = np.random.default_rng(seed)
    params = mech.parameter_vector * (1 + spread * rng.standard_normal((count, len(
        mech.parameters))))
    q0 = mech.solve_position(np.tile(mech.q0, (count, 1)), minimum_norm=True, params=params)
    return params, q0


def one_by_one(mech: CompiledMechanism, params: np.ndarray, q0: np.ndarray, steps: int,
               dt: float, **settings: str) -> list[np.ndarray]:
    """Each run through ``simulate`` with its parameters set: (steps + 1, n) each."""
    nominal = dict(mech.parameters)
    try:
        paths = []
        for p, q in zip(params, q0, strict=True):
            mech.set_parameters(**dict(zip(nominal, p, strict=True)))
            paths.append(simulate(mech, steps * dt, dt, q0=q, **settings).q)
        return paths
    finally:
        mech.set_parameters(**nominal)


@pytest.mark.parametrize("settings", [
    {"integrator": "rk4"},  # blocks of 8 runs in SIMD lanes
    {"integrator": "semi-implicit-euler", "project": "none"},
    {"integrator": "trapezoidal"},  # each run alone through mb_simulate
    {"integrator": "rk4", "coords": "independent"},
], ids=["rk4-lanes", "euler-lanes", "trapezoidal-alone", "independent-alone"])
def test_runs_side_by_side_follow_simulate_run_by_run(
        compiled: Callable[..., CompiledMechanism], settings: dict[str, str]) -> None:
    mech = compiled(FOURBAR)
    params, q0 = varied_starts(mech, 11)  # a full block of 8 and a padded one of 3
    runs = Runs.start(q0, np.zeros_like(q0), params)
    segments = [mech.advance_runs(runs, 1e-3, 150, **settings) for _ in range(2)]
    assert (runs.status == 0).all()
    swept = np.concatenate([s[0] for s in segments if s is not None], axis=1)
    expected = one_by_one(mech, params, q0, 300, 1e-3, **settings)
    lanes = settings.get("coords") != "independent" and settings["integrator"] != "trapezoidal"
    assert mech.sweep_uses_lanes(**settings) == lanes
    for path, run in zip(expected, swept, strict=True):
        assert np.abs(run - path[1:]).max() < 1e-11  # the projections differ in round-off
    assert np.array_equal(runs.q, swept[:, -1])
    assert np.ptp(swept[:, -1, 0]) > 1e-3  # the parameters made the runs differ


def test_a_run_does_not_depend_on_its_block_or_chunk(
        compiled: Callable[..., CompiledMechanism]) -> None:
    mech = compiled(FOURBAR)
    params, q0 = varied_starts(mech, 13, seed=2)
    whole = Runs.start(q0, np.zeros_like(q0), params)
    mech.advance_runs(whole, 1e-3, 200, record=False)
    order = np.random.default_rng(0).permutation(13)
    for part in (order[:5], order[5:]):  # other blocks, other neighbours, other order
        runs = Runs.start(q0[part], np.zeros_like(q0[part]), params[part])
        mech.advance_runs(runs, 1e-3, 120, record=False)
        mech.advance_runs(runs, 1e-3, 80, record=False)
        assert np.array_equal(runs.q, whole.q[part]) and np.array_equal(runs.qd,
                                                                         whole.qd[part])


@pytest.mark.parametrize("integrator", ["rk4", "trapezoidal"])  # in lanes, alone
def test_a_failed_run_is_marked_and_the_others_go_on(
        compiled: Callable[..., CompiledMechanism], integrator: str) -> None:
    mech = compiled(FOURBAR)
    params, q0 = varied_starts(mech, 9, seed=3)
    bad = params.copy()
    bad[4, 0] = np.nan  # a crank of no length: every step of run 4 fails
    clean, broken = (Runs.start(q0, np.zeros_like(q0), p) for p in (params, bad))
    for runs in (clean, broken):
        first = mech.advance_runs(runs, 1e-3, 50, integrator=integrator)
        out = mech.advance_runs(runs, 1e-3, 50, integrator=integrator)
    assert out is not None and first is not None and first[1] is not None
    assert np.isnan(first[0][4]).all() and np.isnan(first[1][4]).all()
    assert out is not None
    assert broken.status[4] != 0 and broken.failed_step[4] == 0  # its very first step
    assert np.isnan(out[0][4]).all()  # skipped from then on, nothing recorded
    assert np.array_equal(broken.q[4], q0[4])  # its last good state
    others = np.arange(9) != 4
    assert (broken.status[others] == 0).all() and (broken.failed_step[others] == -1).all()
    assert np.array_equal(broken.q[others], clean.q[others])


def test_forces_act_per_run(compiled: Callable[..., CompiledMechanism]) -> None:
    mech = compiled(FOURBAR)
    params, q0 = varied_starts(mech, 8, spread=0.0)
    forces = np.zeros_like(q0)
    forces[:, 1] = np.linspace(-5, 5, 8)  # a vertical force on point 1, one per run
    runs = Runs.start(q0, np.zeros_like(q0), params, forces)
    mech.advance_runs(runs, 1e-3, 100, record=False)
    expected = [simulate(mech, 0.1, 1e-3, q0=q0[k], forces={"y1": lambda t, f=f: f + 0 * t}).q[-1]
                for k, f in enumerate(forces[:, 1])]
    assert np.abs(runs.q - np.array(expected)).max() < 1e-11


# -- the study file and the command --------------------------------------------------------

def study_text(mechanism: Path = FOURBAR, samples: int = 20, t_end: float = 0.2,
               extra: str = "") -> str:
    """A small Monte Carlo study of the shipped four-bar."""
    return f"""\
mechanism: {mechanism}
samples: {samples}
seed: 7
chunk: 8
parameters:
  L: {{distribution: uniform, tolerance: 0.01}}
  xb: {{distribution: normal, std: 0.01, low: 3.98, high: 4.02}}
run: {{integrator: rk4, dt: 0.001, t_end: {t_end}}}
record:
  figures:
    - {{of: x2, stats: [min, max, mean, rms]}}
    - {{of: coupler_gyro, stats: [max]}}
    - {{of: energy}}
  trajectories: {{of: [x2, y2_dot], every: 20}}
{extra}"""


def write_study(tmp_path: Path, text: str, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def assert_same_results(a: Path, b: Path) -> None:
    """Every column of two Parquet files equal to the bit (NaN where NaN)."""
    left, right = read_parquet_columns(a), read_parquet_columns(b)
    assert left.keys() == right.keys()
    for name, values in left.items():
        assert np.array_equal(values, right[name], equal_nan=values.dtype.kind == "f"), name


def sweep(tmp_path: Path, out_dir: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["sweep", *args, "--build-dir", str(out_dir)],
                              catch_exceptions=False)


def test_every_run_of_a_study_is_the_simulation_of_its_values(
        compiled: Callable[..., CompiledMechanism], tmp_path: Path, out_dir: Path) -> None:
    """Figures, final states and trajectories of each run against simulate() run with the
    run's parameters, and the drawn values against the study's distributions."""
    study = write_study(tmp_path, study_text())
    result = sweep(tmp_path, out_dir, str(study), "--out", str(tmp_path / "r.parquet"))
    assert result.exit_code == 0, result.output
    assert "✓ fourbar: 20 runs of 200 steps" in result.output
    runs = read_parquet_columns(tmp_path / "r.parquet")
    traces = read_parquet_columns(tmp_path / "r.trajectories.parquet")
    assert not (tmp_path / "r.parquet.partial").exists()  # the chunks were merged, then removed
    assert runs["run"].tolist() == list(range(20)) and set(runs["status"]) == {"ok"}
    assert np.abs(runs["L"] - 1.0).max() <= 0.01 and np.ptp(runs["L"]) > 0.01
    assert (np.abs(runs["xb"] - 4.0) <= 0.02).all()
    mech = compiled(FOURBAR)
    nominal = dict(mech.parameters)
    try:
        for k in (0, 9, 19):
            mech.set_parameters(L=runs["L"][k], xb=runs["xb"][k])
            q0 = mech.solve_position(mech.q0, minimum_norm=True)
            run = simulate(mech, 0.2, 1e-3, q0=q0)
            x2 = run.q[:, 2]
            assert runs["x2_min"][k] == pytest.approx(x2.min(), abs=1e-10)
            assert runs["x2_max"][k] == pytest.approx(x2.max(), abs=1e-10)
            assert runs["x2_mean"][k] == pytest.approx(x2.mean(), abs=1e-10)
            assert runs["x2_rms"][k] == pytest.approx(np.sqrt((x2**2).mean()), abs=1e-10)
            gyro = mech.sensors(run.q, run.qd).reshape(len(run.t), -1)[:, 0]
            assert runs["coupler_gyro_max"][k] == pytest.approx(gyro.max(), abs=1e-9)
            assert runs["energy_min"][k] == pytest.approx(run.energy.min(), abs=1e-9)
            assert runs["energy_max"][k] == pytest.approx(run.energy.max(), abs=1e-9)
            final = [runs[f"{c}_final"][k] for c in mech.coordinate_names]
            assert np.abs(np.array(final) - run.q[-1]).max() < 1e-10
            mine = traces["run"] == k
            assert traces["t"][mine] == pytest.approx(run.t[::20])
            assert np.abs(traces["x2"][mine] - run.q[::20, 2]).max() < 1e-10
            assert np.abs(traces["y2_dot"][mine] - run.qd[::20, 3]).max() < 1e-10
    finally:
        mech.set_parameters(**nominal)


def test_grids_and_fixed_values(tmp_path: Path, out_dir: Path) -> None:
    """A grid over the crank length times a grid of initial crank heights y1, twice each
    (samples), with a fixed initial velocity: every combination, in order, each start
    assembled with the named values met."""
    study = write_study(tmp_path, f"""\
mechanism: {FOURBAR}
samples: 2
parameters:
  L: {{grid: [0.9, 1.0, 1.1]}}
  xb: {{distribution: uniform, low: 3.9, high: 4.1}}
initial:
  y1: {{grid: {{from: 0.1, to: 0.2, count: 2}}}}
velocity:
  y1: 0.5
run: {{dt: 0.001, t_end: 0.01}}
""")
    result = sweep(tmp_path, out_dir, str(study), "--out", str(tmp_path / "g.parquet"))
    assert result.exit_code == 0, result.output
    runs = read_parquet_columns(tmp_path / "g.parquet")
    assert runs["L"].tolist() == [0.9] * 4 + [1.0] * 4 + [1.1] * 4
    assert runs["y1_initial"].tolist() == [0.1, 0.1, 0.2, 0.2] * 3
    assert "y1_dot_initial" not in runs  # fixed, not varied: not a column
    assert set(runs["status"]) == {"ok"}
    assert len(set(runs["xb"].tolist())) == 12


def test_the_same_seed_gives_the_same_runs_and_another_seed_others(
        tmp_path: Path, out_dir: Path) -> None:
    outs = []
    for k, seed in enumerate((7, 7, 8)):
        study = write_study(tmp_path, study_text(t_end=0.01).replace("seed: 7",
                                                                     f"seed: {seed}"),
                            f"s{k}.yaml")
        assert sweep(tmp_path, out_dir, str(study), "--out",
                     str(tmp_path / f"s{k}.parquet")).exit_code == 0
        outs.append(read_parquet_columns(tmp_path / f"s{k}.parquet"))
    assert np.array_equal(outs[0]["L"], outs[1]["L"])
    assert np.array_equal(outs[0]["x2_max"], outs[1]["x2_max"])
    assert not np.array_equal(outs[0]["L"], outs[2]["L"])


def test_failed_runs_are_marked_and_make_the_study_untrusted(
        tmp_path: Path, out_dir: Path) -> None:
    """A crank of no length cannot be assembled (Φq loses rank): that run is marked, the
    others finish; beyond --max-failed the study exits 4 and is written as untrusted,
    within it the study is trusted with a warning."""
    study = write_study(tmp_path, f"""\
mechanism: {FOURBAR}
parameters:
  L: {{grid: [1.0, 0.0, 1.1]}}
run: {{dt: 0.001, t_end: 0.05}}
""")
    out = tmp_path / "f.parquet"
    result = sweep(tmp_path, out_dir, str(study), "--out", str(out))
    assert result.exit_code == EXIT_UNTRUSTED, result.output
    assert "1 of 3 runs failed" in result.output and "✓" not in result.output
    assert not out.exists()
    runs = read_parquet_columns(untrusted_path(out))
    assert runs["status"][0] == runs["status"][2] == "ok"
    assert runs["status"][1].startswith("assembly: ") and runs["failed_at"][1] == 0.0
    assert np.isnan(runs["x1_final"][1]) and np.isfinite(runs["x1_final"][[0, 2]]).all()
    result = sweep(tmp_path, out_dir, str(study), "--out", str(out), "--max-failed", "1")
    assert result.exit_code == 0 and "!" in result.output and out.exists()


def test_a_study_cut_off_resumes_with_the_chunks_it_finished(
        tmp_path: Path, out_dir: Path) -> None:
    """Killed (SIGKILL) once some chunks are written, the same command takes them up and
    computes the rest: the same results as a study never interrupted."""
    study = write_study(tmp_path, study_text(samples=400, t_end=2.0).replace(
        "chunk: 8", "chunk: 16"))
    out = tmp_path / "k.parquet"
    command = [str(Path(sys.executable).parent / "mbgen"), "sweep", str(study), "--out", str(out),
               "--build-dir", str(out_dir), "--workers", "1"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    partial = tmp_path / "k.parquet.partial"
    deadline = time.monotonic() + 120
    while len(list(partial.glob("runs-*.parquet"))) < 3 and time.monotonic() < deadline:
        assert process.poll() is None, "the study ended before it could be cut off"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done = len(list(partial.glob("runs-*.parquet")))
    assert 3 <= done < 25 and not out.exists()
    for part in partial.glob("*.parquet"):  # under its own name only when whole
        read_parquet_columns(part)
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{done} of 25 chunks taken up from an earlier run" in resumed.stderr
    assert not partial.exists()  # its temporaries too
    whole = tmp_path / "whole.parquet"
    assert sweep(tmp_path, out_dir, str(study), "--out", str(whole)).exit_code == 0
    assert_same_results(whole, out)


def test_a_work_directory_of_another_study_is_refused(tmp_path: Path, out_dir: Path) -> None:
    study = write_study(tmp_path, study_text(t_end=0.01))
    out = tmp_path / "o.parquet"
    partial = tmp_path / "o.parquet.partial"
    partial.mkdir()
    (partial / "mine.txt").write_text("the user's")
    result = sweep(tmp_path, out_dir, str(study), "--out", str(out))
    assert result.exit_code == EXIT_BAD_INPUT and "not made by mbgen" in result.output
    assert (partial / "mine.txt").read_text() == "the user's"


def test_on_a_dask_cluster_the_results_are_the_same_to_the_bit(
        tmp_path: Path, out_dir: Path) -> None:
    distributed = pytest.importorskip("distributed", reason="Dask's distributed: mbgen[cluster]")
    study = write_study(tmp_path, study_text(samples=40))
    local, remote = tmp_path / "local.parquet", tmp_path / "cluster.parquet"
    assert sweep(tmp_path, out_dir, str(study), "--out", str(local)).exit_code == 0
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        result = sweep(tmp_path, out_dir, str(study), "--out", str(remote), "--scheduler",
                       cluster.scheduler_address)
    assert result.exit_code == 0, result.output
    assert "on the Dask cluster" in result.output
    for suffix in ("", ".trajectories"):
        assert_same_results(local.with_name(f"local{suffix}.parquet"),
                            remote.with_name(f"cluster{suffix}.parquet"))


def test_without_distributed_a_scheduler_names_the_extra(
        tmp_path: Path, out_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails
    study = write_study(tmp_path, study_text(t_end=0.01))
    result = sweep(tmp_path, out_dir, str(study), "--out", str(tmp_path / "d.parquet"),
                   "--scheduler", "tcp://127.0.0.1:1")
    assert result.exit_code == EXIT_BAD_INPUT
    assert "pip install 'mbgen[cluster]'" in result.output


def test_a_scheduler_that_is_not_there_is_a_clear_error(
        tmp_path: Path, out_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("distributed", reason="Dask's distributed: mbgen[cluster]")
    import mbgen.sweep.cluster

    monkeypatch.setattr(mbgen.sweep.cluster, "CONNECT_TIMEOUT", 2.0)  # 20 s by default
    study = write_study(tmp_path, study_text(t_end=0.01).replace(
        "chunk: 8", "dask: {scheduler: 'tcp://127.0.0.1:9'}\nchunk: 8"))
    with bounded_time(3000):  # a hang never ends; the 2 s timeout plus the sweep's work
        result = sweep(tmp_path, out_dir, str(study), "--out", str(tmp_path / "n.parquet"),
                       "--scheduler-from-study")
    assert result.exit_code == EXIT_BAD_INPUT and "no Dask scheduler reached" in result.output


def test_a_cluster_that_loses_its_worker_stops_the_study_with_a_clear_error(
        tmp_path: Path, out_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers lost after the connection: the study stops with a clear error within the
    limit instead of waiting for ever (a cluster whose workers are all gone)."""
    distributed = pytest.importorskip("distributed", reason="Dask's distributed: mbgen[cluster]")
    import mbgen.sweep.cluster

    monkeypatch.setattr(mbgen.sweep.cluster, "WORKERLESS_LIMIT", 1.0)
    monkeypatch.setattr(mbgen.sweep.cluster, "POLL_INTERVAL", 0.2)
    study = write_study(tmp_path, study_text(t_end=0.01))
    out = tmp_path / "w.parquet"
    def chunk_that_loses_its_worker(*args: object) -> None:
        worker = distributed.get_worker()
        worker.loop.add_callback(worker.close)  # the only worker goes, its chunk with it
        time.sleep(5)

    monkeypatch.setattr(mbgen.sweep.cluster, "cluster_chunk", chunk_that_loses_its_worker)
    with distributed.LocalCluster(n_workers=1, processes=False, protocol="tcp",
                                  dashboard_address=None) as cluster, \
            bounded_time(3000):  # a hang never ends; the 1 s limit plus the sweep's work
        result = sweep(tmp_path, out_dir, str(study), "--out", str(out), "--scheduler",
                       cluster.scheduler_address)
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert "lost chunks of the study" in result.output and "resume" in result.output
    assert not out.exists()


def test_chunks_waiting_on_a_cluster_without_workers_end_in_a_clear_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    distributed = pytest.importorskip("distributed", reason="Dask's distributed: mbgen[cluster]")
    import mbgen.sweep.cluster

    monkeypatch.setattr(mbgen.sweep.cluster, "WORKERLESS_LIMIT", 1.0)
    monkeypatch.setattr(mbgen.sweep.cluster, "POLL_INTERVAL", 0.2)
    with distributed.LocalCluster(n_workers=0, processes=False, protocol="tcp",
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as dask:
        future = dask.submit(sum, [1, 2], pure=False)  # no worker will ever take it
        with bounded_time(3000), pytest.raises(MbgenError, match="has had no worker for 1 s"):
            list(mbgen.sweep.cluster.as_finished(dask, cluster.scheduler_address, {future: 0}))


BAD_STUDIES = [
    ("samples: 20", "samples: 0", 2, "samples", "expected a whole number ≥ 1"),
    ("samples: 20", "samples: many", 2, "samples", "expected an integer"),
    ("  L: {distribution: uniform, tolerance: 0.01}", "  L: {distribution: gamma}", 6,
     "parameters.L.distribution", "unknown value 'gamma'"),
    ("  L: {distribution: uniform, tolerance: 0.01}", "  L: {distribution: uniform, low: 2, "
     "high: 1}", 6, "parameters.L", "low (2) must be below high (1)"),
    ("  L: {distribution: uniform, tolerance: 0.01}", "  L: {distribution: normal, mean: 1}",
     6, "parameters.L", "needs std > 0"),
    ("  L: {distribution: uniform, tolerance: 0.01}", "  L: {distribution: uniform, std: 1, "
     "tolerance: 0.1}", 6, "parameters.L.std", "a uniform distribution takes"),
    ("  L: {distribution: uniform, tolerance: 0.01}", "  L: {grid: []}", 6, "parameters.L.grid",
     "at least one value"),
    ("  L: {distribution: uniform, tolerance: 0.01}", "  L: .nan", 6, "parameters.L",
     "expected a finite number"),
    ("  L: {distribution: uniform, tolerance: 0.01}", "  Lx: 2", 6, "parameters.Lx",
     "'Lx' is not one of the mechanism's parameters (L, xb)"),
    ("run: {integrator: rk4, dt: 0.001, t_end: 0.2}", "run: {integrator: rk5, dt: 0.001, "
     "t_end: 0.2}", 8, "run.integrator", "unknown value 'rk5'"),
    ("run: {integrator: rk4, dt: 0.001, t_end: 0.2}", "run: {dt: 0.003, t_end: 0.2}", 8,
     "run.t_end", "not a whole number of steps"),
    ("run: {integrator: rk4, dt: 0.001, t_end: 0.2}", "run: {dt: 0.001}", 8, "run",
     "missing required key 't_end'"),
    ("    - {of: energy}", "    - {of: power}", 13, "record.figures[2].of",
     "no quantity 'power' to record"),
    ("    - {of: energy}", "    - {of: energy, stats: [max, max]}", 13,
     "record.figures[2].stats",
     "at most once"),
    ("chunk: 8", "chunks: 8", 4, "chunks", "unknown key 'chunks'"),
    ("seed: 7", "seed: -1", 3, "seed", "a seed is a whole number"),
]


@pytest.mark.parametrize(("old", "new", "line", "key", "message"), BAD_STUDIES,
                         ids=[case[4][:30] for case in BAD_STUDIES])
def test_a_bad_study_file_is_a_located_error(tmp_path: Path, out_dir: Path, old: str, new: str,
                                             line: int, key: str, message: str) -> None:
    text = study_text()
    assert old in text
    study = write_study(tmp_path, text.replace(old, new))
    out = tmp_path / "bad.parquet"
    result = sweep(tmp_path, out_dir, str(study), "--out", str(out))
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert f"{study}:{line} [{key}]: " in result.output and message in result.output
    assert not out.exists() and not (tmp_path / "bad.parquet.partial").exists()


#: Mistakes of shape, which the JSON Schema sees as well as the reader (the rest are about
#: the mechanism's names or the numbers' relations: the reader's alone)
SCHEMA_CASES = [case for case in BAD_STUDIES if case[4] in (
    "expected a whole number ≥ 1", "expected an integer", "unknown value 'gamma'",
    "at least one value", "unknown value 'rk5'", "missing required key 't_end'",
    "at most once", "unknown key 'chunks'", "a seed is a whole number")]


def test_the_schema_accepts_the_example_and_rejects_mistakes_of_shape() -> None:
    import jsonschema
    import yaml

    jsonschema.Draft202012Validator.check_schema(study_schema())
    validator = jsonschema.Draft202012Validator(study_schema())
    example = yaml.safe_load((REPO / "examples" / "fourbar-tolerances.yaml").read_text())
    assert not list(validator.iter_errors(example))
    assert not list(validator.iter_errors(yaml.safe_load(study_text())))
    assert len(SCHEMA_CASES) == 9
    for old, new, *_ in SCHEMA_CASES:
        assert list(validator.iter_errors(yaml.safe_load(study_text().replace(old, new)))), new


def test_mbgen_schema_study_prints_the_study_schema() -> None:
    import json

    result = CliRunner().invoke(cli, ["schema", "--study"])
    assert result.exit_code == 0 and json.loads(result.output) == study_schema()


def test_a_study_beyond_the_work_limit_is_refused_before_it_starts(
        tmp_path: Path, out_dir: Path) -> None:
    study = write_study(tmp_path, study_text(samples=1000, t_end=1.0))
    result = sweep(tmp_path, out_dir, str(study), "--out", str(tmp_path / "w.parquet"),
                   "--max-steps", "100000")
    assert result.exit_code == 2 and "1e+06 time steps" in result.output
    assert not list(tmp_path.glob("w.*"))


def test_a_symlinked_work_directory_is_refused(tmp_path: Path, out_dir: Path) -> None:
    """Chunks written through a link would land, and be removed, in the user's directory."""
    study = write_study(tmp_path, study_text(t_end=0.01))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "l.parquet.partial").symlink_to(elsewhere)
    result = sweep(tmp_path, out_dir, str(study), "--out", str(tmp_path / "l.parquet"))
    assert result.exit_code == EXIT_BAD_INPUT and "is a symlink" in result.output
    assert not list(elsewhere.iterdir())


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_mechanism_sweeps_as_it_simulates(
        compiled: Callable[..., CompiledMechanism], path: Path) -> None:
    """Planar and spatial, with and without lanes, redundant rows included: three runs
    with their parameters 1 % apart follow simulate() run by run."""
    mech = compiled(path)
    params = mech.parameter_vector * np.array([[1.0], [1.01], [0.99]])
    q0, status = mech.solve_position(np.tile(mech.q0, (3, 1)), minimum_norm=True,
                                     params=params, errors="status")
    assert (status == 0).all()
    runs = Runs.start(q0, np.zeros_like(q0), params)
    out = mech.advance_runs(runs, 1e-3, 100)
    assert out is not None and (runs.status == 0).all()
    expected = one_by_one(mech, params, q0, 100, 1e-3)
    for path_q, run in zip(expected, out[0], strict=True):
        assert np.abs(run - path_q[1:]).max() < 1e-9 * max(1.0, mech.size)


@pytest.mark.parametrize(("args", "message"), [
    (["--out", "r.csv"], "r.csv"),
    (["--out", "r.parquet", "--workers", "0"], "--workers"),
    (["--out", "r.parquet", "--phi-tol", "nan"], "not a finite number"),
    (["--out", "r.parquet", "--max-failed", "-1"], "--max-failed"),
    (["--out", "study.parquet"], "never writes an output over an input"),
], ids=["suffix", "workers", "phi-tol", "max-failed", "over-the-study"])
def test_bad_sweep_options_are_refused_before_any_work(
        tmp_path: Path, out_dir: Path, monkeypatch: pytest.MonkeyPatch, args: list[str],
        message: str) -> None:
    monkeypatch.chdir(tmp_path)
    study = write_study(tmp_path, study_text(t_end=0.01), "study.parquet")  # any name reads
    result = sweep(tmp_path, out_dir, str(study), *args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.parquet"]

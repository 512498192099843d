"""Hostile studies and schedulers (issue 57, round 2): what a campaign found in `mbgen sweep`,
one test per defect. Each case ends in a clear error (exit 1 or 2, naming the file, line
and key or the option), an honest exit 4, or a correct result; never data loss, a hang,
an internal error (exit 3) or a traceback."""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result
from conftest import SHIPPED_DIR, bounded_time

from mbgen.cli.conventions import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNTRUSTED, EXIT_USAGE
from mbgen.cli.main import cli
from mbgen.io.chunks import read_parquet_columns

FOURBAR = SHIPPED_DIR / "fourbar.yaml"
GUARD = 60  # seconds a case may take before the test calls it a hang


@pytest.fixture(autouse=True)
def no_hang() -> Iterator[None]:
    """A case that hangs fails the test instead of the suite (SIGALRM)."""
    def alarm(_signum: int, _frame: object) -> None:
        raise TimeoutError(f"hung for {GUARD} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(GUARD)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def sweep(out_dir: Path, *args: object) -> Result:
    return CliRunner().invoke(cli, ["sweep", *map(str, args), "--build-dir", str(out_dir)])


def study(tmp_path: Path, body: str, mechanism: Path = FOURBAR, name: str = "study.yaml",
          run: str = "{dt: 0.001, t_end: 0.01}") -> Path:
    path = tmp_path / name
    path.write_text(f"mechanism: {mechanism}\n{body}\nrun: {run}\n")
    return path


def clean(result: Result) -> str:
    """The output, checked to hold no traceback and no internal error."""
    assert result.exit_code != 3 and "Traceback" not in result.output, result.output
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit), repr(result.exception)
    return " ".join(result.output.split())


# -- data loss ----------------------------------------------------------------------------

def test_an_untrusted_result_never_replaces_the_mechanism(tmp_path: Path,
                                                          out_dir: Path) -> None:
    """With failed runs the results go to <out>.untrusted.parquet: when that is the
    mechanism file's name, the sweep is refused before it starts (the untrusted names were
    compared with the study only, after the run, and the mechanism was replaced)."""
    mechanism = tmp_path / "r.untrusted.parquet"
    mechanism.write_bytes(FOURBAR.read_bytes())
    path = study(tmp_path, "parameters:\n  L: {grid: [1.0, 0.0]}", mechanism)
    result = sweep(out_dir, path, "--out", tmp_path / "r.parquet")
    output = clean(result)
    assert result.exit_code == EXIT_USAGE and "never writes an output over an input" in output
    assert mechanism.read_bytes() == FOURBAR.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.untrusted.parquet", "study.yaml"]


def test_an_untrusted_picture_never_replaces_an_input(tmp_path: Path, out_dir: Path) -> None:
    """Every name an untrusted study may write is checked up front, pictures included."""
    mechanism = tmp_path / "r_histograms.untrusted.png"
    mechanism.write_bytes(FOURBAR.read_bytes())
    path = study(tmp_path, "parameters:\n  L: {grid: [1.0, 0.0]}", mechanism)
    result = sweep(out_dir, path, "--out", tmp_path / "r.parquet", "--plot")
    assert result.exit_code == EXIT_USAGE and "--plot (kept as untrusted)" in clean(result)
    assert mechanism.read_bytes() == FOURBAR.read_bytes()


def test_two_sweeps_on_one_out_the_second_is_refused_clearly(tmp_path: Path,
                                                            out_dir: Path) -> None:
    """The second sweep took up the first one's work directory and failed with a bare
    file name; now the first holds <out>.lock, the second says another run is writing,
    and the first finishes as if alone."""
    path = study(tmp_path, "samples: 64\nchunk: 8\nparameters:\n  L: {distribution: "
                 "uniform, tolerance: 0.01}", run="{dt: 0.001, t_end: 1.0}")
    out = tmp_path / "r.parquet"
    assert sweep(out_dir, path, "--out", tmp_path / "warm.parquet").exit_code == 0  # compiled
    first = subprocess.Popen([str(Path(sys.executable).parent / "mbgen"), "sweep", str(path),
                              "--out", str(out), "--build-dir", str(out_dir), "--workers",
                              "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 40
    while not list((tmp_path / "r.parquet.partial").glob("runs-*.parquet")):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.02)
    result = sweep(out_dir, path, "--out", out)
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert f"another run is writing {out}" in clean(result)
    _, stderr = first.communicate(timeout=GUARD)
    assert first.returncode == 0, stderr
    assert len(read_parquet_columns(out)["run"]) == 64
    assert not (tmp_path / "r.parquet.lock").exists()
    assert not (tmp_path / "r.parquet.partial").exists()


def test_a_lock_file_mbgen_did_not_make_is_refused_and_kept(tmp_path: Path,
                                                            out_dir: Path) -> None:
    (tmp_path / "r.parquet.lock").write_text("the user's")
    result = sweep(out_dir, study(tmp_path, "samples: 2"), "--out", tmp_path / "r.parquet")
    assert result.exit_code == EXIT_BAD_INPUT and "not made by mbgen" in clean(result)
    assert (tmp_path / "r.parquet.lock").read_text() == "the user's"


# -- unbounded work -----------------------------------------------------------------------

def test_a_huge_grid_is_refused_before_its_values_are_made(tmp_path: Path,
                                                          out_dir: Path) -> None:
    """100 000 000 000 values were made before the run limit was checked."""
    path = study(tmp_path, "parameters:\n  L: {grid: {from: 1, to: 2, count: 100000000000}}")
    with bounded_time(1000):
        result = sweep(out_dir, path, "--out", tmp_path / "r.parquet")
    output = clean(result)
    assert result.exit_code == EXIT_BAD_INPUT
    assert f"{path}:3 [parameters.L.grid.count]: a grid of 100,000,000,000 values" in output


def test_a_study_file_beyond_the_size_limit_is_refused_before_it_is_read(
        tmp_path: Path, out_dir: Path) -> None:
    """17 MiB of comments took a minute to read; every YAML file has the same limit."""
    from mbgen.model.yaml_nodes import MAX_FILE_BYTES

    path = study(tmp_path, "samples: 2")
    line = "# " + "a comment " * 10 + "\n"
    with path.open("a") as stream:
        stream.write(line * (MAX_FILE_BYTES // len(line) + 1))
    with bounded_time(500):
        result = sweep(out_dir, path, "--out", tmp_path / "r.parquet")
    assert result.exit_code == EXIT_BAD_INPUT
    assert "a study file may have at most 16 MiB" in clean(result)


def test_a_fifo_as_the_study_file_is_refused_without_blocking(tmp_path: Path,
                                                             out_dir: Path) -> None:
    fifo = tmp_path / "study.yaml"
    os.mkfifo(fifo)
    result = subprocess.run([str(Path(sys.executable).parent / "mbgen"), "sweep", str(fifo),
                             "--out", str(tmp_path / "r.parquet")], capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert "a FIFO, not a regular file" in result.stderr and "Traceback" not in result.stderr


def test_chunks_are_bounded_in_number(tmp_path: Path, out_dir: Path) -> None:
    """`chunk: 1` over 20 000 one-step runs wrote 11 500 files in a minute; the default
    chunk grows with a study instead."""
    from mbgen.sweep.study import MAX_CHUNKS, read_study

    path = study(tmp_path, "samples: 20000\nchunk: 1", run="{dt: 0.001, t_end: 0.001}")
    result = sweep(out_dir, path, "--out", tmp_path / "r.parquet")
    output = clean(result)
    assert result.exit_code == EXIT_BAD_INPUT and f"{path}:3 [chunk]: " in output
    assert f"20,000 chunks of the 20,000 runs, more than {MAX_CHUNKS:,}" in output
    assert "give chunk ≥ 5" in output
    assert not list(tmp_path.glob("r.*"))
    assert read_study(study(tmp_path, "samples: 5000000")).chunk == 1221


# -- internal errors in studies -----------------------------------------------------------

def test_uniform_and_grid_over_the_largest_numbers(tmp_path: Path, out_dir: Path) -> None:
    """A uniform over ±1e308 overflowed (exit 3); a grid over ±1e308 gave [nan, inf, inf]:
    the values are drawn and spaced without overflow (the runs then fail: exit 4)."""
    path = study(tmp_path, "samples: 4\nforces:\n  x1: {distribution: uniform, low: -1e308, "
                 "high: 1e308}\n  y1: {grid: {from: -1e308, to: 1e308, count: 3}}")
    out = tmp_path / "r.parquet"
    result = sweep(out_dir, path, "--out", out)
    clean(result)
    assert result.exit_code == EXIT_UNTRUSTED, result.output
    runs = read_parquet_columns(tmp_path / "r.untrusted.parquet")
    assert runs["force_y1"].tolist() == [-1e308] * 4 + [0.0] * 4 + [1e308] * 4
    assert np.isfinite(runs["force_x1"]).all() and np.abs(runs["force_x1"]).max() <= 1e308
    assert runs["force_x1"].max() > 1e307 and runs["force_x1"].min() < -1e307


@pytest.mark.parametrize(("body", "run", "where", "message"), [
    ("parameters:\n  L: {distribution: normal, mean: 1, std: 1e-320, low: 1.5, high: 2}",
     "{dt: 0.001, t_end: 0.01}", ":3 [parameters.L]", "cannot be drawn"),
    ("parameters:\n  L: {distribution: uniform, mean: 1e308, tolerance: 1e308}",
     "{dt: 0.001, t_end: 0.01}", ":3 [parameters.L]", "beyond the largest number"),
    ("samples: 100\nparameters:\n  L: {distribution: normal, std: 1e308}",
     "{dt: 0.001, t_end: 0.01}", ":4 [parameters.L]", "not all finite numbers"),
    ("samples: 1", "{dt: 1e-300, t_end: 1e300}", ":3 [run.t_end]", "more than a run can count"),
    ("samples: 1", "{dt: 5e-324, t_end: 1}", ":3 [run.t_end]", "more than a run can count"),
], ids=["truncnorm-tiny-std", "tolerance-overflow", "normal-huge-std", "dt-1e-300",
        "dt-subnormal"])
def test_numbers_at_the_ends_of_the_doubles_are_located_errors(
        tmp_path: Path, out_dir: Path, body: str, run: str, where: str, message: str) -> None:
    path = study(tmp_path, body, run=run)
    result = sweep(out_dir, path, "--out", tmp_path / "r.parquet")
    output = clean(result)
    assert result.exit_code == EXIT_BAD_INPUT and f"{path}{where}: " in output, output
    assert message in output
    assert not list(tmp_path.glob("r.*"))


def test_a_value_nested_2000_levels_deep_is_a_located_error(tmp_path: Path,
                                                            out_dir: Path) -> None:
    path = tmp_path / "study.yaml"
    path.write_text(f"mechanism: {FOURBAR}\nparameters:\n  L: {'[' * 2000}{']' * 2000}\n"
                    "run: {dt: 0.001, t_end: 0.01}\n")
    result = sweep(out_dir, path, "--out", tmp_path / "r.parquet")
    assert result.exit_code == EXIT_BAD_INPUT
    assert f"{path}:3: invalid YAML: values nested more than 64 levels deep" in clean(result)


def test_plot_of_a_figure_the_same_in_every_run_up_to_rounding(tmp_path: Path,
                                                               out_dir: Path) -> None:
    """"Too many bins for data range" after ✓ and the results were written: a figure
    whose spread is a few ulps is drawn as one bar; no Matplotlib warning with its
    site-packages path reaches the user."""
    path = study(tmp_path, "samples: 5\nvelocity:\n  y1: {grid: [0.5, 0.5000000000000001, "
                 "0.5000000000000002]}\nrecord:\n  figures: [{of: y1_dot}, {of: energy}]")
    result = sweep(out_dir, path, "--out", tmp_path / "r.parquet", "--plot")
    output = clean(result)
    assert result.exit_code == EXIT_OK, output
    assert "site-packages" not in output and "Warning" not in output
    for name in ("histograms", "sensitivity"):
        assert (tmp_path / f"r_{name}.png").read_bytes().startswith(b"\x89PNG")
    y1_dot = read_parquet_columns(tmp_path / "r.parquet")["y1_dot_max"]
    assert 0 < np.ptp(y1_dot) < 1e-14  # the case: differing in rounding only


def test_a_truncated_chunk_is_computed_again_on_resume(tmp_path: Path, out_dir: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk file cut short made the resumed study fail with ArrowInvalid (exit 3)."""
    import mbgen.cli.sweep

    path = study(tmp_path, "samples: 24\nchunk: 8\nparameters:\n  L: {distribution: uniform, "
                 "tolerance: 0.01}\nrecord:\n  trajectories: {of: [x2]}")
    whole = tmp_path / "whole.parquet"
    assert sweep(out_dir, path, "--out", whole).exit_code == 0
    out = tmp_path / "r.parquet"

    def cut_off(*_args: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(mbgen.cli.sweep, "finish", cut_off)
        sweep(out_dir, path, "--out", out)
    partial = tmp_path / "r.parquet.partial"
    for name in ("runs-000001.parquet", "trajectories-000002.parquet"):
        data = (partial / name).read_bytes()
        (partial / name).write_bytes(data[: len(data) // 2])
    result = sweep(out_dir, path, "--out", out)
    output = clean(result)
    assert result.exit_code == EXIT_OK, output
    assert "2 chunk(s) of the earlier run did not read back" in output
    assert "1 of 3 chunks taken up" in output
    for suffix in ("", ".trajectories"):
        a = read_parquet_columns(tmp_path / f"whole{suffix}.parquet")
        b = read_parquet_columns(tmp_path / f"r{suffix}.parquet")
        for name, values in a.items():
            assert np.array_equal(values, b[name], equal_nan=values.dtype.kind == "f"), name


# -- schedulers ---------------------------------------------------------------------------

@pytest.fixture
def silent_server() -> Iterator[tuple[str, list[socket.socket]]]:
    """A loopback server that accepts and never answers: its address and what it took."""
    server = socket.create_server(("127.0.0.1", 0))
    taken: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                taken.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}", taken
    finally:
        server.close()
        for conn in taken:
            conn.close()


@pytest.fixture
def fast_timeout(monkeypatch: pytest.MonkeyPatch) -> float:
    import mbgen.sweep.cluster

    monkeypatch.setattr(mbgen.sweep.cluster, "CONNECT_TIMEOUT", 1.0)
    return 1.0


def test_a_scheduler_that_accepts_and_never_answers_is_given_up_on(
        tmp_path: Path, out_dir: Path, silent_server: tuple[str, list[socket.socket]],
        fast_timeout: float) -> None:
    """The connection timeout covered the TCP connection, not Dask's handshake."""
    pytest.importorskip("distributed")
    address, taken = silent_server
    with bounded_time(3000):  # a hang never ends; the 1 s timeouts plus the sweep's work
        result = sweep(out_dir, study(tmp_path, "samples: 2"), "--out",
                       tmp_path / "r.parquet", "--scheduler", address)
    assert result.exit_code == EXIT_BAD_INPUT and "no Dask scheduler reached" in clean(result)
    assert taken


def test_a_web_server_typed_for_the_scheduler_is_a_clear_error(
        tmp_path: Path, out_dir: Path, fast_timeout: float) -> None:
    """Its reply read as a frame length asked for 3 EiB (MemoryError, exit 3)."""
    pytest.importorskip("distributed")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *_args: object) -> None:
            pass

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        port = web.server_address[1]
        result = sweep(out_dir, study(tmp_path, "samples: 2"), "--out",
                       tmp_path / "r.parquet", "--scheduler", f"tcp://127.0.0.1:{port}")
        assert result.exit_code == EXIT_BAD_INPUT and "no Dask scheduler" in clean(result)
        result = sweep(out_dir, study(tmp_path, "samples: 2"), "--out",
                       tmp_path / "r.parquet", "--scheduler", f"http://127.0.0.1:{port}")
        assert result.exit_code == EXIT_USAGE and "is a web address" in clean(result)
    finally:
        web.shutdown()
        web.server_close()


@pytest.mark.parametrize(("address", "message"), [
    ("tls://127.0.0.1:8786", "needs TLS certificates"),
    ("ucx://127.0.0.1:8786", "over tcp:// or tls:// only"),
    ("inproc://x", "over tcp:// or tls:// only"),
    ("tcp://127.0.0.1", "is not an address HOST:PORT"),
    ("tcp://127.0.0.1:99999", "is not an address HOST:PORT"),
    ("tcp://a b:1", "is not an address HOST:PORT"),
])
def test_schedulers_mbgen_cannot_reach_are_usage_errors(
        tmp_path: Path, out_dir: Path, address: str, message: str) -> None:
    pytest.importorskip("distributed")
    with bounded_time(500):
        result = sweep(out_dir, study(tmp_path, "samples: 2"), "--out",
                       tmp_path / "r.parquet", "--scheduler", address)
    assert result.exit_code == EXIT_USAGE and message in clean(result), result.output
    assert "--scheduler" in result.output
    assert not list(tmp_path.glob("r.*"))


def test_a_study_file_does_not_pick_the_cluster(
        tmp_path: Path, out_dir: Path, silent_server: tuple[str, list[socket.socket]],
        fast_timeout: float) -> None:
    """`dask: {scheduler: ...}` in a study made mbgen connect and unpickle what that
    scheduler sent. Now it runs here and says so; only --scheduler-from-study (or
    --scheduler, $MBGEN_SCHEDULER) connects."""
    pytest.importorskip("distributed")
    address, taken = silent_server
    path = study(tmp_path, f"samples: 2\ndask: {{scheduler: '{address}'}}")
    result = sweep(out_dir, path, "--out", tmp_path / "r.parquet")
    output = clean(result)
    assert result.exit_code == EXIT_OK, output
    assert "not connected to" in output and "--scheduler-from-study" in output
    assert "on 2 threads" in output or "threads" in output
    time.sleep(0.2)
    assert not taken  # nothing connected
    result = sweep(out_dir, path, "--out", tmp_path / "s.parquet", "--scheduler-from-study")
    assert result.exit_code == EXIT_BAD_INPUT and "no Dask scheduler reached" in clean(result)
    assert taken  # asked for: it connects
    result = CliRunner(env={"MBGEN_SCHEDULER": "ucx://x:1"}).invoke(cli, [
        "sweep", str(path), "--out", str(tmp_path / "t.parquet"), "--build-dir", str(out_dir)])
    assert result.exit_code == EXIT_USAGE and "MBGEN_SCHEDULER" in result.output or \
        "--scheduler" in result.output

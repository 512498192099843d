"""Hostile studies: a seeded campaign of mutated study files and scheduler addresses
through `mbgen sweep` in-process (Click's CliRunner), each case in a fresh workspace,
judged clean error / untrusted (exit 4) / correct, or one of the failures that must not
happen (issue 57): data loss (a file that was there before, other than the outputs asked
for, changed or gone), left behind (a lock, a work directory or a temporary after the
command ended), hang (over the per-case limit), internal error (exit 3, a traceback or an
exception out of the command) and ✓ on a NaN (exit 0 with a run marked ok whose recorded
figures or final state are not finite, or no results).

Run: ``.venv/bin/python benchmarks/fuzz_sweep.py [--count N] [--seed S] [--quick]``.
Writes ``benchmarks/results/fuzz_sweep.json`` when N ≥ 5 000.
"""

from __future__ import annotations

import argparse
import http.server
import os
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from _common import REPO, Figure, print_table, write_results

sys.path.insert(0, str(REPO / "tests"))
from fuzz.cli_campaign import Report, invoke_within, run_cases, snapshot

FOURBAR = REPO / "mechanisms" / "fourbar.yaml"
TIME_LIMIT = 30.0  # seconds per case
CONNECT_TIMEOUT = 0.5  # the cluster's timeouts, shortened so that scheduler cases are quick
FAILURES = ("data loss", "left behind", "hang", "internal error", "✓ on a NaN")

BASE = """\
mechanism: {mechanism}
samples: 4
seed: 7
chunk: 2
parameters:
  L: {{distribution: uniform, tolerance: 0.01}}
  xb: {{distribution: normal, std: 0.01, low: 3.98, high: 4.02}}
initial:
  y1: {{grid: {{from: 0.1, to: 0.2, count: 2}}}}
forces:
  x1: 0.5
run: {{integrator: rk4, dt: 0.001, t_end: 0.004}}
record:
  figures:
    - {{of: x2, stats: [min, max, mean, rms]}}
    - {{of: energy}}
  trajectories: {{of: [x2], every: 2}}
""".replace("{{", "{").replace("}}", "}")  # {mechanism} is replaced by each case
NUMBERS = ["nan", ".nan", ".inf", "-.inf", "0", "-1", "1e308", "-1e308", "1e-320", "5e-324",
           "1e300", "1e-300", "100000000000", "9" * 120, "0x10", "0o7", "1_0", "true", "~",
           "'1'", "1.0", "2", "0.001", "[1, 2]", "{a: 1}", "!!python/name:os.system", "*a",
           "-0.0", "4.00000000000001", "0.3", "3", "1e-15"]
#: The mechanism file's names: its own, and the names of outputs a sweep may write
MECHANISM_NAMES = ["mech.yaml", "r.untrusted.parquet", "r.trajectories.parquet",
                   "r_histograms.untrusted.png", "r.parquet.lock",
                   "r.trajectories.untrusted.parquet", "r.parquet.partial", "r_envelope.png"]
KEYS = ["samples", "seed", "chunk", "L", "xb", "y1", "x1", "dt", "t_end", "low", "high",
        "std", "tolerance", "count", "from", "to", "every", "mean"]


@dataclass
class Case:
    label: str
    study: str  # the study file's text ('' with ``special``)
    args: list[str]
    special: str = ""  # "fifo", "symlink", "huge", "bom", "binary": the study file's kind
    mechanism_name: str = "mech.yaml"


# -- servers a scheduler option may point at ---------------------------------------------

class Servers:
    """A loopback server that accepts and never answers, and a web server."""

    def __init__(self) -> None:
        self.silent = socket.create_server(("127.0.0.1", 0))
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *_args: object) -> None:
                pass

        self.web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
        threading.Thread(target=self.web.serve_forever, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.held.append(self.silent.accept()[0])
            except OSError:
                return
            del self.held[:-50]  # keep a few open (never answered), let the rest go

    def addresses(self) -> list[str]:
        silent, web = self.silent.getsockname()[1], self.web.server_address[1]
        return [f"tcp://127.0.0.1:{silent}", f"127.0.0.1:{silent}", f"tcp://127.0.0.1:{web}",
                f"http://127.0.0.1:{web}", "tls://127.0.0.1:8786", "ucx://127.0.0.1:8786",
                "inproc://x", "ws://127.0.0.1:1", "tcp://127.0.0.1:1", "tcp://[::1]:1",
                "tcp://", "", " ", "tcp://a b:1", "tcp://127.0.0.1:99999", "x" * 5000,
                "tcp://127.0.0.1:0"]

    def close(self) -> None:
        self.silent.close()
        self.web.shutdown()
        self.web.server_close()


# -- mutations of the study file ----------------------------------------------------------

def _replace_number(text: str, rng: random.Random) -> str:
    key = rng.choice(KEYS)
    lines = text.splitlines()
    spots = [k for k, line in enumerate(lines) if f"{key}:" in line]
    if not spots:
        return text
    k = rng.choice(spots)
    head, _, tail = lines[k].partition(f"{key}:")
    value, sep, rest = tail.strip().partition(",") if "{" in lines[k] else (tail, "", "")
    for closer in ("}", "]"):
        if closer in value:
            rest, sep = value[value.index(closer):] + sep + rest, ""
            value = value[:value.index(closer)]
    lines[k] = f"{head}{key}: {rng.choice(NUMBERS)}{sep}{' ' if sep else ''}{rest}".rstrip()
    return "\n".join(lines) + "\n"


def _grid_extreme(text: str, rng: random.Random) -> str:
    span = rng.choice(["{from: 1, to: 2, count: 100000000000}", "{from: -1e308, to: 1e308, "
                       "count: 3}", "{from: 0, to: 1e308, count: 1000}", "[]", "[1, .nan]",
                       "{from: 1, to: 1, count: 1}", "[" + ", ".join(["1"] * 3000) + "]",
                       "{from: 1e-320, to: 2e-320, count: 4}", "{from: 1, to: 2}"])
    section = rng.choice(["parameters:\n  L", "forces:\n  x1", "initial:\n  y1",
                          "velocity:\n  y1", "parameters:\n  nope"])
    head, name = section.split("\n  ")
    return text.replace(f"{head}:\n", f"{head}:\n  {name}: {{grid: {span}}}\n", 1) \
        if f"{head}:\n" in text else text + f"{head}:\n  {name}: {{grid: {span}}}\n"


def _distribution(text: str, rng: random.Random) -> str:
    kind = rng.choice([
        "{distribution: uniform, low: -1e308, high: 1e308}",
        "{distribution: uniform, mean: 1e308, tolerance: 1e308}",
        "{distribution: normal, std: 1e-320, low: 1.5, high: 2}",
        "{distribution: normal, std: 1e-320, low: 0.5, high: 2}",
        "{distribution: normal, std: 1e308}", "{distribution: normal, std: 1, low: 50, "
        "high: 60}", "{distribution: normal, std: 1, low: 1e300}",
        "{distribution: normal, mean: 1, std: 1e300, low: -1e308, high: 1e308}",
        "{distribution: gamma}", "{distribution: uniform}", "{distribution: uniform, low: 2, "
        "high: 1}", "{distribution: normal, std: 0}", "{grid: [1], distribution: normal}"])
    return text.replace("{distribution: uniform, tolerance: 0.01}", kind, 1)


def _run_line(text: str, rng: random.Random) -> str:
    run = rng.choice(["{dt: 1e-300, t_end: 1e300}", "{dt: 5e-324, t_end: 1}", "{dt: 0.003, "
                      "t_end: 0.01}", "{dt: 1, t_end: 1e15}", "{dt: 0.001}",
                      "{integrator: rk5, dt: 0.001, t_end: 0.002}", "{dt: 0.001, t_end: "
                      "0.002, coords: independent}", "{integrator: trapezoidal, dt: 0.001, "
                      "t_end: 0.002}", "{dt: 1e-9, t_end: 1}", "[]", "~",
                      "{dt: 0.001, t_end: 0.002, projection: none}"])
    return text.replace("{integrator: rk4, dt: 0.001, t_end: 0.004}", run, 1)


def _nesting(text: str, rng: random.Random) -> str:
    depth = rng.choice([10, 63, 64, 65, 2000, 20000])
    value = "[" * depth + "]" * depth if rng.random() < 0.5 else "{a: " * depth + "1" + \
        "}" * depth
    return text.replace("  x1: 0.5", f"  x1: {value}", 1)


def _structure(text: str, rng: random.Random) -> str:
    choice = rng.randrange(14)
    if choice == 0:
        return text + "samples: 3\n"  # a duplicate key
    if choice == 1:
        return text + "extra: 1\n"
    if choice == 2:
        return text.replace("samples: 4", "samples: !!python/object/apply:os.system "
                            "['touch sentinel']", 1)
    if choice == 3:
        return "a: &a [" + ", ".join(["*a"] * 9) + "]\n" + text  # a recursive alias
    if choice == 4:
        return text[:rng.randrange(len(text))]  # cut anywhere
    if choice == 5:
        return text.replace("chunk: 2", rng.choice(["chunk: 1\nsamples: 20000", "chunk: 0",
                                                     "chunk: 100000000000"]), 1).replace(
            "samples: 4\n", "", 1)
    if choice == 6:
        return text + "dask: {scheduler: 'tcp://127.0.0.1:1'}\n"
    if choice == 7:
        return text.replace("    - {of: energy}", rng.choice([
            "    - {of: power}", "    - {of: energy, stats: [max, max]}", "    - {of: "
            "coupler_gyro, stats: [rms]}", "    - {of: phi_norm}", "    - energy",
            "    - {of: x2_dot, stats: []}"]), 1)
    if choice == 8:
        return text.replace("every: 2", rng.choice(["every: 0", "every: 100000", "every: "
                                                    "-1", "every: 1"]), 1)
    if choice == 9:
        return text.replace("run:", "%YAML 1.1\n---\nrun:", 1) if rng.random() < 0.3 else \
            "%YAML 1.1\n---\n" + text.replace("samples: 4", "samples: 010", 1)
    if choice == 10:
        return text.replace("L:", "? [L]\n  :", 1)
    if choice == 11:
        return text.replace("\n", "\r\n")
    if choice == 12:
        return text.replace("x2", "x\u00002", 1)
    return "\t" + text


MUTATIONS: list[Callable[[str, random.Random], str]] = [
    _replace_number, _replace_number, _grid_extreme, _distribution, _run_line, _nesting,
    _structure, _structure]


def make_case(rng: random.Random, addresses: list[str]) -> Case:
    text = BASE
    mutations = [] if rng.random() < 0.12 else [rng.choice(MUTATIONS) for _ in
                                                 range(rng.choice([1, 1, 2, 3]))]
    for mutation in mutations:
        text = mutation(text, rng)
    args = ["--out", "r.parquet"]
    mechanism_name = "mech.yaml"
    roll = rng.random()
    if roll < 0.06:  # outputs named like the inputs
        mechanism_name = rng.choice(MECHANISM_NAMES[1:])
        text = text.replace("{mechanism}", mechanism_name, 1)
        text = text.replace("L: {distribution: uniform, tolerance: 0.01}",
                            "L: {grid: [1.0, 0.0]}", 1)  # a failed run: untrusted names
    elif roll < 0.1:
        args = ["--out", rng.choice(["study.parquet", "link.parquet", "fifo.parquet",
                                     "notes.parquet", "deep/er/r.parquet", "r.csv"])]
    if rng.random() < 0.1:  # Matplotlib: the slowest cases
        args.append("--plot")
    if rng.random() < 0.15:
        args += ["--max-failed", rng.choice(["0", "1", "100", "-1"])]
    if rng.random() < 0.06:
        args += ["--scheduler", rng.choice(addresses)]
    if rng.random() < 0.03:
        args.append("--scheduler-from-study")
        if "dask:" not in text:
            text += f"dask: {{scheduler: '{rng.choice(addresses)}'}}\n"
    if rng.random() < 0.05:
        args += ["--max-steps", rng.choice(["1", "100", "0"])]
    special = ""
    if rng.random() < 0.03:
        special = rng.choice(["fifo", "symlink", "huge", "bom", "binary", "directory"])
    name = "+".join(m.__name__.strip("_") for m in mutations) or "base"
    return Case(f"{name} {special} {' '.join(args)}".strip(), text, args, special,
                mechanism_name)


# -- running and judging ------------------------------------------------------------------

def prepare(case: Case, root: Path) -> Path:
    """The workspace: the mechanism, the study, the user's own files and hazards."""
    shutil.copy(FOURBAR, root / case.mechanism_name) if case.mechanism_name != \
        "r.parquet.partial" else (root / case.mechanism_name).write_bytes(
            FOURBAR.read_bytes())
    (root / "precious.txt").write_text("the user's own file")
    (root / "notes.parquet").mkdir()
    (root / "link.parquet").symlink_to("precious.txt")
    os.mkfifo(root / "fifo.parquet")
    study = root / "study.yaml"
    text = case.study.replace("{mechanism}", case.mechanism_name)
    if case.special == "fifo":
        os.mkfifo(study)
    elif case.special == "symlink":
        (root / "real.yaml").write_text(text)
        study.symlink_to("real.yaml")
    elif case.special == "directory":
        study.mkdir()
    elif case.special == "huge":
        with study.open("w") as stream:
            stream.write(text)
            stream.write(("# " + "a comment " * 10 + "\n") * (17 * 2**20 // 103))
    elif case.special == "bom":
        study.write_bytes(b"\xef\xbb\xbf" + text.encode())
    elif case.special == "binary":
        study.write_bytes(text.encode()[:60] + b"\xff\xfe\x00\x81" + text.encode()[60:])
    else:
        study.write_text(text)
    return study


def asked_outputs(case: Case) -> set[str]:
    out = Path(case.args[case.args.index("--out") + 1])
    names = {out, out.with_name(f"{out.stem}.trajectories{out.suffix}")}
    names |= {out.with_name(f"{out.stem}_{p}.png") for p in ("histograms", "envelope",
                                                             "sensitivity")}
    names |= {p.with_name(f"{p.stem}.untrusted{p.suffix}") for p in list(names)}
    return {os.path.normpath(p) for p in names}


def nan_under_check(root: Path, case: Case) -> str | None:
    """On exit 0: the results are there and every run marked ok has finite figures."""
    from mbgen.io.chunks import read_parquet_columns

    out = root / case.args[case.args.index("--out") + 1]
    if not out.is_file():
        return f"{out.name} missing after exit 0"
    runs = read_parquet_columns(out)
    ok = runs["status"] == "ok"
    for name, values in runs.items():
        if values.dtype.kind == "f" and name not in ("failed_at",) and \
                not np.isfinite(values[ok]).all():
            return f"{name} not finite in a run marked ok"
    return None


def run_case(case: Case, root: Path, build_dir: Path) -> tuple[str, str]:


    prepare(case, root)
    before = snapshot(root)
    result = invoke_within(root, ["sweep", "study.yaml", *case.args, "--build-dir",
                                  str(build_dir)], TIME_LIMIT)
    if result is None:
        return "hang", f"over {TIME_LIMIT:g} s"
    after = snapshot(root)
    asked = asked_outputs(case)
    for name, entry in before.items():
        if os.path.normpath(name) not in asked and after.get(name) != entry:
            return "data loss", f"{name} {'changed' if name in after else 'is gone'}"
    left = [name for name in after if name not in before and (
        name.endswith(".lock") or Path(name).name.startswith(".") or (
            name.endswith(".partial") and not list((root / name).glob("runs-*"))))]
    if left:  # a lock, a temporary, or a work directory without a chunk to resume
        return "left behind", ", ".join(left[:3])
    code, output = result.exit_code, result.output
    if code == 3 or "Traceback" in output or (
            result.exception is not None and not isinstance(result.exception, SystemExit)):
        return "internal error", f"exit {code}: {(output or repr(result.exception))[-300:]}"
    if code == 0:
        wrong = nan_under_check(root, case)
        return ("✓ on a NaN", wrong) if wrong else ("correct", "")
    if code == 4:
        return "untrusted", output.strip().splitlines()[-1] if output.strip() else ""
    if code in (1, 2) and output.strip():
        return "clean error", output.strip().splitlines()[-1][:200]
    return "internal error", f"exit {code} without a message: {output!r}"


def campaign(count: int, seed: int, workdir: Path,
             progress: Callable[[int], None] | None = None) -> Report:
    import mbgen.sweep.cluster

    mbgen.sweep.cluster.CONNECT_TIMEOUT = CONNECT_TIMEOUT
    from mbgen.loading import load

    build_dir = workdir / "gen"
    warm = workdir / "warm"
    warm.mkdir()
    for name in MECHANISM_NAMES:  # builds are keyed by the file's stem: compiled once each
        copy = warm / name.replace(".partial", ".partial.yaml")
        copy.write_bytes(FOURBAR.read_bytes())
        load(copy, build_dir)
    servers = Servers()
    rng = random.Random(seed)
    try:
        return run_cases((make_case(rng, servers.addresses()) for _ in range(count)),
                         run_case, workdir, build_dir, progress, FAILURES)
    finally:
        servers.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5_000)
    parser.add_argument("--seed", type=int, default=57)
    parser.add_argument("--quick", action="store_true", help="40 cases, no results written")
    args = parser.parse_args(argv)
    count = 40 if args.quick else args.count
    from rich.progress import Progress

    os.environ.setdefault("MPLBACKEND", "Agg")
    workdir = Path(tempfile.mkdtemp(prefix="mbgen-sweep-campaign-"))
    start = time.perf_counter()
    with Progress() as bar:
        task = bar.add_task("cases", total=count)
        report = campaign(count, args.seed, workdir, progress=lambda _k: bar.advance(task))
    elapsed = time.perf_counter() - start
    shutil.rmtree(workdir, ignore_errors=True)
    figures = [Figure("cases", count, "", note=f"seed {args.seed}; {elapsed:.0f} s")]
    figures += [Figure(category, report.counts[category], "") for category in
                ("clean error", "untrusted", "correct")]
    figures += [Figure(category, report.counts[category], "", 0) for category in FAILURES]
    figures.append(Figure("slowest case", report.slowest, "s", TIME_LIMIT))
    print_table("hostile studies and schedulers (mbgen sweep)", figures)
    for case, detail in report.failures[:20]:
        print(f"--- {detail}\n    {case}")
    if count < 5_000:
        print("fewer than 5 000 cases: results not written")
        return 1 if report.failures else 0
    path = write_results("fuzz_sweep", figures, {"failures": report.failures[:100]})
    print(f"wrote {path}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())

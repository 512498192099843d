"""A seeded campaign of hostile command lines: option values, data files, output paths
and mechanism names, each run through the real CLI in a fresh workspace and judged.

Every case ends in one category: ``clean error`` (exit 1 or 2 with a message),
``untrusted`` (exit 4: the command said its result is not to be trusted), ``correct``
(exit 0 and the output passes an independent check), or one of the failures the product
must never show: ``internal error`` (exit 3 or a traceback), ``silent wrong`` (exit 0 with
a missing or non-finite output, or a result under the requested name after exit 4),
``data loss`` (a file that was there before, other than the outputs asked for, changed or
gone), ``code executed`` (a payload's sentinel file appeared) and ``hang`` (over the time
limit).

Used by ``tests/test_fuzz.py`` (a few dozen cases on every run) and
``benchmarks/fuzz.py --cli`` (10 000 and more).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
MECHANISMS = REPO / "mechanisms"
EXAMPLES = REPO / "examples"
TIME_LIMIT = 30.0  # seconds per case
SENTINEL = "campaign-sentinel"
FAILURES = ("internal error", "silent wrong", "data loss", "code executed", "hang")

BAD_NUMBERS = ["nan", "inf", "-inf", "0", "-1", "1e308", "1e-308", "²", "١", "1_000",
               "0x10", "", " ", "1e999", "9" * 6000, "−1", "1e-320", "1,5", "true"]
PAYLOAD = f"__import__('os').system('touch {SENTINEL}')"


class Hang(BaseException):
    """Raised by the alarm: not an Exception, so no handler in mbgen swallows it."""


def no_preparation(_root: Path) -> None:
    """A case that runs on the workspace as it is."""


@dataclass
class Case:
    """One command line (``{name}`` placeholders are workspace files) and its outputs."""

    label: str
    args: list[str]
    outputs: list[str]  # workspace names the command may write (the user asked for them)
    check: Callable[[Path], str | None]  # on exit 0: None if correct, else what is wrong
    prepare: Callable[[Path], None] = no_preparation


@dataclass
class Report:
    counts: Counter = field(default_factory=Counter)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (case, what)
    slowest: float = 0.0


# -- the workspace ----------------------------------------------------------------------

def workspace(root: Path) -> None:
    """The files a user has: mechanisms, readings, a run, a trajectory, precious files."""
    shutil.copy(MECHANISMS / "fourbar.yaml", root / "mech.yaml")
    shutil.copy(MECHANISMS / "slider-crank.yaml", root / "crank.yaml")
    shutil.copy(EXAMPLES / "fourbar-readings.csv", root / "readings.csv")
    shutil.copy(EXAMPLES / "fourbar-run.csv", root / "run.csv")
    t = np.linspace(0, 1, 41)
    (root / "traj.txt").write_text("".join(f"{a:.6f} {2 * a + 0.1 * np.sin(3 * a):.9f}\n"
                                           for a in t))
    (root / "precious.txt").write_text("the user's own file")
    (root / "notes").mkdir()
    (root / "notes" / "README.md").write_text("the user's notes")


def snapshot(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry under root: its kind and, for a file, its bytes."""
    found = {}
    for path in root.rglob("*"):
        name = str(path.relative_to(root))
        if path.is_symlink():
            found[name] = ("link", os.readlink(path).encode())
        elif path.is_file():
            found[name] = ("file", path.read_bytes())
        else:
            found[name] = ("dir" if path.is_dir() else "special", b"")
    return found


# -- oracles: what a correct result looks like -------------------------------------------

def _table(path: Path) -> tuple[list[str], np.ndarray] | str:
    if not path.is_file():
        return f"{path.name} missing"
    try:
        lines = path.read_text().splitlines()
        header = lines[0].split(",")
        data = np.array([[float(c) for c in line.split(",")] for line in lines[1:]], ndmin=2)
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        return f"{path.name} is not a result table: {exc}"
    if not np.isfinite(data).all():
        return f"{path.name} holds non-finite values"
    return header, data


def simulation_ok(t_end: float, dt: float, out: str) -> Callable[[Path], str | None]:
    def check(root: Path) -> str | None:
        table = _table(root / out)
        if isinstance(table, str):
            return table
        header, data = table
        if "phi_norm" not in header or not data.size:
            return f"{out} is not a simulation's table (header {header[:4]}...)"
        if abs(data[-1, 0] - t_end) > dt * 1.01 + 1e-9 * t_end:
            return f"ends at t = {data[-1, 0]}, asked {t_end}"
        if data[:, header.index("phi_norm")].max() > 1e-3 * 16:
            return "constraint error above the tolerance under ✓"
        return None
    return check


def estimate_ok(out: str) -> Callable[[Path], str | None]:
    def check(root: Path) -> str | None:
        table = _table(root / out)
        if isinstance(table, str):
            return table
        header, data = table
        p = data[:, [k for k, h in enumerate(header) if h.startswith("p_branch")]]
        return None if np.allclose(p.sum(axis=1), 1, atol=1e-6) else "branch p do not sum to 1"
    return check


def finite_table(out: str) -> Callable[[Path], str | None]:
    def check(root: Path) -> str | None:
        table = _table(root / out)
        return table if isinstance(table, str) else None
    return check


MAGIC = {".png": b"\x89PNG", ".jpg": b"\xff\xd8", ".jpeg": b"\xff\xd8", ".pdf": b"%PDF",
         ".svg": b"<?xml", ".gif": b"GIF8"}


def picture_ok(out: str) -> Callable[[Path], str | None]:
    def check(root: Path) -> str | None:
        path = root / out
        if not path.is_file():
            return f"{out} missing"
        magic = MAGIC.get(path.suffix.lower())
        return None if magic is None or path.read_bytes().startswith(magic) else \
            f"{out} is not a {path.suffix} file"
    return check


def nothing_to_check(_root: Path) -> None:
    return None


# -- the cases ----------------------------------------------------------------------------

def _number(rng: random.Random, good: list[str]) -> str:
    return rng.choice(BAD_NUMBERS) if rng.random() < 0.35 else rng.choice(good)


def _output(rng: random.Random, suffix: str, inputs: list[str]) -> str:
    """An output path: usually fresh, sometimes an input, the user's file, a link, a FIFO,
    a directory, a name that cannot be."""
    roll = rng.random()
    if roll < 0.6:
        return rng.choice([f"out{suffix}", f"deep/er/out{suffix}", f"é ü{suffix}"])
    return rng.choice([*inputs, f"link{suffix}", f"fifo{suffix}", "notes",
                       "x" * 300 + suffix, f"nodir/../out{suffix}", f"out{suffix}.bak"])


def _hazards(root: Path, rng: random.Random) -> None:
    for suffix in (".csv", ".png", ".gif", ".yaml"):
        (root / f"link{suffix}").symlink_to("precious.txt")
        os.mkfifo(root / f"fifo{suffix}")


READINGS_MUTATIONS: list[Callable[[str, random.Random], str]] = [
    lambda text, _r: "\ufeff" + text,
    lambda text, _r: text.replace("t,", "t,coupler_gyro,", 1),
    lambda text, _r: text + text.splitlines()[-1] + "\n",
    lambda text, r: text.replace(text.splitlines()[r.randrange(1, 50)],
                                 text.splitlines()[r.randrange(1, 50)].split(",")[0] + ",nan"),
    lambda text, _r: text + "1e9,0.1\n",
    lambda text, _r: text.replace(",", ",x" * 100_000, 1),
    lambda text, _r: text.replace("\n", "\r\n"),
    lambda text, _r: "\n".join(reversed(text.splitlines())),
    lambda text, _r: text.splitlines()[0] + "\n",
    lambda text, _r: "",
    lambda text, _r: text.replace("0.0", "\xff", 3),
    lambda text, r: "\n".join(line + ("," if r.random() < 0.3 else "")
                              for line in text.splitlines()),
    lambda text, _r: text.replace("coupler_gyro", "gyro"),
    lambda text, _r: "\n".join(line.split(",")[0] + ",1e308" for line in text.splitlines()),
    lambda text, r: text.replace(text.splitlines()[1].split(",")[0], "-" + str(r.random()), 1),
]


def _mutate(root: Path, name: str, rng: random.Random) -> None:
    path = root / name
    text = path.read_text()
    mutated = rng.choice(READINGS_MUTATIONS)(text, rng)
    path.write_bytes(mutated.encode("utf-8", "surrogateescape") if "\xff" not in mutated
                     else mutated.replace("\xff", "").encode() + b"\xff\xfe")


def make_case(rng: random.Random) -> Case:
    """One random case."""
    kind = rng.choices(["simulate", "estimate", "inverse", "draw", "animate", "check",
                        "name", "package", "cache"], weights=[30, 14, 14, 8, 6, 4, 4, 4, 3])[0]
    if kind == "simulate":
        t_end = _number(rng, ["0.05", "0.1", "0.2"])
        dt = _number(rng, ["0.001", "0.01", "0.005"])
        out = _output(rng, ".csv", ["mech.yaml", "readings.csv"])
        args = ["simulate", "mech.yaml", "--t-end", t_end, "--dt", dt, "--out", out]
        outputs = [out]
        if rng.random() < 0.3:
            extra = _output(rng, ".csv", ["mech.yaml", out])
            args += ["--sensors-out", extra, "--noise-sensor", _number(rng, ["0", "0.01"])]
            outputs.append(extra)
        if rng.random() < 0.3:
            args += ["--q0", rng.choice(["y1=0.5", "x1=nan", "y2=9", "1,0,1,2.01",
                                         "y1=" + PAYLOAD, "q=1", "x1=1,x1=2", ""])]
        if rng.random() < 0.2:
            args += ["--every", _number(rng, ["1", "3"])]
        try:
            check = simulation_ok(float(t_end), float(dt), out)
        except ValueError:
            check = simulation_ok(float("nan"), 0, out)
        return Case(f"simulate {' '.join(args[2:])}", args, outputs, check)
    if kind == "estimate":
        out = _output(rng, ".csv", ["mech.yaml", "readings.csv"])
        args = ["estimate", "mech.yaml", "--data", "readings.csv", "--out", out,
                "--particles", _number(rng, ["20", "50"]), "--pool", "2"]
        if rng.random() < 0.4:
            args += ["--dt", _number(rng, ["0.002", "0.005", "1"])]
        if rng.random() < 0.3:
            args += ["--noise-accel", _number(rng, ["1", "4"])]
        if rng.random() < 0.85:  # the four-bar's gyroscope declares no noise
            args += ["--noise-sensor", _number(rng, ["0.0175", "0.01"])]
        mutate = rng.random() < 0.6
        seed = rng.randrange(1 << 30)
        return Case(f"estimate {' '.join(args[2:])}{' (mutated data)' * mutate}", args, [out],
                    estimate_ok(out), (lambda root: _mutate(root, "readings.csv",
                                                            random.Random(seed))) if mutate
                    else no_preparation)
    if kind == "inverse":
        out = _output(rng, ".csv", ["crank.yaml", "traj.txt"])
        if rng.random() < 0.5:
            args = ["inverse", "crank.yaml", "--motion",
                    "phi=" + rng.choice(["2*t", "sin(t)", "1/t", "t^1000", PAYLOAD, "t*"]),
                    "--t-end", _number(rng, ["0.5", "1"]), "--dt", _number(rng, ["0.01"]),
                    "--out", out]
            prepare = no_preparation
        else:
            args = ["inverse", "crank.yaml", "--trajectory", "traj.txt", "--imposed",
                    rng.choice(["phi", "x1", "phi,x1", "4", "9"]), "--out", out]
            seed = rng.randrange(1 << 30)

            def prepare(root: Path, seed: int = seed) -> None:
                if random.Random(seed).random() < 0.5:
                    text = (root / "traj.txt").read_text()
                    lines = text.splitlines()
                    lines.insert(5, lines[4])
                    (root / "traj.txt").write_text("\n".join(lines) + "\n")
        return Case(f"inverse {' '.join(args[2:])}", args, [out], finite_table(out), prepare)
    if kind == "draw":
        out = _output(rng, rng.choice([".png", ".jpg", ".svg", ".txt"]), ["mech.yaml"])
        args = ["draw", "mech.yaml", "--out", out]
        if rng.random() < 0.3:
            args += ["--q", rng.choice(["y1=0.5", "nan", "y1=" + PAYLOAD, "1,2"])]
        return Case(f"draw {' '.join(args[2:])}", args, [out], picture_ok(out))
    if kind == "animate":
        out = _output(rng, ".gif", ["run.csv", "mech.yaml"])
        args = ["animate", "run.csv", "--mechanism", "mech.yaml", "--out", out, "--fps",
                _number(rng, ["5", "10"])]
        return Case(f"animate {' '.join(args[5:])}", args, [out], picture_ok(out))
    if kind == "check":
        return Case("check", ["check", "mech.yaml"], [], nothing_to_check)
    if kind == "name":  # a hostile mechanism name, compiled into a package and imported
        name = rng.choice(['"""', "*/", "#include <x>", PAYLOAD, "a\nb", "$x$", "é"])

        def prepare(root: Path, name: str = name) -> None:
            import json

            text = (root / "mech.yaml").read_text()
            (root / "mech.yaml").write_text(text.replace("name: fourbar",
                                                         f"name: {json.dumps(name + PAYLOAD)}"))
        args = ["compile", "mech.yaml", "--package", "dist", "--name", "hostile"]
        return Case(f"compile name {name!r}", args, ["dist"], package_imports, prepare)
    if kind == "package":
        target = rng.choice(["notes", ".", "dist", "precious.txt", "link.csv"])
        name = rng.choice(["notes", "mech", "fourbar", "dist"])
        args = ["compile", "mech.yaml", "--package", target, "--name", name]
        if rng.random() < 0.3:
            args.append("--force")
        if rng.random() < 0.5:
            args = ["export", "mech.yaml", "--c", rng.choice(["notes", ".", "cdir"])] + (
                ["--force"] if rng.random() < 0.3 else [])
        outputs = ["dist", "cdir", f"{target}/{name}"]
        if "--force" in args:  # the user asked to replace what stands there
            outputs.append(args[3])
        return Case(f"{' '.join(args)}", args, outputs, nothing_to_check)
    target = rng.choice(["notes", ".", "gen-empty"])
    return Case(f"cache clean {target}", ["cache", "clean", "--all", "--build-dir", target],
                [], nothing_to_check)


def package_imports(root: Path) -> str | None:
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", "import hostile; hostile.mechanism.n"],
                            cwd=root / "dist", capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(root / "dist")})
    return None if result.returncode == 0 else \
        f"the package does not import: {result.stderr[-300:]}"


# -- running and judging ------------------------------------------------------------------

def run_case(case: Case, root: Path, build_dir: Path) -> tuple[str, str]:
    """(category, detail) of one case run in the fresh workspace ``root``."""


    workspace(root)
    _hazards(root, random.Random(0))
    case.prepare(root)
    before = snapshot(root)
    result = invoke_within(root, [*case.args, "--build-dir", str(build_dir)]
                           if case.args[0] not in ("cache",) else case.args, TIME_LIMIT)
    if result is None:
        return "hang", f"over {TIME_LIMIT:g} s"
    if (root / SENTINEL).exists() or Path(SENTINEL).exists():
        return "code executed", result.output[-300:]
    after = snapshot(root)
    asked = {os.path.normpath(o) for o in case.outputs}
    for name, entry in before.items():
        top = name.split(os.sep)[0]
        if os.path.normpath(name) in asked or top in asked:
            continue
        if after.get(name) != entry:
            return "data loss", f"{name} {'changed' if name in after else 'is gone'}"
    code = result.exit_code
    output = result.output
    if code == 3 or "Traceback" in output or (
            result.exception is not None and not isinstance(result.exception, SystemExit)):
        return "internal error", f"exit {code}: {(output or repr(result.exception))[-300:]}"
    if code == 0:
        wrong = case.check(root)
        if list(root.rglob(SENTINEL)):  # the check imports what was written
            return "code executed", "on import of the written package"
        return ("silent wrong", wrong) if wrong else ("correct", "")
    if code == 4:
        for out in case.outputs:
            if (root / out).exists() and before.get(out) == after.get(out) is None:
                return "silent wrong", f"exit 4 but {out} was written"
        return "untrusted", output.strip().splitlines()[-1] if output.strip() else ""
    if code in (1, 2) and output.strip():
        return "clean error", output.strip().splitlines()[-1]
    return "internal error", f"exit {code} without a message: {output!r}"


def invoke_within(root: Path, args: list[str], limit: float) -> Any:
    """The CLI in this process on ``args``, run in ``root`` (the working directory put
    back after), or None when it ran past ``limit`` seconds (a hang: the alarm raises
    Hang, which no handler in mbgen swallows)."""
    from click.testing import CliRunner

    from mbgen.cli.main import cli

    old_cwd = Path.cwd()
    os.chdir(root)

    def alarm(_signum: int, _frame: object) -> None:
        raise Hang

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return CliRunner().invoke(cli, args)
    except Hang:
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        os.chdir(old_cwd)


def campaign(count: int, seed: int, workdir: Path,
             progress: Callable[[int], None] | None = None) -> Report:
    """``count`` cases from ``seed``, each in its own workspace under ``workdir``."""
    rng = random.Random(seed)
    return run_cases((make_case(rng) for _ in range(count)), run_case, workdir,
                     workdir / "gen", progress)


def run_cases(cases: Iterable[Any], run: Callable[[Any, Path, Path], tuple[str, str]],
              workdir: Path, build_dir: Path,
              progress: Callable[[int], None] | None = None,
              failures: Iterable[str] = FAILURES) -> Report:
    """Each case (with a ``label``) run by ``run(case, root, build_dir)`` in a workspace
    of its own under ``workdir``, removed after it, and judged into a Report (the failures
    with their case's label; ``failures``: the categories that are failures): the loop of
    every campaign (benchmarks/fuzz_sweep.py's too)."""
    report, failing = Report(), set(failures)
    for k, case in enumerate(cases):
        root = workdir / f"case{k}"
        root.mkdir()
        start = time.perf_counter()
        category, detail = run(case, root, build_dir)
        report.slowest = max(report.slowest, time.perf_counter() - start)
        report.counts[category] += 1
        if category in failing:
            report.failures.append((case.label[:300], f"{category}: {detail}"))
        shutil.rmtree(root, ignore_errors=True)
        if progress:
            progress(k)
    return report

"""Hostile spatial files and accelerometers: a seeded campaign of mutated 3-D mechanism
files (the Furuta pendulum with an accelerometer, Bricard's linkage, the flyball governor,
the URDF arm), mutated readings files (encoders, gyroscopes, accelerometers) and hostile
option values through check, compile, simulate, estimate, identify and animate, in-process
(Click's CliRunner, tests/fuzz/cli_campaign.py), each case in a fresh workspace.

Each case is judged clean error / untrusted (exit 4) / correct, or one of the failures
that must not happen (issue 57): data loss (a file that was there before, other than the
outputs asked for and the names derived from them, changed or gone; an input is never an
output), code executed (a payload's sentinel appeared), left behind (a temporary after the
command ended), hang (over the case's time limit), internal error (exit 3, a traceback or
an exception out of the command), and ✓ on a NaN or a wrong result (exit 0 with a missing
or non-finite output, an identification that calls a parameter not identifiable or its
cost not finite, or a file check accepts with a NaN, an infinity or a noise ≤ 0 in it).

Why the mix: a mutated mechanism file that parses is a new build (4 to 30 s of SymPy and
cc on this 2-core machine), so mutated files go to `check` (no C), and only a few cases
compile one; the runs (simulate, estimate, identify, animate) use the cached builds of the
shipped files with hostile options, `--param` values and readings.

Round 2 of the campaign also draws every estimate method (particle, ekf, ukf, the
factor-graph smoother with hostile --lag values), one to three --param options (hostile
values, names that are not parameters, malformed NAME=VALUE; a negative mass, damper or
inertia must be refused), an accelerometer on Bricard's linkage (`body: CD`, by name) and
whole-file readings hazards (empty, header only, times not finite, shifted or out of
order, a column all NaN or infinite, one row, holes).

Run: ``.venv/bin/python benchmarks/fuzz_spatial.py [--count N] [--seed S] [--quick]``.
Writes ``benchmarks/results/fuzz_spatial.json`` when N ≥ 5 000. On a shared machine, in
chunks of one sequence: ``--count 1000 --save-part a.json``, then ``--skip 1000 --count
5000 --build-dir DIR --save-part b.json`` (DIR: a build directory to reuse), then
``--combine a.json b.json`` adds them up and writes the results.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from _common import REPO, Figure, print_table, write_results

sys.path.insert(0, str(REPO / "tests"))
from fuzz.cli_campaign import Report, invoke_within, run_cases, snapshot

SENTINEL = "campaign-sentinel"
PAYLOAD = f"__import__('os').system('touch {SENTINEL}')"
FAILURES = ("data loss", "code executed", "left behind", "hang", "internal error",
            "✓ on a NaN or wrong")
TIME_LIMIT = 60.0  # seconds per case; a case that compiles a new file gets COMPILE_LIMIT
COMPILE_LIMIT = 240.0
IMU = "  - {type: accelerometer, body: pendulum, point: T, name: imu, noise: 0.05}\n"
GYRO_CD = "  - {type: gyroscope, body: 2, name: gyroCD, noise: 1e-3}\n"
ENC2 = "  - {type: encoder, coordinate: theta2, name: enc2, noise: 1e-4, offset: offset2}\n"
#: The campaign's base files: name in the workspace -> (source, accelerometer line to add)
BASES = {
    "furuta.yaml": (REPO / "mechanisms" / "furuta.yaml", ENC2, IMU),
    "bricard.yaml": (REPO / "mechanisms" / "bricard.yaml", GYRO_CD,
                     "  - {type: accelerometer, body: CD, point: D, name: imuD, noise: 0.05}\n"),
    "flyball.yaml": (REPO / "tests" / "data" / "flyball-governor.yaml", "", ""),
    "arm.urdf": (REPO / "mechanisms" / "arm.urdf", "", ""),
    "pendulum.yaml": (REPO / "mechanisms" / "actuated-double-pendulum.yaml", ENC2,
                      "  - {type: accelerometer, body: 1, name: imu, noise: 0.05}\n"),
}
RUNS = ("furuta.yaml", "bricard.yaml", "pendulum.yaml")  # files with readings to estimate
NUMBERS = [".nan", ".inf", "-.inf", "nan", "inf", "0", "-0.0", "-1", "1e308", "-1e308",
           "1e-320", "5e-324", "1e300", "1e200", "1e-300", "100000000000", "9" * 400, "0x10",
           "1_0", "true", "~", "'1'", "[1, 2]", "{a: 1}", "!!python/name:os.system", "*a",
           "1/0", "sqrt(-1)", "log(0)", "1e999", "2", "0.5", "-0.05", PAYLOAD, "L1*", "(",
           "exp(1000)", "x" * 70, "1" + "+1" * 5000, "é", "\"\\u0000\""]
CELLS = ["nan", "NaN", "inf", "-inf", "1e308", "-1e308", "1e200", "1e-320", "0", "",
         " ", "abc", "0x10", "1,5", "1e999", "9" * 80, "²", "-0", "+1", ".5", "1e5", "\"1\""]
NAMES = ["g*/\n#include <x>", "a,b", "t", "", "enc1", "imu", "imu.x", "x" * 300, "é",
         PAYLOAD, "\"\"\"", "a b", "1abc", "_", "a\tb", "%s", "{x}", "<script>"]


@dataclass
class Case:
    """One command line over a workspace prepared by ``prepare``."""

    label: str
    args: list[str]
    outputs: list[str]  # names the user asked for (derived names follow from them)
    inputs: list[str]  # names the command reads: never to be changed
    check: Callable[[Path, str], str | None]  # on exit 0: None if right, else what is wrong
    prepare: Callable[[Path], None] = field(default=lambda _root: None)
    limit: float = TIME_LIMIT


# -- the workspace ------------------------------------------------------------------------

def base_text(name: str) -> str:
    source, anchor, line = BASES[name]
    text = source.read_text()
    if line:
        assert anchor in text, (name, anchor)
        text = text.replace(anchor, anchor + line)
    return text.replace("name: actuated-double-pendulum", "name: pendulum")


def workspace(root: Path, warm: Path) -> None:
    """The base files, their readings and runs, the user's own files and hazards."""
    for name in BASES:
        shutil.copy(warm / name, root / name)
    for name in RUNS:
        stem = Path(name).stem
        shutil.copy(warm / f"{stem}-readings.csv", root / f"{stem}-readings.csv")
        shutil.copy(warm / f"{stem}-run.csv", root / f"{stem}-run.csv")
    (root / "precious.txt").write_text("the user's own file")
    (root / "notes").mkdir()
    (root / "notes" / "README.md").write_text("the user's notes")
    for suffix in (".csv", ".yaml", ".gif", ".html"):
        (root / f"link{suffix}").symlink_to("precious.txt")
        os.mkfifo(root / f"fifo{suffix}")


def derived(name: str) -> set[str]:
    """Every name a command may write for the output ``name``: itself, its untrusted twin,
    its figures (<stem>_*.png) and sibling tables (<stem>.*)."""
    path = Path(name)
    return {os.path.normpath(str(p)) for p in (
        path, path.with_name(f"{path.stem}.untrusted{path.suffix}"))}


def is_derived(entry: str, outputs: list[str]) -> bool:
    entry = os.path.normpath(entry)
    for out in outputs:
        path = Path(os.path.normpath(out))
        if entry in derived(out) or entry.split(os.sep)[0] == str(path).split(os.sep)[0] \
                and os.sep in str(path):
            return True
        if out.endswith("/") and entry.startswith(str(path) + os.sep):
            return True  # a directory the user asked to replace, with what it held
        stem = str(path.with_suffix(""))
        if entry.startswith(stem + "_") and entry.endswith(".png") or \
                entry.startswith(stem + ".") and entry != str(path):
            return True
    return False


# -- oracles ------------------------------------------------------------------------------

def _table(path: Path) -> tuple[list[str], np.ndarray] | str:
    if not path.is_file():
        return f"{path.name} missing after exit 0"
    try:
        lines = path.read_text().splitlines()
        header = lines[0].split(",")
        data = np.array([[float(c) if c else np.nan for c in line.split(",")]
                         for line in lines[1:]], ndmin=2)
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        return f"{path.name} is not a result table: {exc}"
    if not data.size:
        return f"{path.name} has no rows"
    return header, data


def finite_table(out: str, t_end: float | None = None,
                 sparse: bool = False) -> Callable[[Path, str], str | None]:
    """The table is there, finite (``sparse``: empty cells allowed, as in readings), and
    (with ``t_end``) ends at it; an estimate's branch probabilities sum to 1."""
    def check(root: Path, _output: str) -> str | None:
        table = _table(root / out)
        if isinstance(table, str):
            return table
        header, data = table
        values = data[:, 1:] if sparse else data
        if np.isinf(values).any() or (not sparse and np.isnan(values).any()):
            return f"{out} holds non-finite values under ✓"
        if t_end is not None and abs(data[-1, 0] - t_end) > 1e-6 * max(1.0, t_end) + 0.02:
            return f"{out} ends at t = {data[-1, 0]}, asked {t_end}"
        branches = [k for k, h in enumerate(header) if h.startswith("p_branch")]
        if branches and not np.allclose(data[:, branches].sum(axis=1), 1, atol=1e-6):
            return "branch probabilities do not sum to 1"
        return None
    return check


def identified(out: str) -> Callable[[Path, str], str | None]:
    """The YAML is there, every value finite; exit 0 says nothing is unidentifiable and
    its cost is finite."""
    def check(root: Path, output: str) -> str | None:
        import yaml

        path = root / out
        if not path.is_file():
            return f"{out} missing after exit 0"
        text = path.read_text().replace("nan: not identifiable", "")  # the legend
        if "# not identifiable" in text or "not identifiable" in output:
            return "a parameter not identifiable under ✓"
        if "final cost inf" in output or "final cost nan" in output:
            return "a final cost that is not finite under ✓"
        try:
            values = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            return f"{out} is not YAML: {exc}"
        flat = [v for v in _leaves(values) if isinstance(v, (int, float))]
        return None if all(np.isfinite(flat)) else f"{out} holds non-finite values"
    return check


def _leaves(value: object) -> list[object]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


MAGIC = {".gif": b"GIF8", ".html": b"<!DOCTYPE html", ".png": b"\x89PNG"}


def picture(out: str) -> Callable[[Path, str], str | None]:
    def check(root: Path, _output: str) -> str | None:
        path = root / out
        if not path.is_file():
            return f"{out} missing after exit 0"
        magic = MAGIC.get(path.suffix.lower(), b"")
        return None if path.read_bytes()[:len(magic)].lower() == magic.lower() else \
            f"{out} is not a {path.suffix} file"
    return check


def refused(reason: str) -> Callable[[Path, str], str | None]:
    """A case whose file must be refused: exit 0 is wrong."""
    def check(_root: Path, _output: str) -> str | None:
        return f"accepted: {reason}"
    return check


def accepted(_root: Path, _output: str) -> str | None:
    return None


# -- mutations of a mechanism file ----------------------------------------------------------

MUST_REFUSE = (".nan", ".inf", "-.inf", "nan", "inf", "1e999", "1/0", "log(0)", "sqrt(-1)",
               PAYLOAD)


def _spots(text: str) -> list[tuple[int, int, int]]:
    """(line, start, end) of every number after a ': ' or in a [..] list of a YAML line."""
    import re

    found = []
    for k, line in enumerate(text.splitlines()):
        if line.lstrip().startswith("#"):
            continue
        code = line.split(" #")[0]
        for match in re.finditer(r"(?<=[:\[,] )-?[0-9][0-9.e+-]*|(?<=[\[])-?[0-9][0-9.e+-]*",
                                 code):
            found.append((k, match.start(), match.end()))
    return found


def mutate_number(text: str, rng: random.Random) -> tuple[str, str, str | None]:
    """A number of the file replaced by a hostile value; (text, label, why exit 0 would be
    wrong or None)."""
    spots = _spots(text)
    if not spots:  # a file already cut or emptied
        return text, "number (none)", None
    k, start, end = rng.choice(spots)
    lines = text.splitlines()
    value = rng.choice(NUMBERS)
    key = lines[k][:start].rstrip(" :[,").split()[-1] if lines[k][:start].strip() else ""
    shown = value if "\n" not in value and len(value) < 40 else repr(value[:20])
    lines[k] = lines[k][:start] + value + lines[k][end:]
    why = f"{key} = {shown}" if value in MUST_REFUSE else None
    if "noise" in key and value in ("0", "-0.0", "-1", "-0.05", "1e-320", "5e-324"):
        why = f"noise = {value}"
    return "\n".join(lines) + "\n", f"number {key}={shown}", why


def mutate_sensor(text: str, rng: random.Random) -> tuple[str, str, str | None]:
    """A sensor line added or changed: odd names, references, noises, kinds."""
    name = rng.choice(NAMES)
    import json

    quoted = json.dumps(name)
    choice = rng.randrange(9)
    if choice == 0:
        line = f"  - {{type: accelerometer, body: 1, name: {quoted}, noise: 0.1}}\n"
        why = None if name.isidentifier() else f"sensor name {name[:20]!r}"
    elif choice == 1:
        line = "  - {type: accelerometer, body: " + rng.choice(
            ["nope", "99", "-1", "1.5", "[1]", "~", "0", "''", quoted]) + ", noise: 0.1}\n"
        why = None
    elif choice == 2:
        line = "  - {type: accelerometer, body: 1, point: " + rng.choice(
            ["nope", "99", "-1", "[1]", quoted, "O", "0"]) + ", noise: 0.1}\n"
        why = None
    elif choice == 3:
        noise = rng.choice(["0", "-0.05", ".nan", ".inf", "1e-320", "1e308", "'a'", "[]"])
        line = f"  - {{type: accelerometer, body: 1, name: acc, noise: {noise}}}\n"
        why = f"noise = {noise}" if noise in ("0", "-0.05", ".nan", ".inf", "1e-320") \
            else None
    elif choice == 4:
        line = "  - {type: " + rng.choice(["magnetometer", "Accelerometer", "''", "[a]",
                                            "gyroscope"]) + ", body: 1, noise: 0.1}\n"
        why = None
    elif choice == 5:
        line = "".join(f"  - {{type: accelerometer, body: 1, name: a{k}, noise: 0.1}}\n"
                       for k in range(rng.choice([2, 50, 3000])))
        why = None
    elif choice == 6:
        line = "  - {type: accelerometer, body: 1, name: acc, noise: 0.1, extra: 1}\n"
        why = None
    elif choice == 7:
        line = "  - {type: encoder, coordinate: " + rng.choice(
            ["nope", "x1", "[a]", "~", quoted]) + ", name: e9, noise: 0.1}\n"
        why = None
    else:
        line = "  - {type: accelerometer, body: 1, name: acc, noise: 0.1, point: " \
               + rng.choice(["[0, 0, 0]", "T", "1e308"]) + "}\n"
        why = None
    if "sensors:\n" in text:
        text = text.replace("sensors:\n", "sensors:\n" + line, 1)
    else:
        text = text.rstrip("\n") + "\nsensors:\n" + line
    return text, f"sensor #{choice} {name[:12]!r}", why


def mutate_structure(text: str, rng: random.Random) -> tuple[str, str, str | None]:
    """The file's shape: cut, nested, duplicated, binary, huge, aliases, tags."""
    choice = rng.randrange(14)
    if choice == 0:
        return text[:rng.randrange(len(text))], "cut", None
    if choice == 1:
        depth = rng.choice([64, 2000, 20000])
        value = "[" * depth + "]" * depth if rng.random() < 0.5 else \
            "{a: " * depth + "1" + "}" * depth
        return text.replace("parameters:\n", f"parameters:\n  deep: {value}\n", 1), \
            f"nesting {depth}", None
    if choice == 2:
        return text.replace("parameters:\n", "parameters:\n  g: 1\n", 1), "duplicate g", None
    if choice == 3:
        return "a: &a [" + ", ".join(["*a"] * 9) + "]\n" + text, "recursive alias", None
    if choice == 4:
        return text.replace("parameters:\n", "parameters:\n  evil: !!python/object/apply:"
                            f"os.system ['touch {SENTINEL}']\n", 1), "python tag", None
    if choice == 5:
        return text + "# " + "x" * 100 + "\n" * (rng.choice([1, 17 * 2**20 // 101])), \
            "long comment", None
    if choice == 6:
        return "\ufeff" + text.replace("\n", "\r\n"), "bom crlf", None
    if choice == 7:
        return text.replace("dimension: 3", "dimension: " + rng.choice(
            ["2", "4", "'3'", ".nan", "3.0", "[3]", "~"]), 1), "dimension", None
    if choice == 8:
        return text.replace("gravity:", "gravity: " + rng.choice(
            ["[.nan, 0, 0]", "[0, 0]", "[0, 0, 0, 0]", "g", "[1e308, 1e308, 1e308]",
             "[a, b, c]"]) + "\n_old_gravity:", 1), "gravity", "gravity NaN" if False else None
    if choice == 9:
        return text.replace("independent_coordinates: [", "independent_coordinates: "
                            + rng.choice(["[nope, ", "[theta1, theta1, ", "[[], ", "["]), 1), \
            "independent", None
    if choice == 10:
        import re

        names = re.findall(r"name: (\w+)", text)
        if len(names) > 2:
            a, b = rng.sample(names[1:], 2)
            return re.sub(rf"\bname: {a}\b", f"name: {b}", text, count=1), "same name", None
        return text, "same name (none)", None
    if choice == 11:
        return text.replace("name: ", "name: " + rng.choice(["'", "\"x\\u0000\" #", "|"]),
                            1), "quoted name", None
    if choice == 12:
        cut = text.encode()
        at = rng.randrange(len(cut))
        return (cut[:at] + b"\xff\xfe\x00" + cut[at:]).decode("utf-8", "surrogateescape"), \
            "binary", None
    return "%YAML 1.1\n---\n" + text.split("---\n", 1)[-1], "yaml 1.1", None


def mutate_urdf(text: str, rng: random.Random) -> tuple[str, str, str | None]:
    """The URDF arm: numbers, entities, nesting, cuts."""
    import re

    choice = rng.randrange(6)
    if choice == 0:
        numbers = list(re.finditer(r"-?[0-9]+\.?[0-9]*(e-?[0-9]+)?", text))
        spot = rng.choice(numbers)
        value = rng.choice(["nan", "inf", "-inf", "1e308", "0", "-1", "1e999", "abc", ""])
        return text[:spot.start()] + value + text[spot.end():], f"urdf number {value}", None
    if choice == 1:
        bomb = ("<?xml version=\"1.0\"?>\n<!DOCTYPE r [<!ENTITY a \"aaaaaaaaaa\">"
                "<!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">]>\n")
        return bomb + text.split("?>", 1)[-1].replace("name=\"", "name=\"&b;", 1), \
            "urdf entity", None
    if choice == 2:
        depth = rng.choice([100, 5000])
        return text.replace("</robot>", "<a>" * depth + "</a>" * depth + "</robot>"), \
            f"urdf nesting {depth}", None
    if choice == 3:
        return text[:rng.randrange(len(text))], "urdf cut", None
    if choice == 4:
        name = rng.choice(NAMES)
        from xml.sax.saxutils import quoteattr

        return re.sub(r'name="[^"]*"', f"name={quoteattr(name)}", text, count=rng.choice(
            [1, 2, 5])), f"urdf name {name[:12]!r}", None
    return re.sub(r'type="revolute"', rng.choice(['type="floating"', 'type="planar"',
                                                  'type=""', 'type="x"']), text, count=1), \
        "urdf joint type", None


# -- mutations of a readings file -----------------------------------------------------------

def mutate_readings(text: str, rng: random.Random) -> tuple[str, str]:
    lines = text.splitlines()
    header, rows = lines[0].split(","), [line.split(",") for line in lines[1:]]
    choice = rng.randrange(24)
    label = f"readings #{choice}"
    if choice >= 16:
        return hostile_readings(choice, header, rows, rng)
    if choice <= 2:  # hostile cells
        for _ in range(rng.choice([1, 1, 3, 50])):
            row = rng.choice(rows)
            row[rng.randrange(len(row))] = rng.choice(CELLS)
    elif choice == 3:  # a column emptied (the encoders, or the accelerometer)
        column = rng.randrange(1, len(header))
        for row in rows:
            row[column] = ""
        label += f" {header[column]} empty"
    elif choice == 4:  # only the accelerometers left
        for row in rows:
            for k, name in enumerate(header):
                if k and "." not in name:
                    row[k] = ""
    elif choice == 5:  # a column dropped or renamed
        column = rng.randrange(1, len(header))
        if rng.random() < 0.5:
            header = header[:column] + header[column + 1:]
            rows = [row[:column] + row[column + 1:] for row in rows]
        else:
            header[column] = rng.choice(NAMES + ["imu.X", "imu.w", "t"]).replace("\n", " ")
    elif choice == 6:  # an extra or duplicated column
        header.append(rng.choice(["enc1", "extra", "imu.x", "t"]))
        rows = [[*row, "0"] for row in rows]
    elif choice == 7:  # columns reordered
        order = [0, *rng.sample(range(1, len(header)), len(header) - 1)]
        header = [header[k] for k in order]
        rows = [[row[k] for k in order] for row in rows]
    elif choice == 8:  # times: repeated, decreasing, huge, tiny steps, uneven
        kind = rng.randrange(5)
        if kind == 0:
            rows.insert(3, list(rows[2]))
        elif kind == 1:
            rows[4][0], rows[5][0] = rows[5][0], rows[4][0]
        elif kind == 2:
            for k, row in enumerate(rows):
                row[0] = repr(1e300 * (k + 1))
        elif kind == 3:
            for k, row in enumerate(rows):
                row[0] = repr(1e-300 * k)
        else:
            rows[5][0] = repr((float(rows[5][0]) + float(rows[4][0])) / 2)
        label += f" times {kind}"
    elif choice == 9:  # many rows: the same readings over and over, later and later
        copies = rng.choice([10, 100, 2000])
        step = float(rows[1][0]) - float(rows[0][0])
        rows = [[repr(float(row[0]) + c * len(rows) * step), *row[1:]]
                for c in range(copies) for row in rows]
        label += f" ×{copies}"
    elif choice == 10:
        rows = rows[:rng.choice([0, 1, 2])]
    elif choice == 11:
        return "\ufeff" + text.replace("\n", "\r\n"), label + " bom crlf"
    elif choice == 12:
        return text + "# a comment\n\n" + ",".join(["1e9"] * len(header)) + "\n", label
    elif choice == 13:
        for row in rows:
            row[rng.randrange(1, len(row))] = rng.choice(["1e200", "1e308", "-1e200"])
        label += " all huge"
    elif choice == 14:
        return text.replace(",", ";"), label + " semicolons"
    else:
        value = rng.choice(["1e200", "1e308"])
        rows[rng.randrange(len(rows))][-1] = value  # one accelerometer reading (the issue's)
        label += f" one {value}"
    return "\n".join(",".join(row) for row in [header, *rows]) + "\n", label


def hostile_readings(choice: int, header: list[str], rows: list[list[str]],
                     rng: random.Random) -> tuple[str, str]:
    """Whole-file hazards: empty, header only, NaN or infinite times, a column all NaN
    or infinite, times before zero or out of order throughout, one row."""
    label = f"readings #{choice}"
    if choice == 16:
        return rng.choice(["", "\n", "\n\n\n"]), label + " empty file"
    if choice == 17:
        return ",".join(header) + "\n", label + " header only"
    if choice == 18:
        rows[rng.randrange(len(rows))][0] = rng.choice(["nan", "inf", "-inf", "", "1e999"])
        label += " time not finite"
    elif choice == 19:
        column = rng.randrange(1, len(header))
        value = rng.choice(["nan", "inf", "-inf", "1e308"])
        for row in rows:
            row[column] = value
        label += f" {header[column]} all {value}"
    elif choice == 20:
        shift = rng.choice([-1.0, -1e300, 1e6, 0.5])
        for row in rows:
            row[0] = repr(float(row[0]) + shift)
        label += f" times shifted {shift:g}"
    elif choice == 21:
        rows = rows[::-1] if rng.random() < 0.5 else rng.sample(rows, len(rows))
        label += " times out of order"
    elif choice == 22:
        rows = rows[:1] * rng.choice([1, 2])
        label += " one time"
    else:
        for row in rows:
            for k in range(1, len(row)):
                row[k] = rng.choice(["nan", "", row[k]])
        label += " holes"
    return "\n".join(",".join(row) for row in [header, *rows]) + "\n", label


PARAMETERS = {"furuta.yaml": ["m2", "L2", "b1", "g", "tilt", "J2a", "K"],
              "bricard.yaml": ["m", "L", "a", "g", "Jl"],
              "pendulum.yaml": ["m1", "L1", "b1", "g", "K"]}


#: Parameters whose negative value no real mechanism has (a mass, a damper, an inertia)
NOT_NEGATIVE = {"m", "m1", "m2", "b1", "J2a"}


def param_options(rng: random.Random, name: str) -> tuple[list[str], str | None]:
    """One to three --param options: hostile values, names that are not parameters
    (a coordinate, a derived parameter, a payload), malformed NAME=VALUE; and why exit 0
    would be wrong (a negative mass, damper or inertia), or None."""
    options, why = [], None
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        key = rng.choice(PARAMETERS[name]) if rng.random() < 0.8 else rng.choice(
            ["nope", "", "theta1", "thetaA", PAYLOAD, "M2", "m2 ", "q0", "x" * 300])
        value = _number(rng, ["0.5", "2", "1e-3"], 0.6)
        shape = rng.random()
        text = f"{key}={value}" if shape < 0.8 else rng.choice(
            [key, f"={value}", f"{key}=={value}", f"{key}={value}={value}", f" {key} = {value}"])
        options += ["--param", text]
        if key in NOT_NEGATIVE and value == "-1" and text == f"{key}={value}":
            why = f"--param {text}"
    return options, why


# -- the cases ------------------------------------------------------------------------------

def _number(rng: random.Random, good: list[str], bad: float = 0.35) -> str:
    return rng.choice(["nan", "inf", "-inf", "0", "-1", "1e308", "1e-308", "1e-320", "1e300",
                       "", "x", "1e999", "5e-324", "-0"]) if rng.random() < bad \
        else rng.choice(good)


def _output(rng: random.Random, suffix: str, inputs: list[str]) -> str:
    if rng.random() < 0.75:
        return rng.choice([f"out{suffix}", f"deep/er/out{suffix}", f"é ü{suffix}"])
    return rng.choice([*inputs, f"link{suffix}", f"fifo{suffix}", "notes", "x" * 300 + suffix,
                       f"nodir/../out{suffix}", "precious.txt", f"out{suffix}/"])


def nothing(_root: Path) -> None:
    """The workspace as it is."""


def _write(name: str, text: str) -> Callable[[Path], None]:
    def prepare(root: Path) -> None:
        (root / name).write_bytes(text.encode("utf-8", "surrogateescape"))
    return prepare


def _both(*steps: Callable[[Path], None]) -> Callable[[Path], None]:
    def prepare(root: Path) -> None:
        for step in steps:
            step(root)
    return prepare


def _rename(source: str, target: str) -> Callable[[Path], None]:
    """An input under the name an output would derive (its untrusted twin, ...)."""
    def prepare(root: Path) -> None:
        if source != target:
            (root / source).replace(root / target)
    return prepare


def check_case(rng: random.Random, texts: dict[str, str]) -> Case:
    """A mutated file through `check` (no C), now and then `compile` or `simulate`."""
    name = rng.choices(list(BASES), weights=[40, 30, 1, 12, 15])[0]  # flyball: 13 s
    text = texts[name]
    why: str | None
    if name.endswith(".urdf"):
        text, label, why = mutate_urdf(text, rng)
    else:
        roll = rng.random()
        mutate = mutate_number if roll < 0.45 else mutate_sensor if roll < 0.75 else \
            mutate_structure
        text, label, why = mutate(text, rng)
        if rng.random() < 0.2:
            text, more, more_why = mutate_number(text, rng)
            label, why = f"{label} + {more}", why or more_why
    args = ["check", name]
    limit = TIME_LIMIT
    outputs: list[str] = []
    check = refused(why) if why else accepted
    if rng.random() < 0.03 and name != "flyball.yaml":  # a new build: slow, so rarely
        args = ["simulate", name, "--t-end", "0.02", "--dt", "0.01", "--out", "out.csv"]
        outputs, limit = ["out.csv"], COMPILE_LIMIT
        check = refused(why) if why else finite_table("out.csv", 0.02)
    if name == "flyball.yaml":  # its check takes 13 s (43 coordinates)
        limit = COMPILE_LIMIT
    return Case(f"{' '.join(args[:2])} {label}", args, outputs, [name], check,
                _write(name, text), limit)


def run_case_args(rng: random.Random, texts: dict[str, str]) -> Case:
    """A cached build's command with hostile options, --param values and readings."""
    kind = rng.choices(["simulate", "estimate", "identify", "animate", "compile", "draw"],
                       weights=[38, 38, 5, 5, 10, 4])[0]  # identify, animate: seconds
    name = rng.choice(RUNS)
    stem = Path(name).stem
    readings, run = f"{stem}-readings.csv", f"{stem}-run.csv"
    prepare: Callable[[Path], None] = nothing
    inputs = [name]
    param, impossible = param_options(rng, name) if rng.random() < 0.3 else ([], None)
    if kind == "simulate":
        t_end = _number(rng, ["0.02", "0.05", "0.1"], 0.25)
        dt = _number(rng, ["0.01", "0.005", "0.001"], 0.25)
        out = _output(rng, ".csv", [name, readings])
        args = ["simulate", name, "--t-end", t_end, "--dt", dt, "--out", out, *param]
        outputs = [out]
        if rng.random() < 0.4:
            extra = _output(rng, ".csv", [name, out, readings])
            args += ["--sensors-out", extra]
            outputs.append(extra)
            if rng.random() < 0.5:
                args += ["--noise-sensor", _number(rng, ["0", "0.01"])]
        if rng.random() < 0.3:
            coordinate = {"furuta.yaml": "theta2", "bricard.yaml": "thetaA",
                          "pendulum.yaml": "theta2"}[name]
            args += ["--q0", rng.choice([f"{coordinate}=0.3", f"{coordinate}=nan",
                                         f"{coordinate}=1e308", f"{coordinate}={PAYLOAD}",
                                         "1,2", "nope=1", ""])]
        if rng.random() < 0.2:
            args += ["--every", _number(rng, ["1", "3", "100000000000000000000"])]
        if rng.random() < 0.2:
            args += ["--coords", "independent"]
        if rng.random() < 0.15:
            args += ["--integrator", rng.choice(["euler", "trapezoidal", "variational",
                                                 "spook", "semi-implicit-euler"])]
        if rng.random() < 0.1:
            args += ["--phi-tol", _number(rng, ["1e-3"]), "--energy-tol", _number(rng, ["1"])]
        try:
            check = finite_table(out, float(t_end))
        except ValueError:
            check = finite_table(out)
        return Case(" ".join(args), args, outputs, inputs,
                    refused(impossible) if impossible else check, prepare)
    if kind in ("estimate", "identify"):
        data = readings
        label = ""
        if rng.random() < 0.6:
            text, label = mutate_readings(texts[readings], rng)
            prepare = _write(readings, text)
        if rng.random() < 0.04:
            data = rng.choice([name, "precious.txt", "notes", "fifo.csv", "missing.csv",
                               "link.csv"])
        inputs = [name, data]
    if kind == "estimate":
        out = _output(rng, ".csv", [name, readings])
        if rng.random() < 0.06 and len(out) < 100:  # the readings, named as the untrusted
            #                                         estimate would be
            stem_out = Path(out).stem
            target = f"{stem_out}.untrusted.csv"
            prepare = _both(prepare, _rename(readings, target))
            data, inputs = target, [name, target]
        args = ["estimate", name, "--data", data, "--out", out, *param]
        method = rng.choices(["particle", "ekf", "ukf", "smoother"], weights=[3, 3, 2, 2])[0]
        if method == "smoother":
            args += ["--method", "smoother"]
            if rng.random() < 0.4:
                args += ["--lag", rng.choice(["all", "0.05", "0.1", "0", "-1", "nan", "inf",
                                              "1e308", "1e-9", "x", "ALL", "5e-324"])]
        elif method in ("ekf", "ukf"):
            args += ["--method", method]
            if rng.random() < 0.25:
                coordinate = {"furuta.yaml": "theta1", "bricard.yaml": "thetaA",
                              "pendulum.yaml": "theta1"}[name]
                args += ["--unknown-forces", rng.choice([coordinate, "nope",
                                                         f"{coordinate},{coordinate}"]),
                         "--noise-force", _number(rng, ["1", "0.1"])]
        else:
            args += ["--particles", _number(rng, ["20", "50"], 0.2), "--pool",
                     _number(rng, ["2", "3"], 0.15)]
        for option, good in (("--noise-sensor", ["0.01", "0.1"]), ("--noise-accel", ["1"]),
                             ("--dt", ["0.01", "0.02"]), ("--speed", ["1", "0.1"]),
                             ("--spread", ["0.1", "0.5"]), ("--seed", ["1", "99"])):
            if rng.random() < 0.15:
                args += [option, _number(rng, good, 0.5)]
        if rng.random() < 0.1:
            args.append("--covariance")
        return Case(f"{' '.join(args)} {label}", args, [out], inputs,
                    refused(impossible) if impossible else finite_table(out), prepare)
    if kind == "identify":
        out = _output(rng, ".yaml", [name, readings])
        unknown = {"furuta.yaml": ["b1", "b2", "m2", "offset2"], "bricard.yaml": ["m", "g"],
                   "pendulum.yaml": ["b1", "b2", "m2"]}[name]
        params = rng.choice([rng.choice(unknown), ",".join(unknown[:2]), "nope", "",
                             f"{unknown[0]},{unknown[0]}", "g,g"])
        args = ["identify", name, "--data", data, "--params", params, "--out", out,
                "--no-step-check", "--max-iterations", _number(rng, ["10", "20"], 0.1), *param]
        if rng.random() < 0.2:
            args += ["--initial", f"{unknown[0]}={_number(rng, ['0.001', '0.1'], 0.7)}"]
        if rng.random() < 0.1:
            args += ["--bounds", f"{unknown[0]}=" + rng.choice(["0:1", "1:0", "nan:1",
                                                                "-inf:inf", "0:0", "a:b"])]
        if rng.random() < 0.1:
            args += ["--prior", f"{unknown[0]}=" + rng.choice(["0.001:0.001", "1:0", "1:-1",
                                                               "nan:1", "1:inf"])]
        for option, good in (("--noise-impulse", ["0.001"]), ("--compliance", ["1e-5"]),
                             ("--substeps", ["1", "2"])):
            if rng.random() < 0.1:
                args += [option, _number(rng, good, 0.6)]
        if rng.random() < 0.15:
            args += ["--coordinates", rng.choice(["dependent", "independent"])]
        return Case(f"{' '.join(args)} {label}", args, [out], inputs,
                    refused(impossible) if impossible else identified(out), prepare,
                    TIME_LIMIT * 2)
    if kind == "animate":
        out = _output(rng, rng.choice([".gif", ".html"]), [name, run])
        label = ""
        if rng.random() < 0.5:
            text, label = mutate_readings(texts[run], rng)
            prepare = _write(run, text)
        mechanism = name if rng.random() < 0.85 else rng.choice(
            [n for n in BASES if n != name])
        args = ["animate", run, "--mechanism", mechanism, "--out", out, "--fps",
                _number(rng, ["2", "5"], 0.2), "--max-frames", rng.choice(["30", "5", "1"])]
        if rng.random() < 0.3:
            args += ["--trace", rng.choice(["T", "P", "1", "nope", "99", "-1", PAYLOAD])]
        if rng.random() < 0.2:
            args += ["--view", _number(rng, ["25"]), _number(rng, ["-60"])]
        return Case(f"{' '.join(args)} {label}", args, [out], [name, run, mechanism],
                    picture(out), prepare)
    if kind == "draw":
        out = _output(rng, rng.choice([".png", ".html"]), [name])
        args = ["draw", name, "--out", out]
        if rng.random() < 0.4:
            args += ["--q", rng.choice(["theta2=0.5", "theta2=nan", "thetaA=1e308", "1,2",
                                        "nope=1", f"theta1={PAYLOAD}"])]
        return Case(" ".join(args), args, [out], [name], picture(out), prepare)
    target = rng.choice(["notes", ".", "dist", "precious.txt", "link.csv", "out"])
    package_name = rng.choice(["notes", "furuta", "dist", "x" * 100, "import", "a-b", "é"])
    args = ["compile", name, "--package", target, "--name", package_name]
    if rng.random() < 0.3:
        args.append("--force")
    outputs = ["dist", "out", f"{target}/{package_name}"]
    if "--force" in args:  # the user asked to replace the package's directory
        outputs.append(f"{target}/{package_name}/")
    return Case(" ".join(args), args, outputs, [name], accepted, prepare)


def make_case(rng: random.Random, texts: dict[str, str]) -> Case:
    return check_case(rng, texts) if rng.random() < 0.45 else run_case_args(rng, texts)


# -- running and judging --------------------------------------------------------------------

def run_case(case: Case, root: Path, build_dir: Path, warm: Path) -> tuple[str, str]:
    workspace(root, warm)
    case.prepare(root)
    before = snapshot(root)
    result = invoke_within(root, [*case.args, "--build-dir", str(build_dir)]
                           if case.args[0] != "check" else case.args, case.limit)
    if result is None:
        return "hang", f"over {case.limit:g} s"
    if (root / SENTINEL).exists() or Path(SENTINEL).exists():
        return "code executed", result.output[-300:]
    after = snapshot(root)
    inputs = {os.path.normpath(name) for name in case.inputs}
    for name, entry in before.items():
        if os.path.normpath(name) not in inputs and is_derived(name, case.outputs):
            continue
        if after.get(name) != entry:
            return "data loss", f"{name} {'changed' if name in after else 'is gone'}"
    left = [name for name in after if name not in before and Path(name).name.startswith(".")
            and Path(name).name != ".mbgen-made"]  # a package's mark: mbgen made it
    if left:
        return "left behind", ", ".join(left[:3])
    code, output = result.exit_code, result.output
    if code == 3 or "Traceback" in output or (
            result.exception is not None and not isinstance(result.exception, SystemExit)):
        return "internal error", f"exit {code}: {(output or repr(result.exception))[-400:]}"
    if code == 0:
        wrong = case.check(root, output)
        return ("✓ on a NaN or wrong", wrong) if wrong else ("correct", "")
    if code == 4:
        return "untrusted", output.strip().splitlines()[-1][:200] if output.strip() else ""
    if code in (1, 2) and output.strip():
        return "clean error", output.strip().splitlines()[-1][:200]
    return "internal error", f"exit {code} without a message: {output[-300:]!r}"


def warm_up(warm: Path, build_dir: Path) -> dict[str, str]:
    """The base files written, compiled once, their runs and readings simulated once;
    returns every base text by name."""
    texts = {}
    for name in BASES:
        texts[name] = base_text(name)
        (warm / name).write_text(texts[name])
    for name in BASES:
        args = ["compile", name, "--build-dir", str(build_dir)]
        result = invoke_within(warm, args, 1200)
        assert result is not None and result.exit_code == 0, (name, result and result.output)
    q0 = {"furuta.yaml": "theta2=0.5", "bricard.yaml": "thetaA=0.3",
          "pendulum.yaml": "theta1=0.3"}
    for name in RUNS:
        stem = Path(name).stem
        args = ["simulate", name, "--t-end", "0.3", "--dt", "0.01", "--q0", q0[name],
                "--out", f"{stem}-run.csv", "--sensors-out", f"{stem}-readings.csv",
                "--build-dir", str(build_dir)]
        if name == "pendulum.yaml":
            args += ["--noise-sensor", "0.001"]
        result = invoke_within(warm, args, 600)
        assert result is not None and result.exit_code == 0, (name, result and result.output)
        texts[f"{stem}-readings.csv"] = (warm / f"{stem}-readings.csv").read_text()
        texts[f"{stem}-run.csv"] = (warm / f"{stem}-run.csv").read_text()
        args = ["estimate", name, "--data", f"{stem}-readings.csv", "--method", "smoother",
                "--out", f"{stem}-smoothed.csv", "--build-dir", str(build_dir)]
        result = invoke_within(warm, args, 1200)  # the factor graph's one-time builds
        assert result is not None and result.exit_code in (0, 1, 4), (name, result.output)
    return texts


def campaign(count: int, seed: int, workdir: Path,
             progress: Callable[[int], None] | None = None,
             stop: float = float("inf"), skip: int = 0,
             build_dir: Path | None = None) -> tuple[Report, Counter]:
    """Cases ``skip`` to ``count`` of the sequence from ``seed`` (none started after the
    time ``stop``, epoch seconds; ``build_dir``: builds of an earlier chunk to reuse);
    the report and the count of each command run."""
    build_dir, warm = build_dir or workdir / "gen", workdir / "warm"
    warm.mkdir()
    texts = warm_up(warm, build_dir)
    rng = random.Random(seed)
    commands: Counter = Counter()

    def generated() -> Iterator[Case]:
        for k in range(count):
            case = make_case(rng, texts)  # drawn even when skipped: the same sequence
            if k < skip:
                continue
            if time.time() > stop:
                return
            commands[case.args[0]] += 1
            yield case
    def judged(case: Case, root: Path, gen: Path) -> tuple[str, str]:
        category, detail = run_case(case, root, gen, warm)
        if category in FAILURES:  # said at once: a long campaign shows them as they come
            print(f"--- {category}: {detail[-300:]}\n    {case.label[:300]}", file=sys.stderr,
                  flush=True)
        return category, detail

    report = run_cases(generated(), judged, workdir, build_dir, progress, FAILURES)
    return report, commands


def figures_of(counts: Counter, commands: Counter, slowest: float, seed: int,
               note: str) -> list[Figure]:
    run = sum(counts.values())
    figures = [Figure("cases", run, "", note=f"seed {seed}; {note}; " + ", ".join(
        f"{name} {n}" for name, n in commands.most_common()))]
    figures += [Figure(category, counts[category], "") for category in
                ("clean error", "untrusted", "correct")]
    figures += [Figure(category, counts[category], "", 0) for category in FAILURES]
    figures.append(Figure("slowest case", slowest, "s", COMPILE_LIMIT))
    return figures


def combine(parts: list[Path]) -> int:
    """The chunks' reports (``--save-part``) of one seed's sequence added up into the
    results: they must cover cases 0 to N without a gap or an overlap."""
    import json

    loaded = sorted((json.loads(path.read_text()) for path in parts), key=lambda p: p["skip"])
    seeds = {part["seed"] for part in loaded}
    assert len(seeds) == 1, f"chunks of different seeds: {seeds}"
    end = 0
    for part in loaded:
        assert part["skip"] == end, f"chunks not contiguous at case {end}: {part['skip']}"
        end = part["skip"] + part["run"]
    counts, commands = Counter(), Counter()
    failures: list[list[str]] = []
    for part in loaded:
        counts.update(part["counts"])
        commands.update(part["commands"])
        failures += part["failures"]
    elapsed = sum(part["elapsed"] for part in loaded)
    figures = figures_of(counts, commands, max(part["slowest"] for part in loaded),
                         seeds.pop(), f"{elapsed:.0f} s in {len(loaded)} chunks")
    print_table("hostile spatial files, readings and options", figures)
    for case, detail in failures[:40]:
        print(f"--- {detail}\n    {case}")
    if end < 5_000:
        print(f"{end} cases, fewer than 5 000: results not written")
        return 1
    path = write_results("fuzz_spatial", figures, {"failures": failures[:100],
                                                   "commands": dict(commands)})
    print(f"wrote {path}")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5_000)
    parser.add_argument("--seed", type=int, default=57)
    parser.add_argument("--quick", action="store_true", help="40 cases, no results written")
    parser.add_argument("--minutes", type=float, default=float("inf"),
                        help="start no case after this many minutes (the figures say so)")
    parser.add_argument("--skip", type=int, default=0,
                        help="start at this case of the sequence (a later chunk)")
    parser.add_argument("--build-dir", type=Path, help="reuse an earlier chunk's builds")
    parser.add_argument("--save-part", type=Path,
                        help="write this chunk's report here (JSON) for --combine")
    parser.add_argument("--combine", type=Path, nargs="+",
                        help="add up the chunks' reports into the results; run nothing")
    args = parser.parse_args(argv)
    if args.combine:
        return combine(args.combine)
    count = 40 if args.quick else args.count
    from rich.progress import Progress

    os.environ.setdefault("MPLBACKEND", "Agg")
    workdir = Path(tempfile.mkdtemp(prefix="mbgen-spatial-campaign-"))
    start = time.perf_counter()
    with Progress() as bar:
        task = bar.add_task("cases", total=count - args.skip)
        report, commands = campaign(count, args.seed, workdir,
                                    progress=lambda _k: bar.advance(task),
                                    stop=time.time() + 60 * args.minutes, skip=args.skip,
                                    build_dir=args.build_dir)
    elapsed = time.perf_counter() - start
    run = sum(report.counts.values())
    stopped = f"; stopped after {args.minutes:g} min" if run < count - args.skip else ""
    shutil.rmtree(workdir, ignore_errors=True)
    if args.save_part:
        import json

        args.save_part.write_text(json.dumps({
            "seed": args.seed, "skip": args.skip, "run": run, "elapsed": elapsed,
            "slowest": report.slowest, "counts": dict(report.counts),
            "commands": dict(commands), "failures": report.failures}, indent=1))
    figures = figures_of(report.counts, commands, report.slowest, args.seed,
                         f"cases {args.skip}-{args.skip + run}; {elapsed:.0f} s{stopped}")
    print_table("hostile spatial files, readings and options", figures)
    for case, detail in report.failures[:40]:
        print(f"--- {detail}\n    {case}")
    if count < 5_000 or args.skip or run < count:
        print("fewer than 5 000 cases in one run: results not written (--combine chunks)")
        return 1 if report.failures else 0
    path = write_results("fuzz_spatial", figures, {"failures": report.failures[:100],
                                                   "commands": dict(commands)})
    print(f"wrote {path}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())

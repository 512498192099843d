"""A seeded fuzzer for mechanism files: mutations of real files, of their YAML structure
and of the expression grammar, each fed to the loader under a time limit.

Used by ``tests/test_fuzz.py`` (a few hundred inputs on every run) and by
``benchmarks/fuzz.py`` (10 000 and more). An outcome is ``accepted`` (the loader and the
symbolic model took it), ``rejected`` (a ``MechanismError``: the wanted answer to bad
input), ``crashed`` (any other exception) or ``timeout``; payloads that would run code
create a marker file, which must never appear.
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

TIME_LIMIT = 2.0  # seconds per input

NUMBERS = ["0", "-1", "1e308", "-1e308", "1e-320", ".inf", "-.inf", ".nan", "1e999",
           "9e18", "0x1F", "1_000", "007", "1.5e+3", "+2", "true", "null", "~", "''",
           "2^1000000000", "9^9^9^9", "1/0", "0/0", "-0.0", "3.14159265358979323846264"]
TOKENS = ["(", ")", "+", "-", "*", "/", "^", "**", ",", "sqrt(", "sin(", "atan2(", "pi",
          "L", "x", "__import__('os')", "os.system", "eval(", "lambda", "[", "]", "{", "}",
          ":", "#", "'", '"', "\\", "\x00", "é", "∞", "𝑥", "1e999", ".", "..", "e", "E"]
KEYS = ["points", "planar_bodies", "parameters", "fixed", "mass", "length", "I0", "cog",
        "x", "y", "sensors", "sliders", "springs", "gravity", "name", "type", "noise",
        "relative_coordinates", "independent_coordinates", "visual", "unknown_key",
        "!!python/object/apply:os.system", "<<", "&a", "*a"]
# Each derived parameter small, the chain runaway: doubling tree, deep nesting, big exacts.
GROWTH = ["{a}*({a} + 1)", "sin({a})", "1e15*{a}", "{a}^2", "{a} + {a}"]
STRUCTURES = [
    "!!python/object/apply:os.system ['touch {marker}']",
    "!!python/name:os.system",
    "&a [*a]",
    "{{a: &b [1, 2], c: *b}}",
    "[" * 200 + "]" * 200,
    "{" * 200 + "}" * 200,
    "\"\\x00\"",
    "!!binary aGVsbG8=",
    "? complex key\n  : value",
    "{{? [a, b]: 1, !!binary aGVsbG8=: 2}}",
    "|\n  multi\n  line",
]


def bomb() -> str:
    """A billion-laughs alias bomb."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{k}: &a{k} [" + ", ".join([f"*a{k - 1}"] * 10) + "]" for k in range(1, 9)]
    return "\n".join(lines) + "\n"


def mutate(text: str, rng: random.Random, marker: Path) -> str:
    """One to three random edits of a YAML text."""
    lines = text.splitlines()
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(10)
        k = rng.randrange(len(lines)) if lines else 0
        if not lines:
            lines = [""]
        if kind == 0:  # delete a line
            del lines[k]
        elif kind == 1:  # duplicate a line
            lines.insert(k, lines[k])
        elif kind == 2 and len(lines) > 1:  # swap two lines
            j = rng.randrange(len(lines))
            lines[k], lines[j] = lines[j], lines[k]
        elif kind == 3:  # replace a number
            words = lines[k].split(" ")
            spots = [i for i, w in enumerate(words) if any(c.isdigit() for c in w)]
            if spots:
                i = rng.choice(spots)
                words[i] = words[i].replace(words[i].strip(",}]"), rng.choice(NUMBERS))
                lines[k] = " ".join(words)
        elif kind == 4:  # replace a key
            if ":" in lines[k]:
                head, _, tail = lines[k].partition(":")
                lines[k] = head[:len(head) - len(head.lstrip())] + rng.choice(KEYS) + ":" \
                    + tail
        elif kind == 5:  # random tokens into a value
            junk = "".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 8)))
            lines[k] = lines[k] + " " + junk.replace("MARKER", str(marker))
        elif kind == 6:  # a hostile structure as a value
            structure = rng.choice(STRUCTURES).format(marker=marker)
            lines.insert(k, f"{rng.choice(KEYS)}: {structure}")
        elif kind == 7 and rng.random() < 0.3:  # derived parameters that grow
            growth = rng.choice(GROWTH)
            lines[k:k] = [f"  g0: {rng.choice(NUMBERS[:3])}"] + [
                f"  g{i}: {growth.format(a=f'g{i - 1}')}" for i in range(1, 300)]
        elif kind == 7:  # deep nesting in an expression
            depth = rng.choice([10, 60, 300, 5000])
            lines.insert(k, f"  L{depth}: {'(' * depth}1{')' * depth}")
        elif kind == 8:  # a payload that would create the marker if executed
            lines.insert(k, f"  p{k}: __import__('os').system('touch {marker}')")
        else:  # an alias bomb, or truncation
            lines = bomb().splitlines() + lines if rng.random() < 0.3 else lines[:k]
    return "\n".join(lines) + ("\n" if rng.random() < 0.9 else "")


@dataclass
class Report:
    """Counts by outcome, and the inputs that failed (crash or timeout)."""

    counts: Counter = field(default_factory=Counter)
    failures: list[tuple[str, str]] = field(default_factory=list)
    slowest: float = 0.0
    code_executed: bool = False


class _Timeout(Exception):
    pass


def _alarm(*_: object) -> None:
    raise _Timeout


def run_one(path: Path) -> tuple[str, str]:
    """(outcome, detail) of loading one file and building its equations."""
    from mbgen.errors import MechanismError
    from mbgen.model.parser import load_mechanism
    from mbgen.symbolic.model import build_symbolic_model

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT)
    try:
        build_symbolic_model(load_mechanism(path))
        return "accepted", ""
    except MechanismError as exc:
        return "rejected", str(exc)[:200]
    except _Timeout:
        return "timeout", ""
    except Exception as exc:
        return "crashed", f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def inputs(seeds: list[Path], count: int, seed: int, marker: Path) -> Iterator[str]:
    rng = random.Random(seed)
    texts = [s.read_text() for s in seeds]
    for _ in range(count):
        yield mutate(rng.choice(texts), rng, marker)


def fuzz(seeds: list[Path], count: int, seed: int, workdir: Path) -> Report:
    """Runs ``count`` mutated files; never raises."""
    report = Report()
    marker = workdir / "CODE_WAS_EXECUTED"
    for k, text in enumerate(inputs(seeds, count, seed, marker)):
        path = workdir / f"input{k % 8}.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        start = time.perf_counter()
        outcome, detail = run_one(path)
        report.slowest = max(report.slowest, time.perf_counter() - start)
        report.counts[outcome] += 1
        if outcome in ("crashed", "timeout"):
            report.failures.append((text, detail or outcome))
    report.code_executed = marker.exists()
    return report

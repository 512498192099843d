"""Fuzzing campaign: mutated mechanism files against the loader (and a sample of the
accepted ones through compile, info and simulate).

Why these figures: bad input must end in a located error within bounded time, never in a
traceback, a hang or executed code (issue "hostile and broken input"). The mutations
(tests/fuzz/fuzzer.py) edit the shipped and reference files line by line, their numbers
and keys, their expressions (random tokens, deep nesting, huge and non-finite numbers,
payloads, chains of derived parameters that grow) and their YAML structure (tags,
anchors and aliases, an alias bomb, NUL bytes, unicode). Counts by outcome; 0 crashed,
0 timeouts (> 2 s) and no executed code are the targets.

Run: ``.venv/bin/python benchmarks/fuzz.py [--count N] [--compile K] [--quick]``. Writes
``benchmarks/results/fuzz.json`` (not with ``--quick``). Hostile command lines (not only
mechanism files) are ``benchmarks/fuzz_cli.py``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, Figure, print_table, write_results

sys.path.insert(0, str(REPO / "tests"))
from fuzz.fuzzer import TIME_LIMIT, fuzz, inputs

SEEDS = sorted((REPO / "mechanisms").glob("*.yaml")) + sorted(
    (REPO / "tests" / "data" / "reference" / "config" / "mechanisms").glob("*.yaml"))


def through_the_cli(texts: list[str], workdir: Path) -> dict[str, int]:
    """compile, info and a short simulate of accepted files: clean outcomes only."""
    from click.testing import CliRunner

    from mbgen.cli.main import cli

    counts = {"commands": 0, "clean": 0, "traceback": 0}
    runner = CliRunner()
    for k, text in enumerate(texts):
        path = workdir / f"accepted{k}.yaml"
        path.write_text(text)
        build = str(workdir / "gen")
        for args in (["compile", str(path), "--build-dir", build],
                     ["info", str(path), "--build-dir", build],
                     ["simulate", str(path), "--t-end", "0.01", "--dt", "0.001", "--out",
                      str(workdir / "run.csv"), "--build-dir", build]):
            result = runner.invoke(cli, args)
            counts["commands"] += 1
            if result.exception is None or isinstance(result.exception, SystemExit):
                counts["clean"] += 1
            else:
                counts["traceback"] += 1
                print(f"traceback: {' '.join(args[:1])} {path.name}: {result.exception!r}")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--compile", type=int, default=20,
                        help="accepted inputs also run through compile, info, simulate")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="500 inputs, 3 compiled")
    args = parser.parse_args(argv)
    count, compiled = (500, 3) if args.quick else (args.count, args.compile)
    workdir = Path(tempfile.mkdtemp(prefix="mbgen-fuzz-"))
    start = time.perf_counter()
    report = fuzz(SEEDS, count, args.seed, workdir)
    elapsed = time.perf_counter() - start
    from mbgen.errors import MechanismError
    from mbgen.model.parser import load_mechanism

    accepted = []
    for k, text in enumerate(inputs(SEEDS, count, args.seed, workdir / "MARKER")):
        if len(accepted) >= compiled:
            break
        probe = workdir / f"probe{k}.yaml"
        probe.write_text(text, errors="surrogatepass")
        try:
            load_mechanism(probe)
        except MechanismError:
            continue
        accepted.append(text)
    cli = through_the_cli(accepted, workdir)
    figures = [
        Figure("inputs", count, "", note=f"seed {args.seed}; {elapsed:.1f} s"),
        Figure("accepted", report.counts["accepted"], ""),
        Figure("rejected with a located MechanismError", report.counts["rejected"], ""),
        Figure("crashed (other exception)", report.counts["crashed"], "", 0),
        Figure(f"timeouts (> {TIME_LIMIT:g} s)", report.counts["timeout"], "", 0),
        Figure("slowest input", report.slowest, "s", TIME_LIMIT),
        Figure("code executed (marker file)", int(report.code_executed), "", 0),
        Figure("CLI commands on accepted inputs (compile, info, simulate)", cli["commands"],
               ""),
        Figure("CLI tracebacks", cli["traceback"], "", 0),
    ]
    print_table("fuzzing the mechanism loader", figures)
    for text, detail in report.failures[:10]:
        print(f"--- {detail}\n{text[:300]}")
    if args.quick:
        print("--quick: results not written")
        return 0
    path = write_results("fuzz", figures, {"failures": [d for _, d in report.failures[:50]]})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

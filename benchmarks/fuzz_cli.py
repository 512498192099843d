"""Hostile command lines: a seeded campaign of option values, data files, output paths
and mechanism names through the real CLI (tests/fuzz/cli_campaign.py), each case judged
clean error / untrusted (exit 4) / correct, or one of the failures that must not happen.

Why these figures: mbgen must never lose a user's file, run text from a file, hang, fail
with an internal error or report a wrong result as a success (issue "data safety"). The
targets are 0 data loss, 0 code executed, 0 hangs, 0 internal errors and 0 silent wrong
results over at least 10 000 cases.

Run: ``.venv/bin/python benchmarks/fuzz_cli.py [--count N] [--seed S]``. Writes
``benchmarks/results/fuzz_cli.json`` when N ≥ 10 000.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, Figure, print_table, write_results

sys.path.insert(0, str(REPO / "tests"))
from fuzz.cli_campaign import FAILURES, TIME_LIMIT, campaign


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    from rich.progress import Progress

    workdir = Path(tempfile.mkdtemp(prefix="mbgen-cli-campaign-"))
    start = time.perf_counter()
    with Progress() as bar:
        task = bar.add_task("cases", total=args.count)
        report = campaign(args.count, args.seed, workdir,
                          progress=lambda _k: bar.advance(task))
    elapsed = time.perf_counter() - start
    figures = [Figure("cases", args.count, "", note=f"seed {args.seed}; {elapsed:.0f} s")]
    figures += [Figure(category, report.counts[category], "") for category in
                ("clean error", "untrusted", "correct")]
    figures += [Figure(category, report.counts[category], "", 0) for category in FAILURES]
    figures.append(Figure("slowest case", report.slowest, "s", TIME_LIMIT))
    print_table("hostile command lines", figures)
    for case, detail in report.failures[:20]:
        print(f"--- {detail}\n    {case}")
    if args.count < 10_000:
        print("fewer than 10 000 cases: results not written")
        return 0
    path = write_results("fuzz_cli", figures, {"failures": report.failures[:100]})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

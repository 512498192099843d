"""A few hundred mutated mechanism files (seeded): every one is accepted or rejected with
a MechanismError within the time limit, and no payload ever runs."""

from __future__ import annotations

from pathlib import Path

from conftest import ALL_MECHANISMS
from fuzz.cli_campaign import campaign
from fuzz.fuzzer import TIME_LIMIT, fuzz


def test_mutated_files_are_accepted_or_rejected_cleanly(tmp_path: Path) -> None:
    report = fuzz(ALL_MECHANISMS, 300, seed=2026, workdir=tmp_path)
    shown = "\n\n".join(f"{detail}\n---\n{text[:400]}" for text, detail in
                        report.failures[:3])
    assert report.counts["crashed"] == 0 and report.counts["timeout"] == 0, shown
    assert report.counts["rejected"] > 100 and report.counts["accepted"] > 10
    assert report.slowest < TIME_LIMIT
    assert not report.code_executed


def test_hostile_command_lines_lose_nothing_and_run_nothing(tmp_path: Path) -> None:
    """A seeded sample of the CLI campaign: every case a clean error, an honest exit 4 or
    a correct result; never data loss, executed code, a hang, an internal error or a
    wrong result under ✓."""
    report = campaign(60, seed=7, workdir=tmp_path)
    assert not report.failures, "\n".join(f"{d}\n    {c}" for c, d in report.failures)
    assert report.counts["correct"] > 10 and report.counts["clean error"] > 10

"""A few hundred mutated mechanism files (seeded): every one is accepted or rejected with
a MechanismError within the time limit, and no payload ever runs."""

from __future__ import annotations

from pathlib import Path

from conftest import ALL_MECHANISMS
from fuzz.fuzzer import TIME_LIMIT, fuzz


def test_mutated_files_are_accepted_or_rejected_cleanly(tmp_path: Path) -> None:
    report = fuzz(ALL_MECHANISMS, 300, seed=2026, workdir=tmp_path)
    shown = "\n\n".join(f"{detail}\n---\n{text[:400]}" for text, detail in
                        report.failures[:3])
    assert report.counts["crashed"] == 0 and report.counts["timeout"] == 0, shown
    assert report.counts["rejected"] > 100 and report.counts["accepted"] > 10
    assert report.slowest < TIME_LIMIT
    assert not report.code_executed

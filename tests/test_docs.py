"""Executable documentation: every ``sh``/``bash`` and ``python`` block of README.md and
docs/*.md runs, in order and as written, in a temporary copy of the repository (the
venv's ``bin`` on PATH, as the guide says to put it). A block that is not meant to run
says so on the line before it: ``<!-- not run: the reason -->``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUN = ("sh", "bash", "python")
SKIP = re.compile(r"<!-- not run: (.+?) -->\s*$")
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
# What a copy of the repository leaves out: builds, environments, caches.
NOT_COPIED = shutil.ignore_patterns(".git", ".venv", "generated", "out", "__pycache__",
                                    "*.egg-info", "build", ".pytest_cache", ".ruff_cache")


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    language: str
    text: str
    skipped: str | None  # the reason, for a block marked as not run


def blocks(document: Path) -> list[Block]:
    """The document's fenced sh, bash and python blocks, in order."""
    text = document.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        language = match.group(1)
        if language not in RUN:
            continue
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = SKIP.search(before)
        found.append(Block(document, text.count("\n", 0, match.start()) + 1, language,
                           match.group(2), marker.group(1) if marker else None))
    return found


def repository_copy(target: Path) -> Path:
    shutil.copytree(REPO, target, ignore=NOT_COPIED)
    return target


@pytest.mark.parametrize("document", [d for d in DOCUMENTS if blocks(d)],
                         ids=lambda d: d.relative_to(REPO).as_posix())
def test_every_block_of_the_document_runs(document: Path, tmp_path: Path, out_dir: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    root = repository_copy(tmp_path / "mbgen")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
           f"{os.environ.get('PATH', '')}", "MBGEN_OUT": str(out_dir), "MPLBACKEND": "Agg"}
    monkeypatch.chdir(root)
    monkeypatch.setenv("MBGEN_OUT", str(out_dir))
    monkeypatch.setenv("PATH", env["PATH"])  # python blocks may run `mbgen` too
    namespace: dict[str, object] = {"__name__": "__doc__"}
    for block in blocks(document):
        where = f"{document.name}:{block.line}"
        if block.skipped:
            continue
        if block.language == "python":
            code = compile(block.text, where, "exec")
            exec(code, namespace)  # the document's own code, as a reader would paste it
            continue
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.text], cwd=root,
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (f"{where} exited {done.returncode}\n{block.text}\n"
                                      f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    for identified in sorted(root.glob("*.yaml")):
        check_identified(identified, root)


def check_identified(path: Path, root: Path) -> None:
    """An identification a document ran (its output starts "# mbgen identify FILE") found
    the values of FILE's parameters, from which its synthetic data came: each within 3 of
    its reported standard deviations and 2 %."""
    import json

    import yaml

    first = path.read_text(encoding="utf-8").splitlines()[0]
    if not first.startswith("# mbgen identify "):
        return
    source = json.JSONDecoder().raw_decode(first[len("# mbgen identify "):])[0]
    truth = yaml.safe_load((root / source).read_text())["parameters"]
    for line in path.read_text(encoding="utf-8").splitlines():
        found = re.match(r"  (\w+): (\S+)  # ± (\S+) \(1 sigma\)", line)
        if found:
            name, value, sigma = found.group(1), float(found.group(2)), float(found.group(3))
            expected = float(truth[name])  # YAML 1.1 reads 1e-4 as text
            error = abs(value - expected)
            assert error <= 3 * sigma and error <= 0.02 * abs(expected), (
                f"{path.name}: {name} = {value} ± {sigma}, the file's value {expected}")


def test_every_skipped_block_says_why() -> None:
    """A block is left out only with a reason, and the set-up commands are the only sh
    blocks left out (.ci/run runs them in a fresh clone)."""
    skipped = [b for d in DOCUMENTS for b in blocks(d) if b.skipped]
    for block in skipped:
        assert len(block.skipped or "") > 10, f"{block.document.name}:{block.line}"
    assert all("venv" in b.text for b in skipped if b.language != "python"), \
        [f"{b.document.name}:{b.line}" for b in skipped]


def test_the_documents_have_blocks_to_run() -> None:
    runnable = [b for d in DOCUMENTS for b in blocks(d) if not b.skipped]
    assert sum(b.language == "python" for b in runnable) >= 5
    assert sum(b.language != "python" for b in runnable) >= 12


def test_the_readmes_peer_table_is_the_measured_one() -> None:
    """The README's comparison with Pinocchio, SymForce and CasADi is rendered from the
    committed benchmarks/results/peers.json (benchmarks/peers.py writes both): no figure
    in it is typed by hand or left behind by a newer run."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import peers_table
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    results = peers_table.load(REPO / "benchmarks" / "results" / "peers.json")
    readme = (REPO / "README.md").read_text()
    assert peers_table.table_in(readme) == peers_table.render(results)
    assert results["peers"]["versions"], "the peers' versions are recorded"

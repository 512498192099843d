"""docs/guide.md: it has commands, and its mechanism checks (test_docs.py runs every
block of it)."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner
from conftest import REPO

from mbgen.cli.main import cli

GUIDE = REPO / "docs" / "guide.md"


def guide_commands() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    return [line.strip() for block in blocks for line in block.splitlines()
            if line.strip().startswith("mbgen ")]


def test_the_guide_has_commands() -> None:
    assert len(guide_commands()) >= 10


def test_the_guides_mechanism_checks(tmp_path: Path) -> None:
    (text,) = re.findall(r"```yaml\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    path = tmp_path / "guide.yaml"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 0, result.output
    assert "1 DOF" in " ".join(result.output.split())

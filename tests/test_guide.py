"""docs/guide.md: every `mbgen` command in its code blocks runs and succeeds, in a scratch
directory with the repository's mechanisms and test data, so the guide cannot rot."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
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


def test_every_guide_command_runs(tmp_path: Path, out_dir: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(REPO / "mechanisms", tmp_path / "mechanisms")
    shutil.copytree(REPO / "tests" / "data", tmp_path / "tests" / "data")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MBGEN_OUT", str(out_dir))  # the session's compile cache
    runner = CliRunner()
    for command in guide_commands():
        result = runner.invoke(cli, shlex.split(command)[1:])
        assert result.exit_code == 0, f"{command}\n{result.output}"
    for made in ("fourbar.png", "run.csv", "run_energy.png", "fg.csv", "run.gif",
                 "torque.csv", "torque_forces.png", "estimate.csv", "estimate.gif",
                 "identified.yaml", "identified_fit.png", "dist/fourbar/__init__.py",
                 "fourbar_c/fourbar.h"):
        assert (tmp_path / made).is_file(), made


def test_the_guides_mechanism_checks(tmp_path: Path) -> None:
    (text,) = re.findall(r"```yaml\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    path = tmp_path / "guide.yaml"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 0, result.output
    assert "1 DOF" in " ".join(result.output.split())

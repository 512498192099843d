"""docs/cli.md's convention, checked on every command's Click parameters: help text,
units and defaults, one name per concept, finite numbers, a runnable example, the old
names as warned aliases, exit codes and formats by suffix."""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from conftest import REPO, SHIPPED_DIR

from mbgen.cli.conventions import EXIT_USAGE, Command, Real
from mbgen.cli.main import cli

UNIT = re.compile(r"\[[^\]]+\]")
# Concepts with one name: an option that means one of these must be spelled so.
INPUT_DATA = {"--data"}
FORBIDDEN = {"--sensors", "--sigma-s", "--sigma-a", "--sensor-noise", "--impulse-noise"}


def commands(group: click.Group = cli, prefix: str = "mbgen") -> Iterator[
        tuple[str, click.Command]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands(command, f"{prefix} {name}")
        else:
            yield f"{prefix} {name}", command


COMMANDS = dict(commands())


def options(command: click.Command) -> list[click.Option]:
    return [p for p in command.params if isinstance(p, click.Option) and not p.hidden
            and p.name != "help"]


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_has_help_and_numbers_have_units_and_defaults(name: str) -> None:
    for option in options(COMMANDS[name]):
        where = f"{name} {option.opts[0]}"
        assert option.help and len(option.help) > 10, f"{where}: no help"
        numeric = isinstance(option.type, Real | click.types.FloatParamType)
        if numeric:
            assert UNIT.search(option.help), f"{where}: no unit in its help"
            assert isinstance(option.type, Real), f"{where}: takes NaN and inf"
        unset = option.default is None or type(option.default).__name__ == "Sentinel"
        if not unset and not option.is_flag and not option.multiple and not option.required:
            assert option.show_default or "default" in option.help, \
                f"{where}: its default is not shown"


@pytest.mark.parametrize("name", COMMANDS)
def test_one_name_per_concept(name: str) -> None:
    spelled = {opt for option in options(COMMANDS[name]) for opt in option.opts}
    assert not spelled & FORBIDDEN, f"{name}: {spelled & FORBIDDEN}"
    for option in options(COMMANDS[name]):
        opt = option.opts[0]
        if "noise" in opt or "sigma" in opt:
            assert opt.startswith("--noise-"), f"{name} {opt}: noise options are --noise-*"
        if opt.endswith("-out") and opt != "--out":
            assert isinstance(option.type, click.Path), f"{name} {opt}: not a file"
        if option.name in ("readings_path", "data_path"):
            assert opt in INPUT_DATA, f"{name} {opt}: recorded readings come in as --data"
    assert all(not opt.startswith("--output") for opt in spelled)


@pytest.mark.parametrize("name", COMMANDS)
def test_help_ends_with_an_example(name: str) -> None:
    command = COMMANDS[name]
    assert isinstance(command, Command) and command.example, f"{name}: no example"
    assert (command.example + " ").startswith(name + " ")
    result = CliRunner().invoke(cli, [*name.split()[1:], "--help"])
    assert result.exit_code == 0
    assert result.output.rstrip().endswith(command.example.splitlines()[-1].strip())


@pytest.mark.parametrize("name", COMMANDS)
def test_every_example_runs(name: str, tmp_path: Path, out_dir: Path,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Each help example, as written, from a copy of the repository's root (one test per
    command: an example takes from milliseconds to tens of seconds, and pytest-xdist
    spreads them; the durations show which)."""
    shutil.copytree(SHIPPED_DIR, tmp_path / "mechanisms")
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MBGEN_OUT", str(out_dir))
    command = COMMANDS[name]
    assert isinstance(command, Command) and command.example
    line = command.example.replace("\\\n", " ")
    result = CliRunner().invoke(cli, shlex.split(line)[1:])
    assert result.exit_code == 0, f"{line}\n{result.output}"


@pytest.mark.parametrize(("old", "new", "value"), [
    ("--sigma-a", "--noise-accel", "2"), ("--sigma-s", "--noise-sensor", "0.1"),
])
def test_old_names_still_work_with_a_warning(old: str, new: str, value: str) -> None:
    command = COMMANDS["mbgen estimate"]
    ctx = command.make_context("estimate", ["f.yaml", old, value, "--data", __file__,
                                            "--out", "x.csv"], resilient_parsing=True)
    parameter = next(p for p in command.params if new in p.opts)
    assert ctx.params[parameter.name] == float(value)
    both = CliRunner().invoke(cli, ["estimate", str(SHIPPED_DIR / "fourbar.yaml"), old, value,
                                    new, value, "--data", __file__, "--out", "x.csv"])
    assert both.exit_code == EXIT_USAGE


def test_a_renamed_option_warns(tmp_path: Path, out_dir: Path) -> None:
    result = CliRunner().invoke(cli, [
        "simulate", str(SHIPPED_DIR / "fourbar.yaml"), "--t-end", "0.01", "--dt", "1e-3",
        "--sensors-out", str(tmp_path / "r.csv"), "--sensor-noise", "0.1", "--out",
        str(tmp_path / "x.csv"), "--build-dir", str(out_dir)])
    assert result.exit_code == 0, result.output
    assert "--sensor-noise is deprecated" in result.output and "--noise-sensor" in result.output
    assert (tmp_path / "r.csv").is_file()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1"])
def test_non_finite_and_non_positive_steps_are_usage_errors(value: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["simulate", str(SHIPPED_DIR / "fourbar.yaml"),
                                      "--t-end", "1", "--dt", value, "--out",
                                      str(tmp_path / "x.csv")])
    assert result.exit_code == EXIT_USAGE and "--dt" in result.output
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.parametrize("suffix", [".png", ".jpg", ".svg", ".pdf"])
def test_draw_writes_the_format_its_suffix_names(suffix: str, tmp_path: Path,
                                                 out_dir: Path) -> None:
    target = tmp_path / f"four{suffix}"
    result = CliRunner().invoke(cli, ["draw", str(SHIPPED_DIR / "fourbar.yaml"), "--out",
                                      str(target), "--build-dir", str(out_dir)])
    assert result.exit_code == 0, result.output
    head = target.read_bytes()[:8]
    magic = {".png": b"\x89PNG", ".jpg": b"\xff\xd8\xff", ".svg": b"<?xml", ".pdf": b"%PDF"}
    assert head.startswith(magic[suffix]), head


def test_an_unknown_picture_suffix_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["draw", str(SHIPPED_DIR / "fourbar.yaml"), "--out",
                                      str(tmp_path / "four.txt")])
    assert result.exit_code == EXIT_USAGE and ".png" in result.output
    assert not (tmp_path / "four.txt").exists()


def test_the_convention_page_lists_the_exit_codes() -> None:
    text = (REPO / "docs" / "cli.md").read_text()
    for code in range(5):
        assert re.search(rf"^\| {code} \|", text, re.MULTILINE), code

"""mbgen's command line (console entry point ``mbgen = mbgen.cli.main:cli``).

Layout:

* :mod:`mbgen.cli.main` holds the Click group ``cli`` and registers every command. Its
  group turns every :class:`~mbgen.errors.MbgenError` raised by any command into one red
  line and the exit code of docs/cli.md.
* :mod:`mbgen.cli.conventions` holds that convention: exit codes, the validated option
  types, formats by suffix, each command's example and renamed options.
* Each command lives in its own module (``build``: compile and export, ``info``: info and
  schema, ``cache``, ``generate``, ``check``, ``simulate``, ...) as a plain
  ``@click.command(cls=Command)``, registered with ``cli.add_command(...)`` at the bottom
  of ``main.py``.
* The helpers below are shared by all command modules. They live in the package, not in
  ``main.py``, so that command modules never import ``main.py`` (and ``main.py`` can import
  them without an import cycle).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from mbgen.runtime.compiled import CompiledMechanism

#: A mechanism file argument (.yaml or .urdf), checked by the loader.
MECHANISM_FILE = click.Path(dir_okay=False, path_type=Path)

#: One meaning per option name across commands: --build-dir is where compiled modules live
#: (the parameter ``build_dir``), --out is always the result file a command writes.
BUILD_DIR = click.option("--build-dir", "build_dir",
                         type=click.Path(file_okay=False, path_type=Path), default=None,
                         help="Where compiled modules live (default: $MBGEN_OUT or "
                         "./generated).")

#: Results go to stdout; status lines and errors to stderr, so output can be piped.
console = Console(highlight=False)
#: Errors: always shown.
err_console = Console(stderr=True, highlight=False, soft_wrap=True)
#: Status lines, progress bars and summaries: silenced by ``mbgen --quiet``.
status_console = Console(stderr=True, highlight=False, soft_wrap=True)


class Verbosity:
    """What ``mbgen --quiet`` / ``--verbose`` / ``--debug`` asked for (set per invocation)."""

    verbose = False
    debug = False

    @classmethod
    def set(cls, quiet: bool, verbose: bool, debug: bool) -> None:
        status_console.quiet = quiet
        cls.verbose = verbose and not quiet
        cls.debug = debug


def detail(message: str) -> None:
    """A status line shown only with ``mbgen --verbose`` (build steps, settings, timings)."""
    if Verbosity.verbose:
        status_console.print(f"[dim]{message}[/]", highlight=False)


def load_with_status(path: Path, out_dir: Path | None = None,
                     force: bool = False) -> tuple[CompiledMechanism, bool]:
    """``mbgen.load`` behind a live status line; returns ``(mechanism, freshly_compiled)``.

    The loader only calls ``progress`` when it compiles, which is how a cache hit is told
    apart from a fresh build (the timings in ``meta.json`` are those of the original build).
    """
    from mbgen.loading import load  # deferred: keeps ``mbgen --help`` fast

    steps: list[str] = []
    start = time.perf_counter()
    with status_console.status(f"loading {path.name}") as status:

        def progress(message: str) -> None:
            steps.append(message)
            detail(f"{time.perf_counter() - start:7.2f} s  {path.name}: {message}")
            status.update(f"{path.name}: {message}")

        mechanism = load(str(path), out_dir=None if out_dir is None else str(out_dir),
                         force=force, progress=progress)
    detail(f"{time.perf_counter() - start:7.2f} s  {path.name}: "
           f"{'compiled' if steps else 'cached build'} {mechanism.directory}")
    return mechanism, bool(steps)


def key_value_grid() -> Table:
    """Two-column key/value grid; long values (paths) fold instead of being cut."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    return grid


def titled_table(title: str, *columns: str) -> Table:
    """A titled table; '#', 'q0' and 'value' columns right-aligned."""
    table = Table(title=title, title_justify="left", title_style="bold", expand=False)
    for column in columns:
        table.add_column(column, justify="right" if column in ("#", "q0", "value") else "left")
    return table

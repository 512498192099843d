"""The ``mbgen`` command group: the error mapping of docs/cli.md (every error one line with
its exit code) and the registration of the commands, each in its own module.

To add a command, write it in its own module as ``@click.command(cls=Command, ...)`` and
register it at the bottom of this file.
"""

from __future__ import annotations

import signal
import sys
import warnings
from typing import Any

import click
from rich.markup import escape
from rich.text import Text

from mbgen.cli import Verbosity, err_console
from mbgen.cli.conventions import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_UNTRUSTED,
    Command,
)
from mbgen.errors import MbgenError, MbgenWarning, UntrustedResultError
from mbgen.version import __version__


def _one_line_warning(message: Warning | str, category: type[Warning], *args: Any,
                      **kwargs: Any) -> None:
    """mbgen's own warnings as one yellow line (no source line); others as Python's."""
    if issubclass(category, MbgenWarning):
        err_console.print(f"[yellow]warning:[/] {escape(str(message))}")
    else:
        _python_warning(message, category, *args, **kwargs)


_python_warning = warnings.showwarning


class MbgenGroup(click.Group):
    """Reports errors as one red line instead of a traceback, for every subcommand
    (``--debug`` adds the traceback), with the exit codes of docs/cli.md."""

    command_class = Command

    def invoke(self, ctx: click.Context) -> Any:
        # SIGTERM ends the command like Ctrl-C would: cleanup code runs, so a file being
        # written leaves no temporary behind
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
        warnings.showwarning = _one_line_warning
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # usage errors and exits: click reports them itself
        except UntrustedResultError as exc:  # ran, but the result is not to be trusted
            _fail(str(exc), ctx, code=EXIT_UNTRUSTED)
        except MbgenError as exc:  # bad input: the message already names file:line [key]
            _fail(str(exc), ctx, code=EXIT_BAD_INPUT)
        except OSError as exc:  # unreadable input, unwritable output directory, ...
            where = f": {exc.filename}" if exc.filename else ""
            _fail(f"{exc.strerror or exc}{where}", ctx, code=EXIT_BAD_INPUT)
        except Exception as exc:  # a bug in mbgen: say so, in one line
            _fail(f"internal error ({type(exc).__name__}: {exc}); please report it with "
                  "the command and input (--debug shows the traceback)", ctx,
                  code=EXIT_INTERNAL)


def _fail(message: str, ctx: click.Context, code: int) -> None:
    if Verbosity.debug:
        err_console.print_exception()
    err_console.print(Text.assemble(("error: ", "bold red"), (message, "red")))
    ctx.exit(code)


@click.group(cls=MbgenGroup)
@click.version_option(__version__, prog_name="mbgen")
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr: no status lines, "
              "progress bars or summaries (results on stdout and files are unchanged).")
@click.option("-v", "--verbose", is_flag=True, help="Also the build steps with their "
              "timings and the settings each command resolved.")
@click.option("--debug", is_flag=True, help="Show the Python traceback with an error.")
def cli(quiet: bool, verbose: bool, debug: bool) -> None:
    """mbgen: symbolic code generation for multibody mechanisms, planar and spatial."""
    Verbosity.set(quiet, verbose, debug)


# -- the commands, each in its own module ------------------------------------------------------
# Each is a plain ``@click.command(cls=Command)``; shared helpers come from ``mbgen.cli``.
from mbgen.cli.build import compile_, export  # noqa: E402
from mbgen.cli.cache import cache  # noqa: E402
from mbgen.cli.check import check  # noqa: E402
from mbgen.cli.estimate import estimate  # noqa: E402
from mbgen.cli.generate import generate  # noqa: E402
from mbgen.cli.identify import identify  # noqa: E402
from mbgen.cli.info import info, schema  # noqa: E402
from mbgen.cli.inverse import inverse  # noqa: E402
from mbgen.cli.pictures import animate, draw  # noqa: E402
from mbgen.cli.simulate import simulate  # noqa: E402
from mbgen.cli.sweep import sweep  # noqa: E402

cli.add_command(compile_)
cli.add_command(export)
cli.add_command(info)
cli.add_command(schema)
cli.add_command(cache)
cli.add_command(generate)
cli.add_command(simulate)
cli.add_command(inverse)
cli.add_command(draw)
cli.add_command(animate)
cli.add_command(check)
cli.add_command(estimate)
cli.add_command(identify)
cli.add_command(sweep)

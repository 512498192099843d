"""The command line's one convention (docs/cli.md): exit codes, validated option types,
file formats by suffix and deprecated option names. Every command takes its types from
here, so a value means the same thing, and is checked the same way, in every command."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from mbgen.errors import MbgenError
from mbgen.files import check_writable, same_file

#: Exit codes, the same in every command.
EXIT_OK = 0
EXIT_BAD_INPUT = 1  # a file, a value or a combination the command cannot take
EXIT_USAGE = 2  # Click's own: unknown option, missing argument, malformed value
EXIT_INTERNAL = 3  # a bug in mbgen
EXIT_UNTRUSTED = 4  # the command ran, but its result is not to be trusted

#: Picture formats Matplotlib writes, by suffix; animations by the encoder they need; the
#: interactive page (Plotly, mbgen/io/page.py), which draw and animate both write.
PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".svg", ".pdf")
ANIMATION_SUFFIXES = (".gif", ".mp4")
PAGE_SUFFIX = ".html"


class Real(click.ParamType):
    """A finite float, optionally bounded; ``unit`` is for messages. NaN and ±inf are
    refused by every mbgen option (click's FLOAT takes them)."""

    name = "float"

    def __init__(self, low: float | None = None, low_open: bool = False,
                 high: float | None = None) -> None:
        self.low, self.low_open, self.high = low, low_open, high

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        if isinstance(value, float) and math.isfinite(value):
            number = value
        else:
            try:
                number = float(value)
            except (TypeError, ValueError):
                self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.low is not None and (number < self.low or (self.low_open
                                                           and number == self.low)):
            self.fail(f"{number:g} is not {'>' if self.low_open else '≥'} {self.low:g}",
                      param, ctx)
        if self.high is not None and number > self.high:
            self.fail(f"{number:g} is not ≤ {self.high:g}", param, ctx)
        return number

    def __repr__(self) -> str:
        return f"Real({self.low}, {self.low_open}, {self.high})"


#: Any finite number; ≥ 0; > 0.
FINITE = Real()
NON_NEGATIVE = Real(0.0)
POSITIVE = Real(0.0, low_open=True)
#: A standard deviation σ: its square and the square's inverse weigh residuals, so both
#: stay finite normal numbers (σ = 1e-320 squares to 0, an infinite weight; 1e200 to inf)
DEVIATION = Real(1e-150, high=1e150)


class OutputFile(click.Path):
    """An output file whose suffix names its format: one of ``suffixes`` (a suffix Click
    cannot know otherwise, e.g. PNG bytes written into ``x.jpg``)."""

    def __init__(self, suffixes: tuple[str, ...]) -> None:
        super().__init__(dir_okay=False, path_type=Path)
        self.suffixes = suffixes

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        path = super().convert(value, param, ctx)
        if Path(os.fsdecode(path)).suffix.lower() not in self.suffixes:
            self.fail(f"{str(path)!r}: the suffix names the format, one of "
                      f"{', '.join(self.suffixes)}", param, ctx)
        return path


class Command(click.Command):
    """An mbgen command. Its help ends with ``example``, one runnable command line (lines
    ending in a backslash continue it). ``renamed`` maps an old option name to its new one,
    which the old one still means for one release, with a warning (hidden from --help)."""

    def __init__(self, *args: Any, example: str | None = None,
                 renamed: dict[str, str] | None = None, **kwargs: Any) -> None:
        if example is not None:
            kwargs["epilog"] = "\b\nExample:\n  " + example.replace("\n", "\n  ")
        super().__init__(*args, **kwargs)
        self.example = example
        self.renamed = renamed or {}

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        end = args.index("--") if "--" in args else len(args)
        given = {arg.partition("=")[0] for arg in args[:end]}
        rewritten = []
        for arg in args[:end]:
            name, equals, value = arg.partition("=")
            if name in self.renamed:
                from mbgen.cli import err_console

                new = self.renamed[name]
                if new in given:
                    raise click.UsageError(f"{name} is the old name of {new}: give {new} "
                                           "only", ctx)
                err_console.print(f"[yellow]warning:[/] {name} is deprecated and goes in the "
                                  f"next release; use {new}")
                arg = new + equals + value
            rewritten.append(arg)
        return super().parse_args(ctx, rewritten + args[end:])


def check_paths(inputs: dict[str, Path | None],
                outputs: dict[str, Path | list[Path] | None], untrusted: bool = False,
                work: dict[str, Path | None] | None = None) -> None:
    """The one path rule, checked before any work, over every name a command may write:
    refuses an output that is one of the command's inputs or another of its outputs (the
    same file by any name, links included): the input would be lost, or one output
    silently overwritten by the other; and an output path that holds something other than
    a regular file. ``untrusted``: the command keeps a result it does not trust under each
    output's :func:`untrusted_path` instead, so those names are outputs too. ``work``:
    what the command makes for itself beside its outputs (a work directory, a lock file),
    which may be no input either. Keys are the options, for the message; None values are
    options not given."""
    given_inputs = [(option, path) for option, path in inputs.items() if path is not None]
    asked = [(option, p) for option, value in outputs.items() if value is not None
             for p in (value if isinstance(value, list) else [value])]
    groups = [asked]  # the outputs one run writes together
    if untrusted:
        groups.append([(f"{option} (kept as untrusted)", untrusted_path(path))
                       for option, path in asked])
    made = [(option, path) for option, path in (work or {}).items() if path is not None]
    for option, path in [pair for group in groups for pair in group] + made:
        for other, source in given_inputs:
            if same_file(path, source):
                raise click.BadParameter(f"{path} is the input given by {other}: mbgen "
                                         "never writes an output over an input",
                                         param_hint=option)
    for group in groups:
        for k, (option, path) in enumerate(group):
            for other, earlier in group[:k]:
                if same_file(path, earlier):
                    raise click.BadParameter(f"{path} is also the output of {other}: one "
                                             "would overwrite the other", param_hint=option)
            try:
                check_writable(path)
            except MbgenError as exc:
                raise click.BadParameter(str(exc), param_hint=option) from None


#: Work a command starts without being asked: beyond it, it refuses with its estimate
#: (docs/cli.md). A run's steps, an animation's frames; memory beyond half the machine's.
MAX_STEPS = 10_000_000
MAX_FRAMES = 10_000


def max_steps_option(what: str, default: int = MAX_STEPS,
                     ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--max-steps``: the most ``what`` a command runs without refusing."""
    return click.option("--max-steps", type=click.IntRange(min=1), default=default,
                        show_default=True, help=f"Refuse to start more {what} than this "
                        "(the estimate is printed first); raise it for a longer run.")


def check_work(count: float, limit: int, what: str, option: str,
               bytes_per_item: float = 0.0) -> None:
    """Refuses, before any work, ``count`` items (steps, frames) above ``limit`` (naming
    the ``option`` that raises it), or arrays of ``count × bytes_per_item`` bytes beyond
    half the machine's memory."""
    if not count <= limit:  # NaN too
        raise click.UsageError(f"this would run {count:.4g} {what}, more than the "
                               f"{limit:,} of {option} (raise it to go on, or shorten the "
                               "run)")
    memory = count * bytes_per_item
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if memory > physical / 2:
        raise click.UsageError(f"{count:.4g} {what} would need {memory / 2**30:.3g} GiB of "
                               f"memory, more than half of this machine's "
                               f"{physical / 2**30:.3g} GiB: shorten the run")


def untrusted_path(path: Path) -> Path:
    """Where a result that is not to be trusted (exit code 4) is written instead of
    ``path``, so it is kept for a look but never taken for the result asked for:
    ``run.csv`` → ``run.untrusted.csv``."""
    return path.with_name(f"{path.stem}.untrusted{path.suffix}")


def no_sensors(name: object, accelerometers: list[str], why_not: str = "") -> str:
    """Why a mechanism cannot give readings to an estimator: what to declare, and (when
    it has accelerometers) ``why_not`` they are not enough for it."""
    text = (f"{name} has no sensors: declare them under `sensors:` (gyroscope, encoder, "
            "position, velocity)")
    if accelerometers and why_not:
        text += f"; its accelerometers ({', '.join(accelerometers)}) read q̈, {why_not}"
    return text


class NoiseLevel(click.ParamType):
    """``SIGMA`` (every sensor) or ``NAME=SIGMA`` (one sensor or accelerometer, by its
    name or an output's label): ``(NAME or None, σ)``, σ finite and ≥ 0, so every
    command that takes a noise per reading reads it the same way."""

    name = "[NAME=]SIGMA"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> tuple[str | None, float]:
        if isinstance(value, tuple):
            return value
        name, equals, number = str(value).rpartition("=")
        if equals and not name.strip():
            self.fail(f"{value!r}: a name before '=' (NAME=SIGMA), or SIGMA alone", param,
                      ctx)
        return (name.strip() if equals else None), NON_NEGATIVE.convert(number.strip(),
                                                                        param, ctx)


def reading_noise(mech: Any, given: tuple[tuple[str | None, float], ...],
                  option: str) -> tuple[list[float], list[float], list[str]]:
    """σ of each sensor and of each accelerometer output (in their labels' order) from
    the file's ``noise``, overridden by ``given`` (:class:`NoiseLevel` values: SIGMA for
    every sensor, then NAME=SIGMA for one, whatever their order), and a line per output
    saying its σ and where it came from. An output that declares none gets 0 (exact)."""
    import math

    # per output: None where the file declares no noise (as mech.sensor_noise reads it)
    declared = ([float(s) for s in mech.sensor_noise(default=math.nan)],
                [math.nan if s is None else float(s) for s in
                 mech.meta.get("accelerometer_noise")
                 or [None] * len(mech.accelerometer_labels)])
    kinds = (("sensors", mech.sensor_labels), ("accelerometers", mech.accelerometer_labels))
    sigma: dict[str, float] = {}
    source: dict[str, str] = {}
    names: dict[str, list[str]] = {}  # a sensor's or an output's name → its outputs
    for (key, labels), values in zip(kinds, declared, strict=True):
        for label, value in zip(labels, values, strict=True):
            sigma[label] = 0.0 if math.isnan(value) else value
            source[label] = "none declared: exact" if math.isnan(value) else "the file's"
        first = 0
        for entry in mech.meta.get(key, []):
            names[str(entry["name"])] = labels[first:first + int(entry["outputs"])]
            first += int(entry["outputs"])
        for label in labels:
            names.setdefault(label, [label])
    every = [value for name, value in given if name is None]
    if len(every) > 1:
        raise click.BadParameter("one SIGMA for every sensor, given twice", param_hint=option)
    for label in mech.sensor_labels if every else []:
        sigma[label], source[label] = every[0], option
    named = [(name, value) for name, value in given if name is not None]
    if len({name for name, _ in named}) < len(named):
        raise click.BadParameter("a sensor is named twice", param_hint=option)
    for name, value in named:
        if name not in names:
            raise click.BadParameter(f"{name!r} is no sensor or accelerometer of "
                                     f"{mech.name} (names and labels: "
                                     f"{', '.join(names) or 'none'})", param_hint=option)
        for label in names[name]:
            sigma[label], source[label] = value, f"{option} {name}"
    lines = [f"{label} {sigma[label]:g} ({source[label]})" for label in sigma]
    return ([sigma[label] for label in mech.sensor_labels],
            [sigma[label] for label in mech.accelerometer_labels], lines)


class ParameterValue(click.ParamType):
    """``NAME=VALUE``: a parameter of the mechanism set for one run, VALUE finite (the
    name is checked against the mechanism by :func:`apply_parameters`)."""

    name = "NAME=VALUE"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> tuple[str, float]:
        if isinstance(value, tuple):
            return value
        name, equals, number = str(value).partition("=")
        if not equals or not name.strip():
            self.fail(f"{value!r}: expected NAME=VALUE, e.g. m1=0.6", param, ctx)
        # the bound of a number written in the file (its 1e308 is refused by file:line;
        # the same value set for a run is too); the parser's, imported when used (SymPy)
        from mbgen.model.expressions import MAX_MAGNITUDE

        bounded = Real(-MAX_MAGNITUDE, high=MAX_MAGNITUDE)
        return name.strip(), bounded.convert(number.strip(), param, ctx)


#: ``--param NAME=VALUE`` (repeatable), the same in every command that runs a mechanism:
#: the parameters are runtime inputs of the compiled module, so nothing is recompiled.
PARAM = click.option(
    "--param", "param_values", type=ParameterValue(), multiple=True,
    help="Run with a parameter of the file changed, e.g. --param m1=0.6 (repeat it for "
    "more; derived parameters follow; nothing is recompiled) [the parameter's unit].")


def apply_parameters(mech: Any, given: tuple[tuple[str, float], ...],
                     option: str = "--param") -> list[str]:
    """Sets ``given`` (:class:`ParameterValue` pairs) as ``mech``'s parameters for the
    run; a name the mechanism does not have is bad input (exit code 1) listing the ones it
    has, a name given twice a usage error. Returns a line per change, for the summary."""
    names = [name for name, _ in given]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise click.BadParameter(f"{', '.join(twice)} given twice", param_hint=option)
    known = dict(mech.parameters)
    for name in names:
        if name not in known:
            raise MbgenError(f"{option} {name}: {mech.name} has no parameter {name!r} (its "
                             f"parameters: {', '.join(known) or 'none'}; derived ones follow "
                             "from them)")
    if not given:
        return []
    from mbgen.cli import status_console
    from mbgen.estimation.plausibility import physical_problems

    mech.set_parameters(**dict(given))
    problems = physical_problems(mech, mech.parameter_vector, _command_model())
    if problems:  # the file's own values met the loader's rules; these must too
        raise MbgenError(f"{option} {', '.join(f'{n}={v:g}' for n, v in given)}: "
                         f"impossible for a real mechanism: {'; '.join(problems)}")
    lines = [f"{name} = {value:g} (the file's {known[name]:g})" for name, value in given]
    status_console.print(f"with {option}: {', '.join(lines)}", markup=False)
    return lines


def _command_model() -> Any:
    """The parsed model of the running command's FILE (every command with --param runs
    one), for the bodies' rules the loader applies (a negative mass on a fixed pivot
    leaves the mass matrix positive definite); None outside a command."""
    from mbgen.model.parser import load_mechanism

    context = click.get_current_context(silent=True)
    file = context.params.get("file") if context is not None else None
    return load_mechanism(file) if file is not None else None


def announce_one_time_builds() -> None:
    """Before a factor graph runs: one status line per build it will make first (once per
    installation, up to a minute on a loaded machine), so a silent minute is explained:
    mbgen's native GTSAM factors and their self-check, or, where those are not used, the
    one-state extension of ``mech.evaluator()``."""
    import os

    from mbgen.cli import status_console
    from mbgen.factors import native
    from mbgen.runtime.single import built_module, built_on_disk

    steps = [native.pending()]
    python_callbacks = os.environ.get(native.ENVIRONMENT, "1") == "0" or \
        native.unavailable() is not None
    if python_callbacks and built_module() is None and not built_on_disk():
        steps.append("compiling the one-state extension of mech.evaluator() (C++, once per "
                     "installation)")
    for step in steps:
        if step:
            status_console.print(f"{step}: this may take a minute", markup=False)

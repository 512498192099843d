"""`mbgen generate`: mechanism files for tests and benchmarks."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from mbgen.cli import console
from mbgen.cli.conventions import Command
from mbgen.files import atomic_write_text


@click.group(cls=click.Group)
def generate() -> None:
    """Write mechanism files for tests and benchmarks."""


@generate.command(cls=Command, example="mbgen generate chain --bodies 20")
@click.option("--bodies", "-n", type=click.IntRange(min=1), required=True,
              help="Number of bars in the chain.")
@click.option("--spatial", is_flag=True, help="A spatial chain: rods joined by revolute "
              "joints whose axes alternate between y and z (dimension: 3).")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Output file (default: chain<N>.yaml, spatial-chain<N>.yaml).")
def chain(bodies: int, spatial: bool, out: Path | None) -> None:
    """A pendulum chain of N bars hanging from a fixed pivot."""
    from mbgen.model.chain import chain_yaml, spatial_chain_yaml

    target = out or Path(f"{'spatial-' if spatial else ''}chain{bodies}.yaml")
    atomic_write_text(target, (spatial_chain_yaml if spatial else chain_yaml)(bodies),
                      parents=False)  # never seen half-written
    console.print(f"wrote [bold]{escape(str(target))}[/] ({bodies} bodies)")

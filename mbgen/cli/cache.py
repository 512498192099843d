"""`mbgen cache`: list and clean the build cache (its rules: codegen/cache_maintenance)."""

from __future__ import annotations

import time
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from mbgen.cli import BUILD_DIR, console
from mbgen.cli.conventions import Command


@click.group(cls=click.Group)
def cache() -> None:
    """The build cache: compiled modules under --build-dir."""


@cache.command("list", cls=Command, example="mbgen cache list")
@BUILD_DIR
def cache_list(build_dir: Path | None) -> None:
    """Every compiled module: mechanism, content hash, mbgen version, size, age."""
    from mbgen.codegen.cache_maintenance import finished_builds, tree_size
    from mbgen.loading import default_out_dir

    root = build_dir or default_out_dir()
    table = Table(title=f"builds in {escape(str(root))}", title_justify="left")
    for column in ("mechanism", "hash", "mbgen", "size", "built"):
        table.add_column(column)
    total = 0
    for directory, meta in finished_builds(root):
        size = tree_size(directory)
        total += size
        age = time.time() - directory.stat().st_mtime
        table.add_row(escape(meta.get("name", directory.parent.name)), directory.name,
                      str(meta.get("mbgen_version", "?")), f"{size / 1e6:.1f} MB",
                      f"{age / 3600:.1f} h ago")
    console.print(table)
    console.print(f"{len(table.rows)} builds, {total / 1e6:.1f} MB")


@cache.command("clean", cls=Command, example="mbgen cache clean")
@BUILD_DIR
@click.option("--all", "everything", is_flag=True, help="Remove every build, not only "
              "stale ones.")
def cache_clean(build_dir: Path | None, everything: bool) -> None:
    """Remove builds of other mbgen versions and interrupted compiles (or, with --all,
    every build). Only what the cache made is touched: builds it recognises, staging
    directories of compiles that are gone (a running compile's is its lock) and the C
    core's archives that earlier versions kept there; a directory that holds none of them
    is refused. The installation's core (docs/generated-code.md) is not touched."""
    from mbgen.codegen.cache_maintenance import plan_cleaning
    from mbgen.loading import default_out_dir

    root = build_dir or default_out_dir()
    cleaning = plan_cleaning(root, everything)
    freed = cleaning.run()
    console.print(f"removed {len(cleaning.directories)} build(s), {freed / 1e6:.1f} MB from "
                  f"{escape(str(root))}")

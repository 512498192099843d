"""The README's table of mbgen against its peers, rendered from benchmarks/results/peers.json.

``benchmarks/peers.py`` writes it into the README between the markers below (and into
``benchmarks/results/peers.md``) after each measured run, and ``tests/test_docs.py`` checks
that the README's table is the one the committed results give: the figures a reader sees
are the measured ones, never typed by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

BEGIN = "<!-- peers-table: begin (benchmarks/peers_table.py writes it) -->"
END = "<!-- peers-table: end -->"
TOOLS = ("mbgen", "Pinocchio", "SymForce", "CasADi")


def _number(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def render(results: dict[str, Any]) -> str:
    """The Markdown table of one run: a row per comparison, the ratio to the best peer."""
    versions = results.get("peers", {}).get("versions", {})
    names = [f"{tool} {versions[tool]}" if tool in versions else tool for tool in TOOLS]
    lines = [f"| per state, one run of `benchmarks/peers.py` ({results['created'][:10]}) | unit "
             f"| {' | '.join(names)} | mbgen / best peer |",
             "|---|---|" + "---:|" * (len(TOOLS) + 1)]
    for row in results["comparison"]:
        values = row["values"]
        ratio = row["mbgen_over_best_peer"]
        verdict = "—" if ratio is None else f"{ratio:.2g}× ({row['best_peer']})"
        lines.append(f"| {row['row']} | {row['unit']} | "
                     + " | ".join(_number(values.get(tool)) for tool in TOOLS)
                     + f" | {verdict} |")
    return "\n".join(lines)


def with_table(readme: str, table: str) -> str:
    """The README's text with the table between the markers replaced."""
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    return readme[:start] + "\n" + table + "\n" + readme[end:]


def table_in(readme: str) -> str:
    """The table the README holds between the markers."""
    return readme[readme.index(BEGIN) + len(BEGIN):readme.index(END)].strip("\n")


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())

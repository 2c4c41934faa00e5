"""Tables that fit the terminal: headers are never cut (short headers explained in a legend),
long cells wrap; ``--wide`` shows every column at full width, however wide that is."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from orchestrator.commands._common import console


@dataclass(frozen=True)
class Column:
    """One column: its full header; ``short`` (explained in the legend) replaces it at terminal
    width; non-``essential`` columns appear only with ``--wide``."""

    header: str
    short: str | None = None
    essential: bool = True
    justify: Literal["left", "right"] = "left"


def print_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    *,
    wide: bool = False,
    width: int | None = None,
) -> None:
    """Print ``rows`` (one string per column) to stdout; ``width`` overrides the terminal's."""
    from rich.table import Table

    shown = [i for i, c in enumerate(columns) if wide or c.essential]
    table = Table()
    legend = []
    for i in shown:
        column = columns[i]
        header = column.header if wide or column.short is None else column.short
        if header != column.header:
            legend.append(f"{header} = {column.header}")
        longest_word = max((len(w) for w in header.split()), default=1)
        table.add_column(
            header,
            justify=column.justify,
            min_width=longest_word,
            overflow="fold",
            no_wrap=wide,
        )
    for row in rows:
        table.add_row(*(row[i] for i in shown))
    out = console()
    if width is not None:
        out.width = width
    if wide:
        # As wide as the table needs: every cell on one line (pipe it to `less -S`).
        cells = [[columns[i].header, *(row[i] for row in rows)] for i in shown]
        needed = sum(max(len(c) for c in column) + 3 for column in cells) + 1
        out.width = max(out.width, needed)
    out.print(table)
    if legend:
        out.print("; ".join(legend), soft_wrap=False)
    hidden = len(columns) - len(shown)
    if hidden:
        out.print(f"{hidden} more column(s) with --wide; all fields with --json")

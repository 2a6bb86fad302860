"""Markdown tables: the one renderer behind the gate's, the A/A check's, the regression check's and
the training benchmark's tables (job summaries, printed text, committed results).

Two layouts. Without ``widths``, the compact one GitHub reads: ``| a | b |`` under a rule of
``---`` or ``---:`` per column. With ``widths``, each cell is padded to its column's width so the
table also lines up where it is printed (a terminal, a log); its rule is dashes only, as wide as
the column or its heading, whichever is wider.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

LEFT, RIGHT = "l", "r"


def table(
    header: Sequence[str],
    rows: Iterable[Sequence[str | None]],
    align: str | None = None,
    widths: Sequence[int] | None = None,
) -> list[str]:
    """The table's lines: the heading, the rule, a line per row.

    ``align``: one letter per column, ``l`` or ``r`` (all ``l`` when left out): the rule's ``---`` or
    ``---:`` in the compact layout, the side a cell is padded on with ``widths``. A cell of None is
    left blank (``| |`` in the compact layout); an empty string is an empty value (``|  |``); with
    ``widths`` both are padded.
    ``widths`` that are narrower than a cell never cut it."""
    align = align or LEFT * len(header)
    if len(align) != len(header) or set(align) - {LEFT, RIGHT}:
        raise ValueError(f"align {align!r}: one of {LEFT!r} or {RIGHT!r} per column of {list(header)}")
    if widths is None:
        rule = ["---:" if side == RIGHT else "---" for side in align]
        return [_line(header), _line(rule), *(_line(row) for row in rows)]
    if len(widths) != len(header):
        raise ValueError(f"widths {list(widths)}: one per column of {list(header)}")

    def padded(cells: Sequence[str | None]) -> list[str]:
        return [
            (cell or "").rjust(width) if side == RIGHT else (cell or "").ljust(width)
            for cell, side, width in zip(cells, align, widths, strict=True)
        ]

    rule = "|" + "|".join("-" * (max(width, len(name)) + 2) for name, width in zip(header, widths, strict=True)) + "|"
    return [_line(padded(header)), rule, *(_line(padded(row)) for row in rows)]


def _line(cells: Sequence[str | None]) -> str:
    return "|" + "|".join(" " if cell is None else f" {cell} " for cell in cells) + "|"

"""Markdown tables, the one renderer behind every table the harness prints or commits: GitHub's
compact layout, or padded to ``widths`` to line up in a log. A record's strings are the measured
code's to choose, so ``text`` makes one inert in a table cell, a summary and the job's log (where the
runner acts on ``::`` at a line's start and ``##[`` anywhere).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

LEFT, RIGHT = "l", "r"
LIMIT = 200  # characters of a record's string shown; a longer one is cut, with an ellipsis

# What GitHub's Markdown acts on within a line: escapes, code, emphasis and strike-through, links
# and images, HTML and <autolinks>, table cells, math, entities, @-mentions (and e-mail autolinks),
# #-references, and a bare URL's ``://`` or ``www.`` (GFM links those too). Each is backslash-escaped,
# which renders it as itself. ``. , - + ( ) / :`` elsewhere are left as they are: inert within a
# line, and in every version, path and GPU name, which read in the log as they always did.
_ACTIVE = re.compile(r"[\\`*_{}\[\]<>|~!@#$&]|:(?=//)|(?<=www)\.", re.IGNORECASE)
_CODE = str.maketrans({"`": "'", '"': "'", "|": "\u00a6"})


def text(value: object, limit: int | None = LIMIT) -> str:
    """``value`` as a table cell or part of a line, in a summary and in the log: one line, at most
    ``limit`` characters of it, its Markdown escaped (``line`` then ``escape``)."""
    return escape(line(value, limit))


def line(value: object, limit: int | None = LIMIT) -> str:
    """``value`` as part of a line of the log: every line break a space (so it can't start a line
    of its own, a workflow command among them), any other control or format character (a
    terminal's escape, a bidirectional override) U+FFFD, the runner's legacy ``##[`` broken, and cut
    to ``limit`` characters (None: whole)."""
    shown = "".join(
        " " if c.isspace() else "\ufffd" if unicodedata.category(c).startswith("C") else c for c in str(value)
    )
    shown = shown.replace("##[", "#\ufffd#[")
    return shown if limit is None or len(shown) <= limit else shown[: limit - 1] + "\u2026"


def escape(plain: str) -> str:
    """A line of plain text as Markdown that shows it as it is (see ``_ACTIVE``): within a line or a
    table cell (a line of its own could still start a list with ``-`` or ``1.``)."""
    return _ACTIVE.sub(r"\\\g<0>", plain)


def code(value: object, limit: int | None = LIMIT) -> str:
    """``value`` inside a code span or a chart's quoted label (where a backslash is no escape): one
    line, and no backtick or double quote to end it, nor a pipe to end a table's cell."""
    return line(value, limit).translate(_CODE)


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

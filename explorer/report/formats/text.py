"""The terminal format: aligned columns, bars of the shares, ANSI colour when asked (the
CLI asks on a TTY).

Lays out a :class:`~explorer.report.document.Document`; computes nothing but string
widths. One table layout for every report: two spaces in, two between columns, numbers
right-aligned.

Why not ``rich`` (issue 27 item 11, weighed 2026-12-02 with rich 15): its tables wrap a
cell at the terminal's width, so a long ``file.py:118 (function)`` breaks across lines
that no longer copy, paste or grep; they pad every line with trailing spaces; and it would
become a base dependency (today only import-linter, a test tool, pulls it in) costing
every ``explorer report`` its import (49 ms of import time) to replace the twenty lines of
:func:`_table`, the one table writer left. Colour stays the palette's own 256-colour codes.
"""

from __future__ import annotations

import numpy as np

from explorer.palette import CATEGORY_COLORS
from explorer.report.document import Document, Entry, Line, Section, Table

NAME = "text"
ORDER = 0
BAR_WIDTH = 30


#: The channel levels of xterm's 6×6×6 colour cube (codes 16–231).
_CUBE_LEVELS = (0, 95, 135, 175, 215, 255)


def ansi_256(hex_colour: str) -> int:
    """The xterm 256-colour code of the cube colour nearest ``#rrggbb``, channel by channel."""
    rgb = [int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)]
    idx = [int(np.argmin([abs(level - v) for level in _CUBE_LEVELS])) for v in rgb]
    return 16 + 36 * idx[0] + 6 * idx[1] + idx[2]


#: The palette's category colours (:mod:`explorer.palette`) as terminal colours.
CATEGORY_COLOURS = {cat: ansi_256(hex_colour) for cat, hex_colour in CATEGORY_COLORS.items()}
#: Each head-line style's colour and weight.
_STYLE = {"": (None, False), "alarm": (196, True), "caution": (208, True), "warning": (208, False)}
_TONE = {"good": 34, "bad": 196}


class _Style:
    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, text: str, code: int | None = None, bold: bool = False) -> str:
        if not self.color:
            return text
        parts = []
        if bold:
            parts.append("1")
        if code is not None:
            parts.append(f"38;5;{code}")
        return f"\x1b[{';'.join(parts)}m{text}\x1b[0m" if parts else text


def render(document: Document, color: bool = False) -> str:
    """The document as terminal text."""
    c = _Style(color)
    alarms = [h for h in document.head if h.style == "alarm"]
    out = [_line(h, c) for h in alarms]
    title = document.title + (f" — {document.subject}" if document.subject else "")
    out.append(c(title, bold=True))
    out += [_line(h, c) for h in document.head if h.style != "alarm"]
    for section in document.sections:
        out += ["", c(section.title, bold=True), *_section(section, c)]
    if document.foot:
        out += ["", *(_line(h, c) for h in document.foot)]
    return "\n".join(out).rstrip() + "\n"


def _line(h: Line, c: _Style) -> str:
    code, bold = _STYLE.get(h.style, (None, False))
    return c(f"*** {h.text} ***" if h.style == "alarm" else h.text, code, bold)


def _section(section: Section, c: _Style) -> list[str]:
    out = [f"  {p}" for p in section.lead]
    for table in section.tables:
        if out:
            out.append("")
        if table.title:
            out.append(f"  {table.title}:")
        out += _table(table, c)
    for e in section.entries:
        out += _entry(e, c)
    out += [f"  {n}" for n in section.notes]
    return out


def _entry(e: Entry, c: _Style) -> list[str]:
    out = [f"  {e.number}. " + c(f"[{e.kind}]", 196 if e.severe else 208, True) + f" {e.title}"]
    for f in e.fields:
        out.append(f"     {f.label.lower() + ':':<6} " + (c(f.value, 39) if f.code else f.value))
    return out


def _table(table: Table, c: _Style) -> list[str]:
    """Aligned columns; a bar per row where the table has shares (in the row's colour)."""
    cells = [table.header, *table.rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(table.header))]

    def line(row: list[str]) -> str:
        return "  " + "  ".join(
            v.rjust(w) if i in table.numeric else v.ljust(w)
            for i, (v, w) in enumerate(zip(row, widths, strict=True))
        )

    out = [line(table.header).rstrip()]
    for k, row in enumerate(table.rows):
        text = line(row)
        tone = table.tones[k] if table.tones else ""
        if tone in _TONE:
            text = c(text, _TONE[tone])
        n = round(BAR_WIDTH * table.shares[k]) if table.shares is not None else 0
        if n:
            code = ansi_256(table.colours[k]) if table.colours else None
            text += "  " + c("█" * n, code)
        out.append(text.rstrip())
    return out

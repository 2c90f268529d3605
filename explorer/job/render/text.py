"""The job report as plain text for a terminal."""

from __future__ import annotations

from typing import Any

from explorer.job.render.sections import Section, sections, title


def table(sec: Section) -> list[str]:
    cells = [sec.header, *sec.rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(sec.header))]

    def line(row: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in sec.numeric else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()

    return [line(sec.header), "  ".join("-" * w for w in widths), *map(line, sec.rows)]


def render(doc: dict[str, Any]) -> str:
    out = [title(doc), "=" * len(title(doc))]
    for sec in sections(doc):
        out += ["", sec.title, "-" * len(sec.title), *sec.lines]
        if sec.header and sec.rows:
            out += table(sec)
    return "\n".join(out) + "\n"

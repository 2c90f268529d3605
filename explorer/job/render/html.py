"""The job report as one self-contained HTML page (inline CSS, no script)."""

from __future__ import annotations

from html import escape
from typing import Any

from explorer.job.render.sections import Section, sections, title
from explorer.report.html import CSS


def _table(sec: Section) -> str:
    def cells(row: list[str], tag: str) -> str:
        return "".join(
            f"<{tag}{' class=n' if i in sec.numeric else ''}>{escape(c)}</{tag}>"
            for i, c in enumerate(row)
        )

    body = "".join(f"<tr>{cells(r, 'td')}</tr>" for r in sec.rows)
    return f"<table><tr>{cells(sec.header, 'th')}</tr>{body}</table>"


def render(doc: dict[str, Any]) -> str:
    parts = [f"<h1>{escape(title(doc))}</h1>"]
    for sec in sections(doc):
        parts.append(f"<h2>{escape(sec.title)}</h2>")
        parts += [f"<p>{escape(line)}</p>" for line in sec.lines]
        if sec.header and sec.rows:
            parts.append(_table(sec))
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>{escape(title(doc))}</title>"
        f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>\n"
    )

"""The Markdown format (for PR comments, wikis, CI summaries): any report document as
GitHub-flavoured Markdown. The one Markdown escaper lives here."""

from __future__ import annotations

from explorer.report.document import Document, Entry, Field, Line, Section, Table

NAME = "markdown"
ORDER = 1


def cell(text: str) -> str:
    """``text`` safe inside a table cell or a line: no pipe ends a cell, no newline a row."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(document: Document, color: bool = False) -> str:
    """The document as GitHub-flavoured Markdown (``color`` is ignored)."""
    title = document.title + (f" — `{document.subject}`" if document.subject else "")
    out = [f"# {title}", ""]
    alarms = [h for h in document.head if h.style == "alarm"]
    for h in [*alarms, *(h for h in document.head if h.style != "alarm")]:
        out += [_line(h), ""]
    for section in document.sections:
        out += [f"## {section.title}", "", *_section(section)]
    for h in document.foot:
        out += [_line(h), ""]
    return "\n".join(out).rstrip() + "\n"


def _line(h: Line) -> str:
    if h.style == "alarm":
        return f"> **⚠ {cell(h.text)}**"
    if h.style == "caution":
        return f"> **{cell(h.text)}**"
    if h.style == "warning":
        return f"> {cell(h.text)}"
    return cell(h.text)


def _section(section: Section) -> list[str]:
    out: list[str] = []
    for p in section.lead:
        out += [cell(p), ""]
    for table in section.tables:
        if table.title:
            out += [f"**{cell(table.title)}**", ""]
        out += [*_table(table), ""]
    for e in section.entries:
        out += _entry(e)
    for n in section.notes:
        out += [cell(n), ""]
    return out


def _value(f: Field) -> str:
    return f"`{cell(f.value)}`" if f.code else cell(f.value)


def _entry(e: Entry) -> list[str]:
    out = [f"### {e.number}. `{e.kind}` — {cell(e.title)}", ""]
    out += [f"- **{f.label}:** {_value(f)}" for f in e.fields]
    return [*out, ""]


def _table(table: Table) -> list[str]:
    align = "".join("---:|" if i in table.numeric else "---|" for i in range(len(table.header)))
    rows = [
        "| " + " | ".join(f"`{cell(v)}`" if i in table.code and v else cell(v) for i, v in enumerate(r)) + " |"
        for r in table.rows
    ]  # fmt: skip
    return ["| " + " | ".join(cell(h) for h in table.header) + " |", "|" + align, *rows]

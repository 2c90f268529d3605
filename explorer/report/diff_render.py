"""A :class:`~explorer.analysis.diff.TraceDiff` as text, Markdown, JSON or HTML.

Reads only the diff's tables; computes nothing but shares and signs.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from explorer.errors import UsageError
from explorer.report import FORMATS
from explorer.report.sections import LABELS
from explorer.units import fmt_ns

#: Rows each table shows (the JSON keeps everything).
TOP = 15


def render_diff(d: Any, format: str = "text", top: int = TOP) -> str:
    """The diff in ``format`` (text, markdown, json or html)."""
    if format not in FORMATS:
        raise UsageError(f"unknown diff format {format!r} (choose from {', '.join(FORMATS)})")
    if format == "json":
        return json.dumps(d.to_dict(), indent=2) + "\n"
    sections = _sections(d, top)
    if format == "text":
        return _text(d, sections)
    if format == "markdown":
        return _markdown(d, sections)
    return _html(d, sections)


def _signed(ns: float) -> str:
    return ("+" if ns > 0 else "-" if ns < 0 else "±") + fmt_ns(abs(ns))


Table = tuple[str, list[str], list[list[str]]]


def _sections(d: Any, top: int) -> list[Table]:
    """(title, header, rows) for every table, already formatted as strings."""
    out = [_step_table(d), _breakdown_table(d)]
    if len(d.findings):
        out.append(_findings_table(d))
    for title, df, key in (
        ("Operators (time per step)", d.ops, "name"),
        ("Kernels and copies (time per step)", d.kernels, "name"),
        ("Source lines (host + device time per step)", d.lines, "line"),
    ):
        changed = df[df["status"] != "same"]
        if len(changed):
            out.append(_changed_table(title, changed, key, top))
    return out


def _step_table(d: Any) -> Table:
    rows = [
        [
            r.side,
            str(r.path),
            str(r.devices),
            str(r.steps),
            fmt_ns(r.median_ns),
            fmt_ns(r.spread_ns),
        ]
        for r in d.steps.itertuples()
    ]
    return (
        "Step time (median over steps, spread = interquartile range)",
        ["", "trace", "devices", "steps", "median", "spread"],
        rows,
    )


def _breakdown_table(d: Any) -> Table:
    rows = [
        [
            LABELS.get(r.category, r.category),
            f"{fmt_ns(r.a_ns)} ±{fmt_ns(r.a_spread_ns / 2)}",
            f"{fmt_ns(r.b_ns)} ±{fmt_ns(r.b_spread_ns / 2)}",
            _signed(r.delta_ns),
        ]
        for r in d.breakdown.itertuples()
    ]
    return (
        "Where step time went (median per step, ± half the interquartile range)",
        ["category", "a", "b", "delta"],
        rows,
    )


def _findings_table(d: Any) -> Table:
    rows = [
        [
            r.status,
            r.kind,
            f"{fmt_ns(r.a_time_lost_ns)} ({r.a_share:.0%})",
            f"{fmt_ns(r.b_time_lost_ns)} ({r.b_share:.0%})",
            str(r.title),
        ]
        for r in d.findings.itertuples()
    ]
    return ("Findings", ["status", "kind", "a lost", "b lost", "title"], rows)


def _changed_table(title: str, changed: Any, key: str, top: int) -> Table:
    """The ``top`` changed ops, kernels or lines, and how many more changed."""
    rows = []
    for r in changed.head(top).itertuples():
        name = f"{r.file}:{r.line} ({r.function})" if key == "line" else str(r.name)
        rows.append(
            [
                r.status,
                name[:80],
                f"{r.a_count}",
                f"{r.b_count}",
                fmt_ns(r.a_ns_per_step),
                fmt_ns(r.b_ns_per_step),
                _signed(r.delta_ns),
            ]
        )
    more = len(changed) - len(rows)
    if more > 0:
        rows.append(["", f"... {more} more", "", "", "", "", ""])
    header = ["status", "name" if key != "line" else "line", "a n", "b n", "a", "b", "delta"]
    return (title, header, rows)


def _text(d: Any, sections: list[Table]) -> str:
    out = [f"explorer diff\n  a: {d.a_path}\n  b: {d.b_path}", ""]
    out += [f"  {n}" for n in d.notes]
    for title, header, rows in sections:
        out += ["", title]
        widths = [
            max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
            for i, h in enumerate(header)
        ]
        out.append(
            "  " + "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()
        )
        for r in rows:
            out.append(
                "  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            )
    return "\n".join(out) + "\n"


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _markdown(d: Any, sections: list[Table]) -> str:
    out = ["# explorer diff", "", f"- a: `{d.a_path}`", f"- b: `{d.b_path}`", ""]
    out += [f"> {n}" for n in d.notes]
    for title, header, rows in sections:
        out += ["", f"## {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(_md(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def _html(d: Any, sections: list[Table]) -> str:
    css = (
        "body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}"
        "table{border-collapse:collapse;font-size:13px}td,th{padding:3px 8px;border-bottom:1px solid #eee;"
        "text-align:left}.note{background:#f6f6f6;padding:6px 10px}h2{font-size:16px;margin-top:24px}"
        ".added{color:#2e7d32}.removed{color:#c62828}.worse{color:#c62828}.better{color:#2e7d32}"
    )
    body = [
        f"<h1>explorer diff</h1><p>a: <code>{escape(d.a_path)}</code><br>b: <code>{escape(d.b_path)}</code></p>"
    ]
    body += [f"<p class='note'>{escape(n)}</p>" for n in d.notes]
    for title, header, rows in sections:
        body.append(
            f"<h2>{escape(title)}</h2><table><tr>"
            + "".join(f"<th>{escape(h)}</th>" for h in header)
            + "</tr>"
        )
        for r in rows:
            cls = (
                f" class='{escape(r[0])}'"
                if r and r[0] in ("added", "removed", "worse", "better")
                else ""
            )
            body.append(f"<tr{cls}>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>")
        body.append("</table>")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>explorer diff</title>"
        f"<style>{css}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )

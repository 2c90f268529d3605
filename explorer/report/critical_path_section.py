"""The critical-path section of a report: :func:`to_dict` turns the analysis into the
report document's ``critical_path`` (the JSON report's), and :func:`section` builds the
section every format renders from that data alone, computing nothing but shares.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from explorer.palette import CRITICAL_PATH_COLORS, CRITICAL_PATH_LABELS
from explorer.report.document import Bar, Chart, Section, Segment, Table
from explorer.report.sections import pct
from explorer.units import fmt_ns, plural, shorten

LABELS: dict[str, str] = CRITICAL_PATH_LABELS  # what a person reads for each category
COLOURS: dict[str, str] = CRITICAL_PATH_COLORS  # the one palette (explorer/palette.py)
#: Rows of the ops, lines and segment tables each format shows.
TOP = 10
#: Slice ids a report's JSON lists (the path of a million-event trace can be long).
MAX_SLICES = 10_000


def to_dict(cp: Any) -> dict[str, Any]:
    """The section as plain data (the JSON report's ``critical_path``), plus the segments."""
    # the listed slices only: a million-event path's ids as a Python list took 70 ms
    d = dataclasses.replace(cp, slices=cp.slices[:MAX_SLICES]).to_dict()
    d["segments"] = [
        {
            "label": str(r.label),
            "start_ns": int(r.start_ns),
            "end_ns": int(r.end_ns),
            "ns": int(r.ns),
            "top_op": str(r.top_op),
        }
        for r in cp.segments.head(200).itertuples()
    ]
    d["segments_total"] = int(len(cp.segments))
    # The longest segments of the whole path, in path order (the section's "where it runs").
    d["longest_segments"] = [
        {"label": str(r.label), "start_ns": int(r.start_ns), "end_ns": int(r.end_ns),
         "ns": int(r.ns), "top_op": str(r.top_op)}
        for r in (cp.segments.nlargest(TOP, "ns").sort_values("start_ns")
                  if len(cp.segments) else cp.segments).itertuples()  # empty: untyped columns
    ]  # fmt: skip
    d["slices_total"] = len(cp.slices)  # a report stays readable; exports take all
    return d


def _headline(d: dict[str, Any]) -> str:
    where = d["scope"]
    if d["length_ns"] == 0:
        return f"No critical path in {where}: it has no slices on host threads or device streams."
    top = max((ns, cat) for cat, ns in d["summary"].items())
    return (
        f"Critical path of {where}: {fmt_ns(d['length_ns'])} "
        f"(from {fmt_ns(d['start_ns'])} to {fmt_ns(d['end_ns'])}); "
        f"most of it is {LABELS[top[1]]} ({pct(top[0], d['length_ns']).strip()}). "
        "Only work on this path shortens the step."
    )


def _source(r: dict[str, Any]) -> str:
    fn = f" ({r['function']})" if r["function"] else ""
    return f"{r['file']}:{r['line']}{fn}"


def _where_title(n: int) -> str:
    return f"Where it runs ({plural(n, 'segment')}{', longest first' if n > 1 else ''})"


def section(d: dict[str, Any]) -> Section:
    """The section of the report's ``critical_path`` (:func:`to_dict`): the headline, what
    the path is made of (a bar of the whole where the medium draws), the ops and source
    lines that hold it, and where it runs."""
    lead = [_headline(d)]
    if d["length_ns"] == 0:
        return Section("critical_path", "Critical path", lead=lead)
    length = d["length_ns"]
    cats = list(d["summary"].items())
    composition = Table(
        ["category", "time", "share"],
        [[LABELS[c], fmt_ns(ns), pct(ns, length).strip()] for c, ns in cats],
        frozenset({1, 2}),
        shares=[ns / length for _, ns in cats],
        colours=[COLOURS[c] for c, _ in cats],
    )
    tables = [composition]
    if d["top_ops"]:
        tables.append(
            Table(
                ["op", "kind", "count", "time", "share"],
                [[shorten(r["name"], 90), r["kind"], str(r["count"]), fmt_ns(r["ns"]),
                  pct(r["ns"], length).strip()] for r in d["top_ops"][:TOP]],
                frozenset({2, 3, 4}),
                code=frozenset({0}),
                title="Ops on the path (time they hold on it)",
            )
        )  # fmt: skip
    if d["top_lines"]:
        tables.append(
            Table(
                ["line", "time", "share"],
                [[_source(r), fmt_ns(r["ns"]), pct(r["ns"], length).strip()]
                 for r in d["top_lines"][:TOP]],
                frozenset({1, 2}),
                code=frozenset({0}),
                title="Source lines on the path",
            )
        )  # fmt: skip
    longest = d.get("longest_segments") or []
    if longest:
        tables.append(
            Table(
                ["start", "length", "where", "top op"],
                [[fmt_ns(s["start_ns"]), fmt_ns(s["ns"]), shorten(s["label"], 40), shorten(str(s["top_op"]), 50)]
                 for s in longest],
                frozenset({0, 1}),
                title=_where_title(int(d["segments_total"])),
            )
        )  # fmt: skip
    chart = Chart(
        "composition",
        "What the path is made of",
        bars=[
            Bar(
                "path",
                [Segment(COLOURS[c], float(ns), f"{LABELS[c]}: {fmt_ns(ns)} "
                         f"({pct(ns, length).strip()})") for c, ns in cats if ns > 0],
            )
        ],
        legend=[(LABELS[c], COLOURS[c]) for c, ns in cats if ns > 0],
    )  # fmt: skip
    return Section("critical_path", "Critical path", lead=lead, tables=tables, charts=[chart])

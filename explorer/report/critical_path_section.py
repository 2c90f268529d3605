"""The critical-path section of a report, in every report format.

Reads a :class:`~explorer.analysis.critical_path.CriticalPath` and computes nothing but
shares of numbers already in it. The report puts the returned text under its own
"Critical path" heading.
"""

from __future__ import annotations

from html import escape
from typing import Any

from explorer.palette import CRITICAL_PATH_COLORS
from explorer.report.sections import pct
from explorer.units import fmt_ns, plural, shorten

#: What a person reads for each path category.
LABELS: dict[str, str] = {
    "host_compute": "host compute",
    "compile": "compile",
    "input": "input (loader)",
    "host_runtime": "host runtime",
    "launch_overhead": "launch overhead",
    "device_compute": "device compute",
    "data_movement": "data movement",
    "communication": "communication",
    "sync_wait": "sync wait",
    "idle_gap": "idle gaps",
}
COLOURS: dict[str, str] = CRITICAL_PATH_COLORS  # the one palette (explorer/palette.py)
#: Rows of the ops, lines and segment tables each format shows.
TOP = 10
BAR = 30
#: Slice ids a report's JSON lists (the path of a million-event trace can be long).
MAX_SLICES = 10_000


def to_dict(cp: Any) -> dict[str, Any]:
    """The section as plain data (the JSON report's ``critical_path``), plus the segments."""
    d = cp.to_dict()
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
    d["slices_total"] = len(d["slices"])
    d["slices"] = d["slices"][:MAX_SLICES]  # a report stays readable; exports take all
    return d


def _headline(cp: Any) -> str:
    where = cp.scope
    if cp.length_ns == 0:
        return f"No critical path in {where}: it has no slices on host threads or device streams."
    top = max(zip(cp.summary["ns"], cp.summary["category"], strict=True))
    return (
        f"Critical path of {where}: {fmt_ns(cp.length_ns)} "
        f"(from {fmt_ns(cp.start_ns)} to {fmt_ns(cp.end_ns)}); "
        f"most of it is {LABELS[top[1]]} ({pct(top[0], cp.length_ns).strip()}). "
        "Only work on this path shortens the step."
    )


def _source(r: Any) -> str:
    fn = f" ({r.function})" if r.function else ""
    return f"{r.file}:{r.line}{fn}"


def render_text(cp: Any) -> str:
    """Aligned columns for the terminal."""
    out = [_headline(cp)]
    if cp.length_ns == 0:
        return out[0] + "\n"
    out.append("")
    for r in cp.summary.itertuples():
        share = r.ns / cp.length_ns
        bar = "#" * round(share * BAR)
        out.append(
            f"  {LABELS[r.category]:<16} {fmt_ns(r.ns):>10} {pct(r.ns, cp.length_ns)}  {bar}"
        )
    if len(cp.top_ops):
        out += ["", "  Ops on the path (time they hold on it):"]
        for r in cp.top_ops.head(TOP).itertuples():
            out.append(
                f"  {fmt_ns(r.ns):>10} {pct(r.ns, cp.length_ns)}  {shorten(r.name, 70)}  [{r.kind}, x{r.count}]"
            )
    if len(cp.top_lines):
        out += ["", "  Source lines on the path:"]
        for r in cp.top_lines.head(TOP).itertuples():
            out.append(f"  {fmt_ns(r.ns):>10} {pct(r.ns, cp.length_ns)}  {_source(r)}")
    if len(cp.segments):
        out += ["", f"  Where it runs ({plural(len(cp.segments), 'segment')}, longest first):"]
        for r in cp.segments.nlargest(TOP, "ns").sort_values("start_ns").itertuples():
            out.append(
                f"  {fmt_ns(r.start_ns):>10} +{fmt_ns(r.ns):<10} {shorten(r.label, 40):<40} {shorten(r.top_op, 50)}"
            )
    return "\n".join(out) + "\n"


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(cp: Any) -> str:
    """GitHub-flavoured Markdown tables (for PR comments and CI summaries)."""
    out = [_headline(cp)]
    if cp.length_ns == 0:
        return out[0] + "\n"
    out += ["", "| category | time | share |", "|---|---:|---:|"]
    for r in cp.summary.itertuples():
        out.append(f"| {LABELS[r.category]} | {fmt_ns(r.ns)} | {pct(r.ns, cp.length_ns).strip()} |")
    if len(cp.top_ops):
        out += ["", "| op on the path | kind | count | time | share |", "|---|---|---:|---:|---:|"]
        for r in cp.top_ops.head(TOP).itertuples():
            out.append(
                f"| `{_md(shorten(r.name, 90))}` | {r.kind} | {r.count} | {fmt_ns(r.ns)} | {pct(r.ns, cp.length_ns).strip()} |"
            )
    if len(cp.top_lines):
        out += ["", "| source line | time | share |", "|---|---:|---:|"]
        for r in cp.top_lines.head(TOP).itertuples():
            out.append(
                f"| `{_md(_source(r))}` | {fmt_ns(r.ns)} | {pct(r.ns, cp.length_ns).strip()} |"
            )
    return "\n".join(out) + "\n"


def render_html(cp: Any) -> str:
    """A self-contained fragment: headline, a stacked bar of the categories, tables."""
    out = [f"<p>{escape(_headline(cp))}</p>"]
    if cp.length_ns == 0:
        return out[0]
    bar = []
    for r in cp.summary.itertuples():
        if r.ns:
            w = 100.0 * r.ns / cp.length_ns
            bar.append(
                f"<div title='{escape(LABELS[r.category])}: {fmt_ns(r.ns)}' "
                f"style='display:inline-block;height:14px;width:{w:.3f}%;background:{COLOURS[r.category]}'></div>"
            )
    out.append("<div style='width:100%;white-space:nowrap;font-size:0'>" + "".join(bar) + "</div>")
    rows = "".join(
        f"<tr><td><i style='display:inline-block;width:10px;height:10px;background:{COLOURS[r.category]}'></i> "
        f"{escape(LABELS[r.category])}</td><td class='n'>{fmt_ns(r.ns)}</td>"
        f"<td class='n'>{pct(r.ns, cp.length_ns).strip()}</td></tr>"
        for r in cp.summary.itertuples()
    )
    out.append(
        f"<table><tr><th>category</th><th class='n'>time</th><th class='n'>share</th></tr>{rows}</table>"
    )
    if len(cp.top_ops):
        rows = "".join(
            f"<tr><td><code>{escape(shorten(r.name, 120))}</code></td><td>{escape(r.kind)}</td>"
            f"<td class='n'>{r.count}</td><td class='n'>{fmt_ns(r.ns)}</td>"
            f"<td class='n'>{pct(r.ns, cp.length_ns).strip()}</td></tr>"
            for r in cp.top_ops.head(TOP).itertuples()
        )
        out.append(
            "<h3>Ops on the path</h3><table><tr><th>op</th><th>kind</th><th class='n'>count</th>"
            f"<th class='n'>time</th><th class='n'>share</th></tr>{rows}</table>"
        )
    if len(cp.top_lines):
        rows = "".join(
            f"<tr><td><code>{escape(_source(r))}</code></td><td class='n'>{fmt_ns(r.ns)}</td>"
            f"<td class='n'>{pct(r.ns, cp.length_ns).strip()}</td></tr>"
            for r in cp.top_lines.head(TOP).itertuples()
        )
        out.append(
            "<h3>Source lines on the path</h3><table><tr><th>line</th><th class='n'>time</th>"
            f"<th class='n'>share</th></tr>{rows}</table>"
        )
    return "\n".join(out)

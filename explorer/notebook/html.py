"""HTML fragments for notebook displays: headline, the chart, the top findings with their
lines, the top source lines. Reads only the documents it is given; every number shown is
in them already (the charts come from :mod:`explorer.plot`, drawn from the same numbers).
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import Any

import pandas as pd

from explorer.palette import CATEGORY_LABELS
from explorer.plot import MISSING, matplotlib_available
from explorer.report.sections import SOURCE_COLUMNS, source, source_cells
from explorer.units import fmt_ns

#: Scoped to the fragment's own class: a notebook page holds many outputs.
STYLE = """<style>
.explorer-nb{font-family:system-ui,-apple-system,Segoe UI,sans-serif;font-size:13px;color:#222;max-width:1100px}
.explorer-nb h3{font-size:15px;margin:4px 0} .explorer-nb h4{font-size:13px;margin:12px 0 4px}
.explorer-nb table{border-collapse:collapse;font-size:inherit} .explorer-nb td,.explorer-nb th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left}
.explorer-nb td.n{text-align:right;font-variant-numeric:tabular-nums}
.explorer-nb .finding{border-left:4px solid #d9453d;padding:4px 10px;margin:8px 0;background:#fafafa}
.explorer-nb code{background:#f0f0f0;padding:0 3px} .explorer-nb .note{color:#666}
.explorer-nb .warn{background:#d9453d;color:#fff;padding:4px 8px;font-weight:bold}
</style>"""
#: Source lines listed under one finding.
LINES_PER_FINDING = 3


def _fragment(kind: str, parts: list[str]) -> str:
    return f"{STYLE}<div class='explorer-nb' data-explorer='{kind}'>" + "".join(parts) + "</div>"


def _chart(draw: Callable[[], Any], what: str) -> str:
    """The figure ``draw()`` makes as inline SVG, or a note when matplotlib is missing."""
    if not matplotlib_available():
        return f"<p class='note'>(No {escape(what)} chart: {escape(MISSING)}.)</p>"
    from explorer.plot.figure import figure_html

    return f"<div class='chart' data-chart='{escape(what)}'>{figure_html(draw())}</div>"


def _table(header: list[str], rows: list[list[str]], numeric: set[int]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td class='n'>{escape(c)}</td>" if i in numeric else f"<td>{escape(c)}</td>"
            for i, c in enumerate(r)
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _steps_list(steps: list[int]) -> str:
    if not steps:
        return "-"
    if steps == list(range(steps[0], steps[-1] + 1)) and len(steps) > 2:
        return f"{steps[0]}-{steps[-1]}"
    return ", ".join(str(s) for s in steps[:12]) + (", ..." if len(steps) > 12 else "")


def findings_html(findings: list[dict[str, Any]], total: int | None = None, none: str = "") -> str:
    """The findings (``Finding.to_dict()`` each, ranked), each with its time lost, steps,
    top source lines (``file:line (function)``) and what to do."""
    return _fragment("findings", [_findings_part(findings, total, none)])


def _findings_part(findings: list[dict[str, Any]], total: int | None, none: str) -> str:
    n = len(findings) if total is None else total
    parts = [f"<h4>Findings ({n}, ranked by time lost)</h4>"]
    if not findings:
        parts.append(f"<p class='note'>{escape(none or 'No finding.')}</p>")
    for i, f in enumerate(findings, 1):
        lost = (
            f"{fmt_ns(f['time_lost_ns'])} ({100 * f['share']:.1f}% of step time)"
            if f["time_lost_ns"]
            else "no time"
        )
        lines = "".join(
            f"<li><code>{escape(source(ln))}</code></li>"
            for ln in f["source_lines"][:LINES_PER_FINDING]
        )
        parts.append(
            f"<div class='finding' data-kind='{escape(f['kind'])}'>"
            f"<b>{i}. [{escape(f['kind'])}] {escape(f['title'])}</b><br>"
            f"time lost: {escape(lost)} on {escape(f['device'] or '-')}, "
            f"steps {escape(_steps_list(f['steps']))}"
            + (f"<ul>{lines}</ul>" if lines else "<br>")
            + (f"fix: {escape(f['recommendation'])}" if f["recommendation"] else "")
            + "</div>"
        )
    return "".join(parts)


def report_breakdown(doc: dict[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The report document's per-step breakdown as the long table
    ``[step, device, category, ns]`` and its steps table ``[step, partial]`` (the shape
    :func:`explorer.plot.breakdown.breakdown_figure` draws): the same numbers, reshaped."""
    rows = [
        (s["step"], dev, cat, ns)
        for s in doc["steps"]
        for dev, cats in s["breakdown"].items()
        for cat, ns in cats.items()
    ]
    bd = pd.DataFrame(rows, columns=["step", "device", "category", "ns"])
    st = pd.DataFrame(
        {"step": [s["step"] for s in doc["steps"]], "partial": [s["partial"] for s in doc["steps"]]}
    )
    return bd, st


def report_html(doc: dict[str, Any]) -> str:
    """A report document (:func:`explorer.report.document`) as a notebook display:
    headline, the per-step breakdown chart, the top findings and the top source lines."""
    summ = doc["summary"]
    info = doc["trace"]
    parts = [f"<h3>Explorer — {escape(Path(info['path']).name or info['path'])}</h3>"]
    if doc.get("synthetic"):
        parts.append("<div class='warn'>SYNTHETIC TRACE — generated, not measured</div>")
    if doc.get("test_backend"):
        parts.append(f"<div class='warn'>TEST BACKEND — {escape(str(doc['test_backend']))}</div>")
    left_out = [p for p in summ["partial_steps"] if p["left_out"]]
    head = (
        f"{summ['steps']} step(s), mean {fmt_ns(summ['mean_step_ns'])}, "
        f"median {fmt_ns(summ['median_step_ns'])}"
        + (f" ({len(left_out)} partial step(s) left out)" if left_out else "")
        + f"; {info['slices']} slices over {fmt_ns(info['span_ns'])}."
    )
    parts.append(f"<p class='headline'>{escape(head)}</p>")
    if doc["findings"]:
        top = doc["findings"][0]
        parts.append(
            f"<p class='headline'>Most time lost: <b>{escape(top['title'])}</b> "
            f"({100 * top['share']:.1f}% of step time).</p>"
        )
    sentence = (doc.get("devices") or {}).get("sentence")
    if sentence:
        parts.append(f"<p class='note'>{escape(str(sentence))}</p>")

    def draw() -> Any:
        from explorer.plot.breakdown import breakdown_figure

        return breakdown_figure(*report_breakdown(doc))

    if doc["steps"]:
        parts.append(_chart(draw, "breakdown"))
    parts.append(_breakdown_summary(doc))
    parts.append(_findings_part(doc["findings"], doc["findings_total"], doc["no_finding"]))
    if doc["by_source"]:
        parts.append("<h4>Top source lines</h4>")
        rows = [source_cells(r) for r in doc["by_source"]]
        parts.append(_table(SOURCE_COLUMNS, rows, set(range(1, len(SOURCE_COLUMNS)))))
    return _fragment("report", parts)


def _breakdown_summary(doc: dict[str, Any]) -> str:
    """Where the counted steps' time went, per device and category (the report's summary)."""
    rows = []
    for dev, cats in doc["summary"]["breakdown"].items():
        total = sum(cats.values()) or 1
        rows += [
            [dev, CATEGORY_LABELS.get(c, c), fmt_ns(ns), f"{100 * ns / total:.1f}%"]
            for c, ns in cats.items()
            if ns
        ]
    if not rows:
        return ""
    return "<h4>Where the step time went</h4>" + _table(
        ["device", "category", "time", "share"], rows, {2, 3}
    )


def diff_html(d: Any) -> str:
    """A :class:`~explorer.analysis.diff.TraceDiff`: the step time before and after, the
    categories as two bars, the findings that changed and the lines that changed most."""
    st = d.steps.set_index("side")
    a_ns, b_ns = int(st.loc["a", "median_ns"]), int(st.loc["b", "median_ns"])
    delta = b_ns - a_ns
    parts = [
        f"<h3>Explorer diff — {escape(Path(d.a_path).name)} → {escape(Path(d.b_path).name)}</h3>",
        f"<p class='headline'>Median step {escape(fmt_ns(a_ns))} → {escape(fmt_ns(b_ns))} "
        f"({'+' if delta > 0 else '-' if delta < 0 else '±'}{escape(fmt_ns(abs(delta)))}).</p>",
    ]
    parts += [f"<p class='note'>{escape(n)}</p>" for n in d.notes]

    def draw() -> Any:
        from explorer.plot.diff import diff_figure

        return diff_figure(d.breakdown)

    parts.append(_chart(draw, "diff"))
    if len(d.findings):
        parts.append("<h4>Findings</h4>")
        parts.append(
            _table(
                ["kind", "status", "a lost", "b lost", "change"],
                [
                    [
                        str(r.kind),
                        str(r.status),
                        fmt_ns(r.a_time_lost_ns),
                        fmt_ns(r.b_time_lost_ns),
                        ("+" if r.delta_ns > 0 else "") + fmt_ns(r.delta_ns),
                    ]
                    for r in d.findings.itertuples(index=False)
                ],  # fmt: skip
                {2, 3, 4},
            )
        )
    changed = d.lines[d.lines["status"] != "same"].head(10)
    if len(changed):
        parts.append("<h4>Source lines that changed most (time per step)</h4>")
        parts.append(
            _table(
                ["line", "status", "a", "b", "change"],
                [
                    [
                        source({"file": r.file, "line": r.line, "function": r.function}),
                        str(r.status),
                        fmt_ns(r.a_ns_per_step),
                        fmt_ns(r.b_ns_per_step),
                        ("+" if r.delta_ns > 0 else "") + fmt_ns(r.delta_ns),
                    ]
                    for r in changed.itertuples(index=False)
                ],  # fmt: skip
                {2, 3, 4},
            )
        )
    return _fragment("diff", parts)


def job_html(doc: dict[str, Any]) -> str:
    """A job report document: the headline, the rank × step heatmap, the straggler's
    causes with their lines and each rank's time."""
    from explorer.job.render.sections import headline

    summ = doc["summary"]
    parts = [
        f"<h3>Explorer job — {escape(str(doc['run']))}</h3>",
        f"<p class='headline'>{escape(headline(doc))}</p>",
        f"<p class='note'>{doc['ranks_present']} of {doc['world_size']} ranks, "
        f"{len(doc['steps'])} steps, mean step {escape(fmt_ns(summ['mean_step_ns']))}; "
        f"{100 * summ['collective_wait_share']:.1f}% of the ranks' time waits in collectives.</p>",
    ]
    parts += [f"<p class='note'>{escape(w)}</p>" for w in doc["warnings"]]

    def draw() -> Any:
        from explorer.plot.heatmap import heatmap_figure

        return heatmap_figure(doc)

    parts.append(_chart(draw, "heatmap"))
    s = doc["straggler"]
    if s is not None and s["causes"]:
        parts.append(f"<h4>Why rank {s['rank']} is late</h4>")
        parts.append(
            _table(
                ["cause", "per step over the others", "at"],
                [
                    [
                        str(c.get("title") or c["what"]),
                        fmt_ns(c["excess_ns_per_step"]),
                        source(c) if c.get("file") else "-",
                    ]
                    for c in s["causes"]
                ],  # fmt: skip
                {1},
            )
        )
    parts.append("<h4>Ranks</h4>")
    parts.append(
        _table(
            ["rank", "steps", "time", "waiting in collectives", "others wait for it"],
            [
                [
                    str(r["rank"]),
                    str(r["steps"]),
                    fmt_ns(r["total_ns"]),
                    fmt_ns(r["wait_ns"]),
                    fmt_ns(r["caused_wait_ns"]),
                ]
                for r in doc["ranks"]
            ],  # fmt: skip
            {1, 2, 3, 4},
        )
    )
    return _fragment("job", parts)

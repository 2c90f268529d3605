"""A :class:`~explorer.analysis.diff.TraceDiff` as a report
:class:`~explorer.report.document.Document`, rendered in any format.

Reads only the diff's tables; computes nothing but shares and signs.
"""

from __future__ import annotations

from typing import Any

from explorer.report import formats
from explorer.report.document import Document, Line, Section, Table
from explorer.report.sections import LABELS
from explorer.units import fmt_ns

#: Rows each table shows (the JSON keeps everything).
TOP = 15


def render_diff(d: Any, format: str = "text", top: int = TOP) -> str:
    """The diff in ``format`` (one of :data:`explorer.report.FORMATS`)."""
    formats.check_format(format, "diff")
    return formats.render(diff_report(d, top), format)


#: How each status reads: a change for the better or the worse (for colour).
_TONES = {"added": "good", "better": "good", "disappeared": "good", "removed": "bad",
          "worse": "bad", "appeared": "bad"}  # fmt: skip


def diff_report(d: Any, top: int = TOP) -> Document:
    """The diff as a document: both traces, the diff's notes, then one section per table."""
    secs = []
    for key, title, header, rows in _sections(d, top):
        numeric = frozenset(i for i, h in enumerate(header) if h in _NUMERIC)
        tones = [_TONES.get(r[0], "") if r else "" for r in rows]
        secs.append(Section(key, title, tables=[Table(header, rows, numeric, tones=tones)]))
    head = [Line(f"a: {d.a_path}"), Line(f"b: {d.b_path}")]
    head += [Line(n, "caution") for n in d.notes]
    return Document(title="explorer diff", head=head, sections=secs, data=d.to_dict())


#: Columns of numbers, right-aligned.
_NUMERIC = {"devices", "steps", "median", "spread", "a", "b", "delta", "a n", "b n", "a lost",
            "b lost"}  # fmt: skip


def _signed(ns: float) -> str:
    return ("+" if ns > 0 else "-" if ns < 0 else "±") + fmt_ns(abs(ns))


_Rows = tuple[str, str, list[str], list[list[str]]]


def _sections(d: Any, top: int) -> list[_Rows]:
    """(key, title, header, rows) for every table, already formatted as strings."""
    out = [_step_table(d), _breakdown_table(d)]
    if len(d.findings):
        out.append(_findings_table(d))
    for sec, title, df, key in (
        ("ops", "Operators (time per step)", d.ops, "name"),
        ("kernels", "Kernels and copies (time per step)", d.kernels, "name"),
        ("lines", "Source lines (host + device time per step)", d.lines, "line"),
    ):
        changed = df[df["status"] != "same"]
        if len(changed):
            out.append((sec, *_changed_table(title, changed, key, top)))
    return out


def _step_table(d: Any) -> _Rows:
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
        "steps",
        "Step time (median over steps, spread = interquartile range)",
        ["", "trace", "devices", "steps", "median", "spread"],
        rows,
    )


def _breakdown_table(d: Any) -> _Rows:
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
        "breakdown",
        "Where step time went (median per step, ± half the interquartile range)",
        ["category", "a", "b", "delta"],
        rows,
    )


def _findings_table(d: Any) -> _Rows:
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
    return ("findings", "Findings", ["status", "kind", "a lost", "b lost", "title"], rows)


def _changed_table(
    title: str, changed: Any, key: str, top: int
) -> tuple[str, list[str], list[list[str]]]:
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

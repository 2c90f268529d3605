"""The report's sections, defined once: what each one shows, as titled tables, numbered
entries and notes of strings already formatted (units from :mod:`explorer.units`).

The text, Markdown and HTML renderers lay this list out, each in its own medium, and add
only what that medium does best (colour and bars in a terminal, plots in HTML); none of
them decides what a section holds. Like :mod:`explorer.report.diff_render`, this reads
only the report document.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from explorer.units import fmt_bytes, fmt_ns

#: What people read for each breakdown category.
LABELS = {
    "compute": "compute",
    "data_movement": "data movement",
    "communication": "communication",
    "host_bound": "host-bound idle",
    "sync_stall": "sync stall",
    "compile": "compile",
    "other_idle": "other idle",
}
#: Rows of the per-step table (the JSON report keeps every step).
MAX_STEP_ROWS = 50


@dataclass(frozen=True)
class Table:
    """Rows of formatted cells. ``numeric`` columns align right; ``code`` columns are source
    lines or identifiers; ``shares`` (one per row, 0–1) may be drawn as bars."""

    header: list[str]
    rows: list[list[str]]
    numeric: frozenset[int] = frozenset()
    code: frozenset[int] = frozenset()
    shares: list[float] | None = None
    categories: list[str] | None = None
    """The breakdown category of each row, where rows are categories (for colours)."""


@dataclass(frozen=True)
class Entry:
    """A numbered item with labelled fields (a finding)."""

    number: int
    kind: str
    title: str
    severe: bool
    fields: list[tuple[str, str, bool]]
    """(label, value, value is code)."""


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    tables: list[Table] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Head:
    """What the report opens with."""

    title: str
    summary: str
    warnings: list[str]
    synthetic: bool
    test_backend: str
    """What the test backend was, when a test backend recorded the trace ("" otherwise)."""
    window: str = ""
    """Which steps a report of a window of the trace covers, and why ("" for all)."""
    device: str = ""
    """Which accelerator the trace ran on, and whether device-side time was recorded."""
    step_notes: list[str] = field(default_factory=list)
    """What defined the steps, and which steps are partial (left out of the figures)."""


def pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:5.1f}%" if whole else "    -"


def step_range(steps: list[int]) -> str:
    """``[1, 2, 3, 7]`` → ``"1-3, 7"`` (at most 6 pieces)."""
    if not steps:
        return "-"
    pieces: list[str] = []
    start = prev = steps[0]
    for s in [*steps[1:], None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        pieces.append(str(start) if start == prev else f"{start}-{prev}")
        if s is not None:
            start = prev = s
    return ", ".join(pieces[:6]) + (", ..." if len(pieces) > 6 else "")


def source(line: dict[str, Any]) -> str:
    fn = f" ({line['function']})" if line.get("function") else ""
    return f"{line['file']}:{line['line']}{fn}"


def head(doc: dict[str, Any]) -> Head:
    t, summ = doc["trace"], doc["summary"]
    rank = (
        ""
        if t["rank"] < 0
        else f", rank {t['rank']} of {t['world_size']}"
        if t["world_size"] > 0
        else f", rank {t['rank']}"
    )
    selected = doc["selected_step"]
    return Head(
        title=f"Explorer report — {t['path'] or '<memory>'}",
        summary=f"{t['slices']} slices, span {fmt_ns(t['span_ns'])}{rank}; "
        f"{summ['steps']} step(s), mean {fmt_ns(summ['mean_step_ns'])}"
        + (f" (step {selected} only)" if selected is not None else ""),
        warnings=[str(w) for w in t["warnings"]],
        synthetic=bool(doc["synthetic"]),
        test_backend=str(doc.get("test_backend") or ""),
        window=_window(doc.get("window")),
        device=str((doc.get("devices") or {}).get("sentence") or ""),
        step_notes=_step_notes(summ),
    )


def _step_notes(summ: dict[str, Any]) -> list[str]:
    """Which annotation defined the steps (and the level, where they nest), and each
    partial step with why it is left out."""
    out = []
    origin = summ.get("step_origin") or {}
    name = origin.get("annotation", "")
    if not name:
        out.append("Steps: no step annotation, so the whole trace is one step (--steps REGEX "
                   "takes them from your own annotation)")  # fmt: skip
    else:
        what = (
            "ProfilerStep#N annotations" if name == "ProfilerStep#N"
            else f"host annotations matching {name!r}"
        )  # fmt: skip
        line = f"Steps: {what}"
        nested = int(origin.get("nested_left_out", 0))
        if nested:
            level = origin.get("nesting", "outermost")
            other = "innermost" if level == "outermost" else "outermost"
            line += (
                f", the {level} where they nest ({nested} nested at the other level left "
                f"out; --step-nesting {other} takes those)"
            )
        out.append(line)
    pre = summ.get("before_capture") or {}
    if pre.get("ops"):
        out.append(
            f"{pre['ops']} device op(s) were launched before the capture began (their launch "
            f"is not in the trace): they belong to no step, and the first step starts once "
            f"they end, at {fmt_ns(pre['end_ns'])} at the latest"
        )
    for p in summ.get("partial_steps", []):
        out.append(
            f"Step {p['step']} is partial ({p['reason']}): "
            + (
                "left out of the mean, the summary and --fail-on"
                if p.get("left_out", True)
                else "no whole step is left, so the figures are its own"
            )
        )
    return out


def _window(w: dict[str, Any] | None) -> str:
    if not w:
        return ""
    which = (
        f"step {w['first_step']}"
        if w["first_step"] == w["last_step"]
        else f"steps {w['first_step']}-{w['last_step']}"
    )
    return (
        f"This report covers {which} only ({w['steps']} of {w['whole_steps']} steps, "
        f"{w['slices']:,} of {w['whole_slices']:,} slices): {w['reason']}. Findings are "
        "ranked within these steps; --step-range FIRST:LAST picks others"
    )


def sections(doc: dict[str, Any]) -> list[Section]:
    """Every section the report shows, in order (empty ones left out)."""
    out = [_breakdown(doc), _steps(doc), _findings(doc)]
    if doc["by_source"]:
        out.append(_by_source(doc["by_source"]))
    if doc["memory"]["peaks"]:
        out.append(_memory(doc["memory"]["peaks"]))
    return out


def _breakdown(doc: dict[str, Any]) -> Section:
    total = doc["summary"]["total_ns"]
    rows, shares, cats = [], [], []
    for dev, per_cat in doc["summary"]["breakdown"].items():
        for cat in doc["categories"]:
            ns = per_cat.get(cat, 0)
            rows.append([dev, LABELS[cat], fmt_ns(ns), pct(ns, total).strip()])
            shares.append(ns / total if total else 0.0)
            cats.append(cat)
    table = Table(["device", "category", "time", "share"], rows, frozenset({2, 3}), shares=shares,
                  categories=cats)  # fmt: skip
    return Section("breakdown", "Where the step time went", [table])


def _steps(doc: dict[str, Any]) -> Section:
    cats = doc["categories"]
    rows = []
    for s in doc["steps"][:MAX_STEP_ROWS]:
        for dev, b in s["breakdown"].items():
            rows.append(
                [
                    str(s["step"]) + (" (partial)" if s.get("partial") else ""),
                    dev,
                    fmt_ns(s["dur_ns"]),
                ]  # fmt: skip
                + [pct(b.get(c, 0), s["dur_ns"]).strip() for c in cats]
            )
    header = ["step", "device", "time"] + [LABELS[c] for c in cats]
    numeric = frozenset({0, *range(2, len(header))})
    more = len(doc["steps"]) - MAX_STEP_ROWS
    notes = [f"... {more} more steps (use --step N or --format json)"] if more > 0 else []
    return Section("steps", "Per step (% of the step)", [Table(header, rows, numeric)], notes=notes)


def _findings(doc: dict[str, Any]) -> Section:
    entries = []
    for i, f in enumerate(doc["findings"], 1):
        lost = (
            f"{fmt_ns(f['time_lost_ns'])} ({100 * f['share']:.1f}% of step time)"
            if f["time_lost_ns"]
            else "no time"
        )
        fields = [
            ("Time lost", f"{lost} on {f['device'] or '-'}, steps {step_range(f['steps'])}", False)
        ]
        if "predicted_saving_ns" in f:
            note = f.get("predicted_note") or ""
            fields.append(
                (
                    "Fix saves",
                    fmt_ns(f["predicted_saving_ns"]) + (f" ({note})" if note else ""),
                    False,
                )
            )
        fields += [("At", source(line), True) for line in f["source_lines"][:5]]
        fields += [("Why", f["explanation"], False), ("Fix", f["recommendation"], False)]
        if f["evidence"]:
            more = ", ..." if len(f["evidence"]) > 10 else ""
            fields.append(
                ("Evidence slices", ", ".join(map(str, f["evidence"][:10])) + more, False)
            )
        entries.append(Entry(i, f["kind"], f["title"], f["share"] >= 0.1, fields))
    return Section(
        "findings",
        f"Findings ({doc['findings_total']}, ranked by what their fix saves)",
        entries=entries,
        notes=[] if entries else [doc["no_finding"]],
    )


def _by_source(rows: list[dict[str, Any]]) -> Section:
    table = Table(
        ["line", "host", "device", "stall", "copied", "syncs", "fallbacks"],
        [
            [
                source(r),
                fmt_ns(r["host_ns"]),
                fmt_ns(r["device_ns"]),
                fmt_ns(r["stall_ns"]),
                fmt_bytes(r["copy_bytes"]),
                str(r["sync_count"]),
                str(r["fallback_count"]),
            ]
            for r in rows
        ],  # fmt: skip
        frozenset(range(1, 7)),
        code=frozenset({0}),
    )
    return Section("by_source", "Top source lines", [table])


def _memory(peaks: list[dict[str, Any]]) -> Section:
    rows = []
    for p in peaks:
        holders = "; ".join(
            f"{fmt_bytes(a['bytes'])} in {a['count']} x {a['op']}"
            + (f" at {source(a)}" if a["file"] else "")
            for a in p.get("top", [])[:3]
        )
        rows.append([p["device"], fmt_bytes(p["peak_bytes"]), fmt_ns(p["ts"]), holders or "-"])
    table = Table(["device", "peak", "at", "largest holders at the peak"], rows, frozenset({1, 2}))
    return Section("memory", "Memory", [table])

"""A trace's report document: the analyses run and their results gathered into plain data
(the JSON schema in :mod:`explorer.report.formats.json_report`), the critical path
included, and stored beside the trace's tables for a repeat report.

Imported on first use through :mod:`explorer.report` (it imports the analyses, and with
them pandas, which a report read back from the store never needs).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from explorer.analysis.ahead import compute_ahead, riding_along
from explorer.analysis.attribution import launched_before_capture
from explorer.analysis.breakdown import CATEGORIES, breakdown
from explorer.analysis.by_source import by_source
from explorer.analysis.critical_path import critical_path
from explorer.analysis.dependency_graph import READ_FIRST, read_first
from explorer.analysis.device_naming import device_naming
from explorer.analysis.findings import findings, no_finding_sentence
from explorer.analysis.steps import (
    counted_steps,
    partial_steps,
    select_steps,
    step_origin,
    step_times,
    window_of_steps,
)
from explorer.analysis.whatif import predicted_findings, replay_graph_of
from explorer.report import SCHEMA_VERSION, STORED_DOCUMENT
from explorer.report import critical_path_section as cps
from explorer.store.cache import finish_cache_write
from explorer.trace.memo import NOT_STORED, memoised
from explorer.trace.model import TraceData

#: Memory curves are thinned to at most this many points per device for the report.
MEMORY_POINTS = 600


def document(trace: TraceData, step: int | None = None, top: int = 10) -> dict[str, Any]:
    """Everything a report shows, as JSON-able data (schema: :mod:`explorer.report.json_report`).

    ``step`` restricts steps and summary to that step and keeps the findings that touch it,
    with that step's time lost, share and ranges; ``top`` caps findings and source lines.

    For a trace opened from the cache, the document is stored beside its tables (keyed by
    them, the analysis and report code, ``step``, ``top`` and the step options, as every
    stored result is): a repeat report reads it back instead of gathering it again from the
    stored results (~0.15 s on 1M events, a sixth of the repeat report). Each call returns
    a document of its own. What is not a result of the tables — the path the trace was
    opened from, the Explorer that reads it — is filled in on every call.
    """
    from explorer import __version__

    store = trace.memo.store
    doc = store.load(STORED_DOCUMENT, (step, top)) if store is not None else NOT_STORED
    if doc is NOT_STORED or not isinstance(doc, dict):
        doc = _gather(trace, step, top)
        if store is not None:
            store.save(STORED_DOCUMENT, (step, top), doc)
    finish_cache_write(trace)  # a trace just parsed: its entry written (the document stored)
    doc["explorer_version"] = __version__
    doc["trace"] = _trace_info(trace)
    return doc


@memoised("memory_section", depends_on=("memory_timeline", "memory_allocations"))
def memory_section(trace: TraceData) -> dict[str, Any]:
    """Peaks and a thinned allocated/reserved curve per device (empty without memory
    events): the report's memory section, memoised so that the report's child finds it
    beside the findings (the allocations table behind it is 600k rows on a 1M-slice
    H100 trace; the section a few kB to hand back)."""
    if len(trace.memory) == 0:
        return {"peaks": [], "timeline": {}}
    from explorer.analysis import memory

    peaks = memory.peaks(trace)
    contrib = memory.peak_contributors(trace, top=5)
    top: dict[str, list[dict[str, Any]]] = {}
    for r in contrib.itertuples(index=False):
        top.setdefault(str(r.device), []).append(
            {"file": str(r.file), "line": int(r.line), "function": str(r.function), "op": str(r.op),
             "bytes": int(r.bytes), "count": int(r.count)}
        )  # fmt: skip
    tl = memory.memory_timeline(trace)
    curves: dict[str, dict[str, list[int]]] = {}
    for dev, g in tl.groupby("device", sort=True):
        if len(g) > MEMORY_POINTS:
            # keep the extremes of each bucket so peaks survive thinning
            idx = np.linspace(0, len(g) - 1, MEMORY_POINTS).astype(np.int64)
            g = g.iloc[
                np.unique(np.concatenate([idx, [int(np.argmax(g["allocated"].to_numpy()))]]))
            ]
        curves[str(dev)] = {
            "ts": [int(x) for x in g["ts"]],
            "allocated": [int(x) for x in g["allocated"]],
            "reserved": [int(x) for x in g["reserved"]],
        }
    return {
        "peaks": [
            {
                "device": str(r.device),
                "peak_bytes": int(r.peak_bytes),
                "ts": int(r.ts),
                "top": top.get(str(r.device), []),
            }  # fmt: skip
            for r in peaks.itertuples(index=False)
        ],
        "timeline": curves,
    }


#: What a whole-trace report computes in a forked child while this process builds the
#: dependency graph and the critical path (:mod:`explorer.analysis.ahead`): the analyses
#: that do not need the graph, and the results of theirs the rest of the report (the
#: path's time categories and source lines among it) reads.
AHEAD_CALLS: tuple[Callable[[TraceData], Any], ...] = (
    functools.partial(select_steps, step=None, attributed=True),
    breakdown,
    findings,
    memory_section,
)
AHEAD_KEPT: tuple[str, ...] = (
    "attributed_steps",
    "breakdown",
    "findings",
    "memory_section",
    "before_capture",
    "step_partial_reasons",
    "fallback_calls",
    # what the critical path reads next here (its time categories on the device, its
    # source lines), found by the breakdown and findings already
    "device_slice_reasons",
    "frame_codes",
)


def _gather(trace: TraceData, step: int | None, top: int) -> dict[str, Any]:
    """The document of :func:`document`, computed from the analyses (memoised and stored
    on their own)."""
    from explorer import __version__

    memo = trace.memo
    stored = memo.available("predicted_findings") and memo.available("critical_path", (None, True))
    if step is None and not stored:
        # The analyses on two cores: the graph-free ones in a child while the graph is
        # built here (then the replays in a child while the path is found here, see
        # predict_savings); the child's results are kept before anything reads them.
        with compute_ahead(trace, AHEAD_CALLS, AHEAD_KEPT, (read_first,), READ_FIRST) as ahead:
            # The cache entry of a trace just parsed is written while the child works (after
            # its fork, so it does not wait), and the graph then built beside the stored
            # tables, mapped, rather than the parse's heap (see CacheWrite), from what the
            # child made first and sent meanwhile (the steps, classes and host reasons).
            finish_cache_write(trace)
            ahead.take_early()
            replay_graph_of(trace)
            ahead.join()
    st = select_steps(trace, step, attributed=True)
    bd = breakdown(trace, step)
    partial = partial_steps(trace)
    steps_out = []
    # each step's breakdown by device (sorted) then category: one pass, not a filter per step
    by_step: dict[int, dict[str, dict[str, int]]] = {}
    for dev, g in bd.groupby("device", sort=True):
        for s, c, n in zip(g["step"].tolist(), g["category"], g["ns"].tolist(), strict=True):
            by_step.setdefault(int(s), {}).setdefault(str(dev), {})[str(c)] = int(n)
    for row in st.itertuples(index=False):
        per_dev = by_step.get(int(row.step), {})
        steps_out.append(
            {
                "step": int(row.step),
                "name": str(row.name),
                "start_ns": int(row.start_ns),
                "dur_ns": int(row.dur_ns),
                "partial": bool(row.partial),
                "partial_reason": partial.get(int(row.step), ""),
                "breakdown": per_dev,
            }
        )
    # The summary covers the whole steps (step_times: the one step-time definition), so
    # a fragment the profiler stopped in does not halve the mean; partial steps stay in the
    # per-step table, marked.
    times = step_times(trace, step)
    counted = counted_steps(trace, step)["step"].to_numpy()
    summary: dict[str, dict[str, int]] = {}
    in_summary = bd[bd["step"].isin(counted)]
    for dev, g in in_summary.groupby("device", sort=True):
        sums = g.groupby("category", observed=False)["ns"].sum()
        summary[str(dev)] = {c: int(sums.get(c, 0)) for c in CATEGORIES}
    total = int(times.sum())
    # With --step N every finding's figures are that step's: the findings of a window of
    # just that step (its breakdown and critical path are the whole trace's).
    found_in = trace if step is None else _step_window(trace, int(step))
    # ranked by what fixing each would save, replayed (issue 30)
    # (the lines' table rides with the replays' child, done while the path is found here)
    with riding_along(trace, (by_source,), ("by_source",)):
        all_findings = predicted_findings(found_in)
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "explorer_version": __version__,
        "trace": _trace_info(trace),
        "synthetic": bool(trace.synthetic),
        "test_backend": trace.test_backend,
        "devices": device_naming(trace).to_dict(),
        "selected_step": None if step is None else int(step),
        "categories": list(CATEGORIES),
        "summary": {
            "steps": int(len(times)),
            "total_ns": total,
            "mean_step_ns": int(total // len(times)) if len(times) else 0,
            "median_step_ns": int(round(float(np.median(times)))) if len(times) else 0,
            "partial_steps": [
                {"step": n, "reason": why, "left_out": n not in set(counted.tolist())}
                for n, why in partial.items()
                if n in set(st["step"].tolist())
            ],
            "step_origin": step_origin(trace),
            "before_capture": _before_capture(trace),
            "breakdown": summary,
            "time_lost_by_kind": _lost_by_kind(all_findings),
        },
        "steps": steps_out,
        "findings": [_whole_ids(found_in, f.to_dict(), "evidence") for f in all_findings[:top]],
        "findings_total": len(all_findings),
        "no_finding": no_finding_sentence(trace),
        "by_source": _by_source(trace, top),
        "memory": memory_section(trace),
        "window": _window(trace),
    }
    # Without --step, the steps the rest of the report covers (--steps REGEX or
    # ProfilerStep#N), not the whole file. Memoised on the trace.
    cp = critical_path(trace, step, all_steps=True)
    doc["critical_path"] = _whole_ids(trace, cps.to_dict(cp), "slices")
    return doc


def _whole_ids(trace: TraceData, d: dict[str, Any], key: str) -> dict[str, Any]:
    """``d`` with the slice ids under ``key`` those of the whole trace, when ``trace`` is a
    window of it (what a user clicks must name the trace they open)."""
    if trace.window is not None:
        d[key] = trace.window.whole_ids(d[key])
    return d


def _window(trace: TraceData) -> dict[str, Any] | None:
    """Which steps of the whole trace a windowed report covers, and why (None: all)."""
    w = trace.window
    if w is None:
        return None
    numbers = [int(x) for x in w.steps["step"]]
    return {
        "first_step": min(numbers),
        "last_step": max(numbers),
        "steps": len(numbers),
        "whole_steps": w.whole_steps,
        "slices": len(trace.slices),
        "whole_slices": w.whole_slices,
        "start_ns": w.start_ns,
        "end_ns": w.end_ns,
        "reason": w.reason,
    }


def _before_capture(trace: TraceData) -> dict[str, int | None]:
    """The device ops launched before the capture began (no step's): how many, and when
    the last of them ends (None when there are none)."""
    pre = np.flatnonzero(launched_before_capture(trace))
    return {
        "ops": int(len(pre)),
        "end_ns": int(trace.ends()[pre].max()) if len(pre) else None,
    }


def _step_window(trace: TraceData, step: int) -> TraceData:
    """Step ``step`` of ``trace`` as a window of its own (``trace`` itself when it is
    already just that step), so the findings read from it are that step's."""
    w = trace.window
    if w is not None and w.steps["step"].tolist() == [step]:
        return trace
    return window_of_steps(trace, step, step, f"requested (--step {step})")


def _lost_by_kind(found: list[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in found:
        out[f.kind] = out.get(f.kind, 0) + int(f.time_lost_ns)
    return out


def _int_or(value: Any, default: int) -> int:
    return default if value is None or value == "" else int(value)


def _trace_info(trace: TraceData) -> dict[str, Any]:
    meta = trace.metadata
    return {
        "path": trace.path,
        "format": str(meta.get("format", "")),
        "rank": _int_or(meta.get("rank"), -1),  # -1: unknown (rank 0 is a rank)
        "world_size": _int_or(meta.get("world_size"), -1),
        "slices": len(trace.slices),
        "span_ns": int(trace.span_ns)
        if trace.window is None
        else trace.window.end_ns - trace.window.start_ns,
        "warnings": [str(w) for w in meta.get("warnings", []) or []],
    }


def _by_source(trace: TraceData, top: int) -> list[dict[str, Any]]:
    rows = by_source(trace).head(top)
    return [
        {k: (int(v) if isinstance(v, (int, np.integer)) else str(v)) for k, v in r.items()}
        for r in rows.to_dict(orient="records")
    ]

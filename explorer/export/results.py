"""Explorer's own results as rows of an exported trace: a "Findings" row with one slice
per finding over the time it covers, a "Critical path" row repeating the slices that set
the step's time with flows along the path's edges between the original slices, and flows
for the dependency graph's cross-track waits (cross-stream events, host syncs).

The analyses are imported statically: a missing module or a failing analysis is an error
that surfaces, never a silently missing row.
"""

from __future__ import annotations

import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from typing import Any

import numpy as np
import pandas as pd

from explorer.analysis import critical_path as path_analysis
from explorer.analysis.dependency_graph import CROSS_TRACK_WAITS, cross_track_waits
from explorer.analysis.finding import Finding
from explorer.analysis.findings import findings as ranked_findings
from explorer.errors import ExplorerError
from explorer.trace.model import TraceData, Window

FINDINGS_ROW = "Findings"
#: A finding links to at most this many of its evidence slices (heaviest first).
MAX_EVIDENCE_LINKS = 32
CRITICAL_PATH_ROW = "Critical path"


@dataclass
class ResultSlice:
    """One slice on an Explorer row (times in trace ns, as ``slices.ts``)."""

    row: str
    ts: int
    dur: int
    name: str
    args: dict[str, Any] = field(default_factory=dict)
    links: list[int] = field(default_factory=list)
    """Slice ids this slice points at with flows (a finding's evidence)."""


@dataclass
class Results:
    """What the exporters add to the trace's own content."""

    slices: list[ResultSlice] = field(default_factory=list)
    """Few, hand-made slices (findings), each with its own args."""
    path: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Slice ids on the critical path, in path order: copied onto the "Critical path" row
    (column-wise: a path can hold a good part of a long trace)."""
    flows: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(
            {"src": np.zeros(0, np.int64), "dst": np.zeros(0, np.int64), "type": []}
        )
    )

    @property
    def count(self) -> int:
        """Slices these results add to the export."""
        return len(self.slices) + len(self.path)

    def of_whole_trace(self, window: Window) -> Results:
        """These results, computed on a window of a trace (:mod:`explorer.trace.window`),
        with their slice ids those of the whole trace, to export with it; each finding says
        which steps were analysed, and why."""
        ids = window.ids
        steps = window.steps["step"]
        analysed = (
            f"{int(steps.min())}-{int(steps.max())} of {window.whole_steps} ({window.reason})"
        )
        flows = self.flows.copy()
        flows["src"] = ids[flows["src"].to_numpy(np.int64)]
        flows["dst"] = ids[flows["dst"].to_numpy(np.int64)]
        return Results(
            slices=[
                replace(
                    s,
                    links=[int(ids[i]) for i in s.links],
                    args={**s.args, "analysed steps": analysed},
                )
                for s in self.slices
            ],
            path=ids[self.path],
            flows=flows,
        )

    def rows(self) -> list[str]:
        """Row names in first-use order (Findings before Critical path)."""
        rows = list(dict.fromkeys(s.row for s in self.slices))
        if len(self.path):
            rows.append(CRITICAL_PATH_ROW)
        return rows


#: The trace a forked child computes the results of (:func:`results_in_child`): inherited
#: through the fork, never sent.
_CHILD_TRACE: list[TraceData] = []


def results_in_child(trace: TraceData) -> Results:
    """:func:`explorer_results` of ``trace``, computed in a forked child process, so that
    all the memory the analyses took goes back to the system when it exits — a process's
    heap keeps much of it (small objects, fragments), and under a memory limit the export
    of the whole trace that follows needs it. In this process when other Python threads
    run (forking while they may hold locks is not safe).

    :class:`~explorer.errors.ExplorerError` when the child is killed (out of memory under
    a cgroup limit: the kernel kills without a word)."""
    if threading.active_count() > 1:
        return explorer_results(trace)
    _CHILD_TRACE[:] = [trace]
    try:
        with ProcessPoolExecutor(1, mp_context=get_context("fork")) as pool:
            packed = pool.submit(_packed_results).result()
    except BrokenProcessPool:
        raise ExplorerError(
            f"{trace.path or 'the trace'}: the analyses for the findings and critical path "
            "were killed (out of memory?) — export --no-results writes the trace's own events, "
            "and --step-range FIRST:LAST the results of fewer steps"
        ) from None
    finally:
        _CHILD_TRACE.clear()
    slices, path, src, dst, type_codes, types = packed
    return Results(
        slices=[ResultSlice(*fields) for fields in slices],
        path=path,
        flows=pd.DataFrame(
            {"src": src, "dst": dst, "type": pd.Categorical.from_codes(type_codes, types)}
        ),
    )


def _packed_results() -> tuple[Any, ...]:
    """In the child: the results of the inherited trace, as plain values and arrays."""
    r = explorer_results(_CHILD_TRACE[0])
    kinds = pd.Categorical(r.flows["type"].astype(str))
    return (
        [(s.row, s.ts, s.dur, s.name, s.args, s.links) for s in r.slices],
        r.path,
        r.flows["src"].to_numpy(np.int64),
        r.flows["dst"].to_numpy(np.int64),
        kinds.codes,
        [str(c) for c in kinds.categories],
    )


def explorer_results(
    trace: TraceData,
    *,
    findings: bool = True,
    critical_path: bool = True,
    dependencies: bool = True,
) -> Results:
    """Findings and critical path of ``trace`` as slices and flows to export, and flows for
    the dependency graph's cross-track waits."""
    out = Results()
    if len(trace.slices) == 0:
        return out
    if findings:
        out.slices.extend(_finding_slices(trace, ranked_findings(trace)))
    if critical_path:
        _critical_path(trace, path_analysis.critical_path(trace), out)
    if dependencies:
        _dependency_flows(trace, out)
    return out


#: Dependency-graph edges worth an arrow (the analysis' own list).
DEPENDENCY_FLOW_TYPES: frozenset[str] = CROSS_TRACK_WAITS


def _dependency_flows(trace: TraceData, out: Results) -> None:
    """Flows for the edges where one stream or thread waited on another (cross-stream
    events, host syncs, a full launch queue); no slices of their own."""
    out.flows = pd.concat([out.flows, cross_track_waits(trace)], ignore_index=True)


def _finding_slices(trace: TraceData, found: list[Finding]) -> list[ResultSlice]:
    """One slice per finding over the hull of its ranges (or its steps' span)."""
    out = []
    span = trace.span_ns
    for rank, f in enumerate(found, start=1):
        ranges = [(int(a), int(b)) for a, b in (f.ranges or []) if int(b) >= int(a)]
        if ranges:
            start = min(a for a, _ in ranges)
            end = max(b for _, b in ranges)
        else:
            start, end = 0, span
        args: dict[str, Any] = {
            "rank": rank,
            "kind": str(f.kind),
            "title": str(f.title),
            "time lost (ms)": round(int(f.time_lost_ns) / 1e6, 3),
            "share of step time": round(float(f.share), 4),
            "recommendation": str(f.recommendation),
            "explanation": str(f.explanation),
            "steps": ", ".join(str(int(s)) for s in f.steps),
            "ranges": len(ranges),
        }
        if f.device:
            args["device"] = str(f.device)
        for k, (file, line, function) in enumerate(list(f.source_lines)[:5]):
            args[f"source {k + 1}"] = f"{file}:{int(line)} ({function})"
        links = [int(e) for e in list(f.evidence)[:MAX_EVIDENCE_LINKS]]
        out.append(ResultSlice(FINDINGS_ROW, start, max(end - start, 0), str(f.title), args, links))
    return out


def _critical_path(trace: TraceData, cp: path_analysis.CriticalPath, out: Results) -> None:
    """The critical path's slices (copied onto their own row by the exporters), and flows
    along the path's edges between the original slices."""
    ids = np.asarray(cp.slices, np.int64)
    ids = ids[(ids >= 0) & (ids < len(trace.slices))]
    if len(ids) == 0:
        return
    out.path = ids
    edges = cp.edges
    if len(edges):
        keep = edges["src"].to_numpy() != edges["dst"].to_numpy()
        pairs = edges.loc[keep, ["src", "dst"]]
    else:  # no edge list: link the path's slices in order
        pairs = pd.DataFrame({"src": ids[:-1], "dst": ids[1:]})
        pairs = pairs[pairs["src"] != pairs["dst"]]
    pairs = pairs.drop_duplicates().assign(type="critical_path")
    out.flows = pd.concat([out.flows, pairs], ignore_index=True)

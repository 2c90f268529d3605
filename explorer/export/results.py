"""Explorer's own results as rows of an exported trace:

* a "Findings" row: one slice per finding over the time it covers, with its text in args
  and flows to (up to :data:`MAX_EVIDENCE_LINKS` of) its evidence slices;
* a "Critical path" row: the path the report shows (the span of every step; the whole
  trace when it has none) as *runs* — consecutive path time on one thread or stream is one
  slice (the path's segments), named after the op holding most of it, with the track it
  is on, how many slices it passes through and its top ops in args. The runs tile the
  path: they cover its time exactly, from its start to its end;
* flows where the path crosses from one track to another (a launch, a sync, a hand-off
  between threads, a stream waiting on another), between the original slices. The path's
  steps along one thread (a slice, its child, its next sibling) are not drawn: the run
  already says the path stays there.

A report stores the findings and the critical path beside the trace's tables
(:mod:`explorer.store.results`), so an export after a report reads them back and computes
only what it writes.

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
from explorer.analysis.ahead import Ahead, handed_back, run_forked, stored_here
from explorer.analysis.dependency_graph import READ_FIRST, read_first
from explorer.analysis.finding import Finding
from explorer.analysis.findings import findings as ranked_findings
from explorer.errors import ExplorerError
from explorer.trace.memory_limits import release_freed_memory
from explorer.trace.model import TraceData, Window

FINDINGS_ROW = "Findings"
#: A finding links to at most this many of its evidence slices (heaviest first).
MAX_EVIDENCE_LINKS = 32
CRITICAL_PATH_ROW = "Critical path"
#: A critical-path run lists this many of its ops (most path time first).
RUN_TOP_OPS = 3
#: The columns of :attr:`Results.path`.
RUN_COLUMNS = ("ts", "dur", "name", "on", "slices", "ops")


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
    path: pd.DataFrame = field(default_factory=lambda: no_runs())
    """The critical path's runs, in path order (written column-wise): ``ts, dur`` (trace
    ns), ``name`` (the op holding most of the run), ``on`` (the track's label),
    ``slices`` (how many slices the path passes through in it), ``ops`` (its top ops and
    their path time, as text)."""
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
            path=self.path,
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
    trace: TraceData, *, findings: bool = True, critical_path: bool = True
) -> Results:
    """Findings and critical path of ``trace`` as slices and flows to export (the
    report's: read back from the store when a report stored them)."""
    with PendingResults(trace, findings=findings, critical_path=critical_path) as pending:
        return pending.get()


class PendingResults:
    """Explorer's results of a trace (:func:`explorer_results`) while they are computed:
    the critical path — its dependency graph and search, the larger part — in a forked
    child from the moment this is made, the findings at :meth:`find` (see below), and in
    between whatever the caller prepares. The Perfetto writer builds its tables of
    the trace's own events meanwhile and encodes them but for their lengths and flow ids:
    on 1M events the child's ~2 s hold the findings, those tables (~0.5 s) and that
    encoding (~0.45 s), where before the path was found here, alone, after the graph (the
    findings' child beside the graph).

    The findings go to whichever process is free first: this one at :meth:`find`, or
    the child once it has the path, if this process has not begun them by then (one
    shared flag, taken once). On the synthetic 1M-event trace the path takes longer than
    this process's work, which finds them; on a 1M-slice trace of the shared H100 trace's
    structure (deep Python stacks, shape args on every op) the path's child ends ~1.5 s
    before this process's tables and encoding, and finds them meanwhile.

    The child also draws the path's runs and cross-track flows and hands back only those
    (~1 MB on 1M events); it stores the path itself where the trace's store writes at once
    (a cache entry), else hands it back too, to be kept and stored as if found here (the
    path was ~40 MB pickled, and 0.12 s read back plus 0.16 s of runs drawn here, while
    the child's core was idle). Where no child can be forked, or it fails, the path (and
    the findings it took) are found here in :meth:`get` (see :mod:`explorer.analysis.
    ahead`). With ``given`` results, :meth:`get` returns them and nothing is computed. A
    context manager: leaving it stops the child."""

    def __init__(
        self,
        trace: TraceData,
        *,
        findings: bool = True,
        critical_path: bool = True,
        given: Results | None = None,
    ) -> None:
        self._trace = trace
        self._findings = findings
        self._critical_path = critical_path
        self._given = given
        self._ahead: Ahead | None = None
        self._found: list[ResultSlice] | None = None
        self._drawn_in_child = False
        #: Who finds the findings, taken once (:func:`_claim`): 0 nobody yet, else
        #: :data:`HERE` or :data:`IN_CHILD`; shared with the child (forked after it).
        self._claim: Any = None
        wanted = given is None and len(trace.slices) > 0 and critical_path
        if wanted and not trace.memo.available("critical_path", (None, True)):
            try:  # a lock in shared memory: none where /dev/shm is missing or full
                self._claim = get_context("fork").Value("b", 0)
            except OSError:
                self._claim = None
            claim, findings_wanted = self._claim, findings

            def work() -> Any:
                # the path's runs and flows drawn here, and the path stored here where
                # its store writes at once: only what the export writes is handed back
                drawn = Results()
                _critical_path(trace, report_path(trace), drawn)
                kept = stored_here(trace, trace.memo.kept(("critical_path",)))
                # the findings too, once the path is found, if this process has not
                # begun them: on a trace of real structure the path's child ends long
                # before this process's tables and encoding, on a synthetic one after
                if findings_wanted and claim is not None and _claim(claim, IN_CHILD):
                    ranked_findings(trace)
                    kept.update(trace.memo.kept(("findings",)))
                return handed_back((drawn.path, drawn.flows), kept)

            # the graph's inputs (steps, classes, host reasons), which the findings here
            # read too, made first in the child and sent back (see take_early)
            self._ahead = run_forked(trace, work, (read_first,), READ_FIRST)
            if not self._ahead.running:
                self._claim = None

    def take_early(self) -> None:
        """Keep what the child made first (the steps, slice classes and host reasons, which
        the findings read too): taken as soon as this process can, since the child holds
        them, pickled, until they are read (~23 MB on top of its path search on the
        H100-structured 1M-slice trace when read only at :meth:`find`)."""
        if self._ahead is not None:
            self._ahead.take_early()

    def find(self) -> None:
        """Find the findings here, now (while the child searches), then give the memory
        their temporaries freed back — unless the child, done with the path, has begun
        them: :meth:`get` then keeps its. :meth:`get` does it when not done yet. Apart
        from it so that a caller can do more before it waits."""
        if self._found is None:
            trace = self._trace
            want = self._given is None and self._findings and len(trace.slices) > 0
            if want and self._claim is not None and not _claim(self._claim, HERE):
                return  # the child finds them
            self.take_early()  # what the child made first: not made again here
            self._found = _finding_slices(trace, ranked_findings(trace)) if want else []
            if want:
                release_freed_memory()

    def get(self) -> Results:
        """The results: the findings found here (while the child searches), then the
        path the child found (or found here)."""
        if self._given is not None:
            return self._given
        trace = self._trace
        out = Results()
        if len(trace.slices) == 0:
            return out
        self.find()
        drawn = self._ahead.result() if self._ahead is not None else None
        if self._found is None:  # the child's (kept with its result), else found here now
            self._claim = None
            self.find()
        assert self._found is not None
        out.slices.extend(self._found)
        if not self._critical_path:
            return out
        if drawn is not None:  # the child's runs and flows (its path stored, or kept here)
            self._drawn_in_child = True
            out.path, flows = drawn
            out.flows = pd.concat([out.flows, flows], ignore_index=True)
        else:  # no child, or it failed: found here
            _critical_path(trace, report_path(trace), out)
        return out

    @property
    def meanwhile(self) -> bool:
        """Whether a child is finding the path while the caller works (so work done
        before :meth:`get` is time the caller would otherwise wait)."""
        return self._ahead is not None and self._ahead.running

    @property
    def path_from_child(self) -> bool:
        """Whether the child found the path (and drew its runs and flows) at :meth:`get`."""
        return self._drawn_in_child

    def close(self) -> None:
        """Stop the child, if it still runs."""
        if self._ahead is not None:
            self._ahead.close()

    def __enter__(self) -> PendingResults:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: Who took the findings (:attr:`PendingResults._claim`).
HERE, IN_CHILD = 1, 2


def _claim(flag: Any, who: int) -> bool:
    """Take the findings for ``who``, unless taken already (by ``who``: still True)."""
    with flag.get_lock():
        if flag.value == 0:
            flag.value = who
        return bool(flag.value == who)


def report_path(trace: TraceData) -> path_analysis.CriticalPath:
    """The critical path the report shows and the export writes: over the span of every
    step (the whole trace when it has none)."""
    return path_analysis.critical_path(trace, None, all_steps=True)


def no_runs() -> pd.DataFrame:
    """An empty :attr:`Results.path`."""
    return pd.DataFrame(
        {
            "ts": np.zeros(0, np.int64),
            "dur": np.zeros(0, np.int64),
            "name": pd.Series([], dtype=object),
            "on": pd.Series([], dtype=object),
            "slices": np.zeros(0, np.int64),
            "ops": pd.Series([], dtype=object),
        }
    )


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
    """The critical path's runs, and flows where it crosses tracks."""
    out.path = path_runs(trace, cp)
    edges = cp.edges
    if not len(edges):
        return
    n = len(trace.slices)
    src = edges["src"].to_numpy(np.int64)
    dst = edges["dst"].to_numpy(np.int64)
    ok = (src >= 0) & (dst >= 0) & (src < n) & (dst < n) & (src != dst)
    track = trace.slices["track"].to_numpy(np.int64)
    cross = np.zeros(len(src), bool)
    cross[ok] = track[src[ok]] != track[dst[ok]]
    pairs = pd.DataFrame({"src": src[cross], "dst": dst[cross]}).drop_duplicates()
    out.flows = pd.concat([out.flows, pairs.assign(type="critical_path")], ignore_index=True)


def path_runs(trace: TraceData, cp: path_analysis.CriticalPath) -> pd.DataFrame:
    """The path's segments (consecutive path time on one track, :attr:`CriticalPath.
    segments`) as the "Critical path" row's slices (:attr:`Results.path`'s columns): each
    edge of the path that holds time belongs to the segment its time ends in, its owner
    slice to the slices the run passes through and its time to its op's."""
    seg = cp.segments
    if not len(seg) or not len(cp.edges):
        return no_runs()
    start = seg["start_ns"].to_numpy(np.int64)
    end = seg["end_ns"].to_numpy(np.int64)
    k = len(seg)
    w = cp.edges["weight"].to_numpy(np.int64)
    owner = cp.edges["owner"].to_numpy(np.int64)
    edge_end = cp.start_ns + np.cumsum(w)
    run = np.minimum(np.searchsorted(end, edge_end, side="left"), k - 1)
    has = (owner >= 0) & (owner < len(trace.slices)) & (w > 0)
    run, owner, w = run[has], owner[has], w[has]
    # slices per run: distinct (run, owner) pairs (sorted: run-major keys)
    n = max(len(trace.slices), 1)
    pair = np.sort(run * n + owner, kind="stable")  # run-major already: timsort's runs
    distinct = pair[np.r_[True, pair[1:] != pair[:-1]]] if len(pair) else pair
    count = np.bincount(distinct // n, minlength=k)
    # path time per (run, op name), then each run's top ones
    names = trace.slices["name"]
    m = len(names.cat.categories) + 1
    code = names.cat.codes.to_numpy(np.int64)[owner]
    key = run * m + np.where(code < 0, m - 1, code)  # a missing name: the "" slot, this run's
    order = np.argsort(key, kind="stable")
    key = key[order]
    at = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else key
    ns = np.add.reduceat(w[order], at) if len(key) else np.zeros(0, np.int64)
    key = key[at]
    key_run = key // m
    best = np.lexsort((-ns, key_run))
    first = np.searchsorted(key_run[best], np.arange(k))
    rank = np.arange(len(best)) - first[key_run[best]]
    top = best[rank < RUN_TOP_OPS]
    # the names of the top ops only: every name as text was ~60 ms in a forked child
    codes = key[top] % m
    named = np.unique(codes[codes < m - 1])
    text = dict(zip(named.tolist(), map(str, names.cat.categories.take(named)), strict=True))
    text[m - 1] = ""
    ops: list[list[str]] = [[] for _ in range(k)]
    for r, c, t in zip(key_run[top].tolist(), codes.tolist(), ns[top].tolist(), strict=True):
        ops[r].append(f"{text[c]} ({t / 1e6:.3f} ms)")
    top_op = seg["top_op"].astype(str).to_numpy(dtype=object)
    return pd.DataFrame(
        {
            "ts": start,
            "dur": end - start,
            "name": np.where(top_op == "", "waiting", top_op).astype(object),
            "on": seg["label"].astype(str).to_numpy(dtype=object),
            "slices": count.astype(np.int64),
            "ops": np.array(["; ".join(o) for o in ops], dtype=object),
        }
    )

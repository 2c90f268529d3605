"""Training steps: the unit every other analysis reports in.

A step is a time window ``[start_ns, end_ns)`` on the host. Where it comes from, in order:

1. ``ProfilerStep#N`` annotations that ``torch.profiler`` writes around each ``prof.step()``
   (host annotations only: the profiler also copies them onto device tracks as
   ``gpu_user_annotation``, which we ignore). ``step`` is ``N``.
2. Host slices whose name matches ``pattern`` (a regular expression), numbered 0, 1, ...
   in time order.
3. Otherwise the whole trace is one step (``step`` 0, name ``"trace"``, ``slice`` -1).

Device work belongs to the step that launched it (the TensorBoard profiler plugin's rule):
:func:`attributed_steps` gives each step the window ``[start_ns, end_ns)`` that holds its
host range *and* the device work launched from it, so GPU work queued late in step N and
run during step N+1's host range counts in step N. The windows never overlap and tile the
host steps, so a breakdown over them still partitions each step's time exactly. Device
work launched before the capture (the iteration running when the profiler started:
:func:`explorer.analysis.attribution.launched_before_capture`) is no step's: the first
step starts where it ends. :func:`launching_step` names each device op's step.

Where matches nest on a thread (an inner ``measure|forward`` inside an outer one), the
trace's ``step_nesting`` picks the level: the outermost (the default) or the innermost;
:func:`step_origin` says which annotation and level defined the steps and how many nested
matches were left out, and the report prints it. When several host threads carry the same
step (rare, but some trainers annotate every worker thread), the earliest-starting (then
longest) occurrence wins and the ones overlapping it are dropped, so each step appears
once. If ``ProfilerStep`` numbers repeat (captures concatenated in time), steps are
numbered 0, 1, ... in time order instead.

A step is ``partial`` when it is not whole in the trace: in a file cut short, the last step
and those the cut took events from; else a last step the profiler stopped during (a
fragment with next to no host ops), or whose launched device work it stopped before
recording. :func:`step_times`, the one step-time definition every verb uses, leaves
partial steps out, and :func:`partial_steps` says why each one is.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from explorer.analysis.attribution import launched_before_capture, launcher
from explorer.errors import UsageError
from explorer.trace.columns import category_values
from explorer.trace.memo import declare, memoised
from explorer.trace.model import PROFILER_STEP, TraceData
from explorer.trace.step_options import step_regex
from explorer.trace.window import cut
from explorer.units import fmt_ns

STEP_COLUMNS = ["step", "name", "start_ns", "dur_ns", "end_ns", "slice", "partial"]
#: A last step under this share of the other steps' median time, holding under
#: :data:`FRAGMENT_OPS` of their median host ops, is a fragment: the profiler stopped (or
#: the run was killed) during it. (A steady compiled step after the compiling ones is
#: short too, but runs its ops.)
FRAGMENT_SHARE = 0.5
FRAGMENT_OPS = 0.1


@memoised("steps", depends_on=("step_pattern", "step_nesting"))
def steps(trace: TraceData, pattern: str | None = None) -> pd.DataFrame:
    """One row per step: ``step, name, start_ns, dur_ns, end_ns, slice, partial`` (see
    module doc; ``partial``: the step is not whole, :func:`partial_steps` says why).

    Without ``pattern``, the trace's own (``trace.step_pattern``) applies; where matches
    nest on a thread, ``trace.step_nesting`` picks the outermost or the innermost. Kept in
    the trace's memo per pattern, since every analysis starts here. A window of a trace
    (:func:`window_of_steps`) has the whole trace's steps in it.
    """
    if trace.window is not None:
        return trace.window.steps[STEP_COLUMNS]
    asked = pattern
    if pattern is None:
        pattern = trace.step_pattern
    if pattern is not None:
        out = _matching_steps(trace, step_regex(pattern), numbered_by_name=False)
        if out is None:
            raise UsageError(
                f"no host annotation in {trace.path or 'the trace'} matches {pattern!r}"
            )
    else:
        out = _matching_steps(trace, PROFILER_STEP, numbered_by_name=True)
        if out is None:
            out = _whole_trace(trace)
    reasons = _partial_reasons(trace, out)
    trace.memo.compute(_PARTIAL_REASONS, (asked,), lambda: reasons)  # for partial_steps
    out["partial"] = np.array([bool(r) for r in reasons], dtype=bool)
    return out[STEP_COLUMNS]


#: :func:`_partial_reasons` of the steps table, kept by :func:`steps` for
#: :func:`partial_steps` (computed again only where the steps came from the store).
_PARTIAL_REASONS = "step_partial_reasons"
declare(_PARTIAL_REASONS, depends_on=("steps",))


def _hits(trace: TraceData, rx: re.Pattern[str]) -> tuple[np.ndarray, int]:
    """(ids of the host annotations that are steps at the trace's nesting level, how many
    matches nested at the other level were left out)."""
    s = trace.slices
    row_hit = trace.name_matches(rx) & trace.on_host()
    row_hit &= np.asarray(s["kind"] != "device_annotation")  # categorical: by code
    ids = np.flatnonzero(row_hit)
    if len(ids) == 0:
        return ids, 0
    parent = s["parent"].to_numpy(np.int64)
    if trace.step_nesting == "innermost":
        holds = np.zeros(len(s), bool)  # a match has a match inside it, on its thread
        frontier = parent[ids]
        while True:  # one pass per nesting level, vectorised
            frontier = np.unique(frontier[frontier >= 0])
            frontier = frontier[~holds[frontier]]
            if len(frontier) == 0:
                break
            holds[frontier] = True
            frontier = parent[frontier]
        left_out = holds[ids]
    else:
        inside = trace.inherit_down(row_hit, keep=row_hit)  # a match or under one
        up = parent[ids]
        left_out = np.where(up >= 0, inside[np.clip(up, 0, None)], False)
    return ids[~left_out], int(left_out.sum())


def _matching_steps(
    trace: TraceData, rx: re.Pattern[str], numbered_by_name: bool
) -> pd.DataFrame | None:
    s = trace.slices
    if len(s) == 0:
        return None
    ids, _ = _hits(trace, rx)
    if len(ids) == 0:
        return None
    df = pd.DataFrame(
        {
            "name": category_values(s["name"])[ids].astype(str),
            "start_ns": s["ts"].to_numpy()[ids].astype(np.int64),
            "dur_ns": s["dur"].to_numpy()[ids].astype(np.int64),
            "slice": ids.astype(np.int64),
        }
    )
    # Matches that overlap an earlier (or longer, same-start) match are the same step seen
    # on another thread: drop them.
    df = df.sort_values(["start_ns", "dur_ns"], ascending=[True, False], kind="stable")
    ends = (df["start_ns"] + df["dur_ns"]).to_numpy()
    prev_end = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(ends)[:-1]])
    df = df[df["start_ns"].to_numpy() >= prev_end].copy()
    numbers = df["name"].str.extract(rx.pattern, expand=False) if numbered_by_name else None
    if numbers is not None and numbers.notna().all() and numbers.str.len().max() <= 19:
        # (more digits than int64 holds, ProfilerStep#99999999999999999999, is no step
        # number a profiler wrote: numbered by position, the name keeps it)
        as_int = numbers.astype(object).map(int)
        if as_int.max() > np.iinfo(np.int64).max or not as_int.is_unique:
            numbers = None
    else:
        numbers = None
    if numbers is not None:
        df["step"] = numbers.astype(np.int64)
    else:  # a pattern, or ProfilerStep numbers that repeat (concatenated captures)
        df["step"] = np.arange(len(df), dtype=np.int64)
    df["end_ns"] = df["start_ns"] + df["dur_ns"]
    return df.reset_index(drop=True)


def _cut_short(trace: TraceData) -> bool:
    """Did the load recover the trace from a file cut short (a killed run)?"""
    return any("cut short" in str(w) for w in trace.metadata.get("warnings", []) or [])


def _partial_reasons(trace: TraceData, table: pd.DataFrame) -> list[str]:
    """Per row of a steps table, why the step is not whole ("" when it is): in a file cut
    short, the last step and those the cut took events from; otherwise only the last step
    can be — a fragment the profiler stopped in (under :data:`FRAGMENT_SHARE` of the other
    steps' median time and :data:`FRAGMENT_OPS` of their host ops), or one whose launched device work the
    profiler stopped before recording (more launches without their device work than any
    other step has)."""
    n = len(table)
    out = [""] * n
    if n == 0 or (n == 1 and table["slice"].iat[0] < 0):
        return out  # the whole trace as one step is whole by definition
    dur = table["dur_ns"].to_numpy(np.int64)
    if _cut_short(trace):
        out[-1] = "the trace was cut short during it (events after the cut are lost)"
        for i, what in enumerate(_cut_losses(trace, table)[:-1]):
            if what:
                out[i] = f"the trace was cut short and the step lost events: it holds {what}"
        return out
    if n < 2:
        return out
    typical = float(np.median(dur[:-1]))
    ops = _per_step(trace, table, trace.kind_in(*_HOST_WORK))
    if dur[-1] < FRAGMENT_SHARE * typical and ops[-1] < FRAGMENT_OPS * np.median(ops[:-1]):
        out[-1] = (
            f"the profiler stopped during it: {fmt_ns(int(dur[-1]))} long with {ops[-1]} "
            f"host ops, against a median of {fmt_ns(int(typical))} and "
            f"{int(np.median(ops[:-1]))} for the other steps"
        )
        return out
    lost = _launches_lost(trace, table)
    if lost[-1] > lost[:-1].max():
        out[-1] = (
            f"the profiler stopped while the device still had work of it to run: "
            f"{lost[-1]} of its launches have no device work in the trace"
        )
    return out


#: Host work a step holds (a fragment the profiler stopped in holds next to none).
_HOST_WORK: tuple[str, ...] = ("cpu_op", "runtime", "sync", "fallback", "copy")
#: Runtime calls that put device work on a queue.
_LAUNCH_CALL = re.compile(r"Launch|Memcpy.*Async|Memset.*Async", re.I)


def _per_step(trace: TraceData, table: pd.DataFrame, mask: np.ndarray) -> np.ndarray:
    """Per step, how many of the slices ``mask`` start in its host range."""
    at = trace.slices["ts"].to_numpy(np.int64)[mask]
    h0 = table["start_ns"].to_numpy(np.int64)
    h1 = table["end_ns"].to_numpy(np.int64)
    k = np.searchsorted(h0, at, side="right") - 1
    inside = (k >= 0) & (at < h1[np.clip(k, 0, None)])
    return np.bincount(k[inside], minlength=len(table)).astype(np.int64)


def _launches_lost(trace: TraceData, table: pd.DataFrame) -> np.ndarray:
    """Per step, how many launch calls in its host range have no device work in the trace."""
    s = trace.slices
    corr = s["correlation"].to_numpy(np.int64)
    calls = np.flatnonzero(
        trace.on_host() & (corr >= 0) & trace.kind_in("runtime") & trace.name_matches(_LAUNCH_CALL)
    )
    ran = np.isin(corr[calls], corr[trace.on_device() & (corr >= 0)])
    lost = np.zeros(len(s), bool)
    lost[calls[~ran]] = True
    return _per_step(trace, table, lost)


#: Kinds of events a cut can lose from some steps only (Kineto writes host ops, runtime
#: calls and device events in sections of their own, so a cut drops a section's tail).
_CUT_KINDS: tuple[str, ...] = ("cpu_op", "runtime", "kernel", "memcpy", "memset")


def _cut_losses(trace: TraceData, table: pd.DataFrame) -> list[str]:
    """Per step of a trace cut short, which kinds of event it lost ("" for none): a step
    holding under half as many of a kind as the step with most of them (steps of one
    training loop run the same ops)."""
    out = [""] * len(table)
    for name in _CUT_KINDS:
        count = _per_step(trace, table, trace.kind_in(name))
        most = int(count.max()) if len(count) else 0
        for i in np.flatnonzero(count < most / 2):
            out[i] += (", " if out[i] else "") + f"{count[i]} of {most} {name} events"
    return out


@memoised("partial_steps", depends_on=("steps",))
def partial_steps(trace: TraceData) -> dict[int, str]:
    """Step number → why the step is not whole, for the steps marked ``partial``: left out
    of means, medians and ``--fail-on``, and every output says so."""
    st = steps(trace)
    reasons = (
        trace.memo.compute(_PARTIAL_REASONS, (None,), lambda: _partial_reasons(trace, st))
        if trace.window is None
        else None
    )
    out: dict[int, str] = {}
    for i, row in enumerate(st.itertuples(index=False)):
        if row.partial:
            why = reasons[i] if reasons else "the step is not whole in the trace"
            out[int(row.step)] = why
    return out


@memoised("step_origin", depends_on=("steps",))
def step_origin(trace: TraceData) -> dict[str, object]:
    """What defined the steps, for the report: ``annotation`` (``ProfilerStep#N``, the
    user's pattern, or ``""`` for the whole trace as one step), ``nesting`` (the level
    taken where matches nest) and ``nested_left_out`` (matches at the other level)."""
    pattern = trace.step_pattern
    st = steps(trace)
    if len(st) == 1 and int(st["slice"].iat[0]) < 0:
        return {"annotation": "", "nesting": trace.step_nesting, "nested_left_out": 0}
    rx = step_regex(pattern) if pattern is not None else PROFILER_STEP
    left_out = _hits(trace, rx)[1] if trace.window is None else 0
    return {
        "annotation": pattern if pattern is not None else "ProfilerStep#N",
        "nesting": trace.step_nesting,
        "nested_left_out": left_out,
    }


def counted_steps(trace: TraceData, step: int | None = None) -> pd.DataFrame:
    """The steps that step times and summaries count (attributed windows): the whole ones,
    or every one when all are partial (then they are what there is). ``step``: just it."""
    att = select_steps(trace, step, attributed=True)
    whole = ~att["partial"].to_numpy(bool)
    return att[whole] if whole.any() else att


def step_times(trace: TraceData, step: int | None = None) -> np.ndarray:
    """The step time every verb reports (``report``'s mean and median, ``diff``'s median,
    ``--fail-on step_time``): per counted step (:func:`counted_steps`: partial steps left
    out), its attributed window's duration in ns (:func:`attributed_steps`: the host range
    widened to the device work it launched)."""
    return counted_steps(trace, step)["dur_ns"].to_numpy(np.int64)


def _whole_trace(trace: TraceData) -> pd.DataFrame:
    s = trace.slices
    if len(s):
        start = int(s["ts"].min())
        end = int((s["ts"] + s["dur"]).max())
    else:
        start = end = 0
    return pd.DataFrame(
        {
            "step": np.array([0], np.int64),
            "name": ["trace"],
            "start_ns": np.array([start], np.int64),
            "dur_ns": np.array([end - start], np.int64),
            "end_ns": np.array([end], np.int64),
            "slice": np.array([-1], np.int64),
            "partial": np.array([False]),
        }
    )


@memoised("attributed_steps", depends_on=("steps", "launcher", "before_capture"))
def attributed_steps(trace: TraceData) -> pd.DataFrame:
    """The steps table with each step's window widened to the device work it launched.

    Columns: those of :func:`steps`, where ``start_ns``/``dur_ns``/``end_ns`` are now the
    attributed window, plus ``host_start_ns``/``host_end_ns`` (the host range). For step
    ``N`` with host range ``[h0, h1)`` whose launches (``launch`` flows, else correlation
    ids: :func:`explorer.analysis.attribution.launcher`) ran device work ending at ``d1``:

    - ``start_N = max(h0, end_{N-1}, b_N)``: the step starts when its host range starts, or
      when the device is done with work it did not launch — the previous step's (``end_{N-1}``)
      or work launched outside any step just before it (``b_N``, the end of device work
      launched after step ``N-1``'s host range and before step ``N``'s; for the first step
      also of the work launched before the capture, up to the start of the first launched
      device work),
    - ``end_N = max(h1, d1, start_N)`` (device work on an in-order queue ends in order; a
      running maximum keeps windows ordered when it does not).

    Without device work (CPU traces) the windows are the host ranges. Kept in the memo.
    A window of a trace (:func:`window_of_steps`) has the whole trace's windows.
    """
    if trace.window is not None:
        return trace.window.attributed_steps
    st = steps(trace)
    start, end = attributed_windows(trace)
    out = st.copy()
    out["start_ns"] = start
    out["end_ns"] = end
    out["dur_ns"] = end - start
    out["host_start_ns"] = st["start_ns"].to_numpy(np.int64)
    out["host_end_ns"] = st["end_ns"].to_numpy(np.int64)
    return out


def attributed_windows(
    trace: TraceData,
    ts: np.ndarray | None = None,
    end: np.ndarray | None = None,
    host: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(start_ns, end_ns)`` of every step's attributed window (see
    :func:`attributed_steps`); with the slices at ``ts``/``end`` (per slice id) and the
    steps' host ranges at ``host`` (``(start, end)`` per step), where a what-if replay
    (:mod:`explorer.analysis.whatif`) moved them. Which step launched which device work is
    as recorded."""
    st = steps(trace)
    h0 = st["start_ns"].to_numpy(np.int64)
    h1 = st["end_ns"].to_numpy(np.int64)
    moved = host if ts is not None and end is not None else None
    d1, before = _launched_device_end(trace, h0, h1, moved, ts, end)
    if moved is not None:
        h0, h1 = moved
    ends = np.maximum.accumulate(np.maximum.reduce([h1, d1, before])) if len(st) else h1
    prev_end = np.concatenate([[np.iinfo(np.int64).min], ends[:-1]])
    start = np.maximum.reduce([h0, prev_end, before])
    return start, ends


def _launched_device_end(
    trace: TraceData,
    h0: np.ndarray,
    h1: np.ndarray,
    moved: tuple[np.ndarray, np.ndarray] | None = None,
    ts: np.ndarray | None = None,
    end: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per step, the end of the last device work launched inside its host range (``h1``
    where it launched none), and of the last launched between the previous step's host range
    and its own (``h0`` where none was). For the first step, the latter also holds the end
    of the work launched before the capture (:func:`launched_before_capture`), up to where
    the first launched work starts: the tail of the iteration the profiler caught is no
    profiled step's. ``moved``: the host ranges, ``ts``/``end`` the slices' times after a
    replay (which step launched what is still read from ``h0``/``h1``)."""
    if moved is not None:
        inside_end, before_end = moved[1].copy(), moved[0].copy()
    else:
        inside_end, before_end = h1.copy(), h0.copy()
    if len(h0) == 0:
        return inside_end, before_end
    work, k, inside = _launches(trace)
    all_ends = trace.ends() if end is None else end
    starts = trace.slices["ts"].to_numpy(np.int64) if ts is None else ts
    ends = all_ends[work].astype(np.int64)
    np.maximum.at(inside_end, k[inside], ends[inside])
    nxt = k + 1  # launched in the gap before step k+1 (or before the first step)
    gap = ~inside & (nxt < len(h0))
    np.maximum.at(before_end, nxt[gap], ends[gap])
    pre = np.flatnonzero(launched_before_capture(trace))
    if len(pre):
        tail = int(all_ends[pre].max())
        if len(work):
            tail = min(tail, int(starts[work].min()))
        before_end[0] = max(before_end[0], tail)
    return inside_end, before_end


@memoised("step_launches", depends_on=("steps", "launcher"))
def _launches(trace: TraceData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids of the launched device work, index of the step starting last before each
    launch (-1: before the first), whether the launch lies inside that step's host range).
    Read-only, computed once per trace (every what-if replay asks again)."""
    st = steps(trace)
    h0 = st["start_ns"].to_numpy(np.int64)
    h1 = st["end_ns"].to_numpy(np.int64)
    src = launcher(trace)
    labels = np.asarray(trace.slices["kind"] == "device_annotation")  # categorical: fast
    work = np.flatnonzero((src >= 0) & ~labels)
    launched_at = trace.slices["ts"].to_numpy(np.int64)[src[work]]
    k = np.searchsorted(h0, launched_at, side="right") - 1
    inside = (k >= 0) & (launched_at < h1[np.clip(k, 0, None)]) if len(h0) else k >= 0
    for a in (work, k, inside):
        a.flags.writeable = False
    return work, k, inside


def launching_step(trace: TraceData) -> np.ndarray:
    """Per slice, the row in :func:`steps` (and :func:`attributed_steps`) of the step whose
    host range launched it; -1 for host slices, device work launched between steps or
    before the capture, and device work whose launch is not in the trace."""
    st = steps(trace)
    out = np.full(len(trace.slices), -1, np.int64)
    if len(st) == 0:
        return out
    work, k, inside = _launches(trace)
    out[work[inside]] = k[inside]
    return out


def window_of_steps(trace: TraceData, first: int, last: int, reason: str) -> TraceData:
    """Steps ``first`` to ``last`` (numbers, both included) of ``trace`` as a trace of their
    own (:func:`explorer.trace.window.cut`): every slice overlapping their host ranges or
    their attributed windows, so each step's breakdown and critical path are the whole
    trace's. ``reason`` says why (:attr:`explorer.trace.model.Window.reason`)."""
    att = attributed_steps(trace)
    numbers = att["step"].to_numpy(np.int64)
    chosen = (numbers >= first) & (numbers <= last)
    if not chosen.any():
        have = ", ".join(str(int(x)) for x in numbers[:20])
        raise UsageError(
            f"{trace.path or 'the trace'}: no step from {first} to {last} (its steps: {have})"
        )
    sel = att[chosen]
    lo = int(min(sel["start_ns"].min(), sel["host_start_ns"].min()))
    hi = int(max(sel["end_ns"].max(), sel["host_end_ns"].max()))
    whole = trace.window.whole_steps if trace.window is not None else len(att)
    return cut(
        trace, lo, hi, steps=steps(trace)[chosen], attributed_steps=sel, whole_steps=whole,
        reason=reason,
    )  # fmt: skip


def select_steps(
    trace: TraceData, step: int | None = None, attributed: bool = False
) -> pd.DataFrame:
    """The steps table, or just step ``step`` (a :class:`UsageError` names the valid ones).

    ``attributed``: the windows of :func:`attributed_steps` (device work in the step that
    launched it) instead of the host ranges.
    """
    st = attributed_steps(trace) if attributed else steps(trace)
    if step is None:
        return st
    sel = st[st["step"] == int(step)]
    if sel.empty:
        have = ", ".join(str(int(x)) for x in st["step"].head(20))
        raise UsageError(f"step {step} is not in the trace (steps: {have})")
    return sel.reset_index(drop=True)

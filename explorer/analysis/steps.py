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
host steps, so a breakdown over them still partitions each step's time exactly.

When several host threads carry the same step (rare, but some trainers annotate every
worker thread), or matches nest, the earliest-starting (then longest) occurrence wins and
the ones overlapping it are dropped, so each step appears once. If ``ProfilerStep`` numbers
repeat (captures concatenated in time), steps are numbered 0, 1, ... in time order instead.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from explorer.analysis.attribution import launcher
from explorer.errors import UsageError
from explorer.trace.columns import category_values
from explorer.trace.memo import memoised
from explorer.trace.model import PROFILER_STEP, TraceData, step_regex
from explorer.trace.window import cut

STEP_COLUMNS = ["step", "name", "start_ns", "dur_ns", "end_ns", "slice"]


@memoised("steps")
def steps(trace: TraceData, pattern: str | None = None) -> pd.DataFrame:
    """One row per step: ``step, name, start_ns, dur_ns, end_ns, slice`` (see module doc).

    Without ``pattern``, the trace's own (``trace.step_pattern``) applies. Kept in the
    trace's memo per pattern, since every analysis starts here. A window of a trace
    (:func:`window_of_steps`) has the whole trace's steps in it.
    """
    if trace.window is not None:
        return trace.window.steps[STEP_COLUMNS]
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
    return out


def _matching_steps(
    trace: TraceData, rx: re.Pattern[str], numbered_by_name: bool
) -> pd.DataFrame | None:
    s = trace.slices
    if len(s) == 0:
        return None
    row_hit = trace.name_matches(rx) & trace.on_host()
    row_hit &= np.asarray(s["kind"] != "device_annotation")  # categorical: by code
    ids = np.flatnonzero(row_hit)
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
    # on another thread, or a nested match: drop them.
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
    return df[STEP_COLUMNS].reset_index(drop=True)


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
        }
    )


@memoised("attributed_steps")
def attributed_steps(trace: TraceData) -> pd.DataFrame:
    """The steps table with each step's window widened to the device work it launched.

    Columns: those of :func:`steps`, where ``start_ns``/``dur_ns``/``end_ns`` are now the
    attributed window, plus ``host_start_ns``/``host_end_ns`` (the host range). For step
    ``N`` with host range ``[h0, h1)`` whose launches (``launch`` flows, else correlation
    ids: :func:`explorer.analysis.attribution.launcher`) ran device work ending at ``d1``:

    - ``start_N = max(h0, end_{N-1}, b_N)``: the step starts when its host range starts, or
      when the device is done with work it did not launch — the previous step's (``end_{N-1}``)
      or work launched outside any step just before it, such as the iteration running when
      the profiler started (``b_N``, the end of device work launched after step ``N-1``'s
      host range and before step ``N``'s),
    - ``end_N = max(h1, d1, start_N)`` (device work on an in-order queue ends in order; a
      running maximum keeps windows ordered when it does not).

    Without device work (CPU traces) the windows are the host ranges. Kept in the memo.
    A window of a trace (:func:`window_of_steps`) has the whole trace's windows.
    """
    if trace.window is not None:
        return trace.window.attributed_steps
    st = steps(trace)
    h0 = st["start_ns"].to_numpy(np.int64)
    h1 = st["end_ns"].to_numpy(np.int64)
    d1, before = _launched_device_end(trace, h0, h1)
    end = np.maximum.accumulate(np.maximum.reduce([h1, d1, before])) if len(st) else h1
    prev_end = np.concatenate([[np.iinfo(np.int64).min], end[:-1]])
    start = np.maximum.reduce([h0, prev_end, before])
    out = st.copy()
    out["start_ns"] = start
    out["end_ns"] = end
    out["dur_ns"] = end - start
    out["host_start_ns"] = h0
    out["host_end_ns"] = h1
    return out


def _launched_device_end(
    trace: TraceData, h0: np.ndarray, h1: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per step, the end of the last device work launched inside its host range (``h1``
    where it launched none), and of the last launched between the previous step's host range
    and its own (``h0`` where none was)."""
    inside_end, before_end = h1.copy(), h0.copy()
    src = launcher(trace)
    labels = np.asarray(trace.slices["kind"] == "device_annotation")  # categorical: fast
    work = np.flatnonzero((src >= 0) & ~labels)
    if len(work) == 0 or len(h0) == 0:
        return inside_end, before_end
    launched_at = trace.slices["ts"].to_numpy(np.int64)[src[work]]
    ends = trace.ends()[work].astype(np.int64)
    k = np.searchsorted(h0, launched_at, side="right") - 1  # the step starting last before
    inside = (k >= 0) & (launched_at < h1[np.clip(k, 0, None)])
    np.maximum.at(inside_end, k[inside], ends[inside])
    nxt = k + 1  # launched in the gap before step k+1 (or before the first step)
    gap = ~inside & (nxt < len(h0))
    np.maximum.at(before_end, nxt[gap], ends[gap])
    return inside_end, before_end


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

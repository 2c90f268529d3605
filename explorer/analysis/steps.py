"""Training steps: the unit every other analysis reports in.

A step is a time window ``[start_ns, end_ns)`` on the host. Where it comes from, in order:

1. ``ProfilerStep#N`` annotations that ``torch.profiler`` writes around each ``prof.step()``
   (host annotations only: the profiler also copies them onto device tracks as
   ``gpu_user_annotation``, which we ignore). ``step`` is ``N``.
2. Host slices whose name matches ``pattern`` (a regular expression), numbered 0, 1, ...
   in time order.
3. Otherwise the whole trace is one step (``step`` 0, name ``"trace"``, ``slice`` -1).

When several host threads carry the same step (rare, but some trainers annotate every
worker thread), or matches nest, the earliest-starting (then longest) occurrence wins and
the ones overlapping it are dropped, so each step appears once. If ``ProfilerStep`` numbers
repeat (captures concatenated in time), steps are numbered 0, 1, ... in time order instead.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from explorer.errors import UsageError
from explorer.trace.memo import memoised
from explorer.trace.model import PROFILER_STEP, TraceData, step_regex

STEP_COLUMNS = ["step", "name", "start_ns", "dur_ns", "end_ns", "slice"]


@memoised("steps")
def steps(trace: TraceData, pattern: str | None = None) -> pd.DataFrame:
    """One row per step: ``step, name, start_ns, dur_ns, end_ns, slice`` (see module doc).

    Without ``pattern``, the trace's own (``trace.step_pattern``) applies. Kept in the
    trace's memo per pattern, since every analysis starts here.
    """
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
    row_hit &= s["kind"].to_numpy() != "device_annotation"
    ids = np.flatnonzero(row_hit)
    if len(ids) == 0:
        return None
    df = pd.DataFrame(
        {
            "name": s["name"].to_numpy()[ids].astype(str),
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
    if numbers is not None and numbers.notna().all() and numbers.astype(np.int64).is_unique:
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


def select_steps(trace: TraceData, step: int | None = None) -> pd.DataFrame:
    """The steps table, or just step ``step`` (a :class:`UsageError` names the valid ones)."""
    st = steps(trace)
    if step is None:
        return st
    sel = st[st["step"] == int(step)]
    if sel.empty:
        have = ", ".join(str(int(x)) for x in st["step"].head(20))
        raise UsageError(f"step {step} is not in the trace (steps: {have})")
    return sel.reset_index(drop=True)

"""Which step a slice (or a moment) belongs to: the one home of that rule.

A host slice belongs to the step whose host range ``[start_ns, end_ns)`` holds its start.
Device work belongs to the step of the host call that launched it
(:func:`explorer.analysis.attribution.launcher`): a kernel launched at the end of step 3
that runs during step 4 is step 3's work. Device work whose launch is not in the trace
falls back to its own start. Outside every step the answer is -1.

The steps table is an argument (default :func:`explorer.analysis.steps.steps`), so the
timeline's strip, the memory tables, the dependency graph and a rank's collectives all ask
the same question of the same table. Steps never overlap (the steps table drops overlapping
matches), so a time is in at most one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.analysis.attribution import launcher
from explorer.trace.model import TraceData


def step_rows(steps: pd.DataFrame, ts: np.ndarray | float) -> np.ndarray:
    """Per time in ``ts`` (ns; a fractional time, such as a pixel's, counts as the ns it is
    in), the position (row) in ``steps`` of the step whose ``[start_ns, end_ns)`` holds it;
    -1 outside every step."""
    t = np.atleast_1d(np.asarray(ts))
    t = (np.floor(t) if t.dtype.kind == "f" else t).astype(np.int64)
    if len(steps) == 0:
        return np.full(len(t), -1, np.int64)
    start = steps["start_ns"].to_numpy(np.int64)
    end = steps["end_ns"].to_numpy(np.int64)
    order = np.argsort(start, kind="stable")
    k = np.searchsorted(start[order], t, side="right") - 1
    kk = np.clip(k, 0, None)
    inside = (k >= 0) & (t < end[order][kk])
    return np.where(inside, order[kk], -1).astype(np.int64)


def step_at(steps: pd.DataFrame, ts: np.ndarray | float) -> np.ndarray:
    """Per time in ``ts``, the number of the step holding it (-1 outside every step)."""
    rows = step_rows(steps, ts)
    if len(steps) == 0:
        return rows
    numbers = steps["step"].to_numpy(np.int64)
    return np.where(rows >= 0, numbers[np.clip(rows, 0, None)], -1).astype(np.int64)


def slice_steps(trace: TraceData, steps: pd.DataFrame | None = None) -> np.ndarray:
    """Per slice id, the number of the step it belongs to (see the module doc); -1 for none.

    ``steps``: the steps table to place slices in (default: the trace's own).
    """
    if steps is None:
        from explorer.analysis.steps import steps as trace_steps

        steps = trace_steps(trace)
    n = len(trace.slices)
    if n == 0:
        return np.zeros(0, np.int64)
    ts = trace.slices["ts"].to_numpy(np.int64)
    src = launcher(trace)
    anchor = np.where(src >= 0, ts[np.clip(src, 0, None)], ts)
    return step_at(steps, anchor)


__all__ = ["slice_steps", "step_at", "step_rows"]

"""What the memory panel shows, computed without Qt: the curves ready to plot, every
allocation's lifetime with who made it, what was never freed, each device's peak, the
allocations alive at a moment as the table lists them, and what a curve holds that the trace
never saw allocated.

Every figure comes from :mod:`explorer.analysis.memory` (one pairing of allocations and
frees, one "alive at", one "never freed", one peak per device); this module only shapes
them for the panel (:mod:`explorer.ui.panels.memory`), which runs :func:`memory_data` in a
worker thread and plots and tabulates the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from explorer.analysis.memory import (
    allocations,
    memory_timeline,
    never_freed,
    peaks,
)
from explorer.trace.model import TraceData

#: The allocation tables' columns, in the order people read them.
TABLE_COLUMNS = [
    "device", "bytes", "op", "source", "alloc_ts", "freed_at", "lifetime_ns", "slice", "addr",
]  # fmt: skip


def allocation_lifetimes(trace: TraceData) -> pd.DataFrame:
    """One row per allocation: ``device, addr, bytes, alloc_ts, free_ts (-1: never freed),
    slice, op, source`` (``"file:line"`` of who allocated, ``""`` when unknown).

    From :func:`explorer.analysis.memory.allocations` — the same pairing of allocations and
    frees that ``live_allocations`` and ``leak_suspects`` use, kept whole here because the
    tables also show when each allocation was freed.
    """
    a = allocations(trace)
    out = a[["device", "addr", "bytes", "alloc_ts", "free_ts", "slice", "op"]].copy()
    files = a["file"].astype(str)
    text = files + ":" + a["line"].astype(np.int64).astype(str)
    out["source"] = text.where(files != "", "").to_numpy(dtype=object)
    return out.reset_index(drop=True)


@dataclass
class MemoryData:
    """What the panel shows for one trace (computed off the UI thread)."""

    curves: pd.DataFrame
    allocations: pd.DataFrame
    leaks: pd.DataFrame
    peaks: pd.DataFrame
    #: device → (x seconds, allocated, reserved or None): step-curve points, ready to plot.
    lines: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = field(default_factory=dict)


def memory_data(trace: TraceData) -> MemoryData:
    """Curves, allocation lifetimes, leak suspects and peaks of one trace."""
    curves = memory_timeline(trace)
    allocations = allocation_lifetimes(trace)
    leaks = never_freed(allocations)
    # By device, as the curves are (the panel colours a peak as its curve).
    top = peaks(trace).sort_values("device", kind="stable", ignore_index=True)
    lines = {}
    for device, curve in curves.groupby("device", sort=True):  # one per device
        ts = curve["ts"].to_numpy(np.int64)
        x, allocated = steps_xy(ts, curve["allocated"].to_numpy(np.int64))
        reserved = curve["reserved"].to_numpy(np.int64)
        lines[str(device)] = (x, allocated, steps_xy(ts, reserved)[1] if reserved.any() else None)
    return MemoryData(curves, allocations, leaks, top, lines)


def table_frame(allocs: pd.DataFrame, trace_end: int) -> pd.DataFrame:
    """The allocation columns people read. ``freed_at`` is empty (NaN) for memory never freed
    in the trace, whose lifetime then runs to the end of the trace."""
    free = allocs["free_ts"].to_numpy(np.int64)
    alloc_ts = allocs["alloc_ts"].to_numpy(np.int64)
    lifetime = np.where(free >= 0, free - alloc_ts, np.maximum(trace_end - alloc_ts, 0))
    freed_at = np.where(free >= 0, free, np.nan)
    out = allocs.assign(lifetime_ns=lifetime, freed_at=freed_at)
    return out[TABLE_COLUMNS].reset_index(drop=True)


def allocated_before_trace(
    data: MemoryData, alive: pd.DataFrame, ts_ns: int
) -> list[tuple[str, int, int]]:
    """``(device, allocated, allocated before the trace)`` for each device where the curve
    at ``ts_ns`` holds more than the allocations the trace saw being made and still alive."""
    out = []
    curves = data.curves
    for device, curve in curves.groupby("device", sort=True):
        ts = curve["ts"].to_numpy(np.int64)
        k = int(np.searchsorted(ts, ts_ns, side="right")) - 1
        if k < 0:
            continue
        held = int(curve["allocated"].to_numpy(np.int64)[k])
        seen = int(alive.loc[alive["device"].astype(str) == str(device), "bytes"].sum())
        if held > seen:
            out.append((str(device), held, held - seen))
    return out


def steps_xy(ts: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A step curve (value holds until the next event) as x in seconds, y in bytes."""
    if len(ts) == 0:
        return np.zeros(0), np.zeros(0)
    x = np.repeat(ts, 2)[1:] / 1e9
    y = np.repeat(values, 2)[:-1].astype(np.float64)
    return x, y


__all__ = [
    "TABLE_COLUMNS",
    "MemoryData",
    "allocated_before_trace",
    "allocation_lifetimes",
    "memory_data",
    "steps_xy",
    "table_frame",
]

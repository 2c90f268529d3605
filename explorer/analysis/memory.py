"""Memory over time, peaks, what is alive when, and what is never freed.

Everything here reads ``trace.memory`` — the profiler's ``[memory]`` events (one row per
allocation, ``bytes > 0``, or free, ``bytes < 0``, with the allocator's running totals) —
and answers in the units users think in: a device label (``"cuda:0"``, ``"cpu"``), bytes,
and the op and source line that allocated.

- :func:`memory_timeline` — allocated and reserved bytes per device after every event.
- :func:`peaks` — each device's highest allocated bytes and when it was reached;
  :func:`peak_contributors` — the ops and lines holding the memory at that moment.
- :func:`allocations` — every allocation paired with its free (by address, per device).
- :func:`live_allocations` — the allocations alive at a time.
- :func:`leak_suspects` — allocations never freed by the end of the trace, largest first.
- :func:`growth_per_step` — allocated bytes at the end of every step, per device.
- :func:`memory_finding_inputs` — one row per device with what the ``memory`` detector
  weighs (peak, growth across steps, never-freed bytes and the lines that made them).

The op of an allocation is the innermost host op enclosing its event, skipping allocator
primitives (``aten::empty``, ``aten::empty_strided``...) so the answer is the op a person
wrote (``aten::linear``, ``aten::to``); its line is that op's innermost user frame
(:func:`explorer.trace.source.user_frames`). All work is vectorised (sorts, ``searchsorted``
and group-bys); results are kept in ``trace.memo``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.analysis.slice_steps import step_at
from explorer.trace.columns import category_values
from explorer.trace.kinds import DEVICE_TYPES, device_label
from explorer.trace.memo import memoised
from explorer.trace.model import TraceData

#: Ops that only carve out memory for the op that called them: an allocation made inside one
#: is credited to its caller.
ALLOCATOR_OPS: frozenset[str] = frozenset({
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
    "aten::new_empty_strided", "aten::resize_", "aten::as_strided", "aten::view",
    "[memory]",
})  # fmt: skip

TIMELINE_COLUMNS = ["device", "ts", "allocated", "reserved"]
ALLOCATION_COLUMNS = [
    "device", "addr", "bytes", "alloc_ts", "free_ts", "op", "file", "line", "function", "slice",
    "step",
]  # fmt: skip
LIVE_COLUMNS = [
    "device",
    "addr",
    "bytes",
    "alloc_ts",
    "op",
    "file",
    "line",
    "function",
    "slice",
    "step",
]


def memory_device_labels(memory: pd.DataFrame) -> np.ndarray:
    """``"cuda:0"``-style label of every memory event (``"cpu"`` for host memory). One label
    is built per distinct (device type, index) pair, then broadcast."""
    if len(memory) == 0:
        return np.empty(0, dtype=object)
    kind = memory["device_type"].to_numpy(np.int64)
    index = memory["device"].to_numpy(np.int64)
    # (type, index) packed into one int64, in the same order: np.unique over rows
    # (``axis=0``) sorts them as opaque records, 0.19 s a call on 600k events.
    low_k, low_i = int(kind.min()), int(index.min())
    width = int(index.max()) - low_i + 1
    uniq, inverse = np.unique((kind - low_k) * width + (index - low_i), return_inverse=True)
    names = []
    for key in uniq.tolist():  # one iteration per distinct device
        t, d = divmod(key, width)
        t, d = t + low_k, d + low_i
        names.append(device_label(DEVICE_TYPES.get(int(t), f"device{t}"), d))
    return np.asarray(names, dtype=object)[np.asarray(inverse).reshape(-1)]


@memoised("memory_timeline")
def memory_timeline(trace: TraceData) -> pd.DataFrame:
    """``[device, ts, allocated, reserved]``: the totals after every memory event, per device,
    sorted by time (ties keep file order).

    ``allocated``/``reserved`` are the allocator's ``Total Allocated``/``Total Reserved`` as
    written. Where a trace lacks them, ``allocated`` is the running sum of ``bytes`` on that
    device (so it starts at 0: memory allocated before profiling is not visible) and
    ``reserved`` falls back to ``allocated`` (the least the allocator can have reserved).
    """
    m = trace.memory
    if m is None or len(m) == 0:
        out = pd.DataFrame(
            {
                "device": pd.Series([], dtype=object),
                "ts": np.empty(0, np.int64),
                "allocated": np.empty(0, np.int64),
                "reserved": np.empty(0, np.int64),
            }
        )
        return out
    labels = memory_device_labels(m)
    ts = m["ts"].to_numpy(np.int64)
    order = np.argsort(ts, kind="stable")
    nbytes = m["bytes"].to_numpy(np.int64)[order]
    dev = pd.Series(labels[order])
    running = pd.Series(nbytes).groupby(dev.to_numpy(), sort=False).cumsum().to_numpy(np.int64)
    written = m["total_allocated"].to_numpy(np.int64)[order]
    allocated = np.where(written >= 0, written, running)
    reserved_w = m["total_reserved"].to_numpy(np.int64)[order]
    reserved = np.where(reserved_w >= 0, np.maximum(reserved_w, 0), allocated)
    out = pd.DataFrame(
        {"device": labels[order], "ts": ts[order], "allocated": allocated, "reserved": reserved}
    )
    return out


def peaks(trace: TraceData) -> pd.DataFrame:
    """``[device, peak_bytes, ts, reserved_bytes]``: per device, the highest allocated bytes,
    the first time it was reached, and what was reserved then; largest first."""
    tl = memory_timeline(trace)
    if len(tl) == 0:
        return pd.DataFrame(
            {
                "device": pd.Series([], dtype=object),
                "peak_bytes": np.empty(0, np.int64),
                "ts": np.empty(0, np.int64),
                "reserved_bytes": np.empty(0, np.int64),
            }
        )
    idx = tl.groupby("device", sort=True)["allocated"].idxmax()  # first max per device
    rows = tl.loc[idx.to_numpy()]
    out = pd.DataFrame(
        {
            "device": rows["device"].to_numpy(),
            "peak_bytes": rows["allocated"].to_numpy(np.int64),
            "ts": rows["ts"].to_numpy(np.int64),
            "reserved_bytes": rows["reserved"].to_numpy(np.int64),
        }
    )
    return out.sort_values(["peak_bytes", "device"], ascending=[False, True], ignore_index=True)


@memoised("memory_allocations", depends_on=("steps", "frame_codes"))
def allocations(trace: TraceData) -> pd.DataFrame:
    """One row per allocation seen in the trace, paired with its free:
    ``device, addr, bytes, alloc_ts, free_ts`` (-1: never freed), ``op, file, line, function``
    (who allocated; ``""``/-1 when unknown), ``slice`` (enclosing host slice, -1 for none) and
    ``step`` (the step it was made in, -1 outside every step).

    Events are sorted by (device, address, time); an allocation's free is the next event on
    the same device and address when that event frees. An address allocated again without a
    free in between (a lost event) ends the earlier allocation at the re-allocation. Frees of
    memory allocated before profiling started have no allocation and are not listed.
    """
    from explorer.analysis.steps import steps as find_steps

    m = trace.memory
    if m is None or len(m) == 0:
        return pd.DataFrame({c: [] for c in ALLOCATION_COLUMNS})
    labels = memory_device_labels(m)
    codes = pd.Categorical(labels).codes.astype(np.int64)
    addr = m["addr"].to_numpy(np.int64)
    ts = m["ts"].to_numpy(np.int64)
    nbytes = m["bytes"].to_numpy(np.int64)
    order = np.lexsort((np.arange(len(m)), ts, addr, codes))
    same_next = np.zeros(len(order), bool)
    same_next[:-1] = (codes[order][1:] == codes[order][:-1]) & (addr[order][1:] == addr[order][:-1])
    next_ts = np.r_[ts[order][1:], -1]
    is_alloc = nbytes[order] > 0
    free_ts = np.where(same_next, next_ts, -1)
    rows = order[is_alloc]
    free_ts = free_ts[is_alloc]
    slice_id = (
        m["slice"].to_numpy(np.int64)[rows] if "slice" in m else np.full(len(rows), -1, np.int64)
    )
    op_slice = _op_slices(trace, slice_id)
    op, file, line, function = _who(trace, op_slice)
    out = pd.DataFrame({
        "device": labels[rows], "addr": addr[rows], "bytes": nbytes[rows], "alloc_ts": ts[rows],
        "free_ts": free_ts, "op": op, "file": file, "line": line, "function": function,
        "slice": slice_id, "step": step_at(find_steps(trace), ts[rows]),
    })  # fmt: skip
    out = out.sort_values(["alloc_ts", "device", "addr"], kind="stable", ignore_index=True)
    return out


def alive_at(allocs: pd.DataFrame, ts: int) -> pd.DataFrame:
    """The rows of an :func:`allocations`-shaped table (any columns, with ``bytes``,
    ``alloc_ts`` and ``free_ts``) alive at ``ts`` — allocated at or before it and not yet
    freed — largest first (ties: earliest allocated, then table order)."""
    alloc_ts = allocs["alloc_ts"].to_numpy(np.int64)
    free_ts = allocs["free_ts"].to_numpy(np.int64)
    alive = (alloc_ts <= ts) & ((free_ts < 0) | (free_ts > ts))
    return _largest_first(allocs.loc[alive])


def never_freed(allocs: pd.DataFrame) -> pd.DataFrame:
    """The rows of an :func:`allocations`-shaped table never freed in the trace, largest
    first (as :func:`alive_at` orders them)."""
    return _largest_first(allocs.loc[allocs["free_ts"].to_numpy(np.int64) < 0])


def _largest_first(allocs: pd.DataFrame) -> pd.DataFrame:
    return allocs.sort_values(
        ["bytes", "alloc_ts"], ascending=[False, True], kind="stable", ignore_index=True
    )


def live_allocations(trace: TraceData, ts: int) -> pd.DataFrame:
    """``[device, addr, bytes, alloc_ts, op, file, line, function, slice, step]``: the
    allocations alive at ``ts`` (allocated at or before it, not yet freed), largest first."""
    a = allocations(trace)
    if len(a) == 0:
        return pd.DataFrame({c: [] for c in LIVE_COLUMNS})
    return alive_at(a, ts)[LIVE_COLUMNS]


def leak_suspects(trace: TraceData) -> pd.DataFrame:
    """Allocations never freed by the end of the trace, largest first (same columns as
    :func:`live_allocations`). Those made in early steps are the strongest suspects: memory
    a step allocates is normally gone by the next step."""
    a = allocations(trace)
    if len(a) == 0:
        return pd.DataFrame({c: [] for c in LIVE_COLUMNS})
    return never_freed(a)[LIVE_COLUMNS]


def peak_contributors(trace: TraceData, top: int = 10) -> pd.DataFrame:
    """What holds the memory at each device's peak: ``[device, op, file, line, function,
    bytes, count]``, the live allocations grouped by op and source line, largest first (at
    most ``top`` rows per device)."""
    cols = ["device", "op", "file", "line", "function", "bytes", "count"]
    p = peaks(trace)
    parts = []
    for dev, ts in zip(p["device"], p["ts"], strict=True):  # one iteration per device
        live = live_allocations(trace, int(ts))
        live = live[live["device"] == dev]
        if live.empty:
            continue
        g = (
            live.groupby(["op", "file", "line", "function"], sort=False, observed=True)["bytes"]
            .agg(["sum", "count"])
            .reset_index()
            .rename(columns={"sum": "bytes"})
        )
        g.insert(0, "device", dev)
        parts.append(g.sort_values("bytes", ascending=False).head(top))
    if not parts:
        return pd.DataFrame({c: [] for c in cols})
    return pd.concat(parts, ignore_index=True)[cols]


def growth_per_step(trace: TraceData) -> pd.DataFrame:
    """``[device, step, allocated_at_end]``: per device, the allocated bytes after the last
    memory event at or before each step's end (steps from :func:`explorer.analysis.steps.steps`).
    Steps that end before a device's first event have no row for that device."""
    from explorer.analysis.steps import steps as find_steps

    tl = memory_timeline(trace)
    st = find_steps(trace)
    if len(tl) == 0 or len(st) == 0:
        return pd.DataFrame(
            {
                "device": pd.Series([], dtype=object),
                "step": np.empty(0, np.int64),
                "allocated_at_end": np.empty(0, np.int64),
            }
        )
    ends = st["end_ns"].to_numpy(np.int64)
    parts = []
    for dev, g in tl.groupby("device", sort=True):  # one iteration per device
        ts = g["ts"].to_numpy(np.int64)
        k = np.searchsorted(ts, ends, side="right") - 1
        ok = k >= 0
        parts.append(
            pd.DataFrame(
                {
                    "device": dev,
                    "step": st["step"].to_numpy(np.int64)[ok],
                    "allocated_at_end": g["allocated"].to_numpy(np.int64)[k[ok]],
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def memory_finding_inputs(trace: TraceData) -> pd.DataFrame:
    """What a ``memory`` finding weighs, one row per device:
    ``device, peak_bytes, peak_ts, first_step, last_step, start_bytes, end_bytes, growth_bytes``
    (allocated at the end of the last step minus at the end of the first), ``growing_steps``
    (steps whose end is above the previous step's end), ``steps`` (steps with a value),
    ``leaked_bytes``/``leaked_count`` (never freed, made inside a step before the last one:
    what outlives the step that made it), and ``top_line`` (file, line, function) of the
    largest such bytes, or None. Largest growth first."""
    p = peaks(trace).set_index("device")
    g = growth_per_step(trace)
    sus = leak_suspects(trace)
    last_step = int(g["step"].max()) if len(g) else -1
    rows = []
    for dev in p.index:  # one iteration per device
        gd = g[g["device"] == dev].sort_values("step")
        alloc = gd["allocated_at_end"].to_numpy(np.int64)
        d = np.diff(alloc)
        s = sus[(sus["device"] == dev) & (sus["step"] >= 0) & (sus["step"] < last_step)]
        top = None
        known = s[s["file"].astype(str) != ""]
        if len(known):
            by_line = known.groupby(["file", "line", "function"], sort=False, observed=True)[
                "bytes"
            ].sum()
            f, ln, fn = by_line.idxmax()
            top = (str(f), int(ln), str(fn))
        rows.append({
            "device": dev, "peak_bytes": int(p.at[dev, "peak_bytes"]), "peak_ts": int(p.at[dev, "ts"]),
            "first_step": int(gd["step"].iloc[0]) if len(gd) else -1,
            "last_step": int(gd["step"].iloc[-1]) if len(gd) else -1,
            "start_bytes": int(alloc[0]) if len(alloc) else 0,
            "end_bytes": int(alloc[-1]) if len(alloc) else 0,
            "growth_bytes": int(alloc[-1] - alloc[0]) if len(alloc) else 0,
            "growing_steps": int((d > 0).sum()), "steps": len(alloc),
            "leaked_bytes": int(s["bytes"].sum()), "leaked_count": len(s), "top_line": top,
        })  # fmt: skip
    out = pd.DataFrame(rows)
    if len(out):
        out = out.sort_values(
            ["growth_bytes", "device"], ascending=[False, True], ignore_index=True
        )
    return out


# -- who allocated ------------------------------------------------------------------------------
def _op_slices(trace: TraceData, slice_id: np.ndarray) -> np.ndarray:
    """Each allocation's enclosing slice, moved up past allocator primitives to their caller.
    One pass per nesting level that still points at a primitive (a handful)."""
    s = trace.slices
    out = slice_id.copy()
    if len(s) == 0 or len(out) == 0:
        return out
    names = s["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return out
    cats = names.cat.categories.astype(str)
    prim_code = np.isin(np.asarray(cats, dtype=object), list(ALLOCATOR_OPS))
    codes = names.cat.codes.to_numpy()
    is_prim = np.zeros(len(s), bool)
    valid = codes >= 0
    is_prim[valid] = prim_code[codes[valid]]
    parent = s["parent"].to_numpy(np.int64)
    # Never up into a Python frame: the primitive's caller there is a frame like ``<built-in
    # method empty of type object at 0x7f…>``, which names no op; the primitive itself
    # (``aten::empty``) does, and its source line is the same.
    op_parent = parent >= 0
    op_parent[op_parent] = ~trace.kind_in("python")[parent[op_parent]]
    for _ in range(64):
        ok = out >= 0
        move = np.zeros(len(out), bool)
        move[ok] = is_prim[out[ok]] & op_parent[out[ok]]
        if not move.any():
            break
        out[move] = parent[out[move]]
    return out


def _values_at(column: pd.Series, ids: np.ndarray) -> np.ndarray:
    """``column``'s values at rows ``ids``, as strings: through its codes when it is a
    categorical."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return category_values(column)[ids].astype(str)
    return column.to_numpy(dtype=object)[ids].astype(str)


def _who(
    trace: TraceData, op_slice: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(op name, file, line, function) for each slice id (-1 → "", "", -1, "")."""
    n = len(op_slice)
    op = np.full(n, "", dtype=object)
    file = np.full(n, "", dtype=object)
    function = np.full(n, "", dtype=object)
    line = np.full(n, -1, np.int64)
    ok = op_slice >= 0
    if not ok.any():
        return op, file, line, function
    from explorer.trace.source import user_frames

    ids = op_slice[ok]
    op[ok] = category_values(trace.slices["name"])[ids].astype(str)
    frames = user_frames(trace)
    # the categoricals' strings per allocation, not one per slice first (1M slices: 0.2 s)
    file[ok] = _values_at(frames["file"], ids)
    line[ok] = frames["line"].to_numpy(np.int64)[ids]
    function[ok] = _values_at(frames["function"], ids)
    return op, file, line, function

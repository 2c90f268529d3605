"""Explorer's figures, taken so that each compares with a peer's figure of the same definition.

Every number here comes from Explorer's analyses as a user gets them (the breakdown's reason
timeline, the attributed step windows, the operator table, the slice table's kinds); this
module only sums them over the window or event set a peer uses, and converts Explorer's
trace-relative ns to the file's own clock (the ``ts`` µs the peers read, as ns).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.analysis.breakdown import DEVICE_REASONS, device_slice_reasons, timelines
from explorer.analysis.operators import _children_time, operator_stats
from explorer.analysis.steps import select_steps
from explorer.trace.columns import category_values
from explorer.trace_api import Trace
from tests.peers.peers import INPUT_ANNOTATION, RUNTIME_CATEGORIES

#: The breakdown's device reasons that are the device busy (the rest is the device idle,
#: split by what the host does).
DEVICE_BUSY = ("dev_compute", "dev_comm", "dev_copy")


def file_clock(trace: Trace) -> int:
    """ns to add to a trace-relative time to get the file's clock (``ts`` µs x 1000)."""
    base = trace.metadata.get("baseTimeNanoseconds") or 0
    return int(trace.metadata["start_ns"]) - int(base)


def device_labels(trace: Trace) -> list[str]:
    return [k for k in timelines(trace.data) if k != "host"]


def reasons_over(trace: Trace, label: str, start: int, end: int) -> dict[str, int]:
    """ns of each breakdown reason of device ``label`` in ``[start, end)`` (file clock)."""
    tl = timelines(trace.data)[label]
    off = file_clock(trace)
    s, e = np.array([start - off]), np.array([end - off])
    return {r: int(tl.reason_ns(r, s, e)[0]) for r, _ in tl.reasons}


def step_windows(trace: Trace) -> pd.DataFrame:
    """The attributed step windows (the report's ``steps[].start_ns/dur_ns``) on the file clock,
    with ``partial`` where Explorer marks a step that is not whole."""
    st = select_steps(trace.data, None, attributed=True).copy()
    off = file_clock(trace)
    st["start"] = st["start_ns"].to_numpy(np.int64) + off
    st["end"] = st["end_ns"].to_numpy(np.int64) + off
    if "partial" not in st.columns:
        st["partial"] = False
    return st.reset_index(drop=True)


def reason_inside(trace: Trace, label: str, reason: str, spans: np.ndarray) -> int:
    """ns of breakdown ``reason`` on ``label`` inside the union of ``spans`` (rows of
    [start, end), file clock)."""
    if not len(spans):
        return 0
    spans = spans[np.argsort(spans[:, 0], kind="stable")]
    merged = [list(spans[0])]
    for a, b in spans[1:]:
        if a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    m = np.array(merged, np.int64) - file_clock(trace)
    return int(timelines(trace.data)[label].reason_ns(reason, m[:, 0], m[:, 1]).sum())


def named_spans(trace: Trace, names: tuple[str, ...], start: int, end: int) -> np.ndarray:
    """[start, end) (file clock) of the slices whose names start with one of ``names``,
    clipped to [start, end)."""
    s = trace.slices
    keep = pd.Series(category_values(s["name"]).astype(str)).str.startswith(names).to_numpy(bool)
    a = s["ts"].to_numpy(np.int64)[keep] + file_clock(trace)
    b = a + s["dur"].to_numpy(np.int64)[keep]
    a, b = np.maximum(a, start), np.minimum(b, end)
    return np.stack([a, b], axis=1)[b > a]


def step_breakdown(trace: Trace) -> pd.DataFrame:
    """``trace.breakdown()`` wide: one row per (step, device), one column per category."""
    bd = trace.breakdown()
    return bd.pivot_table(
        index=["step", "device"], columns="category", values="ns", aggfunc="sum", observed=False
    ).reset_index()


#: The annotations the TensorBoard plugin leaves out of its op tree unless named like a
#: collective (``create_operator_node``) or the input pipeline.
TB_ANNOTATION_CATEGORIES = ("user_annotation", "gpu_user_annotation")
#: The event categories the plugin reads (its ``EventTypeMap``, and the runtime categories
#: that ``peers.run_tb`` gives it under its old name); it ignores every other one.
TB_KNOWN_CATEGORIES = (
    ("trace", "cpu_op", "operator", "runtime", "kernel", "memcpy", "gpu_memcpy", "memset")
    + ("gpu_memset", "python", "memory", "python_function")
    + TB_ANNOTATION_CATEGORIES
    + tuple(RUNTIME_CATEGORIES)
)
TB_COLLECTIVE_NAMES = tuple(
    f"{lib}:{op}"
    for lib in ("nccl", "gloo")
    for op in ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter")
)


def tb_op_tree_self_moves(trace: Trace) -> pd.Series:
    """Per host op name, the time (ns) that the plugin's self time holds and Explorer's does
    not: the time inside its calls of the slices the plugin builds no op-tree node of (a
    ``record_function`` annotation not named like a collective or the input pipeline; a
    category it does not read, as Explorer's own ``explorer_compile`` spans), less the
    plugin's ops and runtime calls inside them. The plugin's self time is a call's time
    less its nearest op-tree descendants'; Explorer's is its time less its direct
    children's, and it gives those slices' own time to their rows. Runtime calls are
    moved as the plugin ties them: to the first op (in time) with their External id,
    wherever it lies, or to no op."""
    s = trace.slices
    cat = category_values(s["cat"]).astype(str)
    name = category_values(s["name"]).astype(str)
    parent = s["parent"].to_numpy(np.int64)
    dur = s["dur"].to_numpy(np.int64)
    transparent = np.isin(cat, TB_ANNOTATION_CATEGORIES) | ~np.isin(cat, TB_KNOWN_CATEGORIES)
    node = ~transparent | np.isin(name, TB_COLLECTIVE_NAMES)
    node |= pd.Series(name).str.startswith(INPUT_ANNOTATION).to_numpy(bool)
    has = parent >= 0
    ts = s["ts"].to_numpy(np.int64)
    direct = _children_time(parent, np.ones(len(s), bool), ts, ts + dur)  # what self subtracts
    up = np.full(len(s), -1, np.int64)  # each node's nearest enclosing node
    for i in np.flatnonzero(node & has):
        p = parent[i]
        while p >= 0 and not node[p]:
            p = parent[p]
        up[i] = p
    runtime = category_values(s["kind"]).astype(str) == "runtime"
    # The plugin ties a runtime call to the first op (in time) with its External id,
    # wherever it lies, instead of to the op it is nested in (id 0 or no such op: none).
    eid = s["external_id"].to_numpy(np.int64)
    owners = np.flatnonzero(node & ~runtime & (eid > 0) & (trace.data.sides() != 1))
    owners = owners[np.argsort(ts[owners], kind="stable")]
    first = pd.Series(owners).groupby(eid[owners]).first()
    rts = np.flatnonzero(runtime)
    owner = first.reindex(eid[rts]).to_numpy()
    tied = ~np.isnan(owner)
    up[rts] = -1
    up[rts[tied]] = owner[tied].astype(np.int64)
    op = up >= 0
    nearest = np.bincount(up[op], weights=dur[op], minlength=len(s))
    gained = (direct - nearest).astype(np.int64)
    keep = node & (gained != 0)
    return pd.Series(gained[keep], index=name[keep]).groupby(level=0).sum()


def step_reasons(trace: Trace, label: str) -> pd.DataFrame:
    """Per attributed step: ns of each breakdown reason on device ``label`` (or ``host``)."""
    st = select_steps(trace.data, None, attributed=True)
    tl = timelines(trace.data)[label]
    s = st["start_ns"].to_numpy(np.int64)
    e = st["end_ns"].to_numpy(np.int64)
    out = pd.DataFrame({"step": st["step"].to_numpy()})
    for r, _ in tl.reasons:
        out[r] = tl.reason_ns(r, s, e)
    return out


def device_slices(trace: Trace) -> pd.DataFrame:
    """Explorer's device work: file-clock start, duration, kind, whether its launch is in the
    trace and the file-clock start of that launch, and the breakdown's class (``compute``,
    ``communication``, ``data_movement``, ``wait``)."""
    s = trace.slices
    code = device_slice_reasons(trace.data)
    on_device = trace.data.sides() == 1
    keep = on_device & (code >= 0)
    launch_ts = np.full(len(s), np.iinfo(np.int64).max, np.int64)  # no launch: never
    f = trace.flows[trace.flows["type"] == "launch"]
    launch_ts[f["dst"].to_numpy()] = s["ts"].to_numpy(np.int64)[f["src"].to_numpy()]
    classes = np.array([c for _, c in DEVICE_REASONS[:4]] + ["none"])
    classes[3] = "wait"
    return pd.DataFrame(
        {
            "ts": s["ts"].to_numpy(np.int64)[keep] + file_clock(trace),
            "dur": s["dur"].to_numpy(np.int64)[keep],
            "name": category_values(s["name"])[keep].astype(str),
            "kind": category_values(s["kind"])[keep].astype(str),
            "launched": launched(trace)[keep],
            "launch_ts": np.where(
                launch_ts[keep] == np.iinfo(np.int64).max,
                launch_ts[keep],
                launch_ts[keep] + file_clock(trace),
            ),
            "cls": classes[code[keep]],
        }
    )


def launched(trace: Trace) -> np.ndarray:
    """Per slice: is it the device end of a launch flow (its host launch is in the trace)?"""
    out = np.zeros(len(trace.slices), bool)
    f = trace.flows
    if len(f):
        out[f.loc[f["type"] == "launch", "dst"].to_numpy()] = True
    return out


def operators(trace: Trace) -> pd.DataFrame:
    """The Operators table (``explorer.analysis.operators.operator_stats``) for the whole trace."""
    return operator_stats(trace.data)


def match_events(theirs: pd.DataFrame, ours: pd.DataFrame, tol_ns: int = 2) -> np.ndarray:
    """For each row of ``theirs`` (``ts``, ``dur`` on the file clock, ns), the row of ``ours``
    that is the same event (start and duration within ``tol_ns``: the µs floats of the file
    parse to ns a rounding apart in two tools), each used once; -1 where none is."""
    order = np.argsort(ours["ts"].to_numpy(), kind="stable")
    ts = ours["ts"].to_numpy()[order]
    dur = ours["dur"].to_numpy()[order]
    used = np.zeros(len(ts), bool)
    out = np.full(len(theirs), -1, np.int64)
    lo = np.searchsorted(ts, theirs["ts"].to_numpy() - tol_ns, side="left")
    hi = np.searchsorted(ts, theirs["ts"].to_numpy() + tol_ns, side="right")
    for i, (a, b, d) in enumerate(zip(lo, hi, theirs["dur"].to_numpy(), strict=True)):
        for j in range(a, b):
            if not used[j] and abs(int(dur[j]) - int(d)) <= tol_ns:
                used[j] = True
                out[i] = order[j]
                break
    return out

"""Every call of an operator that fell back to the CPU, and what its copies cost, from the
host's events alone.

Any backend that sends an operator to the CPU the way PyTorch's generic fallback does — a
C++ backend through ``at::native::cpu_fallback``, a Python one from its dispatch — leaves
the same thing in a torch.profiler trace: the operator, an ``aten::_to_cpu`` inside it (the
copy out), the CPU kernel, and the copies back (``aten::copy_`` / ``aten::_to_copy``).
A call is found either as Explorer's collector labelled it (an ``explorer_fallback`` slice
over the operator, with the user's line the backend's warning named) or, in any other
trace, as the innermost operator around an ``aten::_to_cpu`` that is not the fallback's own
plumbing, or — for a backend that moves tensors its own way — as an operator that holds a
copy, then the same operator run on the host, then a copy. No device timeline is needed: the copies are measured on the host, where the
caller waits for them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.trace.columns import category_in, category_values
from explorer.trace.kinds import (
    FALLBACK_COPY_BACK,
    FALLBACK_MARKER,
    FALLBACK_MOVE_OUT,
    FALLBACK_PLUMBING,
)
from explorer.trace.memo import memoised
from explorer.trace.model import TraceData

COLUMNS = ("id", "op", "track", "ts", "end", "copy_out_ns", "copy_back_ns", "cpu_ns", "labelled")


def _marked_ops(trace: TraceData, host: np.ndarray) -> np.ndarray:
    """Ids of the innermost non-plumbing host ops around each ``aten::_to_cpu``."""
    names = trace.slices["name"]
    parent = trace.slices["parent"].to_numpy(np.int64)
    cur = parent[np.flatnonzero(host & category_in(names, [FALLBACK_MARKER]))]
    plumbing = category_in(names, FALLBACK_PLUMBING) | ~trace.kind_in("cpu_op")
    while len(cur):
        ok = cur >= 0
        climb = ok & plumbing[np.where(ok, cur, 0)]
        if not climb.any():
            break
        cur = np.where(climb, parent[np.where(ok, cur, 0)], cur)
    return np.unique(cur[cur >= 0])


#: How far up an op's parents the same-named op that ran it on the host is looked for
#: (``aten::sigmoid`` > ``PythonSubclass`` > ... > ``aten::sigmoid``).
_NESTING = 16


def _sandwiched_ops(trace: TraceData, host: np.ndarray) -> np.ndarray:
    """Ids of host ops that ran themselves on the CPU between copies: ``X`` holding a copy,
    then an ``X`` of the same name, then a copy — the shape of any fallback, whether the
    backend moves the inputs with ``aten::_to_cpu`` or with ``.to("cpu")``. Only looked for
    when the trace names a device (on a CPU-only run nothing can fall back)."""
    from explorer.analysis.device_naming import device_naming

    if not device_naming(trace).devices:
        return np.zeros(0, np.int64)
    s = trace.slices
    names = s["name"]
    codes = s["name"].cat.codes.to_numpy()
    parent = s["parent"].to_numpy(np.int64)
    ts = s["ts"].to_numpy(np.int64)
    end = ts + s["dur"].to_numpy(np.int64)
    track = s["track"].to_numpy(np.int64)
    op = host & trace.kind_in("cpu_op") & ~category_in(names, FALLBACK_PLUMBING)
    inner = np.flatnonzero(op)
    outer = np.full(len(inner), -1, np.int64)
    cur = parent[inner]
    for _ in range(_NESTING):
        ok = cur >= 0
        at = np.where(ok, cur, 0)
        hit = ok & (outer < 0) & (codes[at] == codes[inner])
        outer[hit] = cur[hit]
        cur = np.where(ok, parent[at], -1)
    keep = outer >= 0
    inner, outer = inner[keep], outer[keep]
    if len(inner) == 0:
        return np.zeros(0, np.int64)
    moves = np.flatnonzero(host & category_in(names, FALLBACK_MOVE_OUT))
    backs = np.flatnonzero(host & category_in(names, FALLBACK_COPY_BACK))
    before = _copy_between(moves, ts, end, track, outer, ts[outer], ts[inner])
    after = _copy_between(backs, ts, end, track, outer, end[inner], end[outer])
    return np.unique(outer[before & after])


def _copy_between(
    copies: np.ndarray,
    ts: np.ndarray,
    end: np.ndarray,
    track: np.ndarray,
    where: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
) -> np.ndarray:
    """Per row, whether one of ``copies`` on the track of slice ``where`` lies wholly in
    [lo, hi]: the copy with the earliest end among those starting at or after ``lo``."""
    found = np.zeros(len(where), bool)
    for t in np.unique(track[where]):
        c = copies[track[copies] == t]
        if len(c) == 0:
            continue
        c = c[np.argsort(ts[c], kind="stable")]
        first_end = np.minimum.accumulate(end[c][::-1])[::-1]  # min end of copies from k on
        first_end = np.append(first_end, np.iinfo(np.int64).max)
        on = track[where] == t
        found[on] = first_end[np.searchsorted(ts[c], lo[on], side="left")] <= hi[on]
    return found


def _windows(trace: TraceData) -> tuple[np.ndarray, np.ndarray]:
    """(ids, labelled): the outermost calls on the host, labelled by the collector first,
    then the marked ops no labelled call covers."""
    s = trace.slices
    host = trace.on_host()
    ts = s["ts"].to_numpy(np.int64)
    end = ts + s["dur"].to_numpy(np.int64)
    track = s["track"].to_numpy(np.int64)
    parent = s["parent"].to_numpy(np.int64)
    fb = host & trace.kind_in("fallback") & (end > ts)
    inner = np.zeros(len(s), bool)
    has = parent >= 0
    inner[has] = fb[parent[has]]
    labelled = np.flatnonzero(fb & ~inner)
    marked = np.union1d(_marked_ops(trace, host), _sandwiched_ops(trace, host))
    if len(marked):  # one call found both ways, or an op inside another found one: the outer
        pm = parent[marked]
        marked = marked[~np.isin(pm, marked)]
    if len(labelled) and len(marked):
        covered = np.zeros(len(marked), bool)
        for t in np.unique(track[labelled]):
            lab = labelled[track[labelled] == t]
            on = track[marked] == t
            if not on.any():
                continue
            order = np.argsort(ts[lab], kind="stable")
            lts, lend = ts[lab][order], end[lab][order]
            at = np.searchsorted(lts, ts[marked[on]], side="right") - 1
            ok = at >= 0
            hit = np.zeros(on.sum(), bool)
            # a marked op inside a labelled call, or the same call (one µs apart)
            hit[ok] = end[marked[on]][ok] <= lend[at[ok]] + 1_000
            covered[np.flatnonzero(on)] = hit
        marked = marked[~covered]
    ids = np.concatenate([labelled, marked])
    flag = np.arange(len(ids)) < len(labelled)
    return ids, flag


@memoised("fallback_calls")
def fallback_calls(trace: TraceData) -> pd.DataFrame:
    """One row per call that fell back to the CPU, in time order: ``id`` (the labelled
    fallback slice, or the operator), ``op``, ``track``, ``ts``/``end``, and its time
    split into ``copy_out_ns`` (the ``aten::_to_cpu`` copies), ``copy_back_ns`` (the
    copies of the results back) and ``cpu_ns`` (the rest: the CPU kernel); ``labelled``
    is True for the collector's slices. The three parts add up to the call's duration."""
    ids, labelled = _windows(trace)
    if len(ids) == 0:
        return pd.DataFrame(
            {c: pd.Series(dtype=object if c == "op" else np.int64) for c in COLUMNS}
        )
    s = trace.slices
    ts = s["ts"].to_numpy(np.int64)
    end = ts + s["dur"].to_numpy(np.int64)
    track = s["track"].to_numpy(np.int64)
    names = category_values(s["name"])
    op = [
        str(trace.args(int(i)).get("op") or names[i]) if lab else str(names[i])
        for i, lab in zip(ids, labelled, strict=True)
    ]
    order = np.lexsort((ts[ids], track[ids]))
    ids, labelled = ids[order], labelled[order]
    op = [op[k] for k in order]
    out_ns, back_ns = _copies(trace, ids, op, ts, end, track, names)
    dur = end[ids] - ts[ids]
    back_ns = np.minimum(back_ns, dur - out_ns)
    df = pd.DataFrame(
        {"id": ids, "op": op, "track": track[ids], "ts": ts[ids], "end": end[ids],
         "copy_out_ns": out_ns, "copy_back_ns": back_ns, "cpu_ns": dur - out_ns - back_ns,
         "labelled": labelled}
    )  # fmt: skip
    return df.sort_values("ts", kind="stable").reset_index(drop=True)


def _inside(
    cand: np.ndarray, ids: np.ndarray, ts: np.ndarray, end: np.ndarray, track: np.ndarray
) -> np.ndarray:
    """Per slice of ``cand``, the row of ``ids`` (sorted by track then start, not nesting)
    whose interval holds it on its track, else -1; never the call's own op (the same
    interval as a labelled slice)."""
    window = np.full(len(cand), -1, np.int64)
    for t in np.unique(track[ids]):
        rows = np.flatnonzero(track[ids] == t)
        on = np.flatnonzero(track[cand] == t)
        at = np.searchsorted(ts[ids[rows]], ts[cand[on]], side="right") - 1
        ok = at >= 0
        w = rows[np.where(ok, at, 0)]
        inside = ok & (end[cand[on]] <= end[ids[w]]) & (cand[on] != ids[w])
        inside &= ~((ts[cand[on]] == ts[ids[w]]) & (end[cand[on]] == end[ids[w]]))
        window[on[inside]] = w[inside]
    return window


def _kernels(
    trace: TraceData, ids: np.ndarray, op: list[str], ts: np.ndarray, end: np.ndarray,
    track: np.ndarray, names: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Per call, the start and end of the first op inside it named as the call's op — the
    CPU kernel the fallback ran (-1 where there is none)."""
    host = trace.on_host()
    cand = np.flatnonzero(host & np.isin(names, list(set(op))))
    window = _inside(cand, ids, ts, end, track)
    want = np.asarray(op, dtype=object)
    ok = window >= 0
    ok[ok] = names[cand[ok]] == want[window[ok]]
    k_ts = np.full(len(ids), -1, np.int64)
    k_end = np.full(len(ids), -1, np.int64)
    if ok.any():
        df = pd.DataFrame({"w": window[ok], "ts": ts[cand[ok]], "end": end[cand[ok]]})
        first = df.sort_values(["w", "ts"], kind="stable").drop_duplicates("w")
        k_ts[first["w"].to_numpy()] = first["ts"].to_numpy()
        k_end[first["w"].to_numpy()] = first["end"].to_numpy()
    return k_ts, k_end


def _copies(
    trace: TraceData,
    ids: np.ndarray,
    op: list[str],
    ts: np.ndarray,
    end: np.ndarray,
    track: np.ndarray,
    names: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Per call (``ids`` sorted by track then start), ns of its outermost copies out and of
    its outermost copies back (host ops inside the call's interval): those that end before
    its CPU kernel starts, and those that start after it ends; where no kernel is seen,
    ``aten::_to_cpu`` is the copy out and every other copy a copy back."""
    host = trace.on_host()
    is_copy = np.isin(names, [*FALLBACK_MOVE_OUT, *FALLBACK_COPY_BACK])
    cand = np.flatnonzero(host & is_copy)
    window = _inside(cand, ids, ts, end, track)
    keep = window >= 0
    cand, window = cand[keep], window[keep]
    out_ns = np.zeros(len(ids), np.int64)
    back_ns = np.zeros(len(ids), np.int64)
    if len(cand) == 0:
        return out_ns, back_ns
    df = pd.DataFrame({"w": window, "ts": ts[cand], "end": end[cand]})
    df = df.sort_values(["w", "ts", "end"], ascending=[True, True, False], kind="stable")
    reach = df.groupby("w")["end"].cummax().groupby(df["w"]).shift(1)
    outer = df[reach.isna() | (df["ts"] >= reach)]
    k_ts, k_end = _kernels(trace, ids, op, ts, end, track, names)
    w = outer["w"].to_numpy(np.int64)
    a, b = outer["ts"].to_numpy(np.int64), outer["end"].to_numpy(np.int64)
    marker = names[cand[outer.index.to_numpy()]] == FALLBACK_MARKER
    seen = k_ts[w] >= 0
    o = np.where(seen, b <= k_ts[w], marker)
    back = np.where(seen, a >= k_end[w], ~marker)
    np.add.at(out_ns, w[o], (b - a)[o])
    np.add.at(back_ns, w[back], (b - a)[back])
    return out_ns, back_ns

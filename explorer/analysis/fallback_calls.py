"""Every call of an operator that fell back to the CPU, and what its copies cost, from the
host's events alone.

Any backend that sends an operator to the CPU the way PyTorch's generic fallback does — a
C++ backend through ``at::native::cpu_fallback``, a Python one from its dispatch — leaves
the same thing in a torch.profiler trace: the operator, an ``aten::_to_cpu`` inside it (the
copy out), the CPU kernel, and the copies back (``aten::copy_`` / ``aten::_to_copy``).
A call is found either as Explorer's collector labelled it (an ``explorer_fallback`` slice
over the operator, with the user's line the backend's warning named) or, in any other
trace, as the innermost operator around an ``aten::_to_cpu`` that is not the fallback's own
plumbing. No device timeline is needed: the copies are measured on the host, where the
caller waits for them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.trace.columns import category_values
from explorer.trace.kinds import FALLBACK_COPY_BACK, FALLBACK_MARKER, FALLBACK_PLUMBING
from explorer.trace.memo import memoised
from explorer.trace.model import TraceData

COLUMNS = ("id", "op", "track", "ts", "end", "copy_out_ns", "copy_back_ns", "cpu_ns", "labelled")


def _marked_ops(trace: TraceData, host: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """Ids of the innermost non-plumbing host ops around each ``aten::_to_cpu``."""
    names = category_values(trace.slices["name"])
    parent = trace.slices["parent"].to_numpy(np.int64)
    cur = parent[np.flatnonzero(host & (names == FALLBACK_MARKER))]
    plumbing = np.isin(names, list(FALLBACK_PLUMBING)) | (kind != "cpu_op")
    while len(cur):
        ok = cur >= 0
        climb = ok & plumbing[np.where(ok, cur, 0)]
        if not climb.any():
            break
        cur = np.where(climb, parent[np.where(ok, cur, 0)], cur)
    return np.unique(cur[cur >= 0])


def _windows(trace: TraceData) -> tuple[np.ndarray, np.ndarray]:
    """(ids, labelled): the outermost calls on the host, labelled by the collector first,
    then the marked ops no labelled call covers."""
    s = trace.slices
    kind = category_values(s["kind"])
    host = trace.on_host()
    ts = s["ts"].to_numpy(np.int64)
    end = ts + s["dur"].to_numpy(np.int64)
    track = s["track"].to_numpy(np.int64)
    parent = s["parent"].to_numpy(np.int64)
    fb = host & (kind == "fallback") & (end > ts)
    inner = np.zeros(len(s), bool)
    has = parent >= 0
    inner[has] = fb[parent[has]]
    labelled = np.flatnonzero(fb & ~inner)
    marked = _marked_ops(trace, host, kind)
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
    out_ns, back_ns = _copies(trace, ids, ts, end, track, names)
    dur = end[ids] - ts[ids]
    back_ns = np.minimum(back_ns, dur - out_ns)
    df = pd.DataFrame(
        {"id": ids, "op": op, "track": track[ids], "ts": ts[ids], "end": end[ids],
         "copy_out_ns": out_ns, "copy_back_ns": back_ns, "cpu_ns": dur - out_ns - back_ns,
         "labelled": labelled}
    )  # fmt: skip
    return df.sort_values("ts", kind="stable").reset_index(drop=True)


def _copies(
    trace: TraceData,
    ids: np.ndarray,
    ts: np.ndarray,
    end: np.ndarray,
    track: np.ndarray,
    names: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Per call (``ids`` sorted by track then start), ns of its outermost ``_to_cpu`` ops
    and of its outermost copy-back ops (host ops strictly inside the call's interval)."""
    host = trace.on_host()
    is_out = names == FALLBACK_MARKER
    is_back = np.isin(names, list(FALLBACK_COPY_BACK))
    cand = np.flatnonzero(host & (is_out | is_back))
    window = np.full(len(cand), -1, np.int64)
    for t in np.unique(track[ids]):
        rows = np.flatnonzero(track[ids] == t)
        on = np.flatnonzero(track[cand] == t)
        at = np.searchsorted(ts[ids[rows]], ts[cand[on]], side="right") - 1
        ok = at >= 0
        w = rows[np.where(ok, at, 0)]
        inside = ok & (end[cand[on]] <= end[ids[w]]) & (cand[on] != ids[w])
        # the op itself (same interval as a labelled slice) is not one of its own copies
        inside &= ~((ts[cand[on]] == ts[ids[w]]) & (end[cand[on]] == end[ids[w]]))
        window[on[inside]] = w[inside]
    keep = window >= 0
    cand, window = cand[keep], window[keep]
    out_ns = np.zeros(len(ids), np.int64)
    back_ns = np.zeros(len(ids), np.int64)
    if len(cand) == 0:
        return out_ns, back_ns
    df = pd.DataFrame({"w": window, "ts": ts[cand], "end": end[cand], "out": is_out[cand]})
    df = df.sort_values(["w", "ts", "end"], ascending=[True, True, False], kind="stable")
    reach = df.groupby("w")["end"].cummax().groupby(df["w"]).shift(1)
    outer = df[reach.isna() | (df["ts"] >= reach)]
    dur = (outer["end"] - outer["ts"]).to_numpy(np.int64)
    w = outer["w"].to_numpy(np.int64)
    o = outer["out"].to_numpy(bool)
    np.add.at(out_ns, w[o], dur[o])
    np.add.at(back_ns, w[~o], dur[~o])
    return out_ns, back_ns

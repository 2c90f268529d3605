"""Waits: the host blocking on the device, and one stream waiting for another.

- A host sync call (``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
  ``cudaEventSynchronize``, ``hipDeviceSynchronize``, MTIA ``synchronizeStream``, the
  collector's ``explorer_sync``...) ends when the last device op it waited for ends: edge
  from that op's end to the call's end. The op is the last device work to finish inside the
  call, on the stream the call waited on when the trace says which (CUDA's ``cuda_sync``
  records, tied to the call by correlation), on any stream otherwise.
- CUDA events: ``cuda_sync`` records carry ``wait_on_cuda_event_record_corr_id`` (the
  ``cudaEventRecord`` call) and ``wait_on_stream``; the recorded op is the last op launched
  on that stream before the record call. ``Stream Wait Event`` → the waiting stream's next
  op depends on it (cross-stream); ``Event Sync`` under a blocking ``cudaEventSynchronize``
  → the host call's end depends on it.
- MTIA queues: ``event_wait`` (``wait_on_stream``, ``seq_num``) waits for the
  ``event_record`` with the same ``seq_num`` on that stream.

Args are read only for the device sync records and MTIA event records — a few per step.
"""

from __future__ import annotations

import numpy as np

from explorer.analysis.graph.edges import END, START, EdgeList
from explorer.analysis.graph.nodes import SliceArrays
from explorer.trace.model import TraceData


def last_ending(
    cand: np.ndarray,
    cand_end: np.ndarray,
    cand_group: np.ndarray,
    q_group: np.ndarray,
    q_lo: np.ndarray,
    q_hi: np.ndarray,
) -> np.ndarray:
    """For each query, the candidate of its group (group -1: any candidate) with the latest
    end in ``[q_lo, q_hi]``, or -1. Vectorised with one sort and ``searchsorted``."""
    out = np.full(len(q_group), -1, np.int64)
    if len(cand) == 0 or len(q_group) == 0:
        return out
    # Any group: one sorted array of ends.
    order = np.argsort(cand_end, kind="stable")
    ends = cand_end[order]
    anyq = q_group < 0
    if anyq.any():
        k = np.searchsorted(ends, q_hi[anyq], side="right") - 1
        ok = k >= 0
        ok[ok] = ends[k[ok]] >= q_lo[anyq][ok]
        res = np.full(len(k), -1, np.int64)
        res[ok] = cand[order[k[ok]]]
        out[anyq] = res
    # Per group: sort by (group, end) and search the combined key.
    if (~anyq).any():
        base = int(max(cand_end.max(), q_hi.max())) + 1 - int(min(cand_end.min(), 0))
        off = -int(min(cand_end.min(), 0))
        groups, g_cand = np.unique(cand_group, return_inverse=True)
        key = g_cand.astype(np.int64) * base + (cand_end + off)
        order = np.argsort(key, kind="stable")
        key = key[order]
        qg = np.searchsorted(groups, q_group[~anyq])
        known = (qg < len(groups)) & (groups[np.minimum(qg, len(groups) - 1)] == q_group[~anyq])
        qkey = qg.astype(np.int64) * base + (q_hi[~anyq] + off)
        k = np.searchsorted(key, qkey, side="right") - 1
        ok = known & (k >= 0)
        ok[ok] = (key[k[ok]] // base == qg[ok]) & (key[k[ok]] % base - off >= q_lo[~anyq][ok])
        res = np.full(len(k), -1, np.int64)
        res[ok] = cand[order[k[ok]]]
        out[~anyq] = res
    return out


def _int_arg(values: list) -> np.ndarray:
    return np.array(
        [int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else -1 for v in values],
        np.int64,
    )


def host_syncs(
    edges: EdgeList, arrays: SliceArrays, trace: TraceData, launcher: np.ndarray, work: np.ndarray
) -> None:
    """Edges into host sync calls, and cross-stream edges from CUDA and MTIA events."""
    calls = np.flatnonzero(arrays.node & arrays.host & arrays.kind_in(("sync",)))
    dev_sync = np.flatnonzero(arrays.node & arrays.device & arrays.kind_in(("sync",)))
    # The device record (if any) each host call is tied to, by correlation/launch flow.
    record_of_call = np.full(arrays.n, -1, np.int64)
    has_launcher = launcher[dev_sync] >= 0
    record_of_call[launcher[dev_sync[has_launcher]]] = dev_sync[has_launcher]

    wait_stream = np.full(arrays.n, -1, np.int64)
    record_corr = np.full(arrays.n, -1, np.int64)
    seq_num = np.full(arrays.n, -1, np.int64)
    if len(dev_sync):
        wait_stream[dev_sync] = _int_arg(trace.arg_column("wait_on_stream", dev_sync))
        record_corr[dev_sync] = _int_arg(
            trace.arg_column("wait_on_cuda_event_record_corr_id", dev_sync)
        )
        seq_num[dev_sync] = _int_arg(trace.arg_column("seq_num", dev_sync))

    cand = np.flatnonzero(work)
    cand_end = arrays.end[cand]
    cand_stream = arrays.stream[cand]

    # 1. Host sync calls without an event: last device work finishing inside the call.
    rec = record_of_call[calls]
    by_event = np.zeros(len(calls), bool)
    by_event[rec >= 0] = record_corr[rec[rec >= 0]] >= 0
    plain = calls[~by_event]
    prec = record_of_call[plain]
    group = np.full(len(plain), -1, np.int64)
    group[prec >= 0] = arrays.stream[prec[prec >= 0]]
    src = last_ending(cand, cand_end, cand_stream, group, arrays.ts[plain], arrays.end[plain])
    ok = src >= 0
    edges.add("sync", src[ok], plain[ok], END, END)
    if (prec >= 0).any():
        tied = prec >= 0
        edges.add("sync", prec[tied], plain[tied], END, END)

    # 2. CUDA events: the op recorded by cudaEventRecord, then whoever waited on it.
    waits = dev_sync[(record_corr[dev_sync] >= 0) & (wait_stream[dev_sync] >= 0)]
    if len(waits):
        recorded = _recorded_ops(
            arrays, launcher, cand, waits, record_corr[waits], wait_stream[waits]
        )
        has = recorded >= 0
        waits, recorded = waits[has], recorded[has]
        call = launcher[waits]
        blocking = (call >= 0) & arrays.kind_in(("sync",), np.maximum(call, 0))
        blocking &= arrays.node[np.maximum(call, 0)]
        edges.add("sync", recorded[blocking], call[blocking], END, END)
        # A stream that waits sits on a stream row; an event *query* sits on the device row.
        stream_wait = ~blocking & (arrays.stream[waits] >= 0)
        _cross_stream(edges, arrays, recorded[stream_wait], waits[stream_wait])

    # 3. MTIA queues: event_wait waits for the event_record with its seq_num on its stream.
    mtia_waits = dev_sync[(seq_num[dev_sync] >= 0) & (wait_stream[dev_sync] >= 0)]
    if len(mtia_waits):
        _mtia_events(edges, arrays, trace, mtia_waits, wait_stream[mtia_waits], seq_num[mtia_waits])


def _recorded_ops(
    arrays: SliceArrays,
    launcher: np.ndarray,
    cand: np.ndarray,
    waits: np.ndarray,
    corr: np.ndarray,
    stream: np.ndarray,
) -> np.ndarray:
    """The device op each event captured: the last op on ``stream`` launched before the
    ``cudaEventRecord`` call whose correlation id is ``corr``."""
    runtime = np.flatnonzero(arrays.host & arrays.kind_in(("runtime",)) & (arrays.correlation >= 0))
    rc = arrays.correlation[runtime]
    order = np.argsort(rc, kind="stable")
    rc, runtime = rc[order], runtime[order]
    k = np.searchsorted(rc, corr)
    found = (
        (k < len(rc)) & (rc[np.minimum(k, max(len(rc) - 1, 0))] == corr)
        if len(rc)
        else np.zeros(len(corr), bool)
    )
    t_record = np.full(len(corr), -1, np.int64)
    t_record[found] = arrays.ts[runtime[k[found]]]
    launched_at = np.where(
        launcher[cand] >= 0, arrays.ts[np.maximum(launcher[cand], 0)], arrays.ts[cand]
    )
    out = last_ending(
        cand,
        launched_at,
        arrays.stream[cand],
        np.where(found, stream, -2),
        np.full(len(corr), np.iinfo(np.int64).min // 4),
        t_record - 1,
    )
    out[~found] = -1
    return out


def _cross_stream(
    edges: EdgeList, arrays: SliceArrays, recorded: np.ndarray, waits: np.ndarray
) -> None:
    """Recorded op -> the wait record's end when the wait lasted until then (from the op's
    end; from its start when the op is itself the signal, like an MTIA ``event_record``
    that the wait ends on), else -> the next op on the waiting stream (the one held back)."""
    longer = arrays.end[waits] >= arrays.end[recorded]
    edges.add("cross_stream", recorded[longer], waits[longer], END, END)
    signal = ~longer & (arrays.end[waits] >= arrays.ts[recorded])
    edges.add("cross_stream", recorded[signal], waits[signal], START, END)
    longer |= signal
    rest_r, rest_w = recorded[~longer], waits[~longer]
    if len(rest_w) == 0:
        return
    # Slice ids are in (track, ts) order, so the next id on the same track is the next op.
    on_stream = np.flatnonzero(arrays.node & arrays.device & (arrays.stream >= 0))
    pos = np.searchsorted(on_stream, rest_w)
    pos_ok = (pos < len(on_stream)) & (on_stream[np.minimum(pos, len(on_stream) - 1)] == rest_w)
    nxt = pos + 1
    ok = pos_ok & (nxt < len(on_stream))
    ok[ok] = arrays.track[on_stream[nxt[ok]]] == arrays.track[rest_w[ok]]
    edges.add("cross_stream", rest_r[ok], on_stream[nxt[ok]], END, START)


def _mtia_events(
    edges: EdgeList,
    arrays: SliceArrays,
    trace: TraceData,
    waits: np.ndarray,
    stream: np.ndarray,
    seq: np.ndarray,
) -> None:
    names = trace.slices["name"]
    rec_code = names.cat.categories.get_indexer(["event_record"])[0]
    if rec_code < 0:
        return
    records = np.flatnonzero((names.cat.codes.to_numpy() == rec_code) & arrays.node & arrays.device)
    if len(records) == 0:
        return
    r_seq = _int_arg(trace.arg_column("seq_num", records))
    r_stream = arrays.stream[records]
    key_r = np.char.add(r_stream.astype(str), np.char.add(":", r_seq.astype(str)))
    key_w = np.char.add(stream.astype(str), np.char.add(":", seq.astype(str)))
    order = np.argsort(key_r, kind="stable")
    key_r, records = key_r[order], records[order]
    k = np.searchsorted(key_r, key_w)
    found = (k < len(key_r)) & (key_r[np.minimum(k, len(key_r) - 1)] == key_w)
    _cross_stream(edges, arrays, records[k[found]], waits[found])

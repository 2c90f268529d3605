"""Decoded events → the columnar tables of :class:`~explorer.trace.model.TraceData`.

One pass pulls each field out of the events into a list, numpy does the rest: timestamps,
track ids, kinds, nesting, flows. Per-event Python work is limited to list comprehensions
that read one attribute; everything else is per distinct name, category or track.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter, itemgetter
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from explorer.errors import TraceError
from explorer.trace import columns
from explorer.trace.args_store import ArgsStore
from explorer.trace.decode import Decoded
from explorer.trace.flows import build_flows
from explorer.trace.kinds import kinds_for, parse_copy_names
from explorer.trace.model import KINDS, SLICE_COLUMNS, TraceData
from explorer.trace.nesting import enclosing, nest
from explorer.trace.tracks import TrackKeys, build_tracks


class KnownArgs(msgspec.Struct, gc=False):
    """The args of slices that the model turns into columns; the rest stay in the raw args."""

    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_old: Any = msgspec.field(default=None, name="external id")
    correlation: Any = None
    stream: Any = None
    device: Any = None
    bytes: Any = None
    Bytes: Any = None
    seq: Any = msgspec.field(default=None, name="Sequence number")
    call_stack: Any = msgspec.field(default=None, name="Call stack")


class MemoryArgs(msgspec.Struct, gc=False):
    """The args of the profiler's ``[memory]`` events."""

    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    addr: Any = msgspec.field(default=None, name="Addr")
    Bytes: Any = None
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")


def _known_args(
    args: list[Any], raw: bool, path: object, spec: type = KnownArgs
) -> dict[str, list[Any]]:
    """Columns of the known args (``spec``'s fields) for the given events' args."""
    fields = spec.__struct_fields__
    if raw:
        blob = b"[" + b",".join(args) + b"]"
        try:
            parsed = msgspec.json.decode(blob, type=list[spec])
        except (msgspec.DecodeError, msgspec.ValidationError):
            # Some event's args are not an object: decode one by one, treating those as empty.
            parsed = []
            for a in args:
                try:
                    parsed.append(msgspec.json.decode(a, type=spec))
                except (msgspec.DecodeError, msgspec.ValidationError):
                    parsed.append(spec())
        del blob
        return {f: list(map(attrgetter(f), parsed)) for f in fields}
    names = dict(zip(fields, spec.__struct_encode_fields__, strict=True))
    return {f: [a.get(names[f]) if isinstance(a, dict) else None for a in args] for f in fields}


def trace_from_events(
    events: Sequence[dict[str, Any]], metadata: dict[str, Any] | None = None, cls: type = TraceData
) -> TraceData:
    """Build a trace in memory from Chrome-trace event dicts (for tests and generators)."""
    return build(
        Decoded(list(events), dict(metadata or {}), raw_args=False), path="<memory>", cls=cls
    )


def _field(events: Sequence[Any], name: str, raw: bool) -> list[Any]:
    if raw:
        return list(map(attrgetter(name), events))
    return [e.get(name) if isinstance(e, dict) else None for e in events]


def _pick(items: Sequence[Any], idx: np.ndarray) -> list[Any]:
    """``[items[i] for i in idx]`` at C speed."""
    if len(idx) == 0:
        return []
    if len(idx) == 1:
        return [items[int(idx[0])]]
    return list(itemgetter(*idx.tolist())(items))


def build(decoded: Decoded, path: object, cls: type = TraceData, progress: Any = None) -> TraceData:
    """The tables for one decoded file."""
    ev = decoded.events
    raw = decoded.raw_args
    meta = dict(decoded.metadata)
    warnings = list(decoded.warnings)
    if not raw:
        bad = next((i for i, e in enumerate(ev) if not isinstance(e, dict)), None)
        if bad is not None:
            raise TraceError(
                path,
                f"event {bad} is {type(ev[bad]).__name__}, not an object",
                "the file is damaged or is not a trace",
            )

    ph = np.array(_field(ev, "ph", raw), dtype=object)
    names_all = _field(ev, "name", raw)

    def where(i: int) -> str:
        n = names_all[i]
        return f"event {i}" + (f" ({n!r})" if n else "")

    is_x = ph == "X"
    is_b = ph == "B"
    is_e = ph == "E"
    is_i = (ph == "i") | (ph == "I")
    is_c = ph == "C"
    is_flow = (ph == "s") | (ph == "t") | (ph == "f")
    is_m = ph == "M"
    n_async = int(((ph == "b") | (ph == "e") | (ph == "n")).sum())
    if n_async:
        warnings.append(f"{n_async} async events (ph b/e/n) are not shown as slices")

    ts_us = columns.floats(_field(ev, "ts", raw), path=path, what="a timestamp", where=where)
    timed = ~is_m & ~np.isnan(ts_us)
    needs_ts = is_x | is_b | is_e | is_i | is_c | is_flow
    missing = needs_ts & np.isnan(ts_us)
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        raise TraceError(
            path, f"{where(i)} has no timestamp ('ts')", "the file is damaged; re-capture it"
        )
    t0_us = float(np.floor(ts_us[timed].min())) if timed.any() else 0.0
    rel_ns = np.rint((ts_us - t0_us) * 1000.0)

    # -- duration events: X, and B/E pairs ---------------------------------------------------
    pid_all = _field(ev, "pid", raw)
    tid_all = _field(ev, "tid", raw)
    keys = TrackKeys(pid_all, tid_all)
    x_idx = np.flatnonzero(is_x)
    x_durs = _field(_pick(ev, x_idx), "dur", raw)
    dur_us = columns.floats(
        x_durs, path=path, what="a duration", where=lambda k: where(int(x_idx[k]))
    )
    dur_us[np.fromiter((d is None for d in x_durs), bool, len(x_durs))] = (
        0.0  # absent: instant-like
    )
    if np.isnan(dur_us).any():
        k = int(np.flatnonzero(np.isnan(dur_us))[0])
        raise TraceError(
            path, f"{where(int(x_idx[k]))} has a NaN duration", "the file is damaged; re-capture it"
        )
    if (dur_us < 0).any():
        k = int(np.flatnonzero(dur_us < 0)[0])
        raise TraceError(
            path,
            f"{where(int(x_idx[k]))} has a negative duration ({dur_us[k]} µs)",
            "the file is damaged; re-capture it",
        )
    s_idx = x_idx
    s_ts = rel_ns[x_idx]
    s_dur = np.rint(dur_us * 1000.0)
    be_idx = np.flatnonzero(is_b | is_e)
    if len(be_idx):
        b_rows, b_ts, b_dur, n_open, n_orphan = _pair_begin_end(
            be_idx,
            is_b[be_idx],
            keys.event_track(be_idx),
            rel_ns[be_idx],
            max(rel_ns[timed].max(), float((s_ts + s_dur).max()) if len(s_ts) else 0.0),
        )
        s_idx = np.concatenate([s_idx, b_rows])
        s_ts = np.concatenate([s_ts, b_ts])
        s_dur = np.concatenate([s_dur, b_dur])
        if n_open:
            warnings.append(
                f"{n_open} 'B' events had no matching 'E': closed at the end of the trace"
            )
        if n_orphan:
            warnings.append(f"{n_orphan} 'E' events had no matching 'B' and were ignored")
    if progress:
        progress(0.55, "building tables")

    s_track_event = keys.event_track(s_idx)
    order = np.lexsort((s_idx, -s_dur, s_ts, s_track_event))
    s_idx, s_ts, s_dur = s_idx[order], s_ts[order].astype(np.int64), s_dur[order].astype(np.int64)

    # -- tracks -------------------------------------------------------------------------------
    m_idx = np.flatnonzero(is_m)
    m_args = [_decode_args(e, raw) for e in _pick(ev, m_idx)]
    sev = _pick(ev, s_idx)
    name_cat = columns.categorical(_pick(names_all, s_idx))
    cat_cat = columns.categorical(_field(sev, "cat", raw))
    kind = kinds_for(cat_cat, name_cat)

    args_list = _field(sev, "args", raw)
    del sev
    known = _known_args(args_list, raw, path)

    def s_where(k: int) -> str:
        return where(int(s_idx[k]))

    device = columns.ints(known["device"], path=path, what="a device", where=s_where)
    stream = columns.ints(known["stream"], path=path, what="a stream", where=s_where)
    tracks, slice_track = build_tracks(
        keys,
        s_idx,
        cat_cat,
        device,
        stream,
        np.flatnonzero(is_i),
        _pick(ev, m_idx),
        m_args,
        raw,
        meta,
    )
    # Re-sort: build_tracks assigns display-ordered track ids.
    order2 = np.lexsort((np.arange(len(s_idx)), -s_dur, s_ts, slice_track))
    if not np.array_equal(order2, np.arange(len(order2))):
        s_idx, s_ts, s_dur, slice_track = (
            s_idx[order2],
            s_ts[order2],
            s_dur[order2],
            slice_track[order2],
        )
        name_cat, cat_cat, kind = name_cat[order2], cat_cat[order2], kind[order2]
        args_list = _pick(args_list, order2)
        known = {k: np.asarray(v, dtype=object)[order2] for k, v in known.items()}
        device, stream = device[order2], stream[order2]

    depth, parent = nest(slice_track, s_ts, s_dur)
    ext = columns.ints(known["external_id"], path=path, what="an External id", where=s_where)
    ext_old = columns.ints(
        known["external_id_old"], path=path, what="an external id", where=s_where
    )
    ext = np.where(ext >= 0, ext, ext_old)
    nbytes = columns.ints(known["bytes"], path=path, what="a byte count", where=s_where)
    nbytes2 = columns.ints(known["Bytes"], path=path, what="a byte count", where=s_where)
    nbytes = np.where(nbytes >= 0, nbytes, nbytes2)
    copy_kind, src_mem, dst_mem = parse_copy_names(name_cat)
    slices = pd.DataFrame(
        {
            "ts": s_ts,
            "dur": s_dur,
            "name": name_cat,
            "cat": cat_cat,
            "kind": pd.Categorical(kind, categories=list(KINDS)),
            "track": slice_track.astype(np.int32),
            "depth": depth,
            "parent": parent,
            "correlation": columns.ints(
                known["correlation"], path=path, what="a correlation id", where=s_where
            ),
            "external_id": ext,
            "stream": stream,
            "device": device,
            "bytes": nbytes,
            "seq": columns.ints(known["seq"], path=path, what="a sequence number", where=s_where),
            "copy_kind": pd.Categorical(copy_kind),
            "src_mem": pd.Categorical(src_mem),
            "dst_mem": pd.Categorical(dst_mem),
        }
    )[SLICE_COLUMNS]
    if progress:
        progress(0.75, "linking flows")

    ends = s_ts + s_dur
    # -- flows ----------------------------------------------------------------------------------
    f_idx = np.flatnonzero(is_flow)
    fev = _pick(ev, f_idx)
    flows = build_flows(
        ph[f_idx],
        columns.strings(_field(fev, "cat", raw)),
        columns.strings(_field(fev, "id", raw)),
        columns.strings(_field(fev, "bp", raw)),
        keys.track_of_events(f_idx, tracks),
        rel_ns[f_idx].astype(np.int64),
        slices,
        ends,
    )

    # -- instants, memory, counters ----------------------------------------------------------
    i_idx = np.flatnonzero(is_i)
    i_names = columns.strings(_pick(names_all, i_idx))
    is_mem = np.array([n == "[memory]" for n in i_names], bool)
    mem_idx = i_idx[is_mem]
    inst_idx = i_idx[~is_mem]
    inst_tracks = keys.track_of_events(inst_idx, tracks)
    instants = pd.DataFrame(
        {
            "ts": rel_ns[inst_idx].astype(np.int64),
            "name": pd.Categorical([i_names[k] for k in np.flatnonzero(~is_mem)]),
            "cat": columns.categorical(_field(_pick(ev, inst_idx), "cat", raw)),
            "track": inst_tracks.astype(np.int32),
            "scope": columns.categorical(_field(_pick(ev, inst_idx), "s", raw)),
        }
    )
    memory = _memory_table(ev, mem_idx, raw, rel_ns, keys, tracks, slices, ends, path, where)
    counters, tracks = _counters(ev, np.flatnonzero(is_c), raw, rel_ns, keys, tracks, names_all)

    # -- metadata -----------------------------------------------------------------------------
    base_ns = meta.get("baseTimeNanoseconds")
    base_ns = (
        int(base_ns) if isinstance(base_ns, (int, float)) and not isinstance(base_ns, bool) else 0
    )
    meta["start_ns"] = base_ns + int(round(t0_us * 1000))
    meta["end_ns"] = meta["start_ns"] + (int(ends.max()) if len(ends) else 0)
    dist = meta.get("distributedInfo") or {}
    if isinstance(dist, dict):
        meta.setdefault("rank", dist.get("rank", -1))
        meta.setdefault("world_size", dist.get("world_size", -1))
    meta["has_call_stack_args"] = any(v is not None for v in known["call_stack"])
    meta["synthetic"] = bool(meta.get("synthetic", False))
    meta["warnings"] = warnings
    meta["source"] = str(path)
    meta.setdefault(
        "format", "kineto" if "schemaVersion" in meta or "deviceProperties" in meta else "chrome"
    )
    meta["event_counts"] = {
        "duration": int(len(slices)),
        "flow": int(len(f_idx)),
        "instant": int(len(i_idx)),
        "counter": int(is_c.sum()),
        "metadata": int(len(m_idx)),
    }
    return cls(
        slices=slices,
        tracks=tracks,
        flows=flows,
        counters=counters,
        instants=instants,
        memory=memory,
        metadata=meta,
        args_store=ArgsStore(args_list),
    )


def _decode_args(e: Any, raw: bool) -> dict[str, Any]:
    if not raw:
        a = e.get("args")
        return a if isinstance(a, dict) else {}
    try:
        a = msgspec.json.decode(e.args)
    except msgspec.DecodeError:
        return {}
    return a if isinstance(a, dict) else {}


def _pair_begin_end(
    idx: np.ndarray, is_begin: np.ndarray, track: np.ndarray, ts: np.ndarray, end_of_trace: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """Match B/E events per track like parentheses, vectorised.

    In time order per track, a B at nesting level L is closed by the next E whose level
    (before it) is L; grouping by (track, level) leaves B, E, B, E... to pair in order.
    """
    order = np.lexsort((idx, ts, track))
    idx, is_begin, track, ts = idx[order], is_begin[order], track[order], ts[order]
    delta = np.where(is_begin, 1, -1)
    # Running level per track.
    run = np.cumsum(delta)
    first = np.r_[0, np.flatnonzero(np.diff(track)) + 1]
    offs = np.repeat(run[first] - delta[first], np.diff(np.r_[first, len(track)]))
    level_after = run - offs
    level = np.where(is_begin, level_after, level_after + 1)
    o = np.lexsort((np.arange(len(idx)), level, track))
    trk, lvl, beg, tt, ix = track[o], level[o], is_begin[o], ts[o], idx[o]
    # Pairs are adjacent B,E within a (track, level) group: vectorised check of neighbours.
    nxt_same = np.r_[(trk[1:] == trk[:-1]) & (lvl[1:] == lvl[:-1]), False]
    pair_start = beg & np.r_[~beg[1:], False] & nxt_same
    starts = np.flatnonzero(pair_start)
    b_rows = ix[starts]
    b_ts = tt[starts]
    b_end = tt[starts + 1]
    matched = np.zeros(len(o), bool)
    matched[starts] = True
    matched[starts + 1] = True
    open_b = beg & ~matched
    n_orphan = int((~beg & ~matched).sum())
    b_rows = np.concatenate([b_rows, ix[open_b]])
    b_ts = np.concatenate([b_ts, tt[open_b]])
    b_end = np.concatenate([b_end, np.full(int(open_b.sum()), end_of_trace)])
    return b_rows, b_ts, np.maximum(b_end - b_ts, 0), int(open_b.sum()), n_orphan


def _memory_table(
    ev, mem_idx, raw, rel_ns, keys, tracks, slices, ends, path, where
) -> pd.DataFrame:
    known = _known_args(_field(_pick(ev, mem_idx), "args", raw), raw, path, MemoryArgs)

    def w(k: int) -> str:
        return where(int(mem_idx[k]))

    trk = keys.track_of_events(mem_idx, tracks)
    ts = rel_ns[mem_idx].astype(np.int64)
    enc = enclosing(
        slices["track"].to_numpy(),
        slices["ts"].to_numpy(),
        ends,
        slices["parent"].to_numpy(),
        trk,
        ts,
    )
    return pd.DataFrame(
        {
            "ts": ts,
            "device_type": columns.ints(
                known["device_type"], path=path, what="a Device Type", where=w
            ),
            "device": columns.ints(known["device_id"], path=path, what="a Device Id", where=w),
            "addr": columns.ints(known["addr"], path=path, what="an Addr", where=w),
            "bytes": columns.ints(known["Bytes"], path=path, what="Bytes", where=w),
            "total_allocated": columns.ints(
                known["total_allocated"], path=path, what="Total Allocated", where=w
            ),
            "total_reserved": columns.ints(
                known["total_reserved"], path=path, what="Total Reserved", where=w
            ),
            "track": trk.astype(np.int32),
            "slice": enc,
        }
    )


def _counters(ev, c_idx, raw, rel_ns, keys, tracks, names_all) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Counter events (``ph: C``): one counter track per (process, name, series)."""
    if len(c_idx) == 0:
        return pd.DataFrame(
            {
                "track": np.empty(0, np.int32),
                "ts": np.empty(0, np.int64),
                "value": np.empty(0, np.float64),
            }
        ), tracks
    rows_key, rows_ts, rows_val = [], [], []
    for i in c_idx:
        args = _decode_args(ev[i], raw)
        pid = keys.pid_str(int(i))
        name = names_all[i] or ""
        for series, value in args.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                label = name if len(args) == 1 or series == name else f"{name} {series}"
                rows_key.append((pid, label))
                rows_ts.append(rel_ns[i])
                rows_val.append(float(value))
    uniq = sorted(set(rows_key))
    proc_label = dict(zip(tracks["pid"], tracks["process"], strict=False))
    base_id = len(tracks)
    base_order = int(tracks["order"].max()) + 1 if len(tracks) else 0
    new = pd.DataFrame(
        {
            "id": np.arange(base_id, base_id + len(uniq), dtype=np.int32),
            "pid": [p for p, _ in uniq],
            "tid": [lab for _, lab in uniq],
            "process": [proc_label.get(p, p) for p, _ in uniq],
            "thread": [lab for _, lab in uniq],
            "label": [lab for _, lab in uniq],
            "type": "counter",
            "device": np.full(len(uniq), -1, np.int64),
            "stream": np.full(len(uniq), -1, np.int64),
            "rank": np.full(len(uniq), tracks["rank"].iloc[0] if len(tracks) else -1, np.int64),
            "order": np.arange(base_order, base_order + len(uniq), dtype=np.int64),
        }
    )
    tracks = pd.concat([tracks, new], ignore_index=True)
    tracks["type"] = pd.Categorical(
        tracks["type"].astype(str), categories=["host_thread", "device_stream", "counter", "other"]
    )
    ids = {k: base_id + j for j, k in enumerate(uniq)}
    counters = pd.DataFrame(
        {
            "track": np.array([ids[k] for k in rows_key], np.int32),
            "ts": np.asarray(rows_ts, np.int64),
            "value": np.asarray(rows_val, np.float64),
        }
    ).sort_values(["track", "ts"], kind="stable", ignore_index=True)
    return counters, tracks

"""Event columns → the tables of :class:`~explorer.trace.model.TraceData`.

:mod:`explorer.trace.events` has already turned the events into columns; everything here
is numpy over those columns: timestamps, B/E pairing, track ids, kinds, nesting, flows,
memory and counters. Python loops run per distinct name, category or track, or over the
few counter and metadata events — never over all events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from explorer.errors import TraceError
from explorer.trace import columns
from explorer.trace.args_store import ArgsStore
from explorer.trace.decode import Decoded, EventChunks
from explorer.trace.event_types import (
    PH_ASYNC,
    PH_B,
    PH_C,
    PH_E,
    PH_F,
    PH_I,
    PH_M,
    PH_S,
    PH_T,
    PH_X,
    SLICE_ARG_FILL,
)
from explorer.trace.events import EventColumns, absolute_start, decode_columns
from explorer.trace.flows import FLOW_TYPES, FlowEvents, build_flows
from explorer.trace.kinds import kinds_for, parse_copy_names
from explorer.trace.model import SLICE_COLUMNS, TraceData
from explorer.trace.nesting import enclosing, nest
from explorer.trace.tracks import TrackKeys, build_tracks


def trace_from_events(
    events: Sequence[dict[str, Any]], metadata: dict[str, Any] | None = None
) -> TraceData:
    """Build a trace in memory from Chrome-trace event dicts (for tests and generators).
    The events go through exactly the path a file's events take."""
    return build(
        Decoded(EventChunks.of(msgspec.json.encode(list(events))), dict(metadata or {})),
        path="<memory>",
    )


def _categorical(codes: np.ndarray, values: list[str]) -> pd.Categorical:
    """A Categorical over only the values these codes use (in code order), by a lookup
    table over the vocabulary: linear, where sorting the codes was n log n and held
    several copies of them."""
    present = np.zeros(len(values), bool)
    present[codes] = True
    used = np.flatnonzero(present)
    remap = np.zeros(len(values), np.int32)
    remap[used] = np.arange(len(used), dtype=np.int32)
    return pd.Categorical.from_codes(remap[codes], categories=[values[u] for u in used])


def build(decoded: Decoded, path: object, progress: Any = None) -> TraceData:
    """The tables for one decoded file (see :func:`build_tables`)."""
    ev = decode_columns(path, decoded.chunks, progress)
    return build_tables(ev, decoded.metadata, decoded.warnings, path, progress)


def build_tables(
    ev: EventColumns,
    metadata: dict[str, Any],
    decode_warnings: list[str],
    path: object,
    progress: Any = None,
) -> TraceData:
    """The tables for one file's event columns: times, slices and tracks, flows, instants,
    memory and counters, then the metadata that describes them. ``ev`` is used up: each
    column is released once the tables it makes are built (at 10M events they are ~1 GB)."""
    meta = dict(metadata)
    warnings = list(decode_warnings) + ev.warnings
    n_async = int(np.isin(ev.ph, PH_ASYNC).sum())
    if n_async:
        warnings.append(f"{n_async} async events (ph b/e/n) are not shown as slices")
    meta["event_counts"] = _event_counts(ev.ph, len(ev.flow_rows))
    rel_ns, t0_us, last_ns = _relative_times(ev, path)
    keys = TrackKeys(ev)
    if progress:
        progress(0.6, "building tables")
    slices, tracks, s_args, known = _slices(
        ev, keys, _duration_events(ev, rel_ns, last_ns, keys, path, warnings), meta
    )
    meta["event_counts"]["duration"] = len(slices)
    store = ArgsStore(blob=ev.args_blob, offsets=ev.args_offsets, index=s_args)
    ev.release("tid", "dur", "dur_missing", "args_rows", "args_blob", "args_offsets")
    if progress:
        progress(0.75, "linking flows")
    ends = slices["ts"].to_numpy() + slices["dur"].to_numpy()
    flows = _flows(ev, rel_ns, keys, slices, ends)
    ev.release("flow_rows", "flow_id", "flow_bp", "ph")
    instants = _instants(ev, rel_ns, keys)
    memory = _memory_table(ev, rel_ns, keys, slices, ends, path)
    counters, tracks = _counters(ev, rel_ns, keys, tracks, warnings)
    _describe(meta, t0_us, ends, warnings, path)
    meta["has_call_stack_args"] = bool(known["has_call_stack"].any())
    _copy_bytes_from_launch(slices, flows, store)
    return TraceData(
        slices=slices,
        tracks=tracks,
        flows=flows,
        counters=counters,
        instants=instants,
        memory=memory,
        metadata=meta,
        args_store=store,
    )


def _flows(
    ev: EventColumns, rel_ns: RelativeTimes, keys: TrackKeys, slices: pd.DataFrame, ends: np.ndarray
) -> pd.DataFrame:
    """The flow table: flow events linked to the slices they start and end on."""
    f_idx = ev.flow_rows
    ph = ev.ph
    return build_flows(
        FlowEvents(
            is_start=ph[f_idx] == PH_S,
            is_end=ph[f_idx] == PH_F,
            cat_code=ev.cat[f_idx],
            cat_values=ev.cats.values,
            ids=ev.flow_id,
            bp_e=ev.flow_bp,
            track=keys.track_of_events(f_idx),
            ts=rel_ns[f_idx].astype(np.int64),
        ),
        slices,
        ends,
    )


def _event_counts(ph: np.ndarray, n_flows: int) -> dict[str, int]:
    """How many events of each phase the file held (``duration``, the slices kept, is
    filled in once they are built)."""
    return {
        "duration": 0,
        "flow": int(n_flows),
        "instant": int((ph == PH_I).sum()),
        "counter": int((ph == PH_C).sum()),
        "metadata": int((ph == PH_M).sum()),
    }


class RelativeTimes:
    """Events' times in ns after the trace's first timed event (whole µs), computed for
    the rows asked for: ``times[rows]`` (float64). Not one column for every event: the
    slices, flows and instants each need their own rows only, and a 10M-event trace
    would hold 80 MB more at the peak of its load."""

    def __init__(self, ts_us: np.ndarray, t0_us: float) -> None:
        self.ts_us = ts_us
        self.t0_us = t0_us

    def __getitem__(self, rows: Any) -> Any:
        return np.rint((self.ts_us[rows] - self.t0_us) * 1000.0)


def _relative_times(ev: EventColumns, path: object) -> tuple[RelativeTimes, float, float]:
    """Events' times in ns after the first timed event (whole µs), that start, and the
    last timed event's time."""
    ph = ev.ph
    timed = np.isin(ph, [PH_X, PH_B, PH_E, PH_I, PH_C, PH_S, PH_T, PH_F])
    ts_us = ev.ts
    missing = timed & np.isnan(ts_us)
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        raise TraceError(
            path, f"{ev.where(i)} has no timestamp ('ts')", "the file is damaged; re-capture it"
        )
    if not timed.any():
        return RelativeTimes(ts_us, 0.0), 0.0, 0.0
    t0_us = float(np.floor(np.min(ts_us, where=timed, initial=np.inf)))
    last_us = float(np.max(ts_us, where=timed, initial=-np.inf))
    return RelativeTimes(ts_us, t0_us), t0_us, float(np.rint((last_us - t0_us) * 1000.0))


def _duration_events(
    ev: EventColumns,
    rel_ns: RelativeTimes,
    last_ns: float,
    keys: TrackKeys,
    path: object,
    warnings: list[str],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(event row, start ns, duration ns) of every slice: X events, and B/E pairs."""
    ph = ev.ph
    x_idx = np.flatnonzero(ph == PH_X)
    dur_us = np.where(ev.dur_missing[x_idx], 0.0, ev.dur[x_idx])  # absent: zero-length
    bad = np.flatnonzero(np.isnan(dur_us))
    if len(bad):
        raise TraceError(
            path,
            f"{ev.where(int(x_idx[bad[0]]))} has a NaN duration",
            "the file is damaged; re-capture it",
        )
    bad = np.flatnonzero(dur_us < 0)
    if len(bad):
        k = int(bad[0])
        raise TraceError(
            path,
            f"{ev.where(int(x_idx[k]))} has a negative duration ({dur_us[k]} µs)",
            "the file is damaged; re-capture it",
        )
    s_idx = x_idx
    s_ts = rel_ns[x_idx]
    s_dur = np.rint(dur_us * 1000.0)
    is_b = ph == PH_B
    be_idx = np.flatnonzero(is_b | (ph == PH_E))
    if len(be_idx):
        end_of_trace = max(last_ns, float((s_ts + s_dur).max()) if len(s_ts) else 0.0)
        b_rows, b_ts, b_dur, n_open, n_orphan = _pair_begin_end(
            be_idx, is_b[be_idx], keys.event_track(be_idx), rel_ns[be_idx], end_of_trace
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
    return s_idx, s_ts.astype(np.int64), s_dur.astype(np.int64)


def _slices(
    ev: EventColumns,
    keys: TrackKeys,
    durations: tuple[np.ndarray, np.ndarray, np.ndarray],
    meta: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray, dict[str, np.ndarray]]:
    """(slices, tracks, each slice's args row, the args columns every slice has): names,
    kinds and tracks, then the final order ``(track, ts, -dur, file order)`` and nesting.
    ``durations`` (from :func:`_duration_events`) is taken over: its arrays are released
    as they are reordered."""
    s_idx, s_ts, s_dur = durations
    del durations
    # Args rows (X and B events, file order) ↔ slices.
    s_args = _rows_in(ev.args_rows, s_idx)
    name_cat = _categorical(ev.name[s_idx], ev.names.values)
    cat_cat = _categorical(ev.cat[s_idx], ev.cats.values)
    kind = kinds_for(cat_cat, name_cat)
    device, stream = (_slice_arg(ev.slice_args, key, s_args) for key in ("device", "stream"))
    tracks, slice_track = build_tracks(
        keys, s_idx, cat_cat, device, stream, np.flatnonzero(ev.ph == PH_I), ev, meta
    )
    del device, stream
    order = slice_order(slice_track, s_ts, s_dur, s_idx)
    # One column at a time, so that only one is held twice (a 10M-event trace's columns
    # are 70 MB each).
    del s_idx
    s_ts = s_ts[order]
    s_dur = s_dur[order]
    slice_track = slice_track[order]
    name_cat = name_cat[order]
    cat_cat = cat_cat[order]
    kind = kind[order]
    s_args = s_args[order]
    del order
    known = _known_args(ev, s_args)
    _device_from_track(known["device"], tracks, slice_track)

    depth, parent = nest(slice_track, s_ts, s_dur)
    _zero_length_calls_to_their_op(
        kind, known["external_id"], slice_track, s_ts, s_dur, depth, parent
    )
    copy_kind, src_mem, dst_mem = parse_copy_names(name_cat)
    slices = pd.DataFrame(
        {
            "ts": s_ts,
            "dur": s_dur,
            "name": name_cat,
            "cat": cat_cat,
            "kind": kind,
            "track": slice_track.astype(np.int32),
            "depth": depth,
            "parent": parent,
            "correlation": known["correlation"],
            "external_id": known["external_id"],
            "stream": known["stream"],
            "device": known["device"],
            "bytes": known["bytes"],
            "seq": known["seq"],
            "copy_kind": copy_kind,
            "src_mem": src_mem,
            "dst_mem": dst_mem,
        },
        copy=False,
    )[SLICE_COLUMNS]  # no consolidating copy: it would hold every column twice
    return slices, tracks, s_args, known


def _zero_length_calls_to_their_op(
    kind: pd.Categorical,
    external_id: np.ndarray,
    track: np.ndarray,
    ts: np.ndarray,
    dur: np.ndarray,
    depth: np.ndarray,
    parent: np.ndarray,
) -> None:
    """A zero-length runtime call at an op's boundary (its end, or the instant the next op
    begins) belongs to the op its ``External id`` names, where that op is on its thread and
    holds the instant (ends included): nesting by time alone gives it to no op, or to the
    next one. In place (``depth``, ``parent``); such a call has no children."""
    codes = np.asarray(kind.codes)
    kinds = list(kind.categories)
    runtime = np.isin(codes, [kinds.index(k) for k in ("runtime", "sync") if k in kinds])
    calls = np.flatnonzero(runtime & (dur == 0) & (external_id >= 0))
    if len(calls) == 0 or "cpu_op" not in kinds:
        return
    ops = np.flatnonzero((codes == kinds.index("cpu_op")) & (external_id >= 0))
    if len(ops) == 0:
        return
    by_key = pd.Series(ops, index=pd.MultiIndex.from_arrays([track[ops], external_id[ops]]))
    by_key = by_key[~by_key.index.duplicated(keep="first")]
    found = by_key.reindex(pd.MultiIndex.from_arrays([track[calls], external_id[calls]]))
    op = found.to_numpy()
    hit = ~pd.isna(op)
    calls, op = calls[hit], op[hit].astype(np.int64)
    inside = (ts[op] <= ts[calls]) & (ts[calls] <= ts[op] + dur[op]) & (parent[calls] != op)
    calls, op = calls[inside], op[inside]
    parent[calls] = op
    depth[calls] = depth[op] + 1


def _device_from_track(device: np.ndarray, tracks: pd.DataFrame, slice_track: np.ndarray) -> None:
    """A slice on a device stream whose args name no device (a memcpy/memset some
    profilers write without ``device``) runs on its track's device: without it, no launch
    pairs with it and its op gets none of its time. In place."""
    missing = device < 0
    if not missing.any() or tracks.empty:
        return
    dev_of = np.full(int(tracks["id"].max()) + 1, -1, np.int64)
    stream = tracks["type"].astype(str).to_numpy() == "device_stream"
    dev_of[tracks["id"].to_numpy()[stream]] = tracks["device"].to_numpy()[stream]
    np.copyto(device, dev_of[slice_track], where=missing)


def _rows_in(rows: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Where each of ``wanted`` is in ``rows`` (sorted; every one of ``wanted`` is in it):
    ``np.searchsorted``, or at once when they are the same rows (a trace of X events only,
    the usual case)."""
    if len(rows) == len(wanted) and np.array_equal(rows, wanted):
        return np.arange(len(rows), dtype=np.intp)
    return np.searchsorted(rows, wanted)


def slice_order(track: np.ndarray, ts: np.ndarray, dur: np.ndarray, row: np.ndarray) -> np.ndarray:
    """The slices' final order: ``np.lexsort((row, -dur, ts, track))`` — by track, start,
    longest first, file order. When track, start and position fit one int64 together
    (1M slices over a minute on 100 tracks do), it is one sort of them packed, in place,
    then the lexsort for only the slices that tie on track and start (when they are few):
    an order of magnitude faster than the lexsort on the benchmark trace, and less memory
    (one int64 a slice, which becomes the order, and the sort's buffer, beside a few for
    each tie). When they do not fit (a long
    trace), tracks are sorted apart first (:func:`_order_by_track_then_start`). Times are
    ns from the trace's start."""
    n = len(ts)
    if n == 0 or int(ts.min()) < 0 or int(track.min()) < 0:
        return np.lexsort((row, -dur, ts, track))
    pos_bits = (n - 1).bit_length()
    ts_bits = int(ts.max()).bit_length()
    if int(track.max()).bit_length() + ts_bits + pos_bits > 63:
        by_track = _order_by_track_then_start(track, ts, ts_bits)
        if by_track is None:
            return np.lexsort((row, -dur, ts, track))
        return _longest_first_among_ties(by_track, track, ts, dur, row)
    key = track.astype(np.int64)
    key <<= ts_bits
    key |= ts
    key <<= pos_bits
    for lo in range(0, n, _BLOCK):
        key[lo : lo + _BLOCK] |= np.arange(lo, min(lo + _BLOCK, n))
    key.sort(kind="stable")  # timsort: fast on runs already in order (file order mostly is)
    tie = np.empty(n - 1, bool)  # sorted neighbours with the same track and start
    for lo in range(0, n - 1, _BLOCK):
        k = key[lo : lo + _BLOCK + 1] >> pos_bits
        tie[lo : lo + len(k) - 1] = k[1:] == k[:-1]
    key &= (1 << pos_bits) - 1  # the positions, in order
    return _longest_first_among_ties(key, track, ts, dur, row, tie)


def _order_by_track_then_start(
    track: np.ndarray, ts: np.ndarray, ts_bits: int
) -> np.ndarray | None:
    """The order by track, start and position when the three do not fit one int64 (a long
    trace: 6.7M slices over 15 minutes need 7 + 40 + 23 bits): a radix sort by track, then
    one packed sort of start and position within each track; None when even a track's
    start and position do not fit (the lexsort then). Many times faster than the lexsort
    on a long trace of millions of slices."""
    if int(track.max()) >= 2**15:
        return None
    counts = np.bincount(track)
    if ts_bits + (int(counts.max()) - 1).bit_length() > 63:
        return None
    order = np.argsort(track.astype(np.int16), kind="stable")  # a radix sort: O(n)
    ends = np.cumsum(counts)
    for hi, count in zip(ends.tolist(), counts.tolist(), strict=True):
        if count < 2:
            continue
        lo = hi - count
        pos_bits = (count - 1).bit_length()
        segment = order[lo:hi]
        key = ts[segment].astype(np.int64, copy=False)
        key <<= pos_bits
        key |= np.arange(count)
        key.sort(kind="stable")
        key &= (1 << pos_bits) - 1
        order[lo:hi] = segment[key]
    return order


def _longest_first_among_ties(
    order: np.ndarray,
    track: np.ndarray,
    ts: np.ndarray,
    dur: np.ndarray,
    row: np.ndarray,
    tie: np.ndarray | None = None,
) -> np.ndarray:
    """``order`` (by track, start and position) with each run of slices that share a track
    and a start put longest first, then in file order; ``tie[k]``: whether the k-th and
    the next slice in ``order`` share them (found here when not given)."""
    n = len(order)
    if tie is None:
        tie = np.empty(max(n - 1, 0), bool)
        for lo in range(0, n - 1, _BLOCK):
            at = order[lo : lo + _BLOCK + 1]
            t, s = track[at], ts[at]
            tie[lo : lo + len(at) - 1] = (t[1:] == t[:-1]) & (s[1:] == s[:-1])
    if not tie.any():
        return order
    tied = np.zeros(n, bool)
    tied[1:] = tie
    tied[:-1] |= tie
    if int(np.count_nonzero(tied)) > n // 8:  # mostly ties (whole-µs times): the lexsort
        del tie, tied, order
        return np.lexsort((row, -dur, ts, track))
    at = np.flatnonzero(tied)
    del tied
    # Runs of equal (track, start), each ordered by -dur, then row.
    new_run = np.ones(len(at), bool)
    new_run[1:] = (np.diff(at) != 1) | ~tie[at[:-1]]
    run = np.cumsum(new_run)
    members = order[at]
    order[at] = members[np.lexsort((row[members], -dur[members], run))]
    return order


#: Slices packed or compared at a time in :func:`slice_order`.
_BLOCK = 1 << 16


def _known_args(ev: EventColumns, s_args: np.ndarray) -> dict[str, np.ndarray]:
    """The args that become slice columns, in the slices' order (one gather per column;
    ``External id`` and ``bytes`` each from whichever of their two spellings the slice
    has); the event columns they came from are released."""
    src = ev.slice_args
    ev.slice_args = {}
    known = {"has_call_stack": _slice_arg(src, "has_call_stack", s_args, pop=True)}
    for old, key in _SECOND_SPELLINGS.items():
        value = _slice_arg(src, key, s_args, pop=True)
        other = src.pop(old, None)
        if other is not None:
            np.copyto(value, other[s_args], where=value < 0)
        known[key] = value
        del other
    for key in SLICE_ARG_FILL:
        if key not in known and key not in _SECOND_SPELLINGS:
            known[key] = _slice_arg(src, key, s_args, pop=True)
    return known


#: Slice args read under a second spelling, merged into the first's column.
_SECOND_SPELLINGS = {"external_id_old": "external_id", "Bytes": "bytes"}


def _slice_arg(
    columns: dict[str, np.ndarray], key: str, rows: np.ndarray, pop: bool = False
) -> np.ndarray:
    """Slice-arg column ``key`` at ``rows``; a column no slice has is not among the
    event columns (:data:`~explorer.trace.event_types.SLICE_ARG_FILL`), and is made here
    once, at the slices' length (at 10M events, six such columns made whole by the merger
    and then gathered touched 670 MB of fresh memory)."""
    column = columns.pop(key, None) if pop else columns.get(key)
    if column is None:
        fill = SLICE_ARG_FILL[key]
        return np.full(len(rows), fill, np.asarray(fill).dtype)
    return column[rows]


def _instants(ev: EventColumns, rel_ns: RelativeTimes, keys: TrackKeys) -> pd.DataFrame:
    inst_idx = ev.instant_rows
    return pd.DataFrame(
        {
            "ts": rel_ns[inst_idx].astype(np.int64),
            "name": _categorical(ev.name[inst_idx], ev.names.values),
            "cat": _categorical(ev.cat[inst_idx], ev.cats.values),
            "track": keys.track_of_events(inst_idx).astype(np.int32),
            "scope": pd.Categorical(ev.instant_scope),
        }
    )


def _describe(
    meta: dict[str, Any], t0_us: float, ends: np.ndarray, warnings: list[str], path: object
) -> None:
    """The metadata every trace has: absolute start and end, rank, format, warnings."""
    base_ns = meta.get("baseTimeNanoseconds")
    base_ns = (
        int(base_ns) if isinstance(base_ns, (int, float)) and not isinstance(base_ns, bool) else 0
    )
    span_ns = int(ends.max()) if len(ends) else 0
    meta["start_ns"] = absolute_start(base_ns, int(t0_us), span_ns, warnings)
    meta["end_ns"] = meta["start_ns"] + span_ns
    dist = meta.get("distributedInfo") or {}
    if isinstance(dist, dict):
        meta.setdefault("rank", dist.get("rank", -1))
        meta.setdefault("world_size", dist.get("world_size", -1))
    meta["synthetic"] = bool(meta.get("synthetic", False))
    meta["warnings"] = warnings
    meta["source"] = str(path)
    meta.setdefault(
        "format", "kineto" if "schemaVersion" in meta or "deviceProperties" in meta else "chrome"
    )


def _copy_bytes_from_launch(slices: pd.DataFrame, flows: pd.DataFrame, store: ArgsStore) -> None:
    """Device copies without a byte count (ROCm's ``gpu_memcpy`` has none) take it from the
    runtime call that launched them (``hipMemcpyWithStream``'s ``size``). Only those few
    calls' args are decoded."""
    nbytes = slices["bytes"].to_numpy()
    kind = slices["kind"].cat
    copies = np.asarray(kind.codes == kind.categories.get_loc("memcpy")) | np.asarray(
        kind.codes == kind.categories.get_loc("memset")
    )
    launch = np.flatnonzero(np.asarray(flows["type"].cat.codes == FLOW_TYPES.index("launch")))
    dst = flows["dst"].to_numpy()[launch]
    want = copies[dst] & (nbytes[dst] < 0)
    if not want.any():
        return
    fixed = nbytes.copy()
    for src, d in zip(flows["src"].to_numpy()[launch[want]], dst[want], strict=True):
        a = store.get(int(src))
        v = a.get("bytes", a.get("size", a.get("Bytes")))
        try:
            fixed[d] = int(v, 0) if isinstance(v, str) else int(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):  # None or not a number: that copy keeps no size
            continue
    slices["bytes"] = fixed


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
    ev: EventColumns,
    rel_ns: RelativeTimes,
    keys: TrackKeys,
    slices: pd.DataFrame,
    ends: np.ndarray,
    path: object,
) -> pd.DataFrame:
    rows = ev.memory_rows
    known = ev.memory_args

    def w(k: int) -> str:
        return ev.where(int(rows[k]))

    trk = keys.track_of_events(rows)
    ts = rel_ns[rows].astype(np.int64)
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


def _counters(
    ev: EventColumns,
    rel_ns: RelativeTimes,
    keys: TrackKeys,
    tracks: pd.DataFrame,
    warnings: list[str],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Counter events (``ph: C``): one counter track per (process, name, series)."""
    if not ev.counter_args:
        return pd.DataFrame(
            {
                "track": np.empty(0, np.int32),
                "ts": np.empty(0, np.int64),
                "value": np.empty(0, np.float64),
            }
        ), tracks
    rows_key, rows_ts, rows_val = [], [], []
    too_large = 0
    for i, args in ev.counter_args:
        pid = columns.strings([ev.pids.values[ev.pid[i]]])[0]
        name = ev.name_text(i)
        for series, value in args.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                try:
                    as_float = float(value)
                except OverflowError:  # an integer of hundreds of digits: no float holds it
                    too_large += 1
                    continue
                label = name if len(args) == 1 or series == name else f"{name} {series}"
                rows_key.append((pid, label))
                rows_ts.append(rel_ns[i])
                rows_val.append(as_float)
    if too_large:
        warnings.append(
            f"{too_large} counter values were integers beyond any float (hundreds of digits) "
            "and were left out"
        )
    uniq = sorted(set(rows_key))
    proc_label = dict(zip(tracks["pid"], tracks["process"], strict=False))
    base_id = len(tracks)
    base_order = int(tracks["order"].max()) + 1 if len(tracks) else 0
    rank = int(tracks["rank"].iloc[0]) if len(tracks) else -1
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
            "rank": np.full(len(uniq), rank, np.int64),
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

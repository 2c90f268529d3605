"""Export a trace as a Perfetto protobuf trace (``.pftrace``): what ui.perfetto.dev loads
fastest, with real tracks, flows and counters.

The file is a stream of ``TracePacket`` messages on one trusted sequence:

1. one packet that clears the sequence's incremental state and interns every event name,
   category, debug-annotation name and repeated string value (``SEQ_INCREMENTAL_STATE_CLEARED``);
2. one ``TrackDescriptor`` packet per row (see :mod:`explorer.export.perfetto_tracks`);
3. the events in time order, written in chunks: a slice is a ``TYPE_SLICE_BEGIN`` and a
   ``TYPE_SLICE_END`` (a zero-length slice is one ``TYPE_INSTANT``), counters are
   ``TYPE_COUNTER`` on counter rows; packets using interned ids carry
   ``SEQ_NEEDS_INCREMENTAL_STATE``. Flows ride on the begin packets as ``flow_ids`` (at
   the earlier end) and ``terminating_flow_ids`` (at the later end);
4. Explorer's own rows (findings, critical path), built with the protobuf classes.

Timestamps are absolute nanoseconds (``metadata["start_ns"] + ts``), so the trace lines up
with anything else recorded on the same clock, and Perfetto shows wall-clock offsets.

Slice and counter packets are encoded column-wise with :mod:`explorer.export.protowire`
(a chunk of packets per handful of numpy operations) and written as they are made: memory
holds one chunk's bytes, never the whole trace as protobuf objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from explorer.export import protowire as w
from explorer.export.lanes import assign_lanes
from explorer.export.perfetto_annotations import Annotations, StringTable, slice_annotations
from explorer.export.perfetto_tracks import EXPLICIT, TrackLayout, build_layout
from explorer.export.results import Results, explorer_results
from explorer.trace.model import TraceData

SEQUENCE_ID = 1
CHUNK_EVENTS = 1 << 16

TYPE_BEGIN = pb.TrackEvent.Type.TYPE_SLICE_BEGIN
TYPE_END = pb.TrackEvent.Type.TYPE_SLICE_END
TYPE_INSTANT = pb.TrackEvent.Type.TYPE_INSTANT
TYPE_COUNTER = pb.TrackEvent.Type.TYPE_COUNTER
CLEARED = pb.TracePacket.SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED
NEEDS_STATE = pb.TracePacket.SequenceFlags.SEQ_NEEDS_INCREMENTAL_STATE

# Order of events at the same timestamp: ends, then begins, then instants, then counters.
_END, _BEGIN, _INSTANT, _COUNTER = 0, 1, 2, 3
# Where an event row comes from.
_FROM_SLICE, _FROM_INSTANT, _FROM_COUNTER = 0, 1, 2

_TYPE_TAG = w.tag(9, w.VARINT) + b"\x00"  # the type byte is filled in per row
_SEQ_FIELD = w.tag(10, w.VARINT) + w.varint_bytes(SEQUENCE_ID)
_FLAGS_FIELD = w.tag(13, w.VARINT) + w.varint_bytes(NEEDS_STATE)
_FLOW_TAG = np.frombuffer(w.tag(47, w.FIXED64), np.uint8)
_TERMINATING_FLOW_TAG = np.frombuffer(w.tag(48, w.FIXED64), np.uint8)


@dataclass
class PerfettoExport:
    """What was written, for the CLI's summary line and for tests."""

    path: Path
    slices: int = 0  # trace slices (begin/end pairs, or one instant when zero-length)
    instants: int = 0  # the trace's instant events
    counter_samples: int = 0
    flows: int = 0
    result_slices: int = 0  # Explorer's findings / critical-path slices
    lane_tracks: int = 0  # sibling rows added for overlapping slices
    bytes: int = 0
    notes: list[str] = field(default_factory=list)


def to_perfetto(
    trace: TraceData, path: str | Path, *, results: Results | None = None
) -> PerfettoExport:
    """Write ``trace`` to ``path`` as a Perfetto protobuf trace and say what was written.

    ``results`` defaults to Explorer's findings and critical path of the trace (left out
    when those analyses are not available).
    """
    path = Path(path)
    sl = trace.slices
    n = len(sl)
    ts = sl["ts"].to_numpy(np.int64)
    dur = sl["dur"].to_numpy(np.int64)
    track = sl["track"].to_numpy()
    lanes = assign_lanes(track, ts, dur)
    if results is None:
        results = explorer_results(trace)
    instants = trace.instants if trace.instants is not None else pd.DataFrame()
    inst_track = instants["track"].to_numpy(np.int64) if len(instants) else np.zeros(0, np.int64)
    layout = build_layout(trace, lanes, has_global_instants=bool((inst_track < 0).any()))
    result_uuid, result_lanes = _result_rows(layout, results)

    strings = StringTable()
    annotations = slice_annotations(trace, strings)
    names = _Interned()
    cats = _Interned()
    slice_name_iid = names.codes(sl["name"]) if n else np.zeros(0, np.int64)
    slice_cat_iid = cats.codes(sl["cat"]) if n else np.zeros(0, np.int64)
    inst_name_iid = names.codes(instants["name"]) if len(instants) else np.zeros(0, np.int64)
    inst_cat_iid = cats.codes(instants["cat"]) if len(instants) else np.zeros(0, np.int64)

    flows = _flow_table(trace, results)
    out_ptr, out_ids, in_ptr, in_ids = flows.by_slice(n)

    counters = _counter_rows(trace, layout)
    start_ns = int(trace.metadata.get("start_ns", 0) or 0)

    summary = PerfettoExport(path=path, notes=list(results.notes))
    with open(path, "wb") as f:
        head = pb.TracePacket(
            trusted_packet_sequence_id=SEQUENCE_ID,
            sequence_flags=CLEARED,
            first_packet_on_sequence=True,
        )
        names.fill(head.interned_data.event_names, pb.EventName)
        cats.fill(head.interned_data.event_categories, pb.EventCategory)
        for i, name in enumerate(annotations.names, start=1):
            head.interned_data.debug_annotation_names.add(iid=i, name=name)
        for i, value in enumerate(strings.values, start=1):
            head.interned_data.debug_annotation_string_values.add(iid=i, str=value.encode())
        _write(f, head)
        for desc in layout.descriptors:
            _write(f, pb.TracePacket(trusted_packet_sequence_id=SEQUENCE_ID, track_descriptor=desc))

        events = _event_order(ts, dur, len(instants), instants, counters)
        src_kind, src_idx, ev_kind = events
        slice_uuid = layout.slice_uuid
        inst_uuid = np.where(
            inst_track >= 0,
            layout.track_uuid[np.clip(inst_track, 0, None)] if len(layout.track_uuid) else 0,
            layout.group_uuid.get("instants", 0),
        )
        for lo in range(0, len(ev_kind), CHUNK_EVENTS):
            hi = min(lo + CHUNK_EVENTS, len(ev_kind))
            chunk = _Chunk(src_kind[lo:hi], src_idx[lo:hi], ev_kind[lo:hi])
            data = _encode_chunk(
                chunk,
                start_ns,
                ts,
                dur,
                slice_uuid,
                slice_name_iid,
                slice_cat_iid,
                annotations,
                (out_ptr, out_ids, in_ptr, in_ids),
                instants,
                inst_uuid,
                inst_name_iid,
                inst_cat_iid,
                counters,
            )
            f.write(memoryview(data))
        _write_results(f, results, result_uuid, result_lanes, start_ns)
        summary.bytes = f.tell()

    is_slice = src_kind == _FROM_SLICE
    summary.slices = int((is_slice & (ev_kind != _END)).sum())
    summary.instants = len(instants)
    summary.counter_samples = int((src_kind == _FROM_COUNTER).sum())
    summary.flows = flows.count
    summary.result_slices = len(results.slices)
    summary.lane_tracks = layout.lane_tracks
    return summary


# -- interning -------------------------------------------------------------------------------


class _Interned:
    """Event names or categories: one iid per distinct string, in first-seen order."""

    def __init__(self) -> None:
        self.iid: dict[str, int] = {}

    def codes(self, column: pd.Series) -> np.ndarray:
        """iid of every row, looked up once per distinct value (categorical or not)."""
        cat = column.astype("category") if column.dtype.name != "category" else column
        table = np.array(
            [self._get(str(c)) for c in cat.cat.categories] + [self._get("")], np.int64
        )
        return table[cat.cat.codes.to_numpy()]

    def _get(self, s: str) -> int:
        if s not in self.iid:
            self.iid[s] = len(self.iid) + 1
        return self.iid[s]

    def fill(self, repeated: object, message: type) -> None:
        repeated.extend(message(iid=i, name=s) for s, i in self.iid.items())  # type: ignore[attr-defined]


# -- flows ---------------------------------------------------------------------------------


@dataclass
class _Flows:
    first: np.ndarray  # slice id carrying flow_ids (the earlier end)
    second: np.ndarray  # slice id carrying terminating_flow_ids
    count: int

    def by_slice(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """CSR lists: flow ids starting at / terminating at each slice."""
        ids = np.arange(1, self.count + 1, dtype=np.int64)

        def csr(owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            order = np.argsort(owner, kind="stable")
            ptr = np.zeros(n + 1, np.int64)
            np.cumsum(np.bincount(owner, minlength=n), out=ptr[1:])
            return ptr, ids[order]

        o_ptr, o_ids = csr(self.first)
        i_ptr, i_ids = csr(self.second)
        return o_ptr, o_ids, i_ptr, i_ids


def _flow_table(trace: TraceData, results: Results) -> _Flows:
    """Every flow between two distinct slices, oriented by start time so that a flow always
    begins before it terminates (clock skew can put a kernel before its launch)."""
    n = len(trace.slices)
    parts = [trace.flows[["src", "dst"]]] if trace.flows is not None and len(trace.flows) else []
    if len(results.flows):
        parts.append(results.flows[["src", "dst"]])
    if not parts or n == 0:
        return _Flows(np.zeros(0, np.int64), np.zeros(0, np.int64), 0)
    fl = pd.concat(parts, ignore_index=True)
    src = fl["src"].to_numpy(np.int64)
    dst = fl["dst"].to_numpy(np.int64)
    ok = (src >= 0) & (dst >= 0) & (src < n) & (dst < n) & (src != dst)
    # the trace's own flows first, then an analysis' flow only where no arrow exists yet
    ok &= ~pd.DataFrame({"s": src, "d": dst}).duplicated().to_numpy()
    src, dst = src[ok], dst[ok]
    ts = trace.slices["ts"].to_numpy(np.int64)
    swap = (ts[dst] < ts[src]) | ((ts[dst] == ts[src]) & (dst < src))
    first = np.where(swap, dst, src)
    second = np.where(swap, src, dst)
    return _Flows(first, second, len(first))


# -- counters ------------------------------------------------------------------------------


@dataclass
class _Counters:
    ts: np.ndarray
    uuid: np.ndarray
    value: np.ndarray

    def __len__(self) -> int:
        return len(self.ts)


def _counter_rows(trace: TraceData, layout: TrackLayout) -> _Counters:
    """Counter samples of the trace plus the allocator's running totals per device."""
    ts, uuid, value = [], [], []
    c = trace.counters
    if c is not None and len(c):
        ts.append(c["ts"].to_numpy(np.int64))
        uuid.append(layout.track_uuid[c["track"].to_numpy(np.int64)])
        value.append(c["value"].to_numpy(np.float64))
    mem = trace.memory
    if mem is not None and len(mem):
        for (dtype, dev, what), u in layout.memory_uuids.items():
            sel = ((mem["device_type"] == dtype) & (mem["device"] == dev)).to_numpy()
            col = "total_allocated" if what == "allocated" else "total_reserved"
            ts.append(mem["ts"].to_numpy(np.int64)[sel])
            uuid.append(np.full(int(sel.sum()), u, np.int64))
            value.append(mem[col].to_numpy(np.float64)[sel])
    if not ts:
        return _Counters(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
    return _Counters(np.concatenate(ts), np.concatenate(uuid), np.concatenate(value))


# -- event order ---------------------------------------------------------------------------


def _event_order(
    ts: np.ndarray, dur: np.ndarray, n_inst: int, instants: pd.DataFrame, counters: _Counters
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every packet to write, in time order: (source kind, source row, event kind).

    At one timestamp, ends come first (innermost first: later slice id first), then begins
    (outermost first), then instants and counters — so each row nests properly.
    """
    n = len(ts)
    ids = np.arange(n, dtype=np.int64)
    opens = dur > 0
    b = ids[opens]
    z = ids[~opens]
    inst_ts = instants["ts"].to_numpy(np.int64) if n_inst else np.zeros(0, np.int64)
    time = np.concatenate([ts[b], ts[b] + dur[b], ts[z], inst_ts, counters.ts])
    ev_kind = np.concatenate(
        [
            np.full(len(b), _BEGIN, np.int8),
            np.full(len(b), _END, np.int8),
            np.full(len(z), _INSTANT, np.int8),
            np.full(n_inst, _INSTANT, np.int8),
            np.full(len(counters), _COUNTER, np.int8),
        ]
    )
    src_kind = np.concatenate(
        [
            np.full(2 * len(b) + len(z), _FROM_SLICE, np.int8),
            np.full(n_inst, _FROM_INSTANT, np.int8),
            np.full(len(counters), _FROM_COUNTER, np.int8),
        ]
    )
    src_idx = np.concatenate([b, b, z, np.arange(n_inst), np.arange(len(counters))])
    tie = np.concatenate([b, -b, z, n + np.arange(n_inst), np.arange(len(counters))])
    order = np.lexsort((tie, ev_kind, time))
    return src_kind[order], src_idx[order], ev_kind[order]


# -- encoding ------------------------------------------------------------------------------


@dataclass
class _Chunk:
    src_kind: np.ndarray
    src_idx: np.ndarray
    ev_kind: np.ndarray


def _encode_chunk(
    chunk: _Chunk,
    start_ns: int,
    ts: np.ndarray,
    dur: np.ndarray,
    slice_uuid: np.ndarray,
    slice_name_iid: np.ndarray,
    slice_cat_iid: np.ndarray,
    annotations: Annotations,
    flow_csr: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    instants: pd.DataFrame,
    inst_uuid: np.ndarray,
    inst_name_iid: np.ndarray,
    inst_cat_iid: np.ndarray,
    counters: _Counters,
) -> np.ndarray:
    """The framed bytes of one chunk of packets."""
    m = len(chunk.ev_kind)
    is_slice = chunk.src_kind == _FROM_SLICE
    is_inst = chunk.src_kind == _FROM_INSTANT
    is_ctr = chunk.src_kind == _FROM_COUNTER
    opening = is_slice & (chunk.ev_kind != _END)  # begins and zero-length slices
    named = opening | is_inst
    sid = np.where(is_slice, chunk.src_idx, 0)
    iidx = np.where(is_inst, chunk.src_idx, 0)
    cidx = np.where(is_ctr, chunk.src_idx, 0)

    time = np.zeros(m, np.int64)
    if is_slice.any():
        t = ts[sid]
        time = np.where(is_slice, t + np.where(chunk.ev_kind == _END, dur[sid], 0), time)
    if is_inst.any():
        time = np.where(is_inst, instants["ts"].to_numpy(np.int64)[iidx], time)
    if is_ctr.any():
        time = np.where(is_ctr, counters.ts[cidx], time)
    time = time + start_ns

    ev_type = np.select(
        [chunk.ev_kind == _BEGIN, chunk.ev_kind == _END, is_ctr],
        [TYPE_BEGIN, TYPE_END, TYPE_COUNTER],
        TYPE_INSTANT,
    )
    uuid = np.select(
        [is_slice, is_inst],
        [slice_uuid[sid] if len(slice_uuid) else 0, inst_uuid[iidx] if len(inst_uuid) else 0],
        counters.uuid[cidx] if len(counters) else 0,
    )
    name_iid = np.select(
        [is_slice, is_inst],
        [
            slice_name_iid[sid] if len(slice_name_iid) else 0,
            inst_name_iid[iidx] if len(inst_name_iid) else 0,
        ],
        0,
    )
    cat_iid = np.select(
        [is_slice, is_inst],
        [
            slice_cat_iid[sid] if len(slice_cat_iid) else 0,
            inst_cat_iid[iidx] if len(inst_cat_iid) else 0,
        ],
        0,
    )
    type_and_track = w.field_varint(11, uuid, prefix=_TYPE_TAG)
    type_and_track.bytes[:, 1] = ev_type  # every type fits in the one byte after its tag
    inner = w.Block([type_and_track])
    if named.any():
        inner.append(w.field_varint(10, name_iid, named))
        inner.append(w.field_varint(3, cat_iid, named))
    if is_ctr.any():
        inner.append(w.field_fixed64(44, counters.value[cidx].astype(np.float64), is_ctr))
    inner.extend(annotations.encode(sid, opening))
    slots = _flow_slots(sid, opening, flow_csr)
    if slots is not None:
        inner.extend(slots)
        tail, tail_lens = np.zeros(0, np.uint8), np.zeros(m, np.int64)
    else:  # some slice has many flows (a graph launch): append them as raw bytes
        tail, tail_lens = _flow_tail(sid, opening, flow_csr)
    packet = w.Block([w.field_varint(8, time, prefix=_SEQ_FIELD)])
    if named.any():
        packet.append(w.constant(_FLAGS_FIELD, named))
    packet.extend(w.message(11, inner, extra_len=tail_lens))
    if not len(tail):
        return w.frame(packet)
    flat, lens = packet.flat(), packet.lens
    flat = w.interleave(flat, lens, tail, tail_lens)
    return w.frame_ragged(flat, lens + tail_lens)


#: Up to this many flow ids per packet are laid out as fixed columns; more fall back to the
#: slower byte-level tail (only for chunks holding such a packet).
_MAX_FLOW_SLOTS = 8


def _flow_slots(
    sid: np.ndarray,
    opening: np.ndarray,
    flow_csr: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> w.Block | None:
    """``flow_ids`` then ``terminating_flow_ids`` of each packet as fixed-width parts;
    None when a packet of this chunk has more than :data:`_MAX_FLOW_SLOTS` of them."""
    out_ptr, out_ids, in_ptr, in_ids = flow_csr
    block = w.Block()
    if len(out_ids) == 0:
        return block
    n_out = np.where(opening, out_ptr[sid + 1] - out_ptr[sid], 0)
    n_in = np.where(opening, in_ptr[sid + 1] - in_ptr[sid], 0)
    k_out, k_in = int(n_out.max(initial=0)), int(n_in.max(initial=0))
    if k_out + k_in > _MAX_FLOW_SLOTS:
        return None
    for count, ptr, ids, tag_bytes in (
        (k_out, out_ptr, out_ids, _FLOW_TAG),
        (k_in, in_ptr, in_ids, _TERMINATING_FLOW_TAG),
    ):
        have_n = n_out if tag_bytes is _FLOW_TAG else n_in
        for k in range(count):
            have = have_n > k
            value = ids[np.clip(ptr[sid] + k, 0, len(ids) - 1)]
            rows = np.empty((len(sid), 10), np.uint8)
            rows[:, :2] = tag_bytes
            rows[:, 2:] = value.astype("<u8").view(np.uint8).reshape(len(sid), 8)
            block.append(w.Part(rows, have))
    return block


def _flow_tail(
    sid: np.ndarray,
    opening: np.ndarray,
    flow_csr: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """``flow_ids`` and ``terminating_flow_ids`` fields of each packet, as bytes appended
    to its track event (10 bytes per id: a two-byte tag and a fixed64)."""
    out_ptr, out_ids, in_ptr, in_ids = flow_csr
    m = len(sid)
    if len(out_ids) == 0:
        return np.zeros(0, np.uint8), np.zeros(m, np.int64)
    n_out = np.where(opening, out_ptr[sid + 1] - out_ptr[sid], 0)
    n_in = np.where(opening, in_ptr[sid + 1] - in_ptr[sid], 0)
    per = n_out + n_in
    total = int(per.sum())
    if total == 0:
        return np.zeros(0, np.uint8), np.zeros(m, np.int64)
    rows = np.repeat(np.arange(m), per)
    k = np.arange(total) - np.repeat(np.cumsum(per) - per, per)  # index within the packet
    is_out = k < n_out[rows]
    ids = np.where(
        is_out,
        out_ids[np.clip(out_ptr[sid[rows]] + k, 0, len(out_ids) - 1)],
        in_ids[np.clip(in_ptr[sid[rows]] + k - n_out[rows], 0, max(len(in_ids) - 1, 0))],
    )
    items = np.empty((total, 10), np.uint8)
    items[:, :2] = np.where(is_out[:, None], _FLOW_TAG[None, :], _TERMINATING_FLOW_TAG[None, :])
    items[:, 2:] = ids.astype("<u8").view(np.uint8).reshape(total, 8)
    return items.reshape(-1), per * 10


def _write(f: object, packet: pb.TracePacket) -> None:
    data = packet.SerializeToString()
    f.write(w.tag(1, w.LEN) + w.varint_bytes(len(data)) + data)  # type: ignore[attr-defined]


# -- Explorer's rows -------------------------------------------------------------------------


def _result_rows(layout: TrackLayout, results: Results) -> tuple[dict[str, list[int]], np.ndarray]:
    """Describe the Explorer group and its rows (with overlap lanes); each result slice's
    lane."""
    if not results.slices:
        return {}, np.zeros(0, np.int32)
    group = layout.add(name="Explorer", child_ordering=EXPLICIT, sibling_order_rank=-1)
    layout.group_uuid["explorer"] = group
    rows = results.rows()
    row_of = np.array([rows.index(s.row) for s in results.slices], np.int64)
    ts = np.array([s.ts for s in results.slices], np.int64)
    dur = np.array([s.dur for s in results.slices], np.int64)
    order = np.lexsort((-dur, ts, row_of))
    lanes = np.zeros(len(ts), np.int32)
    lanes[order] = assign_lanes(row_of[order], ts[order], dur[order])
    uuids = {}
    for r, row in enumerate(rows):
        count = int(lanes[row_of == r].max()) + 1
        uuids[row] = layout.add_lanes(group, row, count, r)
    return uuids, lanes


def _write_results(
    f: object, results: Results, uuids: dict[str, list[int]], lanes: np.ndarray, start_ns: int
) -> None:
    """Explorer's result slices: few, so plain protobuf objects with inline names."""
    if not results.slices:
        return
    events = []
    for i, s in enumerate(results.slices):
        uuid = uuids[s.row][int(lanes[i])]
        if s.dur > 0:
            events.append((s.ts, _BEGIN, i, uuid, s))
            events.append((s.ts + s.dur, _END, -i, uuid, s))
        else:
            events.append((s.ts, _INSTANT, i, uuid, s))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    for t, kind, _, uuid, s in events:
        te = pb.TrackEvent(track_uuid=uuid)
        if kind == _END:
            te.type = TYPE_END
        else:
            te.type = TYPE_BEGIN if kind == _BEGIN else TYPE_INSTANT
            te.name = s.name
            te.categories.append("explorer")
            for key, value in s.args.items():
                a = te.debug_annotations.add(name=key)
                if isinstance(value, bool):
                    a.bool_value = value
                elif isinstance(value, int):
                    a.int_value = value
                elif isinstance(value, float):
                    a.double_value = value
                else:
                    a.string_value = str(value)
        packet = pb.TracePacket(
            timestamp=start_ns + int(t), trusted_packet_sequence_id=SEQUENCE_ID, track_event=te
        )
        _write(f, packet)

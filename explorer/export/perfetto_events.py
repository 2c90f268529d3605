"""The slice, instant and counter packets of a Perfetto export, encoded a chunk at a
time: which events there are, in what order, and their bytes.

Every packet is cut from per-source columns (:class:`EventTables`): a slice gives a
begin and an end packet (or one instant when it has no length), the trace's instants and
counter samples one packet each. :func:`event_order` puts them in time order once;
:func:`encode_core` turns a run of them into bytes with
:mod:`explorer.export.protowire`, so no packet is ever a Python object, all but the lengths
and flow ids, which wait for the analyses; :func:`finish_chunk` adds those.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from explorer.export import protowire as w
from explorer.export.perfetto_annotations import Annotations
from explorer.export.perfetto_tracks import TrackLayout
from explorer.export.results import Results
from explorer.trace.model import TraceData

SEQUENCE_ID = 1

TYPE_BEGIN = pb.TrackEvent.Type.TYPE_SLICE_BEGIN
TYPE_END = pb.TrackEvent.Type.TYPE_SLICE_END
TYPE_INSTANT = pb.TrackEvent.Type.TYPE_INSTANT
TYPE_COUNTER = pb.TrackEvent.Type.TYPE_COUNTER
NEEDS_STATE = pb.TracePacket.SequenceFlags.SEQ_NEEDS_INCREMENTAL_STATE

#: Order of events at the same timestamp: ends, then begins, then instants, then counters.
END, BEGIN, INSTANT, COUNTER = 0, 1, 2, 3
#: Where an event row comes from.
FROM_SLICE, FROM_INSTANT, FROM_COUNTER = 0, 1, 2

_TYPE_TAG = w.tag(9, w.VARINT) + b"\x00"  # the type byte is filled in per row
_SEQ_FIELD = w.tag(10, w.VARINT) + w.varint_bytes(SEQUENCE_ID)
_FLAGS_FIELD = w.tag(13, w.VARINT) + w.varint_bytes(NEEDS_STATE)
_FLOW_TAG = np.frombuffer(w.tag(47, w.FIXED64), np.uint8)
_TERMINATING_FLOW_TAG = np.frombuffer(w.tag(48, w.FIXED64), np.uint8)


# -- flows ---------------------------------------------------------------------------------


@dataclass
class Flows:
    """Flow ids ``first_id``.. (1.. by default): ``first`` carries ``flow_ids`` (the earlier end; -1 when that end
    is a result slice, not a trace slice), ``second`` carries ``terminating_flow_ids``."""

    first: np.ndarray
    second: np.ndarray
    count: int
    result_links: dict[int, list[int]] = field(default_factory=dict)
    """Result slice index → the flow ids it begins (links to a finding's evidence)."""
    first_id: int = 1
    """The id of flow 0 (ids run first_id..first_id+count-1)."""

    def by_slice(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """CSR lists: flow ids starting at / terminating at each trace slice."""
        ids = np.arange(self.first_id, self.first_id + self.count, dtype=np.int64)

        def csr(owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            mine = owner >= 0
            order = np.argsort(owner[mine], kind="stable")
            ptr = np.zeros(n + 1, np.int64)
            np.cumsum(np.bincount(owner[mine], minlength=n), out=ptr[1:])
            return ptr, ids[mine][order]

        o_ptr, o_ids = csr(self.first)
        i_ptr, i_ids = csr(self.second)
        return o_ptr, o_ids, i_ptr, i_ids


def flow_table(trace: TraceData, results: Results, first_id: int = 1) -> Flows:
    """Every flow between two distinct slices, oriented by start time so that a flow always
    begins before it terminates (clock skew can put a kernel before its launch); then the
    findings' links to their evidence (only to slices starting after the finding does)."""
    n = len(trace.slices)
    parts = [trace.flows[["src", "dst"]]] if trace.flows is not None and len(trace.flows) else []
    if len(results.flows):
        parts.append(results.flows[["src", "dst"]])
    if n == 0:
        return Flows(np.zeros(0, np.int64), np.zeros(0, np.int64), 0, first_id=first_id)
    first = second = np.zeros(0, np.int64)
    ts = trace.slices["ts"].to_numpy(np.int64)
    if parts:
        fl = pd.concat(parts, ignore_index=True)
        src = fl["src"].to_numpy(np.int64)
        dst = fl["dst"].to_numpy(np.int64)
        ok = (src >= 0) & (dst >= 0) & (src < n) & (dst < n) & (src != dst)
        # the trace's own flows first, then an analysis' flow only where no arrow exists yet
        ok &= ~pd.DataFrame({"s": src, "d": dst}).duplicated().to_numpy()
        src, dst = src[ok], dst[ok]
        # the end whose opening packet comes first in the file: by time, then begins
        # before zero-length instants, then slice id (the order event_order writes)
        inst = trace.slices["dur"].to_numpy(np.int64) == 0
        key_s = np.stack([ts[src], inst[src], src])
        key_d = np.stack([ts[dst], inst[dst], dst])
        swap = _lex_less(key_d, key_s)
        first = np.where(swap, dst, src)
        second = np.where(swap, src, dst)
    links: dict[int, list[int]] = {}
    extra: list[int] = []
    for i, s in enumerate(results.slices):
        targets = [e for e in dict.fromkeys(s.links) if 0 <= e < n and ts[e] > s.ts]
        if targets:
            start = len(first) + len(extra) + first_id
            links[i] = list(range(start, start + len(targets)))
            extra.extend(targets)
    if extra:
        first = np.concatenate([first, np.full(len(extra), -1, np.int64)])
        second = np.concatenate([second, np.asarray(extra, np.int64)])
    return Flows(first, second, len(first), links, first_id)


def _lex_less(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Column-wise lexicographic ``a < b`` for keys stacked as rows."""
    less = np.zeros(a.shape[1], bool)
    equal = np.ones(a.shape[1], bool)
    for ra, rb in zip(a, b, strict=True):
        less |= equal & (ra < rb)
        equal &= ra == rb
    return less


# -- counters ------------------------------------------------------------------------------


@dataclass
class Counters:
    ts: np.ndarray
    uuid: np.ndarray
    value: np.ndarray

    def __len__(self) -> int:
        return len(self.ts)


def counter_rows(trace: TraceData, layout: TrackLayout) -> Counters:
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
        return Counters(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
    return Counters(np.concatenate(ts), np.concatenate(uuid), np.concatenate(value))


# -- event order ---------------------------------------------------------------------------


def event_order(t: EventTables) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every packet to write, in time order: (source kind, source row, event kind).

    At one timestamp, ends come first (innermost first: later slice id first), then begins
    (outermost first), then instants and counters — so each row nests properly.
    """
    ts, dur, counters = t.ts, t.dur, t.counters
    n_inst = len(t.inst_ts)
    n = len(ts)
    # Row numbers as int32 when they fit: this sort holds ~5 arrays of two entries a slice.
    fits = n + n_inst + len(counters) < 2**31
    idx_t = np.int32 if fits else np.int64
    ids = np.arange(n, dtype=idx_t)
    opens = dur > 0
    b = ids[opens]
    z = ids[~opens]
    inst_ts = t.inst_ts
    time = np.concatenate([ts[b], ts[b] + dur[b], ts[z], inst_ts, counters.ts])
    ev_kind = np.concatenate(
        [
            np.full(len(b), BEGIN, np.int8),
            np.full(len(b), END, np.int8),
            np.full(len(z), INSTANT, np.int8),
            np.full(n_inst, INSTANT, np.int8),
            np.full(len(counters), COUNTER, np.int8),
        ]
    )
    src_kind = np.concatenate(
        [
            np.full(2 * len(b) + len(z), FROM_SLICE, np.int8),
            np.full(n_inst, FROM_INSTANT, np.int8),
            np.full(len(counters), FROM_COUNTER, np.int8),
        ]
    )
    inst_idx, ctr_idx = np.arange(n_inst, dtype=idx_t), np.arange(len(counters), dtype=idx_t)
    src_idx = np.concatenate([b, b, z, inst_idx, ctr_idx])
    tie = np.concatenate([b, -b, z, n + inst_idx, ctr_idx])
    order = np.lexsort((tie, ev_kind, time))
    return src_kind[order], src_idx[order], ev_kind[order]


# -- encoding ------------------------------------------------------------------------------


@dataclass
class EventTables:
    """The per-source columns packets are cut from (times relative to ``start_ns``)."""

    start_ns: int
    ts: np.ndarray  # slices
    dur: np.ndarray
    slice_uuid: np.ndarray
    slice_name_iid: np.ndarray
    slice_cat_iid: np.ndarray
    annotations: Annotations
    flow_csr: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    inst_ts: np.ndarray  # the trace's instants
    inst_uuid: np.ndarray
    inst_name_iid: np.ndarray
    inst_cat_iid: np.ndarray
    counters: Counters


@dataclass
class EncodedChunk:
    """A run of packets encoded but for what the analysis results decide: each packet's
    fields but its own length, its track event's tag and length, and its flow ids (the
    critical path's flows and the findings' links add ids to trace slices). ``core``
    holds, per packet, the packet's fields before its track event (``head_lens`` bytes)
    then the track event's fields (``event_lens``). :func:`finish_chunk` frames it."""

    core: np.ndarray
    head_lens: np.ndarray
    event_lens: np.ndarray
    sid: np.ndarray  # the slice of each packet (0 where none)
    opening: np.ndarray  # a slice's begin or zero-length slice: the packets flows attach to


def encode_core(
    t: EventTables, src_kind: np.ndarray, src_idx: np.ndarray, ev_kind: np.ndarray
) -> EncodedChunk:
    """Every byte of one run of packets that needs no flow: all of them but the lengths
    and flow ids (the export encodes these while the analyses still run)."""
    counters, annotations = t.counters, t.annotations
    is_slice = src_kind == FROM_SLICE
    is_inst = src_kind == FROM_INSTANT
    is_ctr = src_kind == FROM_COUNTER
    opening = is_slice & (ev_kind != END)  # begins and zero-length slices
    named = opening | is_inst
    sid = np.where(is_slice, src_idx, 0)
    iidx = np.where(is_inst, src_idx, 0)
    cidx = np.where(is_ctr, src_idx, 0)
    time = _packet_times(t, is_slice, is_inst, is_ctr, sid, iidx, cidx, ev_kind)
    ev_type = np.select(
        [ev_kind == BEGIN, ev_kind == END, is_ctr],
        [TYPE_BEGIN, TYPE_END, TYPE_COUNTER],
        TYPE_INSTANT,
    )
    ctr_uuid = counters.uuid[cidx] if len(counters) else 0
    uuid = _pick(is_slice, t.slice_uuid, sid, is_inst, t.inst_uuid, iidx, ctr_uuid)
    name_iid = _pick(is_slice, t.slice_name_iid, sid, is_inst, t.inst_name_iid, iidx, 0)
    cat_iid = _pick(is_slice, t.slice_cat_iid, sid, is_inst, t.inst_cat_iid, iidx, 0)
    # every type fits in the one byte after its tag
    type_and_track = w.with_column(w.field_varint(11, uuid, prefix=_TYPE_TAG), 1, ev_type)
    event = w.Block([type_and_track])
    if named.any():
        event.append(w.field_varint(10, name_iid, named))
        event.append(w.field_varint(3, cat_iid, named))
    if is_ctr.any():
        event.append(w.field_fixed64(44, counters.value[cidx].astype(np.float64), is_ctr))
    event.extend(annotations.encode(sid, opening))
    head = w.Block([w.field_varint(8, time, prefix=_SEQ_FIELD)])
    if named.any():
        head.append(w.constant(_FLAGS_FIELD, named))
    core = w.Block([*head, *event])
    # held for every chunk while the analyses run: lengths (of a packet's parts) as int32
    return EncodedChunk(
        core.flat(), head.lens.astype(np.int32), event.lens.astype(np.int32), sid, opening
    )


def finish_chunk(
    c: EncodedChunk, flow_csr: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
) -> np.ndarray:
    """The framed bytes of an encoded run: each packet's ``Trace.packet`` tag and length,
    its head, its track event's tag and length, the event's fields, then its flow ids
    (the event's last fields) — inserted into the core in one pass."""
    flows, flow_lens = _flow_tail(c.sid, c.opening, flow_csr)
    head_lens = c.head_lens.astype(np.int64)
    event_lens = c.event_lens + flow_lens
    event_head = w.field_varint_len(11, event_lens)
    packet = w.field_varint_len(1, head_lens + event_head.width + event_lens)
    return w.inserted(
        c.core,
        head_lens + c.event_lens,
        [
            (w.Block([packet]).flat(), packet.lens, np.zeros(len(flow_lens), np.int64)),
            (w.Block([event_head]).flat(), event_head.lens, head_lens),
            (flows, flow_lens, head_lens + c.event_lens),
        ],
    )


def _pick(
    is_slice: np.ndarray,
    of_slice: np.ndarray,
    sid: np.ndarray,
    is_inst: np.ndarray,
    of_inst: np.ndarray,
    iidx: np.ndarray,
    other: np.ndarray | int,
) -> np.ndarray:
    """Per packet: the slice's value, the instant's, or ``other`` (a counter's)."""
    return np.select(
        [is_slice, is_inst],
        [of_slice[sid] if len(of_slice) else 0, of_inst[iidx] if len(of_inst) else 0],
        other,
    )


def _packet_times(
    t: EventTables,
    is_slice: np.ndarray,
    is_inst: np.ndarray,
    is_ctr: np.ndarray,
    sid: np.ndarray,
    iidx: np.ndarray,
    cidx: np.ndarray,
    ev_kind: np.ndarray,
) -> np.ndarray:
    """Absolute ns of each packet: a slice's begin or end, an instant's or a sample's time."""
    time = np.zeros(len(ev_kind), np.int64)
    if is_slice.any():
        end = np.where(ev_kind == END, t.dur[sid], 0)
        time = np.where(is_slice, t.ts[sid] + end, time)
    if is_inst.any():
        time = np.where(is_inst, t.inst_ts[iidx], time)
    if is_ctr.any():
        time = np.where(is_ctr, t.counters.ts[cidx], time)
    return time + t.start_ns


def _flow_tail(
    sid: np.ndarray,
    opening: np.ndarray,
    flow_csr: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """``flow_ids`` and ``terminating_flow_ids`` fields of each packet, as bytes appended
    to its track event (10 bytes per id: a two-byte tag and a fixed64)."""
    out_ptr, out_ids, in_ptr, in_ids = flow_csr
    m = len(sid)
    if len(out_ids) == 0 and len(in_ids) == 0:
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
        out_ids[np.clip(out_ptr[sid[rows]] + k, 0, max(len(out_ids) - 1, 0))]
        if len(out_ids)
        else 0,
        in_ids[np.clip(in_ptr[sid[rows]] + k - n_out[rows], 0, max(len(in_ids) - 1, 0))]
        if len(in_ids)
        else 0,
    )
    items = np.empty((total, 10), np.uint8)
    items[:, :2] = np.where(is_out[:, None], _FLOW_TAG[None, :], _TERMINATING_FLOW_TAG[None, :])
    items[:, 2:] = ids.astype("<u8").view(np.uint8).reshape(total, 8)
    return items.reshape(-1), per * 10

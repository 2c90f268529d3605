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
4. Explorer's own rows (see :mod:`explorer.export.perfetto_results`): the findings
   (protobuf objects, written before the events so that the flows they begin towards
   their evidence precede the slices that end them), and the critical path's runs, in
   time order like the trace's slices.

Timestamps are absolute nanoseconds (``metadata["start_ns"] + ts``), so the trace lines up
with anything else recorded on the same clock, and Perfetto shows wall-clock offsets.

The header and descriptors are protobuf objects; slice, instant and counter packets are
encoded column-wise (:mod:`explorer.export.perfetto_events`,
:mod:`explorer.export.protowire`: a chunk of packets per handful of numpy operations) and
written as they are made, so memory holds one chunk's bytes, never the whole trace as
protobuf objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from explorer.export.lanes import assign_lanes
from explorer.export.perfetto_annotations import IID, StringTable, slice_annotations
from explorer.export.perfetto_events import (
    END,
    FROM_COUNTER,
    FROM_SLICE,
    SEQUENCE_ID,
    EncodedChunk,
    EventTables,
    counter_rows,
    encode_core,
    event_order,
    finish_chunk,
    flow_table,
)
from explorer.export.perfetto_results import (
    critical_path_tables,
    layout_result_rows,
    write_findings,
    write_packet,
)
from explorer.export.perfetto_tracks import IdSpace, build_layout
from explorer.export.results import PendingResults, Results
from explorer.trace.model import TraceData

CHUNK_EVENTS = 1 << 16

CLEARED = pb.TracePacket.SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED


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
    next_ids: IdSpace = field(default_factory=IdSpace)
    """Where the next trace written to the same file starts its ids."""


def to_perfetto(
    trace: TraceData, path: str | Path, *, results: Results | None = None
) -> PerfettoExport:
    """Write ``trace`` to ``path`` as a Perfetto protobuf trace and say what was written.

    ``results`` defaults to Explorer's findings and critical path of the trace (:func:`~explorer.export.results.explorer_results`).
    """
    path = Path(path)
    with open(path, "wb") as f:
        summary = write_perfetto(f, trace, results=results)
    summary.path = path
    return summary


def write_perfetto(
    f: Any, trace: TraceData, *, results: Results | None = None, ids: IdSpace | None = None
) -> PerfettoExport:
    """Append ``trace`` to the open binary file ``f``: a complete Perfetto trace on its
    own, or one of several (a job's ranks) when each starts at the previous one's
    ``next_ids`` (its first packet clears the sequence's interned state, so every trace
    interns its own names). ``summary.bytes`` counts this trace's bytes only."""
    ids = ids or IdSpace()
    first_byte = f.tell()
    sl = trace.slices
    ts = sl["ts"].to_numpy(np.int64)
    dur = sl["dur"].to_numpy(np.int64)
    track = sl["track"].to_numpy()
    # The results (unless given) are found meanwhile: the path in a child, the findings
    # at get(); the trace's own events need none of them but their flows.
    with PendingResults(trace, given=results) as pending:
        lanes = assign_lanes(track, ts, dur, sl["parent"].to_numpy())
        instants = trace.instants if trace.instants is not None else pd.DataFrame()
        inst_track = (
            instants["track"].to_numpy(np.int64) if len(instants) else np.zeros(0, np.int64)
        )
        layout = build_layout(
            trace, lanes, has_global_instants=bool((inst_track < 0).any()), ids=ids
        )
        strings = StringTable()
        names = _Interned()
        cats = _Interned()
        # (no track is added and nothing interned before the results' rows would have)
        tables = _event_tables(trace, layout, instants, inst_track, names, cats, strings)
        tables.start_ns -= ids.shift_ns
        pending.take_early()  # the child's first results, sent by now: freed in the child
        order = event_order(tables)
        # While the child searches: every byte of the events but their lengths and flow
        # ids (~0.45 s of the 0.65 s of encoding on 1M events; else encoded as written),
        # then the findings — unless the child, done with the path, has begun them.
        cores = _encoded(tables, order) if pending.meanwhile else None
        pending.find()
        results = pending.get()
    rows = layout_result_rows(layout, results, trace)
    flows = flow_table(trace, results, ids.first_flow)
    tables.flow_csr = flows.by_slice(len(sl))
    start_ns = tables.start_ns
    path_tables = critical_path_tables(results, rows, tables, names, cats, strings)

    summary = PerfettoExport(path=Path())  # the caller knows the path
    head = _interned_head(names, cats, tables.annotations.names, strings)
    head.first_packet_on_sequence = first_byte == 0
    write_packet(f, head)
    for desc in layout.descriptors:
        write_packet(
            f, pb.TracePacket(trusted_packet_sequence_id=SEQUENCE_ID, track_descriptor=desc)
        )
    # findings first: they begin the flows to their evidence, which the slices end
    write_findings(f, results, rows, start_ns, flows.result_links)
    src_kind, src_idx, ev_kind = _write_events(f, tables, order, cores)
    if path_tables is not None:
        _write_events(f, path_tables)
    summary.bytes = f.tell() - first_byte
    summary.next_ids = IdSpace(
        first_uuid=layout.new_uuid(),
        first_flow=ids.first_flow + flows.count,
        first_synthetic=layout.next_synthetic,
    )

    is_slice = src_kind == FROM_SLICE
    summary.slices = int((is_slice & (ev_kind != END)).sum())
    summary.instants = len(instants)
    summary.counter_samples = int((src_kind == FROM_COUNTER).sum())
    summary.flows = flows.count
    summary.result_slices = results.count
    summary.lane_tracks = layout.lane_tracks
    return summary


def _event_tables(
    trace: TraceData,
    layout: Any,
    instants: pd.DataFrame,
    inst_track: np.ndarray,
    names: _Interned,
    cats: _Interned,
    strings: StringTable,
) -> EventTables:
    """The trace's slices, instants and counters as the columns the encoder writes; their
    flows (which the results add to) are set by the caller, none until then."""
    sl = trace.slices
    n = len(sl)
    none = np.zeros(0, np.int64)
    annotations = slice_annotations(trace, strings)
    slice_name_iid = names.codes(sl["name"]) if n else none
    slice_cat_iid = cats.codes(sl["cat"]) if n else none
    inst_name_iid = names.codes(instants["name"]) if len(instants) else none
    inst_cat_iid = cats.codes(instants["cat"]) if len(instants) else none
    inst_uuid = np.where(
        inst_track >= 0,
        layout.track_uuid[np.clip(inst_track, 0, None)] if len(layout.track_uuid) else 0,
        layout.group_uuid.get("instants", 0),
    )
    return EventTables(
        start_ns=int(trace.metadata.get("start_ns", 0) or 0),
        ts=sl["ts"].to_numpy(np.int64),
        dur=sl["dur"].to_numpy(np.int64),
        slice_uuid=layout.slice_uuid,
        slice_name_iid=slice_name_iid,
        slice_cat_iid=slice_cat_iid,
        annotations=annotations,
        flow_csr=(np.zeros(n + 1, np.int64), none, np.zeros(n + 1, np.int64), none),
        inst_ts=instants["ts"].to_numpy(np.int64) if len(instants) else none,
        inst_uuid=inst_uuid,
        inst_name_iid=inst_name_iid,
        inst_cat_iid=inst_cat_iid,
        counters=counter_rows(trace, layout),
    )


def _interned_head(
    names: _Interned, cats: _Interned, arg_names: list[str], strings: StringTable
) -> pb.TracePacket:
    """The first packet: every interned name, category and annotation string."""
    head = pb.TracePacket(
        trusted_packet_sequence_id=SEQUENCE_ID,
        sequence_flags=CLEARED,
        first_packet_on_sequence=True,
    )
    names.fill(head.interned_data.event_names, pb.EventName)
    cats.fill(head.interned_data.event_categories, pb.EventCategory)
    for i, name in enumerate(arg_names, start=1):
        head.interned_data.debug_annotation_names.add(iid=i, name=name)
    for i, value in enumerate(strings.values, start=1):
        head.interned_data.debug_annotation_string_values.add(iid=i, str=value.encode())
    return head


# -- interning -------------------------------------------------------------------------------


class _Interned:
    """Event names or categories: one iid per distinct string, in first-seen order."""

    def __init__(self) -> None:
        self.iid: dict[str, int] = {}

    def codes(self, column: pd.Series) -> np.ndarray:
        """iid of every row, looked up once per distinct value (categorical or not)."""
        cat = column.astype("category") if column.dtype.name != "category" else column
        table = np.array([self.get(str(c)) for c in cat.cat.categories] + [self.get("")], IID)
        return table[cat.cat.codes.to_numpy()]

    def get(self, s: str) -> int:
        if s not in self.iid:
            self.iid[s] = len(self.iid) + 1
        return self.iid[s]

    def fill(self, repeated: object, message: type) -> None:
        repeated.extend(message(iid=i, name=s) for s, i in self.iid.items())  # type: ignore[attr-defined]


def _encoded(
    tables: EventTables, order: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> list[EncodedChunk]:
    """Every chunk of events encoded but for its lengths and flow ids (:func:`encode_core`)."""
    src_kind, src_idx, ev_kind = order
    return [
        encode_core(tables, src_kind[lo:hi], src_idx[lo:hi], ev_kind[lo:hi])
        for lo, hi in _chunks(len(ev_kind))
    ]


def _chunks(n: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + CHUNK_EVENTS, n)) for lo in range(0, n, CHUNK_EVENTS)]


def _write_events(
    f: Any,
    tables: EventTables,
    order: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    cores: list[EncodedChunk] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Encode and write every event of ``tables`` in time order (``order``: their
    :func:`event_order`, when found already; ``cores``: their chunks encoded already,
    but for the flows, taken from the list as they are written), a chunk at a time."""
    src_kind, src_idx, ev_kind = order if order is not None else event_order(tables)
    for lo, hi in _chunks(len(ev_kind)):
        core = (
            cores.pop(0)  # each freed once written
            if cores is not None
            else encode_core(tables, src_kind[lo:hi], src_idx[lo:hi], ev_kind[lo:hi])
        )
        data = finish_chunk(core, tables.flow_csr)
        f.write(data.data)  # the array's own buffer: no copy
    return src_kind, src_idx, ev_kind

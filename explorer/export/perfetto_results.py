"""Explorer's own rows in a Perfetto export: the "Explorer" group with a "Findings" row and
a "Critical path" row (see :mod:`explorer.export.results` for what they hold).

Findings are few and carry long texts, so they are written as protobuf objects with
inline names. The critical path's runs can be many on a long trace, so they go through the
same column-wise encoder as the trace's own slices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from explorer.export import protowire as w
from explorer.export.lanes import assign_lanes
from explorer.export.perfetto_annotations import Annotations, StringTable
from explorer.export.perfetto_events import (
    BEGIN,
    END,
    INSTANT,
    SEQUENCE_ID,
    TYPE_BEGIN,
    TYPE_END,
    TYPE_INSTANT,
    Counters,
    EventTables,
)
from explorer.export.perfetto_tracks import EXPLICIT, TrackLayout
from explorer.export.results import CRITICAL_PATH_ROW, Results
from explorer.trace.model import TraceData

#: Category of every slice on Explorer's rows.
CATEGORY = "explorer"


@dataclass
class ResultRows:
    """The uuids of Explorer's rows and which lane each result slice is on."""

    uuids: dict[str, list[int]] = field(default_factory=dict)
    finding_lanes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    path_uuid: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def write_packet(f: Any, packet: pb.TracePacket) -> None:
    """One packet, framed as an element of ``Trace.packet``."""
    data = packet.SerializeToString()
    f.write(w.tag(1, w.LEN) + w.varint_bytes(len(data)) + data)


def layout_result_rows(layout: TrackLayout, results: Results, trace: TraceData) -> ResultRows:
    """Describe the Explorer group and its rows, with overlap lanes where results overlap."""
    out = ResultRows()
    if not results.count:
        return out
    group = layout.add_top(name="Explorer", child_ordering=EXPLICIT, sibling_order_rank=-1)
    layout.group_uuid["explorer"] = group
    for r, row in enumerate(results.rows()):
        if row == CRITICAL_PATH_ROW:
            ts = results.path["ts"].to_numpy(np.int64)
            dur = results.path["dur"].to_numpy(np.int64)
            lanes = _lanes(np.zeros(len(ts), np.int64), ts, dur)
            out.uuids[row] = layout.add_lanes(group, row, int(lanes.max()) + 1, r)
            out.path_uuid = np.asarray(out.uuids[row], np.int64)[lanes]
            continue
        mine = np.array([s.row == row for s in results.slices])
        ts = np.array([s.ts for s in results.slices], np.int64)
        dur = np.array([s.dur for s in results.slices], np.int64)
        lanes = _lanes(np.where(mine, 0, 1), ts, dur)
        if len(out.finding_lanes) == 0:
            out.finding_lanes = np.zeros(len(results.slices), np.int32)
        out.finding_lanes[mine] = lanes[mine]
        out.uuids[row] = layout.add_lanes(group, row, int(lanes[mine].max()) + 1, r)
    return out


def _lanes(group: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Overlap lanes of slices in any order (sorted for the lane split, then put back)."""
    order = np.lexsort((-dur, ts, group))
    lanes = np.zeros(len(ts), np.int32)
    lanes[order] = assign_lanes(group[order], ts[order], dur[order])
    return lanes


def critical_path_tables(
    results: Results,
    rows: ResultRows,
    main: EventTables,
    names: Any,
    cats: Any,
    strings: StringTable,
) -> EventTables | None:
    """Columns for the critical path's runs on the "Critical path" row: named after their
    top op, with the track they are on, their slice count and top ops as annotations."""
    runs = results.path
    k = len(runs)
    if k == 0:
        return None
    ann = Annotations(names=main.annotations.names)  # one name table for the sequence
    every = np.ones(k, bool)
    ann.add("on", strings.iids(runs["on"]), every, string=True)
    ann.add("slices", runs["slices"].to_numpy(np.int64), every, string=False)
    ann.add("top ops", strings.iids(runs["ops"]), runs["ops"].to_numpy(object) != "", string=True)
    empty = np.zeros(0, np.int64)
    return EventTables(
        start_ns=main.start_ns,
        ts=runs["ts"].to_numpy(np.int64),
        dur=runs["dur"].to_numpy(np.int64),
        slice_uuid=rows.path_uuid,
        slice_name_iid=names.codes(runs["name"].astype(str)),
        slice_cat_iid=np.full(k, cats.get(CATEGORY), np.int64),
        annotations=ann,
        flow_csr=(np.zeros(k + 1, np.int64), empty, np.zeros(k + 1, np.int64), empty),
        inst_ts=empty,
        inst_uuid=empty,
        inst_name_iid=empty,
        inst_cat_iid=empty,
        counters=Counters(empty, empty, np.zeros(0)),
    )


def write_findings(
    f: Any, results: Results, rows: ResultRows, start_ns: int, links: dict[int, list[int]]
) -> None:
    """The findings' slices: few, so plain protobuf objects with inline names and args,
    each beginning the flows to its evidence (``links``: flow ids by finding index)."""
    if not results.slices:
        return
    events = []
    for i, s in enumerate(results.slices):
        uuid = rows.uuids[s.row][int(rows.finding_lanes[i])]
        if s.dur > 0:
            events.append((s.ts, BEGIN, i, uuid, s))
            events.append((s.ts + s.dur, END, -i, uuid, s))
        else:
            events.append((s.ts, INSTANT, i, uuid, s))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    for t, kind, i, uuid, s in events:
        te = pb.TrackEvent(track_uuid=uuid)
        if kind == END:
            te.type = TYPE_END
        else:
            te.type = TYPE_BEGIN if kind == BEGIN else TYPE_INSTANT
            te.name = s.name
            te.categories.append(CATEGORY)
            te.flow_ids.extend(links.get(i, []))
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
        write_packet(f, packet)

"""Read a ``.pftrace`` back packet by packet and check what trace_processor would rely on.

There is no trace_processor binary here, so the tests check the file themselves: interned
ids defined before use on the sequence, tracks described before use, begin/end balanced
per track, flows that begin and terminate, counters only on counter tracks. The counts
returned let tests compare the file with the trace it came from.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

CLEARED = pb.TracePacket.SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED
NEEDS = pb.TracePacket.SequenceFlags.SEQ_NEEDS_INCREMENTAL_STATE
T = pb.TrackEvent.Type


@dataclass
class Parsed:
    packets: int = 0
    begins: int = 0
    ends: int = 0
    instants: int = 0
    counters: int = 0
    flows: int = 0
    slices_by_category: Counter = field(default_factory=Counter)
    names_by_track: dict[int, Counter] = field(default_factory=lambda: defaultdict(Counter))
    descriptors: dict[int, pb.TrackDescriptor] = field(default_factory=dict)
    slice_tracks: set[int] = field(default_factory=set)
    events: list[tuple[int, int, int, str, str]] = field(default_factory=list)
    """(timestamp, type, track uuid, name, category) per track event."""
    annotations: list[dict[str, object]] = field(default_factory=list)
    """Debug annotations of each begin/instant, resolved to names and values."""
    flow_ends: dict[int, tuple[tuple[int, str], tuple[int, str]]] = field(default_factory=dict)
    """Flow id → ((start, name) of the slice it begins at, (start, name) where it ends)."""
    completed: list[tuple[int, str, int, int]] = field(default_factory=list)
    """(track uuid, name, start, duration) of every slice, from its begin/end or instant."""

    @property
    def slices(self) -> int:
        return self.begins + self.instants

    def track_name(self, uuid: int) -> str:
        d = self.descriptors[uuid]
        return d.name or d.thread.thread_name or d.process.process_name

    def slices_on(self, row: str) -> int:
        """Slices (begins + instants) on rows named ``row`` or its overlap lanes."""
        return sum(
            sum(c.values())
            for u, c in self.names_by_track.items()
            if self.track_name(u) == row or self.track_name(u).startswith(row + " (overlap")
        )


def read_packets(path: Path) -> list[pb.TracePacket]:
    """Every packet, decoded one at a time from the length-delimited stream."""
    data = Path(path).read_bytes()
    out = []
    pos = 0
    while pos < len(data):
        assert data[pos] == 0x0A, f"byte {pos}: expected the tag of Trace.packet (0x0A)"
        pos += 1
        length, shift = 0, 0
        while True:
            b = data[pos]
            pos += 1
            length |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        packet = pb.TracePacket()
        packet.ParseFromString(data[pos : pos + length])
        out.append(packet)
        pos += length
    assert pos == len(data), "trailing bytes after the last packet"
    return out


def check(path: Path) -> Parsed:
    """Parse and verify ``path``; assertion errors name the packet that broke a rule."""
    p = Parsed()
    names: dict[int, dict[int, str]] = {}
    cats: dict[int, dict[int, str]] = {}
    ann_names: dict[int, dict[int, str]] = {}
    strings: dict[int, dict[int, bytes]] = {}
    cleared: set[int] = set()
    open_slices: dict[int, list[tuple[int, str]]] = defaultdict(list)
    last_ts: dict[int, int] = {}
    flow_begun: dict[int, tuple[int, str]] = {}
    flow_done: set[int] = set()
    for k, packet in enumerate(read_packets(path)):
        p.packets += 1
        seq = packet.trusted_packet_sequence_id
        assert seq, f"packet {k}: no trusted_packet_sequence_id"
        if packet.sequence_flags & CLEARED:
            cleared.add(seq)
            for table in (names, cats, ann_names, strings):
                table[seq] = {}
        if packet.HasField("interned_data"):
            assert seq in cleared, f"packet {k}: interned data before the state was cleared"
            d = packet.interned_data
            names[seq].update({e.iid: e.name for e in d.event_names})
            cats[seq].update({e.iid: e.name for e in d.event_categories})
            ann_names[seq].update({e.iid: e.name for e in d.debug_annotation_names})
            strings[seq].update({e.iid: e.str for e in d.debug_annotation_string_values})
        if packet.HasField("track_descriptor"):
            d = packet.track_descriptor
            assert d.uuid not in p.descriptors, f"packet {k}: track {d.uuid} described twice"
            if d.HasField("parent_uuid"):
                assert d.parent_uuid in p.descriptors, f"packet {k}: parent {d.parent_uuid} unknown"
            p.descriptors[d.uuid] = d
        if not packet.HasField("track_event"):
            continue
        te = packet.track_event
        uuid = te.track_uuid
        assert uuid in p.descriptors, f"packet {k}: track {uuid} used before it was described"
        is_counter_track = p.descriptors[uuid].HasField("counter")
        uses_interned = (
            te.HasField("name_iid")
            or len(te.category_iids)
            or any(
                a.HasField("name_iid") or a.HasField("string_value_iid")
                for a in te.debug_annotations
            )
        )
        if uses_interned:
            assert packet.sequence_flags & NEEDS, f"packet {k}: interned ids without NEEDS flag"
            assert seq in cleared, f"packet {k}: interned ids before the state was cleared"
        name = names[seq][te.name_iid] if te.HasField("name_iid") else te.name
        if te.HasField("name_iid"):
            assert te.name_iid in names[seq], f"packet {k}: name iid {te.name_iid} undefined"
        for c in te.category_iids:
            assert c in cats[seq], f"packet {k}: category iid {c} undefined"
        cat = cats[seq][te.category_iids[0]] if len(te.category_iids) else ",".join(te.categories)
        ts = packet.timestamp
        assert ts >= last_ts.get(uuid, 0), f"packet {k}: time goes backwards on track {uuid}"
        last_ts[uuid] = ts
        p.events.append((ts, te.type, uuid, name, cat))
        if te.type == T.TYPE_COUNTER:
            assert is_counter_track, f"packet {k}: counter value on non-counter track {uuid}"
            p.counters += 1
            continue
        assert not is_counter_track, f"packet {k}: slice event on counter track {uuid}"
        if te.type in (T.TYPE_SLICE_BEGIN, T.TYPE_INSTANT):
            anns = {}
            for a in te.debug_annotations:
                key = ann_names[seq][a.name_iid] if a.HasField("name_iid") else a.name
                if a.HasField("name_iid"):
                    assert a.name_iid in ann_names[seq], f"packet {k}: annotation name undefined"
                if a.HasField("string_value_iid"):
                    assert a.string_value_iid in strings[seq], f"packet {k}: string iid undefined"
                    anns[key] = strings[seq][a.string_value_iid].decode()
                else:
                    kind = a.WhichOneof("value")
                    anns[key] = getattr(a, kind) if kind else None
            p.annotations.append(anns)
            p.slices_by_category[cat] += 1
            p.names_by_track[uuid][name] += 1
            p.slice_tracks.add(uuid)
            for fid in te.flow_ids:
                assert fid not in flow_begun, f"packet {k}: flow {fid} begun twice"
                flow_begun[fid] = (ts, name)
            for fid in te.terminating_flow_ids:
                assert fid in flow_begun, f"packet {k}: flow {fid} terminates before it begins"
                assert fid not in flow_done, f"packet {k}: flow {fid} terminated twice"
                flow_done.add(fid)
                p.flow_ends[fid] = (flow_begun[fid], (ts, name))
        if te.type == T.TYPE_SLICE_BEGIN:
            p.begins += 1
            open_slices[uuid].append((ts, name))
        elif te.type == T.TYPE_SLICE_END:
            p.ends += 1
            assert open_slices[uuid], f"packet {k}: end without begin on track {uuid}"
            start, begun_name = open_slices[uuid].pop()
            assert start <= ts
            p.completed.append((uuid, begun_name, start, ts - start))
        elif te.type == T.TYPE_INSTANT:
            p.instants += 1
            p.completed.append((uuid, name, ts, 0))
    unbalanced = {u: len(s) for u, s in open_slices.items() if s}
    assert not unbalanced, f"slices left open at the end: {unbalanced}"
    assert set(flow_begun) == flow_done, "flows that never terminate"
    p.flows = len(flow_done)
    return p

"""The two building blocks of the Perfetto export, against slow obvious versions:
overlap lanes (every lane properly nested, nothing dropped) and the column-wise protobuf
encoder (every message parses to what was meant)."""

from __future__ import annotations

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

import explorer
from explorer.export import protowire as w
from explorer.export.lanes import assign_lanes
from explorer.trace.nesting import improperly_nested, nest


def nested_ok(ts: list[int], end: list[int]) -> bool:
    """No two slices partially overlap (the definition, pair by pair). Slices starting
    together nest (the longer one encloses the other)."""
    for i in range(len(ts)):
        for j in range(len(ts)):
            if ts[i] < ts[j] < end[i] < end[j]:
                return False
    return True


def sort_slices(track, ts, dur):
    order = np.lexsort((-dur, ts, track))
    return track[order], ts[order], dur[order]


def test_random_tracks_split_into_nested_lanes() -> None:
    rng = np.random.default_rng(7)
    for trial in range(40):
        n = int(rng.integers(1, 60))
        track = rng.integers(0, 3, n)
        ts = rng.integers(0, 100, n).astype(np.int64)
        dur = rng.integers(0, 40, n).astype(np.int64)
        track, ts, dur = sort_slices(track, ts, dur)
        end = ts + dur
        lanes = assign_lanes(track, ts, dur)
        assert len(lanes) == n and lanes.min() >= 0
        for t in np.unique(track):
            for lane in np.unique(lanes[track == t]):
                sel = (track == t) & (lanes == lane)
                assert nested_ok(ts[sel].tolist(), end[sel].tolist()), (trial, t, lane)
            clean = nested_ok(ts[track == t].tolist(), end[track == t].tolist())
            assert clean == (lanes[track == t].max() == 0), (trial, t)


def test_improperly_nested_matches_the_definition() -> None:
    rng = np.random.default_rng(3)
    for _ in range(40):
        n = int(rng.integers(1, 40))
        track = np.zeros(n, np.int64)
        ts = rng.integers(0, 50, n).astype(np.int64)
        dur = rng.integers(0, 20, n).astype(np.int64)
        track, ts, dur = sort_slices(track, ts, dur)
        end = ts + dur
        bad = improperly_nested(track, ts, end)
        expect = [any(ts[i] <= ts[j] < end[i] < end[j] for j in range(i + 1, n)) for i in range(n)]
        assert bad.tolist() == expect


def test_chained_overlaps_use_two_lanes_not_one_per_slice() -> None:
    # back-to-back kernels each overlapping the next by 1 ns (rounding in real traces)
    n = 1000
    ts = np.arange(n, dtype=np.int64) * 10
    dur = np.full(n, 11, np.int64)
    lanes = assign_lanes(np.zeros(n, np.int64), ts, dur)
    assert lanes.max() == 1
    assert (lanes[::2] == 0).all() and (lanes[1::2] == 1).all()


def test_encoder_round_trips_through_the_protobuf_classes() -> None:
    rng = np.random.default_rng(1)
    n = 500
    ts = rng.integers(-(2**40), 2**62, n).astype(np.int64)
    uuid = rng.integers(1, 300, n)
    name = rng.integers(1, 2**20, n)
    has_name = rng.random(n) < 0.6
    value = rng.normal(size=n)
    flow = rng.integers(1, 2**63, n, dtype=np.uint64)
    has_flow = rng.random(n) < 0.3
    ann = rng.integers(-5, 2**35, n)
    has_ann = rng.random(n) < 0.5
    inner = w.Block(
        [
            w.field_varint(11, uuid, prefix=w.tag(9, w.VARINT) + b"\x01"),
            w.field_varint(10, name, has_name),
            w.field_fixed64(44, value),
            w.field_fixed64(47, flow, has_flow),
            w.message_part(4, w.field_varint(4, ann, has_ann, prefix=b"\x08\x03")),
        ]
    )
    packets = w.Block([w.field_varint(8, ts, prefix=b"\x50\x01"), *w.message(11, inner)])
    trace = pb.Trace()
    trace.ParseFromString(w.frame(packets).tobytes())
    assert len(trace.packet) == n
    for i, p in enumerate(trace.packet):
        want = pb.TracePacket(timestamp=int(ts[i]) % 2**64, trusted_packet_sequence_id=1)
        te = want.track_event
        te.type = pb.TrackEvent.Type.TYPE_SLICE_BEGIN
        te.track_uuid = int(uuid[i])
        if has_name[i]:
            te.name_iid = int(name[i])
        te.double_counter_value = float(value[i])
        if has_flow[i]:
            te.flow_ids.append(int(flow[i]))
        if has_ann[i]:
            te.debug_annotations.add(name_iid=3, int_value=int(ann[i]))
        assert p == want, i


def test_inserted_puts_each_piece_at_its_place_in_its_message() -> None:
    rng = np.random.default_rng(2)
    n = 300
    base_lens = rng.integers(0, 12, n)
    base = rng.integers(0, 256, int(base_lens.sum())).astype(np.uint8)
    pieces = []
    place = np.zeros(n, np.int64)
    for _ in range(3):  # places in order within each message, some pieces empty
        place = place + rng.integers(0, 3, n)
        place = np.minimum(place, base_lens)
        lens = rng.integers(0, 4, n) * (rng.random(n) < 0.5)
        data = rng.integers(0, 256, int(lens.sum())).astype(np.uint8)
        pieces.append((data, lens, place.copy()))
    got = w.inserted(base, base_lens, pieces).tobytes()
    # built message by message, in plain Python
    want = bytearray()
    b_at, p_at = 0, [0, 0, 0]
    for i in range(n):
        msg = bytes(base[b_at : b_at + base_lens[i]])
        b_at += int(base_lens[i])
        out, last = bytearray(), 0
        for k, (data, lens, at) in enumerate(pieces):
            out += msg[last : at[i]]
            last = int(at[i])
            out += bytes(data[p_at[k] : p_at[k] + lens[i]])
            p_at[k] += int(lens[i])
        want += out + msg[last:]
    assert got == bytes(want)
    assert len(got) == len(base) + sum(len(d) for d, _, _ in pieces)


def test_over_long_varints_are_what_parsers_read() -> None:
    # 5 padded to three bytes, as a column whose widest value needs three
    values = np.array([5, 2**20], np.int64)
    m = w.varint_matrix(values)
    assert m.tolist()[0] == [0x85, 0x80, 0x00]
    p = pb.TracePacket()
    p.ParseFromString(b"\x40" + bytes(m[0]))
    assert p.timestamp == 5


def test_random_tracks_with_parents_split_into_nested_lanes() -> None:
    """With the parents from nest(), lanes stay properly nested, and a slice whose parent's
    lane has room for it is on that lane."""
    rng = np.random.default_rng(11)
    for trial in range(40):
        n = int(rng.integers(1, 60))
        track = rng.integers(0, 3, n)
        ts = rng.integers(0, 100, n).astype(np.int64)
        dur = rng.integers(0, 40, n).astype(np.int64)
        track, ts, dur = sort_slices(track, ts, dur)
        end = ts + dur
        _, parent = nest(track, ts, dur)
        lanes = assign_lanes(track, ts, dur, parent)
        for t in np.unique(track):
            for lane in np.unique(lanes[track == t]):
                sel = (track == t) & (lanes == lane)
                assert nested_ok(ts[sel].tolist(), end[sel].tolist()), (trial, t, lane)


def test_profiler_steps_keep_their_work_on_their_lane(sample_traces) -> None:
    """cpu_cnn: each ProfilerStep#N starts inside a Python frame and outlives it, so it
    needs a lane of its own in the Perfetto export — and its children go with it."""
    trace = explorer.load(sample_traces / "cpu_cnn.pt.trace.json.gz")
    s = trace.slices
    track = s["track"].to_numpy()
    ts = s["ts"].to_numpy()
    dur = s["dur"].to_numpy()
    parent = s["parent"].to_numpy()
    lanes = assign_lanes(track, ts, dur, parent)
    key = track.astype(np.int64) * (int(lanes.max()) + 1) + lanes
    order = np.lexsort((-dur, ts, key))
    assert not improperly_nested(key[order], ts[order], (ts + dur)[order]).any()
    names = s["name"].astype(str).to_numpy()
    steps = np.flatnonzero(s["name"].astype(str).str.startswith("ProfilerStep#").to_numpy())
    assert len(steps) >= 3 and (lanes[steps] > 0).any()
    end = ts + dur
    for step in steps:
        kids = np.flatnonzero(parent == step)
        assert len(kids)
        assert (lanes[kids] == lanes[step]).mean() > 0.8, names[step]
        # A child leaves its parent's lane only when a slice there partly overlaps it.
        same = np.flatnonzero((track == track[step]) & (lanes == lanes[step]))
        for k in kids[lanes[kids] != lanes[step]]:
            crossing = (ts[same] < ts[k]) & (ts[k] < end[same]) & (end[same] < end[k])
            assert crossing.any(), names[k]


def test_only_the_crossing_slices_are_walked_with_the_same_lanes() -> None:
    """``_first_fit`` walks the crossing slices and gives the rest their parent's lane:
    the same lanes as walking every slice, on random stretches (most with crossings) and
    on a Python stack where record_function annotations cross the frames around them."""
    from explorer.export.lanes import _first_fit, _first_fit_walk

    rng = np.random.default_rng(11)
    crossed = 0
    for trial in range(400):
        n = int(rng.integers(1, 150))
        ts = rng.integers(0, int(rng.integers(5, 400)), n).astype(np.int64)
        dur = rng.integers(0, int(rng.integers(1, 200)), n).astype(np.int64)
        if trial % 4 == 0:
            dur[rng.random(n) < 0.3] = 0  # zero-length slices at their parents' ends
        _, ts, dur = sort_slices(np.zeros(n, np.int64), ts, dur)
        _, parent = nest(np.zeros(n, np.int64), ts, dur)
        end = ts + dur
        crossed += bool(improperly_nested(np.zeros(n, np.int64), ts, end).any())
        want = _first_fit_walk(ts, end, np.asarray(parent, np.int64))
        assert _first_fit(ts, end, np.asarray(parent, np.int64)).tolist() == want.tolist()
    assert crossed > 300
    # a step's frames: the training frame, ProfilerStep#N starting inside the 7 us
    # _record_function_enter_new frame and outliving it, forward/backward frames inside it,
    # and the profiler's step() frame that starts inside the annotation and outlives it
    ts_l, end_l = [0], [10_000]
    for k in range(5):
        base = 100 + k * 1900
        ts_l += [base, base + 3, base + 10, base + 1500]
        end_l += [base + 7, base + 1700, base + 1400, base + 1800]
        ts_l += [base + 11 + 2 * j for j in range(600)]  # ops under the forward frame
        end_l += [base + 12 + 2 * j for j in range(600)]
    ts, end = np.array(ts_l, np.int64), np.array(end_l, np.int64)
    _, ts, dur = sort_slices(np.zeros(len(ts)), ts, end - ts)
    end = ts + dur
    _, parent = nest(np.zeros(len(ts), np.int64), ts, dur)
    parent = np.asarray(parent, np.int64)
    got = _first_fit(ts, end, parent)
    assert got.tolist() == _first_fit_walk(ts, end, parent).tolist()
    # each annotation moved to the sibling lane with the work inside it
    assert got.max() == 1 and got[0] == 0
    assert (got[parent >= 0] == got[parent[parent >= 0]]).mean() > 0.99

"""The timeline's level of detail on real traces: what the lane index draws against the slices
rasterised directly with numpy, the coarse index shown while indexing, the lane cache beside
the store, and indexing off the GUI thread (real widgets, offscreen)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PyQt6.QtCore import Qt

import explorer
from explorer.errors import ExplorerError
from explorer.store.lod import fingerprint, open_lod, write_lod
from explorer.ui.timeline.colors import color_ids
from explorer.ui.timeline.lane_builder import LaneBuilder, lane_key, lod_directory, open_or_build
from explorer.ui.timeline.lod import LaneIndex, build_lanes, lane_rects, pixel_edges, track_lanes
from explorer.ui.timeline.view import TimelineView

#: Real traces of different shapes: Python stacks (deep, improperly nested), NVIDIA with
#: NCCL and copies, AMD, MTIA (24 queues), a sampled rank.
SAMPLE = ("cpu_transformer.pt.trace.json.gz", "cpu_slow_dataloader.pt.trace.json.gz")
SHARED = (
    "nccl_parser_config__nccl_data.json.gz",
    "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "mtia_inference_trace__mtia_inference_rank_0.json.gz",
    "timeline_analysis__sampled_rank-0.json.gz",
)
WIDTH = 700


def real_trace(name: str, sample_traces: Path) -> explorer.Trace:
    if name in SAMPLE:
        return explorer.load(sample_traces / name)
    shared = sample_traces.parents[1] / "shared" / "traces" / name
    if not shared.exists():
        pytest.skip("../shared/traces is absent (it is not part of a user's clone)")
    return explorer.load(shared)


def raster(ts: np.ndarray, end: np.ndarray, t0: float, t1: float, width: int) -> np.ndarray:
    """Pixels any of the intervals ``[ts, end)`` overlaps (a zero-length one: the pixel it
    lies inside), straight from the slices: a difference array over each slice's pixels."""
    edges = pixel_edges(t0, t1, width)
    lo = np.clip(np.searchsorted(edges, ts, "right") - 1, 0, width)
    hi = np.clip(np.searchsorted(edges, end, "left"), 0, width)
    keep = hi > lo
    diff = np.zeros(width + 1, np.int64)
    np.add.at(diff, lo[keep], 1)
    np.add.at(diff, hi[keep], -1)
    return np.cumsum(diff[:-1]) > 0


def drawn(lanes: LaneIndex, lane_ids: np.ndarray, t0: float, t1: float, width: int):
    """Pixels the rectangles of these lanes cover, and how many rectangles keep a slice's
    exact (fractional) edges."""
    diff = np.zeros(width + 1, np.int64)
    exact = 0
    for lane in lane_ids:
        r = lane_rects(lanes, int(lane), t0, t1, width)
        a = np.clip(np.floor(r.x0).astype(np.int64), 0, width)
        b = np.clip(np.ceil(r.x1).astype(np.int64), 0, width)
        np.add.at(diff, a, 1)
        np.add.at(diff, b, -1)
        exact += int((r.slice_id >= 0).sum())
    return np.cumsum(diff[:-1]) > 0, exact


def windows(ts: np.ndarray, end: np.ndarray) -> list[tuple[float, float]]:
    """The whole trace, then windows 100x and 10,000x narrower around busy moments."""
    lo, hi = float(ts.min()), float(end.max())
    span = hi - lo
    mid = float(np.median(ts))
    out = [(lo - span * 0.01, hi + span * 0.01)]
    for zoom in (1e-2, 1e-4):
        out.append((mid - span * zoom / 3, mid + span * zoom * 2 / 3))
    return out


@pytest.mark.parametrize("name", SAMPLE + SHARED)
def test_lod_draws_exactly_the_busy_pixels_of_every_track(name: str, sample_traces: Path) -> None:
    trace = real_trace(name, sample_traces)
    s = trace.slices
    color = color_ids(s["kind"], s["name"])
    full, coarse = build_lanes(s, color), track_lanes(s, color)
    ts = s["ts"].to_numpy()
    end = ts + s["dur"].to_numpy()
    track = s["track"].to_numpy()
    checked = 0
    for t0, t1 in windows(ts, end):
        for tid in np.unique(track):
            mine = track == tid
            expected = raster(ts[mine], end[mine], t0, t1, WIDTH)
            # The coarse index (one lane per track): busy per pixel, exactly.
            got, exact = drawn(coarse, coarse.lanes_of_track(int(tid)), t0, t1, WIDTH)
            assert exact == 0
            assert np.array_equal(got, expected), (name, tid, t0, t1)
            # The full index: its lanes together cover the same pixels; a slice drawn with
            # its own fractional edges may round into one neighbouring pixel per edge.
            got, exact = drawn(full, full.lanes_of_track(int(tid)), t0, t1, WIDTH)
            assert not (expected & ~got).any(), (name, tid, "a busy pixel left empty")
            assert (got & ~expected).sum() <= 2 * exact, (name, tid, "idle pixels drawn")
            checked += int(expected.sum())
    assert checked > WIDTH  # real busy pixels were compared, not empty windows


@pytest.mark.parametrize("name", SAMPLE[:1] + SHARED[:1])
def test_lanes_of_the_full_index_never_overlap_and_hold_every_slice(
    name: str, sample_traces: Path
) -> None:
    trace = real_trace(name, sample_traces)
    s = trace.slices
    lanes = build_lanes(s, color_ids(s["kind"], s["name"]))
    assert np.array_equal(np.sort(lanes.order), np.arange(len(s)))
    assert np.array_equal(lanes.pos[lanes.order], np.arange(len(s)))
    end = lanes.ts + s["dur"].to_numpy()[lanes.order]
    lane_no = np.repeat(np.arange(len(lanes.lane_start) - 1), np.diff(lanes.lane_start))
    same = lane_no[1:] == lane_no[:-1]
    assert (lanes.ts[1:][same] >= end[:-1][same]).all()  # one after the other on a lane
    assert (lanes.lane_track[lane_no] == s["track"].to_numpy()[lanes.order]).all()


@pytest.mark.parametrize("name", SAMPLE[:2] + SHARED[:2])
def test_lanes_indexed_a_group_of_tracks_at_a_time_equal_one_pass(
    name: str, sample_traces: Path
) -> None:
    """Big traces are indexed a group of whole tracks at a time (bounded memory); the
    index must be the one-pass index exactly, wherever the groups are cut."""
    trace = real_trace(name, sample_traces)
    s = trace.slices
    color = color_ids(s["kind"], s["name"])
    whole = build_lanes(s, color, group=len(s) + 1)
    tracks = len(np.unique(s["track"].to_numpy()))
    assert tracks >= 2  # or there would be nothing to group
    for group in (1, len(s) // 3, len(s) // 2):
        grouped = build_lanes(s, color, group=max(group, 1))
        for name_ in LaneIndex.STORED:
            a, b = getattr(whole, name_), getattr(grouped, name_)
            assert a.dtype == b.dtype and np.array_equal(a, b), (name, group, name_)


def test_cached_lanes_equal_rebuilt_ones_and_a_changed_or_damaged_cache_is_rebuilt(
    sample_traces: Path, tmp_path: Path
) -> None:
    trace = explorer.load(sample_traces / "cpu_transformer.pt.trace.json.gz")
    s = trace.slices
    where = tmp_path / "trace.lanes"
    built, how = open_or_build(s, where)
    assert how == "built" and where.is_dir()
    cached, how = open_or_build(s, where)
    assert how == "cached"
    fresh = build_lanes(s, color_ids(s["kind"], s["name"]))
    for name in LaneIndex.STORED:
        assert np.array_equal(getattr(cached, name), getattr(fresh, name)), name
        assert getattr(cached, name).dtype == getattr(fresh, name).dtype, name
        assert not getattr(cached, name).flags.writeable  # mapped from the file
    # Other slices (one duration changed): the key differs, the index is built again.
    other = s.copy()
    dur = other["dur"].to_numpy().copy()
    dur[len(dur) // 2] += 1
    other["dur"] = dur
    assert lane_key(other, color_ids(other["kind"], other["name"])) != lane_key(
        s, color_ids(s["kind"], s["name"])
    )
    assert open_or_build(other, where)[1] == "built"
    assert open_or_build(other, where)[1] == "cached"
    assert open_or_build(s, where)[1] == "built"  # replaced, not mixed up
    # A flipped byte in a stored array: rejected by its checksum, never drawn.
    victim = where / "ts.bin"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x40
    victim.write_bytes(bytes(data))
    assert open_lod(where, lane_key(s, color_ids(s["kind"], s["name"]))) is None
    assert open_or_build(s, where)[1] == "built"


def test_a_lane_cache_never_replaces_what_is_not_one(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("a user's file")
    with pytest.raises(ExplorerError):
        write_lod(mine, {"a": np.arange(3)}, "k")
    assert (mine / "notes.txt").read_text() == "a user's file"


@pytest.fixture
def indexing_view(qtbot) -> TimelineView:
    v = TimelineView()
    qtbot.addWidget(v)
    v.resize(1200, 600)
    v.show()
    qtbot.waitExposed(v)
    v.background_from = 0  # index every trace in the background, however small
    yield v
    v.stop_indexing()


def test_the_index_is_built_off_the_gui_thread_and_cached_for_the_next_open(
    indexing_view: TimelineView, sample_traces: Path, qtbot
) -> None:
    view = indexing_view
    trace = explorer.load(sample_traces / "cpu_transformer.pt.trace.json.gz")
    where = lod_directory(trace.path)
    assert where is not None
    shutil.rmtree(where, ignore_errors=True)  # another test may have cached this trace
    events: list[str] = []
    view.lanes_changed.connect(events.append)
    view.set_trace(trace)
    # set_trace returned without the index: the rows are there, no slice is indexed yet.
    assert view.lanes_state == "indexing" and view.lanes.n_slices == 0
    assert [r.kind for r in view.rows()].count("track") == trace.slices["track"].nunique()
    assert view.indexer is not None  # the index comes from the background
    view.repaint()  # the first frame, before any index: rows and a note, no error
    view.select_slice(int(np.argmax(trace.slices["dur"].to_numpy())))  # no index yet
    assert view.wait_for_lanes(60)
    assert events == ["coarse", "built"]
    assert view.slice_rect(view.selected) is not None  # the selection was scrolled to
    full = view.lanes
    qtbot.waitUntil(lambda: where.is_dir(), timeout=30000)
    qtbot.waitUntil(lambda: LaneBuilder.running() == 0, timeout=30000)
    # A second open maps the cached index: same arrays, no coarse frame needed.
    events.clear()
    view.set_trace(explorer.load(sample_traces / "cpu_transformer.pt.trace.json.gz"))
    assert view.wait_for_lanes(60)
    assert events == ["cached"]
    for name in LaneIndex.STORED:
        assert np.array_equal(getattr(view.lanes, name), getattr(full, name)), name


def test_the_builder_indexes_in_its_own_thread(sample_traces: Path, tmp_path: Path) -> None:
    trace = explorer.load(sample_traces / "cpu_transformer.pt.trace.json.gz")
    builder = LaneBuilder(trace.slices, tmp_path / "trace.lanes")
    threads: dict[str, int] = {}

    def record(name: str):
        return lambda *_: threads.setdefault(name, threading.get_ident())

    direct = Qt.ConnectionType.DirectConnection  # run where emitted: tells the thread
    builder.coarse.connect(record("coarse"), direct)
    builder.ready.connect(record("ready"), direct)
    builder.start()
    assert builder.wait(60_000)
    assert set(threads) == {"coarse", "ready"}
    assert threading.get_ident() not in threads.values()


def test_the_coarse_frame_draws_every_track_on_one_row_until_the_full_index_comes(
    indexing_view: TimelineView, sample_traces: Path
) -> None:
    trace = explorer.load(sample_traces / "cpu_slow_dataloader.pt.trace.json.gz", use_cache=False)
    view = indexing_view
    seen: list[tuple[str, int, list[int]]] = []

    def frame(how: str) -> None:  # runs as each index arrives, before the next one
        view.repaint()
        lanes = [len(r.lanes) for r in view.rows() if r.kind == "track"]
        seen.append((how, view.last_paint_stats["rects"], lanes))

    view.lanes_changed.connect(frame)
    view.set_trace(trace)
    assert view.lanes.n_slices == 0
    assert view.wait_for_lanes(60)
    assert [how for how, _, _ in seen] == ["coarse", "built"]
    (_, coarse_rects, coarse_lanes), (_, _, full_lanes) = seen
    assert coarse_rects > 0 and set(coarse_lanes) == {1}
    assert len(full_lanes) == len(coarse_lanes) and max(full_lanes) > 1


def test_a_trace_opened_while_another_is_indexed_wins(
    indexing_view: TimelineView, sample_traces: Path
) -> None:
    view = indexing_view
    first = explorer.load(sample_traces / "cpu_transformer.pt.trace.json.gz")
    second = explorer.load(sample_traces / "cpu_slow_dataloader.pt.trace.json.gz")
    view.set_trace(first)
    view.set_trace(second)
    assert view.wait_for_lanes(60)
    assert view.lanes.n_slices == len(second.slices)
    assert view.trace is second
    tracks = np.unique(second.slices["track"].to_numpy())
    assert np.array_equal(np.unique(view.lanes.lane_track), tracks)


def test_small_traces_are_indexed_in_place(qtbot, small_trace) -> None:
    view = TimelineView()
    qtbot.addWidget(view)
    view.set_trace(small_trace)
    assert view.lanes_state == "full" and view.indexer is None
    assert view.lanes.n_slices == len(small_trace.slices)


def test_empty_lanes_frame_paints_for_a_trace_without_slices(qtbot) -> None:
    """A trace with no slices at all still opens (nothing to index)."""
    s = pd.DataFrame(
        {
            "ts": np.zeros(0, np.int64),
            "dur": np.zeros(0, np.int64),
            "track": np.zeros(0, np.int32),
            "depth": np.zeros(0, np.int16),
        }
    )
    assert track_lanes(s, np.zeros(0, np.int16)).n_slices == 0
    assert LaneIndex.tracks_only(s["track"].to_numpy(), np.arange(3)).lane_track.size == 0


def test_a_lane_cache_that_cannot_be_written_is_no_error(
    sample_traces: Path, tmp_path: Path
) -> None:
    trace = explorer.load(sample_traces / "cpu_slow_dataloader.pt.trace.json.gz")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    lanes, how = open_or_build(trace.slices, blocker / "trace.lanes")
    assert how == "built" and lanes.n_slices == len(trace.slices)
    assert blocker.read_text() == "not a directory"


def test_the_window_can_point_at_slices_while_the_timeline_indexes(
    window, qtbot, sample_traces: Path
) -> None:
    """Findings, search and panels point at slices as soon as a trace is open; during the
    background index that must neither fail nor be lost."""
    window.timeline.background_from = 0
    trace = explorer.load(sample_traces / "cpu_slow_dataloader.pt.trace.json.gz", use_cache=False)
    window.set_trace(trace)
    timeline = window.timeline
    assert timeline.lanes_state == "indexing"
    longest = np.argsort(trace.slices["dur"].to_numpy())[-3:]
    window.show_evidence(longest)
    window.show_slices(longest[:1])
    window.reveal(int(longest[0]))
    timeline.repaint()
    assert timeline.selected == int(longest[0])
    assert timeline.wait_for_lanes(60)
    timeline.repaint()
    rect = timeline.slice_rect(int(longest[0]))
    assert rect is not None and timeline.rect().intersects(rect.toRect())
    assert timeline.slice_at(rect.center().x(), rect.center().y()) == int(longest[0])
    qtbot.waitUntil(lambda: window.analysis is None or window.analysis.isFinished(), timeout=60000)


def test_a_view_dropped_while_its_trace_is_indexed_does_not_take_the_process_down(
    qtbot, sample_traces: Path
) -> None:
    import gc

    from explorer.ui.timeline.lane_builder import wait_for_builders

    trace = explorer.load(sample_traces / "cpu_transformer.pt.trace.json.gz", use_cache=False)
    view = TimelineView()
    view.background_from = 0
    view.set_trace(trace)
    builder = view.indexer
    assert builder is not None
    view.deleteLater()
    del view
    qtbot.wait(1)  # the widget is deleted while its builder may still run
    gc.collect()
    wait_for_builders()  # held by the module, not by the view: still there to wait for
    assert builder.isFinished()


def test_lod_entries_round_trip_every_dtype_and_refuse_what_they_were_not_made_from(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(3)
    arrays = {
        "i64": rng.integers(-(2**40), 2**40, 1000),
        "i32": rng.integers(0, 2**31 - 1, 1000).astype(np.int32),
        "i16": rng.integers(-100, 100, 1000).astype(np.int16),
        "empty": np.zeros(0, np.int64),
    }
    key = fingerprint(list(arrays.values()))
    where = tmp_path / "x.lanes"
    write_lod(where, arrays, key)
    back = open_lod(where, key)
    assert back is not None and set(back) == set(arrays)
    for name, a in arrays.items():
        assert back[name].dtype == a.dtype and np.array_equal(back[name], a)
    assert open_lod(where, key + "x") is None  # made from something else
    assert open_lod(tmp_path / "absent", key) is None
    (where / "i32.bin").unlink()
    assert open_lod(where, key) is None  # incomplete
    # The key names the contents: one changed value changes it.
    changed = dict(arrays, i16=arrays["i16"].copy())
    changed["i16"][7] += 1
    assert fingerprint(list(changed.values())) != key


def test_an_index_that_fails_in_the_background_is_said_not_fatal(
    indexing_view: TimelineView, small_trace
) -> None:
    """A failure inside the worker thread (here: slices without their ``depth`` column, as a
    broken reader would give) reaches the view as a note; the process lives on."""
    import dataclasses

    broken = dataclasses.replace(small_trace.data, slices=small_trace.slices.drop(columns="depth"))
    events: list[str] = []
    indexing_view.lanes_changed.connect(events.append)
    indexing_view.set_trace(broken)
    assert not indexing_view.wait_for_lanes(30)
    assert events == ["failed"] and "depth" in indexing_view.index_error
    indexing_view.repaint()  # the rows and the note, no exception
    assert indexing_view.lanes_state == "indexing"

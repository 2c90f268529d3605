"""The timeline: level-of-detail bucketing against a brute-force rasteriser, the row
layout, and the real widget driven by keys and the mouse (offscreen)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PyQt6.QtCore import QPoint, QPointF, Qt
from PyQt6.QtGui import QWheelEvent

from explorer.ui.timeline.axis import ticks
from explorer.ui.timeline.geometry import AXIS_H, LABEL_W, STEP_H
from explorer.ui.timeline.layout import TrackLayout
from explorer.ui.timeline.lod import build_lanes, counter_pixels, lane_rects, pixel_edges
from explorer.ui.timeline.view import TimelineView
from explorer.units import fmt_ns


def random_lane(n: int, seed: int) -> pd.DataFrame:
    """Non-overlapping slices on one lane with gaps, widths from 1 ns to 10 µs."""
    rng = np.random.default_rng(seed)
    dur = rng.integers(1, 10_000, n)
    gap = rng.integers(0, 5_000, n)
    ts = np.cumsum(gap + np.r_[0, dur[:-1]])
    return pd.DataFrame(
        {"ts": ts, "dur": dur, "track": np.zeros(n, np.int32), "depth": np.zeros(n, np.int16)}
    )


def coverage_brute(ts: np.ndarray, dur: np.ndarray, t0: float, t1: float, width: int) -> np.ndarray:
    """Pixel p is covered when any slice overlaps [edge_p, edge_p+1) — one loop per slice."""
    edges = pixel_edges(t0, t1, width)
    out = np.zeros(width, bool)
    for s, d in zip(ts, dur, strict=True):
        e = s + d
        lo = np.searchsorted(edges, s, "right") - 1
        hi = np.searchsorted(edges, e, "left")
        out[max(lo, 0) : min(hi, width)] = True
    return out


@pytest.mark.parametrize("zoom", [1.0, 0.1, 0.001, 0.00001])
def test_lane_rects_cover_exactly_the_pixels_that_have_events(zoom: float) -> None:
    df = random_lane(20_000, seed=1)
    lanes = build_lanes(df, np.zeros(len(df), np.int16))
    span = float(df["ts"].iat[-1] + df["dur"].iat[-1])
    t0 = span * 0.3
    t1 = t0 + span * zoom
    width = 800
    rects = lane_rects(lanes, 0, t0, t1, width)
    drawn = np.zeros(width, bool)
    for a, b in zip(rects.x0, rects.x1, strict=True):
        drawn[int(np.floor(a)) : int(np.ceil(b))] = True
    expected = coverage_brute(df["ts"].to_numpy(), df["dur"].to_numpy(), t0, t1, width)
    # Exact edges of wide slices may round into a neighbouring pixel: allow 1 px per rect.
    assert (drawn & ~expected).sum() <= len(rects)
    assert not (expected & ~drawn).any(), "a pixel with an event was left empty"
    # Rectangles never exceed the pixels (the whole point of level of detail).
    assert len(rects) <= width


def test_lane_rects_keep_exact_edges_and_ids_of_wide_slices() -> None:
    df = pd.DataFrame(
        {"ts": [100, 400], "dur": [200, 50], "track": [0, 0], "depth": [0, 0]}
    ).astype({"track": np.int32, "depth": np.int16})
    lanes = build_lanes(df, np.array([3, 5], np.int16))
    r = lane_rects(lanes, 0, 0, 1000, 1000)  # 1 ns per pixel
    assert list(r.slice_id) == [0, 1]
    assert np.allclose(r.x0, [100, 400]) and np.allclose(r.x1, [300, 450])
    assert list(r.color) == [3, 5]


def test_counter_pixels_take_the_max_and_hold_the_last_value() -> None:
    ts = np.array([0, 5, 9, 30])
    values = np.array([1.0, 5.0, 2.0, 7.0])
    v, valid = counter_pixels(ts, values, 0, 40, 4)  # pixels of 10 ns
    assert valid.all()
    assert list(v) == [5.0, 2.0, 2.0, 7.0]


def test_axis_ticks_and_units() -> None:
    times, step = ticks(0, 1e9, 1000)
    assert step == 100_000_000 and times[0] == 0 and times[-1] == 1e9
    assert fmt_ns(812) == "812 ns"
    assert fmt_ns(3410) == "3.41 µs"
    assert fmt_ns(12_345_678) == "12.3 ms"


def test_layout_groups_devices_first_and_collapses_and_pins(small_trace) -> None:
    from explorer.ui.timeline.colors import color_ids

    s = small_trace.slices
    lanes = build_lanes(s, color_ids(s["kind"], s["name"]))
    lay = TrackLayout(small_trace, lanes)
    kinds = [(r.kind, r.label) for r in lay.rows]
    assert kinds[0] == ("group", "GPU 0")
    assert ("track", "stream 7") in kinds and ("track", "main") in kinds
    assert any(r.kind == "counter" and "allocated cuda:0" in r.label for r in lay.rows)
    host_group = next(r.group for r in lay.rows if r.label == "main")
    lay.toggle_collapsed(host_group)
    assert all(r.label != "main" for r in lay.rows)
    lay.toggle_collapsed(host_group)
    key = next(r.key for r in lay.rows if r.label == "main")
    lay.toggle_pinned(key)
    assert lay.rows[0].label == "Pinned" and lay.rows[1].label == "main"
    assert lay.row_at(lay.rows[1].y + 1).label == "main"


@pytest.fixture
def view(qtbot, small_trace) -> TimelineView:
    v = TimelineView()
    qtbot.addWidget(v)
    v.resize(1200, 600)
    v.show()
    v.set_trace(small_trace)
    qtbot.waitExposed(v)
    return v


def test_keys_zoom_pan_and_fit(view: TimelineView, qtbot) -> None:
    t0, t1 = view.visible_range()
    qtbot.keyClick(view, Qt.Key.Key_W)
    a0, a1 = view.visible_range()
    assert (a1 - a0) < 0.85 * (t1 - t0)
    qtbot.keyClick(view, Qt.Key.Key_S)
    b0, b1 = view.visible_range()
    assert abs((b1 - b0) - (t1 - t0)) <= 2
    qtbot.keyClick(view, Qt.Key.Key_W)
    c0, c1 = view.visible_range()
    qtbot.keyClick(view, Qt.Key.Key_D)
    d0, d1 = view.visible_range()
    assert d0 > c0 and abs((d1 - d0) - (c1 - c0)) <= 2
    qtbot.keyClick(view, Qt.Key.Key_A)
    qtbot.keyClick(view, Qt.Key.Key_A)
    assert view.visible_range()[0] < c0
    qtbot.keyClick(view, Qt.Key.Key_0)
    assert view.visible_range() == (t0, t1)
    view.select_slice(22, emit=False)  # a 30 µs kernel
    qtbot.keyClick(view, Qt.Key.Key_F)
    f0, f1 = view.visible_range()
    ts, dur = int(view.trace.slices["ts"].iat[22]), int(view.trace.slices["dur"].iat[22])
    assert f0 <= ts and ts + dur <= f1 and (f1 - f0) < 2 * dur
    view.highlight([21, 22])
    qtbot.keyClick(view, Qt.Key.Key_Escape)
    assert view.selected == -1 and len(view.highlights) == 0


def test_wheel_zooms_at_the_pointer(view: TimelineView) -> None:
    x = LABEL_W + 300.0
    t_before = view._t_of(x)
    span = view.t1 - view.t0
    ev = QWheelEvent(
        QPointF(x, 200),
        QPointF(view.mapToGlobal(QPoint(int(x), 200))),
        QPoint(0, 0),
        QPoint(0, 120),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    view.wheelEvent(ev)
    assert view.t1 - view.t0 < span
    assert abs(view._t_of(x) - t_before) < span * 1e-6


def test_click_selects_the_slice_under_the_pointer(view: TimelineView, qtbot) -> None:
    rect = view.slice_rect(21)  # the first sgemm kernel
    assert rect is not None and rect.width() >= 3
    with qtbot.waitSignal(view.slice_selected) as sig:
        qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=rect.center().toPoint())
    assert sig.args == [21]
    assert view.selected == 21
    assert "ampere_sgemm" in view.describe(21)


def test_drag_pans_and_axis_drag_selects_a_range(view: TimelineView, qtbot) -> None:
    t0, t1 = view.visible_range()
    y = AXIS_H + STEP_H + 60
    qtbot.mousePress(view, Qt.MouseButton.LeftButton, pos=QPoint(700, y))
    qtbot.mouseMove(view, QPoint(600, y))
    qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, pos=QPoint(600, y))
    p0, _ = view.visible_range()
    assert p0 > t0  # dragged left = later times
    with qtbot.waitSignal(view.range_selected) as sig:
        qtbot.mousePress(view, Qt.MouseButton.LeftButton, pos=QPoint(400, 10))
        qtbot.mouseMove(view, QPoint(500, 10))
        qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, pos=QPoint(500, 10))
    a, b = sig.args
    assert a < b and abs(a - view._t_of(400)) < 1e3 and abs(b - view._t_of(500)) < 1e3


def test_click_on_a_step_zooms_to_it(view: TimelineView, small_trace, qtbot) -> None:
    steps = small_trace.steps()
    view.set_steps(steps, small_trace.breakdown())
    step2 = steps.iloc[1]
    x = view._x_of((step2["start_ns"] + step2["end_ns"]) / 2)
    qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=QPoint(int(x), AXIS_H + 5))
    a, b = view.visible_range()
    assert a <= step2["start_ns"] and step2["end_ns"] <= b
    assert (b - a) < 1.1 * step2["dur_ns"]


def test_group_header_click_collapses(view: TimelineView, qtbot) -> None:
    header = view.rows()[0]
    assert header.kind == "group"
    n = len(view.rows())
    y = AXIS_H + STEP_H + header.y + 5
    qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=QPoint(20, y))
    assert len(view.rows()) < n
    assert header.group in view.layout_.collapsed


def test_paint_batches_by_colour(view: TimelineView) -> None:
    view.grab()
    stats = view.last_paint_stats
    assert stats["rects"] > 0
    assert stats["draw_calls"] <= len(view._palette)
    assert stats["labels"] > 0


def test_hover_shows_a_tooltip(view: TimelineView, qtbot) -> None:
    from PyQt6.QtWidgets import QToolTip

    hover(view, view.slice_rect(21).center())
    qtbot.waitUntil(lambda: "ampere_sgemm_64x64_nn" in QToolTip.text(), timeout=3000)
    assert "kernel" in QToolTip.text() and "120 µs" in QToolTip.text()


def test_clicking_the_pin_mark_pins_a_row_to_the_top(view: TimelineView, qtbot) -> None:
    from explorer.ui.timeline.geometry import PIN_W

    row = next(r for r in view.rows() if r.label == "main")
    y = AXIS_H + STEP_H + row.y + 8 - view.scroll_y
    qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=QPoint(LABEL_W - PIN_W // 2, y))
    rows = view.rows()
    assert rows[0].label == "Pinned" and rows[1].label == "main"
    assert view.layout_.pinned == [row.key]


def test_every_real_trace_draws_and_hit_tests(qtbot, shared_trace) -> None:
    """Each trace in ../shared/traces (NVIDIA, AMD, MTIA, CPU-only, old formats) indexes,
    paints, and gives back the slice drawn under a point."""
    import explorer

    folder = shared_trace("README.md").parent
    files = sorted(
        p
        for p in folder.iterdir()
        if p.name.endswith((".json", ".json.gz")) and not p.name.endswith("_et.json.gz")
    )  # the Execution Trace is not a timeline
    v = TimelineView()
    qtbot.addWidget(v)
    v.resize(1200, 700)
    v.show()
    checked = 0
    for path in files:
        trace = explorer.load(path)
        if len(trace) == 0:
            continue
        v.set_trace(trace)
        v.grab()
        assert v.last_paint_stats["rects"] > 0, path.name
        # The longest slice on a visible row is found again by clicking its middle.
        visible = {r.track for r in v.rows() if r.kind == "track"}
        s = trace.slices
        cand = s[s["track"].isin(visible)]
        sid = int(cand["dur"].idxmax())
        rect = v.slice_rect(sid)
        if rect is None or rect.center().y() > v.height() - 30:
            continue
        hit = v.slice_at(rect.center().x(), rect.center().y())
        assert hit == sid or int(s["depth"].iat[hit]) == int(s["depth"].iat[sid]), path.name
        checked += 1
    assert checked >= 10


def test_traces_without_slices_still_draw(qtbot) -> None:
    """A trace of counters only shows its counter row over the counters' time; an empty
    trace paints without error."""
    from explorer.trace.build import trace_from_events

    counters = [
        {"ph": "C", "name": "util", "pid": 1, "tid": 1, "ts": 5 + i, "args": {"v": float(i % 3)}}
        for i in range(50)
    ]
    v = TimelineView()
    qtbot.addWidget(v)
    v.resize(900, 400)
    v.show()
    v.set_trace(trace_from_events(counters))
    a, b = v.visible_range()
    assert a <= 0 and b >= 49_000  # the counters' 49 µs, in ns
    v.grab()
    assert [r.kind for r in v.rows()] == ["group", "counter"]
    assert v.last_paint_stats["rects"] > 100
    v.set_trace(trace_from_events([]))
    v.grab()
    assert v.rows() == [] and v.last_paint_stats["rects"] == 0


def hover(view: TimelineView, pos: QPointF) -> None:
    """Send a real mouse move (QTest's sends none when the cursor is already there)."""
    from PyQt6.QtCore import QEvent
    from PyQt6.QtGui import QMouseEvent
    from PyQt6.QtWidgets import QApplication

    event = QMouseEvent(
        QEvent.Type.MouseMove,
        pos,
        view.mapToGlobal(pos),
        Qt.MouseButton.NoButton,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(view, event)


def test_step_and_counter_tooltips(view: TimelineView, small_trace, qtbot) -> None:
    from PyQt6.QtWidgets import QToolTip

    steps, breakdown = small_trace.steps(), small_trace.breakdown()
    view.set_steps(steps, breakdown)
    s2 = steps.iloc[1]
    hover(view, QPointF(view._x_of((s2["start_ns"] + s2["end_ns"]) / 2), AXIS_H + 8))
    qtbot.waitUntil(lambda: "step 2" in QToolTip.text(), timeout=3000)
    part = breakdown[(breakdown["step"] == 2) & (breakdown["device"] == "cuda:0")]
    top = part.sort_values("ns", ascending=False)["category"].iat[0].replace("_", " ")
    assert "cuda:0" in QToolTip.text() and top in QToolTip.text()
    row = next(r for r in view.rows() if r.kind == "counter" and "cuda:0" in r.label)
    y = AXIS_H + STEP_H + row.y + row.height / 2 - view.scroll_y
    t = float(small_trace.memory["ts"].iat[1]) + 1000  # just after the second allocation
    hover(view, QPointF(view._x_of(t), y))
    qtbot.waitUntil(lambda: "allocated cuda:0" in QToolTip.text(), timeout=3000)
    assert "2.0 MiB" in QToolTip.text()


def test_deep_tracks_compact_on_a_click_and_expand_for_a_selection(qtbot) -> None:
    """A real run with Python stacks (sample_traces/): clicking the deep main thread's label
    shows its first COMPACT_LANES levels only; selecting a deeper slice expands it again."""
    from pathlib import Path

    import explorer
    from explorer.ui.timeline.layout import COMPACT_LANES

    path = Path(__file__).resolve().parents[2] / "sample_traces" / "cpu_cnn.pt.trace.json.gz"
    trace = explorer.load(path)
    v = TimelineView()
    qtbot.addWidget(v)
    v.resize(1200, 700)
    v.show()
    v.set_trace(trace)
    deep = next(r for r in v.rows() if r.kind == "track" and len(r.all_lanes) > COMPACT_LANES + 3)
    assert deep.hidden_lanes == 0
    v.scrollbar.setValue(deep.y)
    y = AXIS_H + STEP_H + deep.y + 8 - v.scroll_y
    qtbot.mouseClick(v, Qt.MouseButton.LeftButton, pos=QPoint(40, int(y)))
    assert len(deep.lanes) == COMPACT_LANES and deep.hidden_lanes > 0
    s = trace.slices
    at_depth = (s["track"] == deep.track).to_numpy() & (s["depth"] == COMPACT_LANES + 3).to_numpy()
    sid = int(np.flatnonzero(at_depth)[0])
    assert v.slice_rect(sid) is None  # hidden while compact
    v.select_slice(sid)
    assert deep.hidden_lanes == 0 and v.slice_rect(sid) is not None


def test_shift_wheel_and_wheel_over_labels_scroll_rows(view: TimelineView) -> None:
    view.resize(1200, 200)  # shorter than the rows, so there is something to scroll
    assert view.scrollbar.maximum() > 0
    span = view.t1 - view.t0

    def wheel(x: float, modifiers: Qt.KeyboardModifier) -> None:
        view.wheelEvent(
            QWheelEvent(
                QPointF(x, 120),
                QPointF(view.mapToGlobal(QPoint(int(x), 120))),
                QPoint(0, 0),
                QPoint(0, -120),
                Qt.MouseButton.NoButton,
                modifiers,
                Qt.ScrollPhase.NoScrollPhase,
                False,
            )
        )

    wheel(LABEL_W + 200, Qt.KeyboardModifier.ShiftModifier)
    assert view.scroll_y > 0 and view.t1 - view.t0 == span
    view.scrollbar.setValue(0)
    wheel(40, Qt.KeyboardModifier.NoModifier)  # over the row labels
    assert view.scroll_y > 0 and view.t1 - view.t0 == span

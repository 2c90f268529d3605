"""The timeline: level-of-detail bucketing against a brute-force rasteriser, the row
layout, and the real widget driven by keys and the mouse (offscreen)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PyQt6.QtCore import QPoint, QPointF, Qt
from PyQt6.QtGui import QWheelEvent

from explorer.ui.timeline.axis import ticks
from explorer.ui.timeline.geometry import AXIS_H, LABEL_W, SCROLL_W, STEP_H
from explorer.ui.timeline.layout import TrackLayout
from explorer.ui.timeline.lod import build_lanes, counter_pixels, lane_rects, pixel_edges
from explorer.ui.timeline.view import TimelineView
from explorer.units import fmt_ns
from tests.ui.conftest import MTIA


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
    assert "2.00 MiB" in QToolTip.text()  # the allocator's total after step 2's block
    # The row's value axis reads the series' max (3 steps of 1 MiB) — the same text the
    # axis paints at the row's top right.
    assert view.counter_value_text(row.series, view._series_max(row.series)) == "3.00 MiB"


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


def test_deep_zoom_labels_ticks_relative_to_a_reference_shown_once(view, qtbot) -> None:
    """Zoomed to 100 µs at 210.85 ms (Perfetto's way): ticks read ``+20 µs``..., the
    gutter shows the reference once; zoomed out, ticks are absolute again."""
    from explorer.ui.timeline import axis

    # The pure functions, against values worked out by hand.
    assert axis.reference(0, 500e6, 100e6) is None  # "100 ms" labels are short
    assert axis.reference(210_850_000, 210_950_000, 10_000) == 210_850_000
    assert axis.tick_label(210_870_000, 10_000, 210_850_000) == "+20 µs"
    assert axis.format_offset(210_850_000, 10_000) == "210.85 ms"
    assert axis.format_offset(1_500_000_000, 1_000_000) == "1.500 s"

    lo, hi = view.extent
    mid = (lo + hi) // 2
    view.set_visible_range(mid, mid + 400)  # 400 ns, deep inside the trace
    view.grab()  # paints
    t0, t1 = view.visible_range()
    times, step = axis.ticks(t0, t1, view._tracks_width())
    ref = axis.reference(t0, t1, step)
    assert ref is not None and ref <= t0 < ref + step
    assert view.axis_origin == f"{axis.format_offset(ref, step)} +"
    labels = [axis.tick_label(t, step, ref) for t in times]
    assert all(lbl.startswith("+") and len(lbl) <= 8 for lbl in labels), labels
    view.fit_all()
    view.grab()
    assert view.axis_origin == "time"


def test_the_legend_is_never_clipped_and_lists_the_rest_on_hover(view, small_trace, qtbot) -> None:
    """At 1600 px every entry fits; narrower, the entries that do not fit are left out
    whole — slice kinds first, so every category the step bars draw stays named — each
    drawn one ends inside the widget, and hovering the legend lists what was left out."""
    from PyQt6.QtGui import QFontMetrics
    from PyQt6.QtWidgets import QToolTip

    from explorer.ui.timeline import paint

    view.set_steps(small_trace.steps(), small_trace.breakdown())
    entries = paint.legend_entries(view._kinds_present, paint.used_categories(view.step_shares))
    kinds = [label for label, _, is_cat in entries if not is_cat]
    cats = [label for label, _, is_cat in entries if is_cat]
    assert len(kinds) >= 5 and cats
    view.resize(1600, 600)
    view.grab()
    assert view.legend_hidden == []
    fm = QFontMetrics(view._font)
    w = {lbl: 14 + fm.horizontalAdvance(lbl) + 14 for lbl, _, _ in entries}
    more_w = fm.horizontalAdvance("+99 more (hover)") + 12
    cat_block = fm.horizontalAdvance("step bars:") + 20 + sum(w[c] for c in cats)
    # Room for the categories, the "+N more" and one or two kinds (and the scroll bar).
    need = 8 + cat_block + more_w + w[kinds[0]] + SCROLL_W + 8 + 2
    for width in (need + w[kinds[1]], need):
        view.resize(width, 600)
        view.grab()
        hidden = view.legend_hidden
        assert 0 < len(hidden) < len(kinds)
        assert hidden == kinds[len(kinds) - len(hidden) :], "kinds make way, from the end"
        # The entries drawn, laid out as draw_legend does, end before the widget's edge.
        shown = [e for e in entries if e[0] not in hidden]
        x = 8 + sum(14 + fm.horizontalAdvance(lbl) + 14 for lbl, _, _ in shown)
        x += fm.horizontalAdvance("step bars:") + 20
        assert x + fm.horizontalAdvance(f"+{len(hidden)} more (hover)") + 12 <= view.width()
    hover(view, QPointF(200, view.height() - 8))
    qtbot.waitUntil(lambda: "step bars:" in QToolTip.text(), timeout=3000)
    for label in hidden:
        assert label in QToolTip.text()


def test_the_legend_plan_keeps_the_categories_whole() -> None:
    """The layout rule on its own: kinds make way for categories; categories are cut only
    when they alone do not fit."""
    from explorer.ui.timeline.paint import legend_plan

    widths, is_cat = [100] * 6 + [80] * 3, [False] * 6 + [True] * 3
    everything = legend_plan(widths, is_cat, 50, 90, 2000)
    assert [i for what, i in everything if what == "entry"] == list(range(9))
    tight = legend_plan(widths, is_cat, 50, 90, 8 + 50 + 240 + 90 + 200)
    assert [i for what, i in tight if what == "entry"] == [0, 1, 6, 7, 8]
    assert ("more", 4) in tight
    narrow = legend_plan(widths, is_cat, 50, 90, 300)
    assert ("more", 9 - sum(what == "entry" for what, _ in narrow)) in narrow


def test_a_many_stream_device_starts_as_one_summary_row_and_remembers_a_click(
    window, open_trace, shared_trace, settings, qtbot
) -> None:
    """A real MTIA trace (24 queue rows): the device starts collapsed to one summary row so
    the host threads are on the first screen; a real click on it expands it, and the next
    window (same settings) opens it expanded."""
    from PyQt6.QtCore import QPoint

    from explorer.ui.main_window import MainWindow
    from explorer.ui.timeline.layout import MANY_STREAMS

    path = shared_trace(MTIA)
    trace = open_trace(window, path)
    view = window.timeline
    device_tracks = int((trace.tracks["type"] == "device_stream").sum())
    assert device_tracks > MANY_STREAMS
    groups = [r for r in view.rows() if r.kind == "group"]
    device = next(r for r in groups if r.device)
    assert device.key in view.layout_.collapsed
    host_rows = [r for r in view.rows() if r.kind == "track" and not r.device]
    page = view._tracks_bottom() - view._tracks_top()
    assert host_rows and host_rows[0].y < page, "a host thread is on the first screen"
    # The summary strip paints the device's activity inside the header row.
    img = view.grab().toImage()
    y = AXIS_H + STEP_H + device.y + device.height // 2
    colours = {img.pixelColor(x, y).name() for x in range(LABEL_W + 1, view.width() - 20, 3)}
    assert len(colours - {paint_header_colour()}) >= 2

    qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=QPoint(40, int(y)))
    assert device.key not in view.layout_.collapsed
    assert sum(r.kind == "track" and r.device for r in view.rows()) == device_tracks
    window.close()

    again = MainWindow(settings=settings, restore=False)
    qtbot.addWidget(again)
    again.show()
    open_trace(again, path)
    device2 = next(r for r in again.timeline.rows() if r.kind == "group" and r.device)
    assert device2.key not in again.timeline.layout_.collapsed


def paint_header_colour() -> str:
    from explorer.ui.timeline import paint

    return paint.DEVICE_HEADER.name()


def test_flow_arrows_are_drawn_above_slices_on_a_halo(view, qtbot) -> None:
    """The launch → kernel arrow of the small trace: on its line the arrow's colour, beside
    it (2 px across) the white halo — not the slice colour underneath."""
    from explorer.ui.timeline.view_paint import ARROW

    view.zoom_to_slices(np.array([2, 21]))
    view.set_related([(2, 21)])
    a, b = view.slice_rect(2), view.slice_rect(21)
    assert a is not None and b is not None
    img = view.grab().toImage()
    x0, y0, x1, y1 = a.left() + 1, a.bottom(), b.left() + 1, b.top()
    length = float(np.hypot(x1 - x0, y1 - y0))
    assert length > 30
    nx, ny = -(y1 - y0) / length, (x1 - x0) / length  # unit normal

    def at(x: float, y: float, d: float):
        return img.pixelColor(int(round(x + d * nx)), int(round(y + d * ny)))

    def is_arrow(c) -> bool:
        return abs(c.red() - ARROW.red()) + abs(c.green() - ARROW.green()) < 60

    samples = [(x0 + f * (x1 - x0), y0 + f * (y1 - y0)) for f in np.linspace(0.3, 0.7, 9)]
    for x, y in samples:
        assert any(is_arrow(at(x, y, d)) for d in (-1, 0, 1)), "the arrow is on top"
        # On both sides of the line, a light halo pixel (not the slice's colour).
        assert max(at(x, y, d).lightness() for d in (1, 2)) > 215
        assert max(at(x, y, -d).lightness() for d in (1, 2)) > 215


def test_the_range_label_never_sits_on_a_tick_label(view, qtbot) -> None:
    """For ranges all along the trace: no tick label text touches the range's duration
    label (no dark grey text pixels in the 6 px either side of its box, above the ticks)."""
    lo, hi = view.extent
    span = hi - lo
    for k in range(8):
        a = lo + span * k / 10
        view.range = (int(a), int(a + span / 7))
        img = view.grab().toImage()
        box = view.range_label_box()
        assert box is not None
        for x0, x1 in ((box.left() - 6, box.left() - 1), (box.right() + 1, box.right() + 6)):
            for x in range(max(int(x0), LABEL_W), min(int(x1) + 1, view.width() - 20)):
                for y in range(0, AXIS_H - 8):
                    c = img.pixelColor(x, y)  # grey text is dark and unsaturated; the
                    assert c.lightness() > 150 or c.saturation() > 100, (
                        k,
                        x,
                        y,
                    )  # range edge is blue


def test_the_legend_names_the_categories_the_step_bars_draw(view, small_trace) -> None:
    """The step bars of this trace draw some of the seven breakdown categories: the legend
    names exactly those (each with time in some step), so at 1600 px none hides behind
    ``+N more``; a category with 0 ns in every step is not listed."""
    from explorer.palette import CATEGORY_COLORS
    from explorer.ui.timeline import paint

    breakdown = small_trace.breakdown()
    view.set_steps(small_trace.steps(), breakdown)
    device = paint.step_device(breakdown)
    part = breakdown[breakdown["device"].astype(str) == device]
    per_category = part.groupby("category", observed=True)["ns"].sum()
    drawn = {str(c) for c, ns in per_category.items() if ns > 0}
    assert 0 < len(drawn) < len(CATEGORY_COLORS) < 8
    assert set(paint.used_categories(view.step_shares)) == drawn
    view.resize(1600, 600)
    view.grab()
    assert view.legend_hidden == []
    labels = [
        lbl for lbl, _, is_cat in paint.legend_entries([], paint.used_categories(view.step_shares))
    ]
    assert labels == [c.replace("_", " ") for c in CATEGORY_COLORS if c in drawn]


def test_axis_labels_read_in_the_unit_of_the_axis_and_never_negative(view) -> None:
    """Ticks 500 ms apart on a 5 s axis read ``3.5 s``, not ``3500 ms``; a view that starts
    before the trace (as a search jump to its first slice leaves it) labels no tick before
    time 0, and the deep-zoom reference is never negative."""
    from explorer.ui.timeline import axis

    assert axis.tick_label(3_500_000_000, 500_000_000, None, 5_300_000_000) == "3.5 s"
    assert axis.tick_label(3_000_000_000, 500_000_000, None, 5_300_000_000) == "3.0 s"
    assert axis.tick_label(0, 500_000_000, None, 5_300_000_000) == "0.0 s"
    assert axis.tick_label(20_000_000, 10_000_000, None, 90_000_000) == "20 ms"
    assert axis.tick_label(1_250_000, 50_000, None, 1_900_000) == "1.25 ms"
    # The search jump: the first slice of the trace, zoomed to with its margin.
    first = int(view.trace.slices["ts"].to_numpy().argmin())
    view.zoom_to_slices(np.array([first]))
    t0, t1 = view.visible_range()
    assert t0 < 0, "the jump leaves a margin before the trace start"
    times, step, ref = axis.labelled_ticks(t0, t1, view._tracks_width())
    assert len(times) and (times >= 0).all()
    labels = [axis.tick_label(t, step, ref, max(abs(t0), abs(t1))) for t in times]
    assert not any("-" in lbl for lbl in labels), labels
    view.grab()
    assert "-" not in view.axis_origin
    assert axis.reference(-4_000, 96_000, 20) == 0.0

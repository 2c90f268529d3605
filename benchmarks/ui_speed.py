"""How fast the timeline draws a ≥1M-event trace, driving the real widget offscreen.

Measures, on a trace made by ``benchmarks/big_trace.py`` (a real trace repeated in time):

- first frame: from a loaded trace to the first painted timeline (indexing + paint);
- repaint time at every zoom level from the whole trace down to single events (several
  positions per level), and for pans; median and p95 against the targets of issue #7
  (≤ 50 ms median, ≤ 100 ms p95);
- memory of the view's own structures against the trace's tables (target ≤ 1×);
- a baseline measured in the same run: the whole trace drawn without level of detail (every
  event its own rectangle, still one ``drawRects`` per colour), to show what bucketing buys.

    QT_QPA_PLATFORM=offscreen python benchmarks/ui_speed.py [--events 1000000] [--trace PATH]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent))


def table_bytes(trace) -> int:
    """Memory of the trace's tables (what the view is compared against)."""
    total = 0
    for name in ("slices", "tracks", "flows", "counters", "instants", "memory"):
        df = getattr(trace, name)
        total += int(df.memory_usage(deep=True).sum())
    return total


def repaint_ms(view) -> float:
    """One synchronous repaint of the widget, in ms (checked to have really painted)."""
    before = getattr(view, "paint_count", 0)
    t = time.perf_counter()
    view.repaint()
    ms = (time.perf_counter() - t) * 1e3
    if getattr(view, "paint_count", 0) != before + 1:
        raise SystemExit("the widget did not paint: is it shown and exposed?")
    return ms


def baseline_ms(view, QImage, QPainter) -> float:  # noqa: N803 (Qt classes passed in)
    """Every event in the window as its own rectangle (no per-pixel buckets)."""
    from explorer.ui.timeline.paint import draw_rect_batches

    lanes = view.lanes
    width = view._tracks_width()
    img = QImage(view.width(), view.height(), QImage.Format.Format_ARGB32_Premultiplied)
    t = time.perf_counter()
    p = QPainter(img)
    scale = width / (view.t1 - view.t0)
    x0 = (lanes.ts - view.t0) * scale
    x1 = np.maximum((lanes.ts + lanes.dur[lanes.order] - view.t0) * scale, x0 + 1)
    lane_no = np.repeat(np.arange(len(lanes.lane_start) - 1), np.diff(lanes.lane_start))
    y = (lane_no % 50) * 18.0
    draw_rect_batches(p, x0, y, x1, np.full(len(x0), 16.0), lanes.color, view._palette)
    p.end()
    return (time.perf_counter() - t) * 1e3


def window_figures(trace, app) -> tuple[float, list[float]]:
    """The whole main window: time to its first timeline frame, then repaint times while
    the analysis thread and the panels' jobs work on the same trace (they share the GIL)."""
    from PyQt6.QtCore import QSettings

    from explorer.ui.main_window import MainWindow

    settings = QSettings(
        str(Path(tempfile.gettempdir()) / "explorer-bench.ini"), QSettings.Format.IniFormat
    )
    window = MainWindow(settings=settings, restore=False, remember=False)
    window.resize(1600, 1000)
    window.show()
    app.processEvents()
    t = time.perf_counter()
    window.set_trace(trace)
    repaint_ms(window.timeline)
    first = time.perf_counter() - t
    busy: list[float] = []
    deadline = time.perf_counter() + 60
    k = 0
    while window.analysis.isRunning() and time.perf_counter() < deadline:
        app.processEvents()
        # Cycle from the whole trace down ~6 decades and back, as a user zooming around.
        if k % 40 == 0:
            window.timeline.fit_all()
        else:
            window.timeline.zoom(0.7)
        k += 1
        busy.append(repaint_ms(window.timeline))
    window.analysis.wait()
    window.timeline.stop_indexing()
    window.close()
    return first, busy


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_500_000, help="file events (≈1M slices)")
    ap.add_argument("--trace", help="an existing trace to use instead of building one")
    ap.add_argument("--positions", type=int, default=8, help="window positions per zoom level")
    args = ap.parse_args()

    from PyQt6.QtGui import QImage, QPainter
    from PyQt6.QtWidgets import QApplication

    import explorer
    from explorer.ui.timeline.view import TimelineView

    app = QApplication.instance() or QApplication([])
    if args.trace:
        path = Path(args.trace)
    else:
        from big_trace import make_big_trace

        path = make_big_trace(
            Path(tempfile.gettempdir()) / f"explorer_big_{args.events}.json", args.events
        )
    t = time.perf_counter()
    trace = explorer.load(path)
    load_s = time.perf_counter() - t
    print(f"trace: {path} — {len(trace):,} slices, loaded in {load_s:.1f} s")
    if len(trace) < 1_000_000:
        print(f"note: {len(trace):,} slices, fewer than 1M; raise --events for the issue's target")

    view = TimelineView()
    view.resize(1600, 1000)
    view.show()
    app.processEvents()
    t = time.perf_counter()
    view.set_trace(trace)
    repaint_ms(view)
    first_frame = time.perf_counter() - t
    view.wait_for_lanes()  # a large trace is indexed in the background (ui_scale.py)
    print(
        f"first frame after load: {first_frame * 1e3:.0f} ms (target ≤ 2000 ms); full lane "
        f"index ({view.lanes_state}) at {(time.perf_counter() - t) * 1e3:.0f} ms"
    )

    span = trace.span_ns
    rng = np.random.default_rng(0)
    median_dur = float(np.median(trace.slices["dur"].to_numpy()))
    levels = []
    w = float(span) * 1.02
    while w > max(median_dur * 4, 1_000):
        levels.append(w)
        w /= 10
    levels.append(max(median_dur * 4, 1_000))
    all_times: list[float] = []
    print(
        f"{'window':>12} {'median ms':>10} {'p95 ms':>8} {'max ms':>8} {'rects':>8} {'labels':>7}"
    )
    for width_ns in levels:
        times = []
        for _ in range(args.positions):
            start = rng.uniform(0, max(span - width_ns, 0))
            view.set_visible_range(start, start + width_ns)
            times.append(repaint_ms(view))
            view.pan(0.2)
            times.append(repaint_ms(view))
        all_times += times
        st = view.last_paint_stats
        print(
            f"{width_ns / 1e6:>10.3f}ms {np.median(times):>10.1f} {np.percentile(times, 95):>8.1f} "
            f"{max(times):>8.1f} {st.get('rects', 0):>8} {st.get('labels', 0):>7}"
        )
    med, p95 = float(np.median(all_times)), float(np.percentile(all_times, 95))
    print(f"all zoom levels: median {med:.1f} ms, p95 {p95:.1f} ms (targets ≤ 50 / ≤ 100 ms)")

    view.fit_all()
    lod_full = [repaint_ms(view) for _ in range(5)]
    base_full = [baseline_ms(view, QImage, QPainter) for _ in range(3)]
    print(
        f"whole trace: LOD {np.median(lod_full):.1f} ms vs no-LOD baseline "
        f"{np.median(base_full):.1f} ms → {np.median(base_full) / np.median(lod_full):.1f}× faster"
    )
    view_b, table_b = view.view_nbytes, table_bytes(trace)
    print(
        f"memory: view structures {view_b / 2**20:.1f} MiB vs trace tables {table_b / 2**20:.1f} MiB "
        f"→ {view_b / table_b:.2f}× (target ≤ 1×)"
    )
    window_first, busy = window_figures(trace, app)
    print(f"main window: first timeline frame {window_first * 1e3:.0f} ms after set_trace")
    if busy:
        print(
            f"repaints while analyses and panels run in the background: median "
            f"{np.median(busy):.1f} ms, p95 {np.percentile(busy, 95):.1f} ms ({len(busy)} frames)"
        )
    ok = first_frame <= 2.0 and med <= 50 and p95 <= 100 and view_b <= table_b
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The timeline on 1M / 5M / 10M-event traces, from the columnar store (issue #14).

For each trace (made by ``benchmarks/big_trace.py`` and loaded once, so it opens from the
trace cache), in this process, driving the real widget offscreen at 1600×1000:

- store ready: ``explorer.load`` of the cached trace (the tables memory-mapped);
- first frame: ``set_trace`` plus one synchronous repaint; how long ``set_trace`` held the
  GUI thread; then when the coarse index (every track busy/idle per pixel) and the full
  lane index arrive, built (lane cache emptied first) and then mapped from the lane cache
  (a second view, as a reopen does); repaints while the index is built in the background;
- the same run's baseline: the full index built in place on the GUI thread before the
  first frame (what ``set_trace`` did before; ``background_from`` set past the trace);
- pan/zoom: repaint time at zoom levels from the whole trace down to a few µs, several
  positions per level, plus a pan at each: median and p95 (targets ≤ 50 / ≤ 100 ms);
- memory: the view's own structures (the lane index) against the trace's tables;
- the whole main window (``--window-s``): its ``set_trace`` to the first timeline frame,
  then repaints while the lane index, the analyses and the panels' jobs all run in the
  background of the same process (they share the GIL).

    QT_QPA_PLATFORM=offscreen python benchmarks/ui_scale.py TRACE [TRACE ...] [--repeat 3]

With ``--baseline-pythonpath CHECKOUT`` each trace is also opened, in a child process between
this code's measurements, by the ``TimelineView`` of another checkout (e.g. the commit before
the background index): its first frame and pan/zoom, same trace, same cache directory (the
checkout must read the same trace-cache version, or it parses the JSON again).

Make the traces with ``python benchmarks/big_trace.py /tmp/big_N.json --events N`` and load
each once (``python -c "import explorer; explorer.load('/tmp/big_N.json')"``) so the store
entry exists; the script says so when it does not.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ui_speed import repaint_ms, table_bytes  # noqa: E402 (after the path is set)


def rss_mb() -> float:
    """This process's peak resident memory, MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def new_view(app):
    from explorer.ui.timeline.view import TimelineView

    view = TimelineView()
    view.resize(1600, 1000)
    view.show()
    app.processEvents()
    return view


def open_view(trace, app, *, background: bool = True) -> dict[str, float]:
    """Times (s) from ``set_trace`` to: its return, the first frame, the coarse index, the
    full index; plus repaint times (ms) of frames drawn while indexing."""
    view = new_view(app)
    if not background:
        view.background_from = len(trace) + 1
    got: dict[str, float] = {}
    t = time.perf_counter()
    view.lanes_changed.connect(lambda how: got.setdefault(how, time.perf_counter() - t))
    view.set_trace(trace)
    returned = time.perf_counter() - t
    repaint_ms(view)
    first = time.perf_counter() - t
    during: list[float] = []
    while view.lanes_state != "full":  # a user zooming while the index is built
        app.processEvents()
        view.zoom(0.7 if len(during) % 20 else 1 / 0.7**19)
        during.append(repaint_ms(view))
        time.sleep(0.01)
    ready = time.perf_counter() - t
    out = {"returned": returned, "first": first, "full": ready, "view": view}
    out.update({k: v for k, v in got.items()})
    out["during"] = during
    return out


def zoom_levels(view, trace, positions: int, rng) -> list[tuple[float, list[float], dict]]:
    span = float(trace.span_ns)
    levels, w = [], span * 1.02
    while w > 2_000:  # down to ~2 µs windows
        levels.append(w)
        w /= 10
    out = []
    start0 = float(trace.slices["ts"].min())
    for width_ns in levels:
        times = []
        for _ in range(positions):
            start = start0 + rng.uniform(0, max(span - start0 - width_ns, 0))
            view.set_visible_range(start, start + width_ns)
            times.append(repaint_ms(view))
            view.pan(0.2)
            times.append(repaint_ms(view))
        out.append((width_ns, times, dict(view.last_paint_stats)))
    return out


def baseline_child(path: Path, app, repeat: int, positions: int) -> None:
    """In the child process: another checkout's view on ``path``; one JSON line out."""
    import explorer

    trace = explorer.load(path)
    firsts = []
    for _ in range(repeat):
        view = new_view(app)
        t = time.perf_counter()
        view.set_trace(trace)
        repaint_ms(view)
        firsts.append(time.perf_counter() - t)
        view.close()
    view = new_view(app)
    view.set_trace(trace)
    times = [
        ms
        for _, level, _ in zoom_levels(view, trace, positions, np.random.default_rng(0))
        for ms in level
    ]
    print(
        json.dumps(
            {
                "explorer": explorer.__file__,
                "first": float(np.median(firsts)),
                "zoom_median": float(np.median(times)),
                "zoom_p95": float(np.percentile(times, 95)),
            }
        )
    )


def baseline(path: Path, checkout: str, repeat: int, positions: int) -> dict[str, float]:
    """Run :func:`baseline_child` with ``checkout`` on ``PYTHONPATH``."""
    cmd = [sys.executable, __file__, str(path), "--baseline-child", "--repeat", str(repeat)]
    cmd += ["--positions", str(positions)]
    env = dict(os.environ, PYTHONPATH=checkout)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"baseline run failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(
    path: Path, app, repeat: int, positions: int, window_s: float, checkout: str = ""
) -> None:
    import explorer
    from explorer.store.cache import entry_path, load_cached
    from explorer.ui.timeline.lane_builder import lod_directory

    if load_cached(path) is None:
        raise SystemExit(f"{path}: no trace-cache entry; load it once first (see the docstring)")
    t = time.perf_counter()
    trace = explorer.load(path)
    store_s = time.perf_counter() - t
    lanes_dir = lod_directory(str(trace.path))
    print(
        f"\n{path.name}: {len(trace):,} slices; store ready in {store_s:.2f} s ({entry_path(path)})"
    )
    cold, warm, sync = [], [], []
    for _ in range(repeat):
        shutil.rmtree(lanes_dir, ignore_errors=True)
        cold.append(open_view(trace, app))
        while lanes_dir is not None and not lanes_dir.exists():  # the cache write follows
            app.processEvents()
            time.sleep(0.05)
        warm.append(open_view(trace, app))
        sync.append(open_view(trace, app, background=False))
        for r in cold[-1:] + warm[-1:] + sync[-1:]:
            r["view"].stop_indexing()
            r["view"].close()

    def med(rows, key):
        vals = [r[key] for r in rows if key in r]
        return float(np.median(vals)) if vals else float("nan")

    print(f"  first frame (set_trace + paint), median of {repeat}:")
    print(
        f"    lane cache empty: {med(cold, 'first') * 1e3:.0f} ms (set_trace returned in "
        f"{med(cold, 'returned') * 1e3:.0f} ms); coarse index at {med(cold, 'coarse'):.2f} s, "
        f"full index built at {med(cold, 'built'):.2f} s"
    )
    print(
        f"    lane cache filled: {med(warm, 'first') * 1e3:.0f} ms; full index mapped at "
        f"{med(warm, 'cached'):.2f} s"
    )
    print(
        f"    baseline, index built on the GUI thread first: {med(sync, 'first'):.2f} s "
        f"-> {med(sync, 'first') / med(cold, 'first'):.0f}x the background first frame"
    )
    if checkout:
        base = baseline(path, checkout, repeat, positions)
        print(
            f"    before ({base['explorer']}): first frame {base['first']:.2f} s, pan/zoom "
            f"median {base['zoom_median']:.1f} ms, p95 {base['zoom_p95']:.1f} ms -> first frame "
            f"now {base['first'] / med(cold, 'first'):.0f}x sooner (lane cache empty)"
        )
    during = [ms for r in cold for ms in r["during"]]
    if during:
        print(
            f"  repaints while indexing ({len(during)} frames): median "
            f"{np.median(during):.1f} ms, p95 {np.percentile(during, 95):.1f} ms"
        )
    view = new_view(app)
    view.set_trace(trace)
    view.wait_for_lanes()
    rng = np.random.default_rng(0)
    all_times: list[float] = []
    print(f"  {'window':>14} {'median ms':>10} {'p95 ms':>8} {'max ms':>8} {'rects':>8}")
    for width_ns, times, stats in zoom_levels(view, trace, positions, rng):
        all_times += times
        print(
            f"  {width_ns / 1e6:>12.4f}ms {np.median(times):>10.1f} "
            f"{np.percentile(times, 95):>8.1f} {max(times):>8.1f} {stats.get('rects', 0):>8}"
        )
    print(
        f"  pan/zoom, all levels: median {np.median(all_times):.1f} ms, p95 "
        f"{np.percentile(all_times, 95):.1f} ms over {len(all_times)} repaints"
    )
    view_b, table_b = view.view_nbytes, table_bytes(trace)
    print(
        f"  memory: lane index {view_b / 2**20:.0f} MiB vs trace tables {table_b / 2**20:.0f} MiB "
        f"= {view_b / table_b:.2f}x; process peak RSS {rss_mb():.0f} MiB"
    )
    view.close()
    if window_s > 0:
        window_figures(trace, app, window_s)


def window_figures(trace, app, seconds: float) -> None:
    """The main window on this trace: first timeline frame, then ``seconds`` of zooming
    while everything else computes in the background."""
    import tempfile

    from PyQt6.QtCore import QSettings, QThreadPool

    from explorer.ui.main_window import MainWindow

    settings = QSettings(
        str(Path(tempfile.gettempdir()) / "explorer-ui-scale.ini"), QSettings.Format.IniFormat
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
    k = 0
    while time.perf_counter() - t < seconds:
        app.processEvents()
        if k % 40 == 0:
            window.timeline.fit_all()
        else:
            window.timeline.zoom(0.7)
        k += 1
        busy.append(repaint_ms(window.timeline))
    print(
        f"  main window: first timeline frame {first * 1e3:.0f} ms after set_trace; "
        f"{len(busy)} repaints in the next {seconds:.0f} s while the index, analyses and "
        f"panels run: median {np.median(busy):.1f} ms, p95 {np.percentile(busy, 95):.1f} ms "
        f"(lanes {window.timeline.lanes_state})"
    )
    if window.analysis is not None:
        window.analysis.cancel()
        window.analysis.wait()
    window.timeline.stop_indexing()
    QThreadPool.globalInstance().waitForDone(600_000)
    window.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--repeat", type=int, default=3, help="opens of each kind per trace")
    ap.add_argument("--positions", type=int, default=6, help="window positions per zoom level")
    ap.add_argument(
        "--window-s", type=float, default=20.0, help="seconds of zooming in the main window"
    )
    ap.add_argument("--baseline-pythonpath", default="", help="also time this checkout's view")
    ap.add_argument("--baseline-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    from PyQt6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    if args.baseline_child:
        baseline_child(args.traces[0], app, args.repeat, args.positions)
        return 0
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    for path in args.traces:
        measure(path, app, args.repeat, args.positions, args.window_s, args.baseline_pythonpath)
    return 0


if __name__ == "__main__":
    sys.exit(main())

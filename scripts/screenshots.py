"""Render the README's screenshots of the desktop explorer, one per panel, headless.

The trace is ``--trace``, a scenario from :mod:`explorer.scenarios` (``--scenario``;
synthetic — the window then shows its synthetic banner, and this script says so), or by
default the real torch.compile run the README shows (:data:`README_TRACE`). Each image is
the real window rendered offscreen, opened on finding 1 exactly as
``explorer view TRACE --finding 1 --screenshot window.png`` opens it, so every panel has
something to show; the timeline, GPU and MTIA pictures follow (the last two need
``../shared/traces``).

    python scripts/screenshots.py [--trace PATH | --scenario sync_storm] [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]


#: The real run the README's window.png shows, and its one-command reproduction names.
README_TRACE = ROOT / "sample_traces" / "cpu_compile_graph_break.pt.trace.json.gz"


def pick_trace(args: argparse.Namespace) -> tuple[Path, str]:
    """The trace to show and a note on where it came from."""
    if args.trace:
        return Path(args.trace), "given trace"
    if not args.scenario:
        return README_TRACE, "sample trace (a real run), as the README's command"
    from explorer import scenarios

    name = args.scenario
    path = scenarios.write(name, Path(tempfile.gettempdir()) / f"explorer_{name}.json")
    return path, f"SYNTHETIC scenario '{name}' (explorer.scenarios)"


def device_timeline(out: Path, size: tuple[int, int]) -> Path:
    """The timeline of a synthetic GPU scenario (sample traces are CPU runs): device streams,
    step breakdown bars and memory rows. Labelled synthetic in the picture."""
    from explorer import scenarios
    from explorer.ui.app import open_headless

    path = scenarios.write("pageable_copies", Path(tempfile.gettempdir()) / "explorer_gpu.json")
    window = open_headless(str(path), size=size)
    pixmap = window.timeline.grab()
    stamp(pixmap, "synthetic trace (explorer.scenarios: pageable_copies)")
    file = out / "timeline_device.png"
    pixmap.save(str(file))
    window.close()
    return file


SHARED = ROOT.parent / "shared" / "traces"


def timeline_pictures(path: Path, out: Path, size: tuple[int, int]) -> list[Path]:
    """The timeline's own points, on the same real trace: a finding's evidence (amber),
    search hits (magenta) and the selection (black) at once; a deep zoom whose axis counts
    ``+x µs`` from a reference shown once, with a range selected."""
    import numpy as np

    from explorer.ui.app import open_headless, wait_idle

    window = open_headless(str(path), size=size, finding=1)
    window.search.search("bytecode_tracing")
    wait_idle(window)
    marks = out / "timeline_marks.png"
    window.timeline.grab().save(str(marks))
    t = window.timeline
    sid = int(t.selected) if t.selected >= 0 else 0
    ts = int(window.trace.slices["ts"].iat[sid])
    t.set_visible_range(ts - 2_000, ts + 18_000)
    t.range = (ts + 4_000, ts + 11_000)
    t.highlight(np.zeros(0, np.int64))
    zoom = out / "timeline_zoom.png"
    t.grab().save(str(zoom))
    window.close()
    return [marks, zoom]


def demo_and_narrow_pictures(path: Path, out: Path) -> list[Path]:
    """The timeline of a fresh ``explorer demo`` run (its outermost frame is the training
    script's main, not Explorer's CLI), and a 900 px window whose legend ends in
    ``+N more (hover)`` instead of clipping an entry."""
    import subprocess

    from explorer.ui.app import open_headless

    folder = Path(tempfile.mkdtemp(prefix="explorer-demo-"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "explorer",
            "demo",
            "--no-view",
            "--steps",
            "3",
            "--out",
            str(folder),
        ],
        check=True,
        capture_output=True,
        cwd=folder,
    )
    trace = next(folder.glob("*.pt.trace.json*"))
    window = open_headless(str(trace), size=(1600, 1000))
    demo = out / "demo_timeline.png"
    window.timeline.grab().save(str(demo))
    window.close()
    window = open_headless(str(path), size=(900, 700))
    narrow = out / "timeline_narrow.png"
    window.timeline.grab().save(str(narrow))
    window.close()
    return [demo, narrow]


def shared_pictures(out: Path, size: tuple[int, int]) -> list[Path]:
    """Points that need real GPU/MTIA traces (../shared/traces, not part of a clone): the
    MTIA device collapsed to a summary row, a 5000-character kernel name in Details, the
    layered dependency graph over host threads and GPU streams."""
    from PyQt6.QtCore import Qt

    from explorer.ui.app import open_headless, wait_idle

    mtia = SHARED / "mtia_inference_trace__mtia_inference_rank_0.json.gz"
    alexnet = SHARED / "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"
    if not (mtia.exists() and alexnet.exists()):
        print(f"skipped the GPU/MTIA pictures: {SHARED} is absent")
        return []
    window = open_headless(str(mtia), size=size)
    many = out / "timeline_many_streams.png"
    window.timeline.grab().save(str(many))
    window.close()

    window = open_headless(str(alexnet), size=size)
    names = window.trace.slices["name"].astype(str)
    longest = int(names.str.len().idxmax())
    window.reveal(longest)
    wait_idle(window)
    right = [window.docks["findings"], window.docks["details"]]
    window.resizeDocks(right, [size[1] // 4, size[1] * 3 // 4], Qt.Orientation.Vertical)
    details = out / "details_long_name.png"
    window.docks["details"].grab().save(str(details))
    graph_panel = window.panels["dependency_graph"]
    graph_panel.hops.setValue(4)
    window.docks["dependency_graph"].raise_()
    window.resizeDocks([window.docks["dependency_graph"]], [size[1] // 2], Qt.Orientation.Vertical)
    kernel = int((window.trace.slices["kind"].astype(str) == "kernel").to_numpy().nonzero()[0][5])
    window.reveal(kernel)
    wait_idle(window)
    graph_panel.view.scale(0.7, 0.7)
    graph_panel.view.centerOn(graph_panel.node_items[kernel])
    graph = out / "dependency_graph_gpu.png"
    window.docks["dependency_graph"].grab().save(str(graph))
    window.close()
    return [many, details, graph]


def stamp(pixmap, text: str) -> None:
    """Label a picture in its bottom-right corner (synthetic data is always labelled)."""
    from PyQt6.QtCore import QRectF, Qt
    from PyQt6.QtGui import QColor, QPainter

    p = QPainter(pixmap)
    fm = p.fontMetrics()
    w, h = fm.horizontalAdvance(text) + 16, fm.height() + 6
    box = QRectF(pixmap.width() - w - 4, pixmap.height() - h - 4, w, h)
    p.fillRect(box, QColor("#fff3bf"))
    p.setPen(QColor("#5c4400"))
    p.drawText(box, Qt.AlignmentFlag.AlignCenter, text)
    p.end()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", help="trace to show")
    ap.add_argument("--scenario", help="synthetic scenario to show instead of a sample trace")
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    ap.add_argument("--size", default="1600x1000")
    args = ap.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path, origin = pick_trace(args)
    print(f"trace: {path} ({origin})")

    from PyQt6.QtWidgets import QApplication

    import explorer
    from explorer.ui.app import open_headless, wait_idle

    # The same window as `explorer view TRACE --finding 1 --screenshot window.png`.
    finding = 1 if explorer.load(path).findings() else None
    window = open_headless(str(path), size=(width, height), finding=finding)
    wait_idle(window)
    saved = []

    synthetic = bool(window.trace.synthetic)

    def save(widget, name: str) -> None:
        QApplication.processEvents()
        file = out / f"{name}.png"
        pixmap = widget.grab()
        if synthetic and name != "window":  # the window shows its own banner
            stamp(pixmap, "synthetic trace (explorer.scenarios)")
        pixmap.save(str(file))
        saved.append(file)

    save(window, "window")
    save(window.timeline, "timeline")
    from PyQt6.QtCore import Qt

    right = [window.docks["findings"], window.docks["details"]]
    window.resizeDocks(right, [height * 2 // 3, height // 3], Qt.Orientation.Vertical)
    save(window.docks["findings"], "findings")
    window.resizeDocks(right, [height // 4, height * 3 // 4], Qt.Orientation.Vertical)
    save(window.docks["details"], "details")
    for name in window.panels:
        dock = window.docks[name]
        dock.raise_()
        # Give the bottom panels half the window for their own picture.
        window.resizeDocks([dock], [height // 2], Qt.Orientation.Vertical)
        wait_idle(window)
        save(dock, name)
    if "operators" in window.docks:
        window.docks["operators"].raise_()
    window.close()
    saved.append(device_timeline(out, (width, height)))
    saved += timeline_pictures(path, out, (width, height))
    saved += demo_and_narrow_pictures(path, out)
    saved += shared_pictures(out, (width, height))
    for file in saved:
        print(f"wrote {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The job overview (``explorer view RUN_DIR``) on real 4-rank DDP jobs, with real widgets.

The committed job ``sample_traces/ddp_4rank_slow_input`` (rank 2's input pipeline is slowed:
``job.info``) is analysed once by the window itself, in the background, as a user opens it.
Values shown are checked against what each rank's own trace says, computed here.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from PyQt6.QtCore import Qt
from PyQt6.QtWidgets import QApplication

import explorer
from explorer.job.document import default_store
from explorer.ui.job_model import STEP_TIME
from explorer.ui.job_window import JobWindow

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "sample_traces" / "ddp_4rank_slow_input"


#: Whole jobs: each module's job is analysed on a real Dask cluster (seconds each).
pytestmark = pytest.mark.slow


def _rank_file(job: Path, rank: int) -> Path:
    return job / f"rank{rank}.pt.trace.json.gz"


class Ticks:
    """Counts how long the GUI thread goes without processing events while waiting."""

    def __init__(self) -> None:
        self.longest = 0.0

    def wait_until(self, done: Any, timeout: float = 120.0) -> None:
        start = last = time.monotonic()
        while not done():
            assert time.monotonic() - start < timeout, "timed out"
            QApplication.processEvents()
            now = time.monotonic()
            self.longest = max(self.longest, now - last)
            last = now
            time.sleep(0.01)


def _open(qtbot: Any, settings: Any, job: Path, **kw: Any) -> tuple[JobWindow, list, Ticks]:
    window = JobWindow(settings=settings)
    qtbot.addWidget(window)
    window.show()
    seen: list[tuple[int, int]] = []
    ticks = Ticks()
    window.open_job(str(job), **kw)
    assert window.analysis is not None
    window.analysis.progress.connect(lambda d, t: seen.append((d, t)))
    return window, seen, ticks


@pytest.fixture(scope="module")
def own_traces() -> dict[int, explorer.Trace]:
    return {r: explorer.load(_rank_file(JOB, r)) for r in range(4)}


@pytest.fixture
def analysed(qtbot: Any, settings: Any) -> tuple[JobWindow, list, Ticks]:
    window, seen, ticks = _open(qtbot, settings, JOB)
    ticks.wait_until(lambda: window.doc is not None)
    return window, seen, ticks


def test_overview_heatmap_straggler_and_collectives(
    analysed: tuple[JobWindow, list, Ticks], own_traces: dict[int, explorer.Trace]
) -> None:
    window, seen, ticks = analysed
    doc = window.doc
    assert doc is not None
    # progress came as ranks done / total, and the GUI thread never stalled meanwhile
    assert seen[-1] == (4, 4) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert ticks.longest < 1.0, f"the GUI thread was blocked {ticks.longest:.2f} s"
    assert not window.progress.isVisible() and not window.cancel_button.isVisible()
    assert doc["warnings"] == [] and not window.warnings.isVisible()

    # heatmap cells = the document's step matrix = each rank's own steps
    heat = window.heatmap.heat
    assert window.quantity.currentText() == STEP_TIME
    assert heat.rowCount() == 4 and heat.columnCount() == len(doc["steps"])
    for row in range(4):
        rank = window.heatmap.rank_of(row)
        shown = [heat.data(heat.index(row, c), Qt.ItemDataRole.UserRole) for c in range(5)]
        assert shown == [float(v) for v in doc["step_matrix"][str(rank)]]
        assert shown == own_traces[rank].steps()["dur_ns"].astype(float).tolist()

    # the straggler: the rank job.info slowed, and only its row is marked
    slow = json.loads((JOB / "job.info").read_text())["slow_rank"]
    assert doc["straggler"]["rank"] == slow == 2
    headers = [heat.headerData(r, Qt.Orientation.Vertical) for r in range(4)]
    assert [("straggler" in h) for h in headers] == [r == slow for r in range(4)]
    # its causes with their source line: the rank's own input-stall finding
    stall = next(f for f in own_traces[2].findings() if f.kind == "input_stall")
    file, line, _ = stall.source_lines[0]
    assert f"{Path(file).name}:{line}" in window.causes.text()
    assert f"{Path(file).name}:{line}" in window.headline.text()

    # the collectives table: every row of the document, sortable by the wait it caused
    model = window.collectives_model
    rows = doc["collectives"]["rows"]
    assert model.rowCount() == len(rows) == doc["collectives"]["matched"]
    # no sort arrow until the user sorts: the rows are in time order (the document's)
    header = window.collectives.horizontalHeader()
    assert header.sortIndicatorSection() == -1
    assert [model.source_row(i) for i in range(model.rowCount())] == list(range(len(rows)))
    col = list(model.frame.columns).index("caused_wait_ns")
    window.collectives.sortByColumn(col, Qt.SortOrder.DescendingOrder)
    # the arrow says what the rows show
    assert (header.sortIndicatorSection(), header.sortIndicatorOrder()) == (
        col,
        Qt.SortOrder.DescendingOrder,
    )
    shown = [model.row(i)["caused_wait_ns"] for i in range(model.rowCount())]
    assert shown == sorted(shown, reverse=True)
    window.collectives.sortByColumn(col, Qt.SortOrder.AscendingOrder)
    shown = [model.row(i)["caused_wait_ns"] for i in range(model.rowCount())]
    assert header.sortIndicatorOrder() == Qt.SortOrder.AscendingOrder
    assert shown == sorted(shown)
    window.collectives.sortByColumn(col, Qt.SortOrder.DescendingOrder)
    top = model.row(0)
    assert top["caused_wait_ns"] == max(r["caused_wait_ns"] for r in rows)
    assert int(top["last_rank"]) == next(
        r["last_rank"] for r in rows if r["caused_wait_ns"] == top["caused_wait_ns"]
    )


def test_category_heatmap_is_each_ranks_own_step_breakdown(
    analysed: tuple[JobWindow, list, Ticks], own_traces: dict[int, explorer.Trace]
) -> None:
    window = analysed[0]
    doc = window.doc
    assert doc is not None
    names = [window.quantity.itemText(i) for i in range(window.quantity.count())]
    assert names[0] == STEP_TIME and "host_bound" in names and "communication" in names
    window.quantity.setCurrentText("host_bound")
    assert "per rank × step" in window.quantity_note.text()
    heat = window.heatmap.heat
    for row in range(4):
        rank = window.heatmap.rank_of(row)
        bd = own_traces[rank].breakdown()
        mine = bd[bd["category"].astype(str) == "host_bound"].groupby("step")["ns"].sum()
        shown = [heat.data(heat.index(row, c), Qt.ItemDataRole.UserRole) for c in range(5)]
        assert shown == [float(mine.get(s, 0)) for s in doc["steps"]]
        # and the steps add up to the report's per-rank breakdown
        assert sum(shown) == doc["ranks"][rank]["breakdown"]["host_bound"]
    # the slowed rank's input stall shows as the darkest row
    assert int(np.argmax(heat.map.values.sum(axis=1))) == window.heatmap.row_of(2)


def _click_row(qtbot: Any, window: JobWindow, rank: int, modifier: Any = None) -> None:
    view = window.heatmap
    rect = view.visualRect(view.heat.index(view.row_of(rank), 0))
    mods = modifier if modifier is not None else Qt.KeyboardModifier.NoModifier
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, mods, rect.center())


def test_clicking_rank_2_shows_its_timeline_and_double_click_its_window(
    qtbot: Any, analysed: tuple[JobWindow, list, Ticks], own_traces: dict[int, explorer.Trace]
) -> None:
    window, _, ticks = analysed
    _click_row(qtbot, window, 2)
    ticks.wait_until(lambda: list(window.stack.views) == [2], timeout=30)
    shown = window.stack.views[2].trace
    own = own_traces[2]
    assert shown is not None and len(shown.slices) == len(own.slices)
    assert (shown.slices["name"].astype(str).value_counts()).equals(
        own.slices["name"].astype(str).value_counts()
    )
    assert "rank 2" in window.stack.headers[2].text()

    qtbot.mouseDClick(
        window.heatmap.viewport(),
        Qt.MouseButton.LeftButton,
        pos=window.heatmap.visualRect(
            window.heatmap.heat.index(window.heatmap.row_of(2), 0)
        ).center(),
    )
    full = window.rank_windows[2]
    qtbot.addWidget(full)
    ticks.wait_until(lambda: full.trace is not None, timeout=60)
    assert full.trace.rank == 2 and len(full.trace) == len(own)
    assert "rank 2" in full.windowTitle()


def _skewed_job(tmp: Path, rank: int, shift_us: int) -> Path:
    """The sample job with one rank's clock ``shift_us`` ahead, on another host (so the
    report aligns it: ranks on one host share its clock)."""
    job = tmp / "skewed_job"
    shutil.copytree(JOB, job)
    path = _rank_file(job, rank)
    doc = json.loads(gzip.decompress(path.read_bytes()))
    for ev in doc["traceEvents"]:
        if "ts" in ev:
            ev["ts"] = float(ev["ts"]) + shift_us
    doc["explorer"]["environment"]["host"] = "node-b"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return job


def test_stacked_ranks_are_aligned_on_matched_collectives(
    qtbot: Any, settings: Any, tmp_path: Path
) -> None:
    shift_ms = 500
    job = _skewed_job(tmp_path, 3, shift_ms * 1000)
    window, _, ticks = _open(qtbot, settings, job)
    ticks.wait_until(lambda: window.doc is not None)
    doc = window.doc
    assert doc is not None
    offsets = {r["rank"]: r["clock_offset_ns"] for r in doc["ranks"]}
    assert offsets[0] == 0 and abs(offsets[3] - shift_ms * 1_000_000) < 10_000_000

    _click_row(qtbot, window, 0)
    _click_row(qtbot, window, 3, Qt.KeyboardModifier.ControlModifier)
    _click_row(qtbot, window, 2, Qt.KeyboardModifier.ControlModifier)
    ticks.wait_until(lambda: sorted(window.stack.views) == [0, 2, 3], timeout=30)
    views = window.stack.views
    assert len({v.width() for v in views.values()}) == 1

    def starts(rank: int) -> np.ndarray:  # the rank's all_reduces, its own clock
        s = views[rank].trace.slices
        rows = s[s["name"].astype(str) == "gloo:all_reduce"].sort_values("ts")
        return rows["ts"].to_numpy(np.float64)

    skews = [c["skew_ns"] for c in doc["collectives"]["rows"] if c["op"] == "allreduce"]
    for zoom in (None, 0.25):
        if zoom is not None:  # zoom one view: the others follow
            views[3].zoom(zoom)
        v0 = views[0]
        px_per_ns = (v0._x_of(v0.t1) - v0._x_of(v0.t0)) / (v0.t1 - v0.t0)
        x = {r: np.array([views[r]._x_of(t) for t in starts(r)]) for r in views}
        assert len(x[0]) == len(x[2]) == len(x[3]) == len(skews)
        for k, skew in enumerate(skews):
            at = [x[r][k] for r in views]
            assert max(at) - min(at) <= skew * px_per_ns + 1.0
        # without the offset rank 3 would sit the planted 500 ms away: far beyond the skews
        assert shift_ms * 1e6 > 3 * max(skews)


def test_cancel_mid_analysis_leaves_no_store_no_workers_and_a_live_gui(
    qtbot: Any, settings: Any, tmp_path: Path
) -> None:
    job = tmp_path / "job"
    shutil.copytree(JOB, job)
    window, seen, ticks = _open(qtbot, settings, job, workers=1)
    ticks.wait_until(lambda: len(seen) >= 1)  # one rank in, three to go
    assert seen[0] == (1, 4)
    workers = [
        p
        for p in psutil.Process().children(recursive=True)
        if "resource_tracker" not in " ".join(p.cmdline())
    ]
    assert workers
    qtbot.mouseClick(window.cancel_button, Qt.MouseButton.LeftButton)
    assert not window.cancel_button.isEnabled()
    ticks.wait_until(lambda: not window.analysis.isRunning(), timeout=60)
    ticks.wait_until(lambda: not window.progress.isVisible(), timeout=5)
    assert ticks.longest < 1.0, f"the GUI thread was blocked {ticks.longest:.2f} s"
    assert window.doc is None and window.heatmap.heat.rowCount() == 0
    assert "cancelled" in window.headline.text().lower()
    _, alive = psutil.wait_procs(workers, timeout=15)
    assert alive == []
    assert not default_store(str(job)).exists()  # some ranks only: removed, never read
    # and the job opens whole afterwards
    window.open_job(str(job))
    ticks.wait_until(lambda: window.doc is not None)
    assert window.doc["ranks_present"] == 4 and window.heatmap.heat.rowCount() == 4


def _broken_job(tmp: Path) -> Path:
    job = tmp / "broken"
    job.mkdir()
    shutil.copy(_rank_file(JOB, 0), job)
    (job / "rank1.pt.trace.json").write_text('{"traceEvents": [ {"ph": "X", ')
    return job


def test_a_bad_rank_is_left_out_and_said_first(qtbot: Any, settings: Any, tmp_path: Path) -> None:
    """A rank file with no events does not sink the job (issue 25): the job opens with the
    ranks that read, and the banner's first line names the rank left out and its file."""
    window, _, ticks = _open(qtbot, settings, _broken_job(tmp_path))
    ticks.wait_until(lambda: window.doc is not None or window.error_box is not None)
    assert window.error_box is None
    assert window.doc["ranks_present"] == 1 and window.heatmap.heat.rowCount() == 1
    first = window.warnings.text().splitlines()[0]
    assert window.warnings.isVisible() and "rank 1 is left out" in first
    assert "rank1.pt.trace.json" in first and "Traceback" not in window.warnings.text()
    assert not window.progress.isVisible()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "explorer", *args], capture_output=True, text=True, cwd=ROOT,
        timeout=300,
    )  # fmt: skip


def test_bad_job_directories_are_one_cli_line(tmp_path: Path) -> None:
    twice = tmp_path / "twice"
    twice.mkdir()
    shutil.copy(_rank_file(JOB, 1), twice / "rank1.pt.trace.json.gz")
    shutil.copy(_rank_file(JOB, 1), twice / "worker_rank1.json.gz")
    r = _cli("view", str(twice))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "rank 1 also comes from" in r.stderr

    out = tmp_path / "job.png"  # a bad rank is left out (the window says so): drawn
    r = _cli("view", str(_broken_job(tmp_path)), "--screenshot", str(out))
    assert r.returncode == 0 and out.exists() and "Traceback" not in r.stderr, r.stderr

    r = _cli("view", str(JOB), "--finding", "1")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--finding" in r.stderr


def test_screenshot_of_a_job(tmp_path: Path) -> None:
    out = tmp_path / "job.png"
    r = _cli("view", str(JOB), "--screenshot", str(out), "--size", "1200x900")
    assert r.returncode == 0, r.stderr
    from PyQt6.QtGui import QImage

    image = QImage(str(out))
    assert (image.width(), image.height()) == (1200, 900)


def test_broadcast_chain_job_marks_the_slowed_rank_not_the_root(qtbot: Any) -> None:
    """On the job where the broadcast root, held up by rank 2, enters the all_reduce last,
    the marked row is still the rank ``job.info`` slowed; the headless window shows its
    timeline."""
    from explorer.ui.job_app import open_headless

    job = ROOT / "sample_traces" / "ddp_4rank_broadcast_chain"
    slow = json.loads((job / "job.info").read_text())["slow_rank"]
    window = open_headless(str(job), (1200, 900))
    qtbot.addWidget(window)
    heat = window.heatmap.heat
    marked = [
        window.heatmap.rank_of(r)
        for r in range(heat.rowCount())
        if "straggler" in heat.headerData(r, Qt.Orientation.Vertical)
    ]
    assert marked == [slow] == [window.doc["straggler"]["rank"]]
    # counting who enters the all_reduces last would blame the broadcast root, rank 0
    last = [c["last_rank"] for c in window.doc["collectives"]["rows"] if c["op"] == "allreduce"]
    assert last.count(0) > last.count(slow)
    assert list(window.stack.views) == [slow]
    own = explorer.load(_rank_file(job, slow))
    assert len(window.stack.views[slow].trace.slices) == len(own.slices)
    row = window.heatmap.row_of(slow)
    shown = [heat.data(heat.index(row, c), Qt.ItemDataRole.UserRole) for c in range(6)]
    assert shown == own.steps()["dur_ns"].astype(float).tolist()


def test_selecting_more_ranks_than_fit_stacks_the_first_ones(
    analysed: tuple[JobWindow, list, Ticks], monkeypatch: pytest.MonkeyPatch
) -> None:
    import explorer.ui.job_window as job_window

    monkeypatch.setattr(job_window, "MAX_STACKED", 2)
    window, _, ticks = analysed
    window.heatmap.selectAll()
    ticks.wait_until(lambda: sorted(window.stack.views) == [0, 1], timeout=30)
    assert "4 ranks selected: the first 2 are shown" in window.stack_hint.text()


def test_two_real_nvidia_ranks_stack_aligned(
    qtbot: Any, settings: Any, shared_traces: Path
) -> None:
    """Two ranks of a real 128-rank NVIDIA job (a glob): their NCCL kernels, matched by
    order as the report matches them, land within the report's skew of each other."""
    window, _, ticks = _open(qtbot, settings, shared_traces / "*sampled_rank-*.json.gz")
    ticks.wait_until(lambda: window.doc is not None)
    doc = window.doc
    assert doc is not None and doc["ranks_present"] == 2
    # the report's warning that 126 of the job's 128 ranks are missing is on screen
    assert window.warnings.isVisible() and "2 of 128 ranks are present" in window.warnings.text()
    window.heatmap.selectAll()
    ticks.wait_until(lambda: sorted(window.stack.views) == [0, 1], timeout=60)
    views = window.stack.views
    kernels = {}
    for r, view in views.items():
        s = view.trace.slices
        kernels[r] = np.sort(s.loc[s["kind"].astype(str) == "collective", "ts"].to_numpy())
    v0 = views[0]
    px_per_ns = (v0._x_of(v0.t1) - v0._x_of(v0.t0)) / (v0.t1 - v0.t0)
    rows = doc["collectives"]["rows"]
    assert rows and {c["op"] for c in rows} == {"sendrecv"}
    for c in rows:
        k = int(c["key"].split("#")[1])
        x0, x1 = views[0]._x_of(kernels[0][k]), views[1]._x_of(kernels[1][k])
        assert abs(x0 - x1) <= c["skew_ns"] * px_per_ns + 1.0
    # On the raw clocks the ranks disagree by the report's 170 µs offset: pick the
    # collective where ignoring it would show most, zoom to a few µs per pixel there.
    raw = {r: kernels[r] + int(views[r].trace.metadata["start_ns"]) for r in views}

    def beyond_skew(c: dict) -> int:
        k = int(c["key"].split("#")[1])
        return abs(int(raw[1][k] - raw[0][k])) - c["skew_ns"]

    c = max(rows, key=beyond_skew)
    assert beyond_skew(c) > 100_000
    k = int(c["key"].split("#")[1])
    at = kernels[0][k] + window.stack.shifts[0]
    window.stack.set_aligned_range(at - 2e5, at + 2e5)
    px_per_ns = (v0._x_of(v0.t1) - v0._x_of(v0.t0)) / (v0.t1 - v0.t0)
    assert 1 / px_per_ns < 3000  # ns per pixel
    x0, x1 = views[0]._x_of(kernels[0][k]), views[1]._x_of(kernels[1][k])
    assert abs(x0 - x1) <= c["skew_ns"] * px_per_ns + 1.0

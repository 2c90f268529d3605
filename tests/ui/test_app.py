"""The main window: loading off the UI thread, title, banner, errors, recent files,
drag-and-drop, the saved layout and the ``explorer view`` command."""

from __future__ import annotations

import json
from pathlib import Path

from PyQt6.QtCore import QMimeData, QPointF, Qt, QUrl
from PyQt6.QtGui import QDropEvent, QImage
from PyQt6.QtWidgets import QMessageBox

from explorer.cli.main import main as cli_main
from explorer.ui.loader import TraceLoader
from explorer.ui.main_window import MainWindow


def test_open_shows_the_trace_with_file_rank_and_device_in_the_title(
    window, open_trace, small_trace_file
) -> None:
    trace = open_trace(window, small_trace_file)
    assert len(trace) == 30
    title = window.windowTitle()
    assert "small.pt.trace.json" in title and "rank 0" in title and "cuda:0" in title
    assert not window.banner.isVisible()
    assert not window.progress.isVisible()
    assert window.timeline.trace is trace
    assert window.timeline.steps is not None and len(window.timeline.steps) == 3
    assert window.recent_files()[0] == str(small_trace_file)
    assert window.recent_menu.actions()[0].text() == str(small_trace_file)


def test_progress_is_reported_while_loading(qtbot, small_trace_file) -> None:
    loader = TraceLoader(str(small_trace_file), use_cache=False)
    seen: list[int] = []
    loader.progress.connect(lambda pct, msg: seen.append(pct))
    with qtbot.waitSignal(loader.loaded, timeout=30000):
        loader.start()
    loader.wait()
    assert seen and seen[-1] == 100 and seen == sorted(seen)


def test_cancel_stops_the_load(qtbot, small_trace_file) -> None:
    loader = TraceLoader(str(small_trace_file), use_cache=False)
    loaded = []
    loader.loaded.connect(loaded.append)
    loader.cancel()
    with qtbot.waitSignal(loader.cancelled, timeout=30000):
        loader.start()
    loader.wait()
    assert not loaded


def test_a_bad_file_shows_the_readers_message_and_the_window_survives(
    window, open_trace, tmp_path, qtbot, small_trace_file
) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text("{ this is not json")
    window.open_path(str(bad))
    qtbot.waitUntil(lambda: window.error_box is not None, timeout=30000)
    box = window.error_box
    assert isinstance(box, QMessageBox) and box.isVisible()
    assert "broken.json" in box.text() and "\n" not in box.text().strip()
    assert window.trace is None
    box.accept()
    # Still usable: the next open works.
    trace = open_trace(window, small_trace_file)
    assert trace is not None and window.timeline.trace is trace


def test_synthetic_traces_carry_a_visible_banner(window, open_trace, write_trace) -> None:
    open_trace(window, write_trace("scenario.json", synthetic=True))
    assert window.banner.isVisible() and "SYNTHETIC" in window.banner.text()
    assert "[synthetic]" in window.windowTitle()


def test_a_test_backend_trace_says_so_in_banner_and_title(
    window, qtbot, open_trace, small_trace_file
) -> None:
    """The neuron sample was recorded on Explorer's test backend (a PrivateUse1 device on the
    CPU): the viewer names the device as the trace does and says its timings are the CPU's."""
    sample = Path(__file__).resolve().parents[2] / "sample_traces" / "neuron_cnn.pt.trace.json.gz"
    open_trace(window, sample)
    assert window.banner.isVisible()
    assert "TEST BACKEND" in window.banner.text() and "not Trainium" in window.banner.text()
    title = window.windowTitle()
    assert "neuron:0" in title and "[test backend on the CPU]" in title
    window.open_path(str(small_trace_file))  # a real capture: no banner
    qtbot.waitUntil(lambda: Path(window.trace.path).name == small_trace_file.name, timeout=30000)
    assert not window.banner.isVisible()
    assert "test backend" not in window.windowTitle()


def test_drop_a_file_opens_it(window, qtbot, small_trace_file) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(small_trace_file))])
    event = QDropEvent(
        QPointF(50, 50),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    window.dropEvent(event)
    qtbot.waitUntil(lambda: window.trace is not None, timeout=30000)
    assert window.trace.path == str(small_trace_file)


def test_dock_layout_is_remembered(qtbot, settings) -> None:
    first = MainWindow(settings=settings, restore=False)
    qtbot.addWidget(first)
    first.show()
    assert set(first.docks) >= {"details", "findings"}
    first.docks["details"].hide()
    first.close()  # saves the layout
    second = MainWindow(settings=settings, restore=True)
    qtbot.addWidget(second)
    second.show()
    assert not second.docks["details"].isVisible()
    assert second.docks["findings"].isVisible()


def test_every_registered_panel_is_docked(window) -> None:
    from explorer.ui.main_window import PANELS

    assert [name for name, _title, _cls in PANELS] == [
        "operators",
        "source",
        "dependency_graph",
        "memory",
    ]
    for name, title, cls in PANELS:
        assert window.docks[name].widget() is window.panels[name]
        assert isinstance(window.panels[name], cls)
        assert window.docks[name].windowTitle() == title


def test_cli_screenshot_and_errors(tmp_path: Path, small_trace_file: Path) -> None:
    out = tmp_path / "shot.png"
    assert (
        cli_main(["view", str(small_trace_file), "--screenshot", str(out), "--size", "900x600"])
        == 0
    )
    image = QImage(str(out))
    assert (image.width(), image.height()) == (900, 600)
    assert cli_main(["view", str(tmp_path / "missing.json"), "--screenshot", str(out)]) == 2
    assert (
        cli_main(
            ["view", str(small_trace_file), "--screenshot", str(out), "--select", "no-such-op"]
        )
        == 2
    )


def test_a_range_dragged_on_the_axis_goes_to_the_operators_panel(
    window, open_trace, small_trace_file, qtbot
) -> None:
    open_trace(window, small_trace_file)
    operators = window.panels.get("operators")
    assert operators is not None, "the Operators panel is installed in this project"
    window.timeline.range_selected.emit(100_000, 500_000)
    qtbot.waitUntil(lambda: not operators.busy(), timeout=10000)
    assert operators.scope_range() == (100_000, 500_000)


def test_view_without_a_display_says_how_to_get_a_picture(small_trace_file: Path, capsys) -> None:
    # The tests run offscreen, which is exactly "no display" for an interactive window.
    assert cli_main(["view", str(small_trace_file)]) == 2
    err = capsys.readouterr().err
    assert "--screenshot" in err and err.count("\n") == 1


def test_opening_another_file_while_loading_keeps_only_the_last(
    window, qtbot, small_trace_file, write_trace
) -> None:
    first = write_trace("first.json")
    window.open_path(str(first))
    window.open_path(str(small_trace_file))  # replaces the first load
    qtbot.waitUntil(lambda: window.trace is not None, timeout=30000)
    qtbot.waitUntil(lambda: not window.loader.isRunning(), timeout=30000)
    # The bar shows the analyses' progress next; it is gone once they are done.
    qtbot.waitUntil(
        lambda: window.analysis is not None and window.analysis.isFinished(), timeout=60000
    )
    qtbot.wait(50)  # let the first loader's late signals arrive
    assert window.trace.path == str(small_trace_file)
    assert window.error_box is None
    assert not window.progress.isVisible()


def test_explorer_trace_is_short_for_view(tmp_path: Path, small_trace_file: Path) -> None:
    out = tmp_path / "short.png"
    assert cli_main([str(small_trace_file), "--screenshot", str(out)]) == 0
    assert QImage(str(out)).width() == 1600


def test_the_memory_panel_follows_the_timeline_zoom(
    window, open_trace, small_trace_file, qtbot
) -> None:
    open_trace(window, small_trace_file)
    memory = window.panels.get("memory")
    assert memory is not None, "the Memory panel is installed in this project"
    window.timeline.set_visible_range(200_000, 700_000)
    qtbot.waitUntil(lambda: abs(memory.visible_range_ns()[0] - 200_000) < 1_000, timeout=5000)
    assert abs(memory.visible_range_ns()[1] - 700_000) < 1_000


def test_panels_drive_the_timeline(window, open_trace, small_trace_file) -> None:
    """Every docked panel's contract signals reach the timeline: one slice selects and
    reveals it, several are highlighted, a range zooms."""
    import numpy as np

    open_trace(window, small_trace_file)
    assert window.panels
    for panel in window.panels.values():
        panel.slices_selected.emit(np.array([21]))
        assert window.timeline.selected == 21
        assert "ampere_sgemm" in window.details.text()
        panel.slices_selected.emit(np.array([22, 25]))
        assert list(window.timeline.highlights) == [22, 25]
        panel.range_requested.emit(300_000, 400_000)
        assert window.timeline.visible_range() == (300_000, 400_000)


def test_interactive_main_loads_selects_and_quits(small_trace_file: Path, tmp_path: Path) -> None:
    """``main(path, select=...)`` as a user runs it: the window opens, loads in the
    background, selects the event, and the event loop returns when the window closes.
    Runs in its own process: a finished ``app.exec()`` leaves the QApplication unusable
    for the tests after it."""
    import os
    import subprocess
    import sys

    script = f"""
import json
from PyQt6.QtCore import QTimer
from PyQt6.QtWidgets import QApplication
from explorer.ui import app as app_module
from explorer.ui.main_window import MainWindow

app_module.has_display = lambda: True
app_module.application()  # the timer below needs the application to exist
seen = {{}}

def check():
    windows = [w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow)]
    w = windows[0] if windows else None
    if w is None or w.trace is None or w.timeline.selected < 0:
        QTimer.singleShot(50, check)
        return
    seen["title"] = w.windowTitle()
    seen["selected"] = str(w.trace.slices["name"].iat[w.timeline.selected])
    w.close()
    QApplication.instance().quit()

QTimer.singleShot(50, check)
seen["rc"] = app_module.main({str(small_trace_file)!r}, select="cudaDeviceSynchronize")
print(json.dumps(seen))
"""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", XDG_CONFIG_HOME=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["rc"] == 0
    assert seen["selected"] == "cudaDeviceSynchronize"
    assert "small.pt.trace.json" in seen["title"]
    # Closing saved the layout and the recent file in the user's settings (here tmp_path).
    from PyQt6.QtCore import QSettings

    saved = QSettings(str(tmp_path / "Explorer" / "explorer.conf"), QSettings.Format.IniFormat)
    assert saved.value("recent") == [str(small_trace_file)]
    assert saved.value("window_state") is not None


def test_failed_analyses_show_in_one_dialog(window, open_trace, small_trace_file, qtbot) -> None:
    """Two analyses failing: one dialog, one line per analysis, and the Findings panel
    says why it is empty — nothing vanishes silently."""
    open_trace(window, small_trace_file)
    window.analysis_failed("findings", "ValueError: no steps")
    box = window.error_box
    assert box is not None and box.isVisible()
    window.analysis_failed("dependency_graph", "KeyError: 'track'")
    assert window.error_box is box
    assert box.text().splitlines() == [
        "findings failed: ValueError: no steps",
        "dependency graph failed: KeyError: 'track'",
    ]
    assert "Findings failed" in window.findings.text.toPlainText()


def test_analysing_shows_which_analysis_and_how_far_then_a_summary_stays(
    window, open_trace, small_trace_file, qtbot
) -> None:
    """While the analyses run, the status bar and the Findings panel say which one runs and
    how far they are (``Analysing: findings (4 of 5)…``); once done, the status bar keeps a
    summary of the trace (events, steps, findings) that later messages do not erase."""
    from explorer.ui.loader import ANALYSES, LABELS

    seen: list[tuple[str, str]] = []

    def watch(message: str) -> None:
        if message.startswith("Analysing"):
            seen.append((message, window.findings.text.toPlainText()))

    window.statusBar().messageChanged.connect(watch)
    open_trace(window, small_trace_file)
    names = [n for n, _ in ANALYSES]
    assert [m for m, _ in seen] == [
        f"Analysing: {LABELS[n]} ({k + 1} of {len(names)})…" for k, n in enumerate(names)
    ]
    # Until the findings are in, the Findings panel says the same.
    before = [panel for _, panel in seen[: names.index("findings") + 1]]
    assert before == [m for m, _ in seen[: len(before)]]
    assert not window.progress.isVisible()
    trace = window.trace
    steps, found = trace.steps(), trace.findings()
    summary = window.summary.text()
    assert f"{len(trace.slices):,} events" in summary
    assert f"{len(steps)} step" in summary and f"{len(found)} finding" in summary
    window.statusBar().showMessage("something else", 1)
    qtbot.wait(30)
    assert window.summary.isVisible() and window.summary.text() == summary


def test_status_summary_gives_the_reports_step_time_on_a_partial_step(
    window, open_trace, shared_traces
) -> None:
    """The AMD MI250 trace's profiler stopped inside its second step: the report counts one
    whole step (mean 9.29 ms), and the status bar must say the same, not average the
    fragment in (it said "2 steps, mean 4.67 ms")."""
    from explorer.analysis.steps import step_times
    from explorer.units import fmt_ns

    trace = open_trace(
        window, shared_traces / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    )
    times = step_times(trace.data)
    assert len(times) == 1 and len(trace.steps()) == 2
    summary = window.summary.text()
    assert f"1 step, mean {fmt_ns(int(times.mean()))} (+1 partial)" in summary, summary

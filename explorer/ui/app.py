"""Starting the desktop explorer, interactively or headless for a screenshot.

``main(path)`` opens the window and blocks in the Qt event loop. ``main(path,
screenshot="out.png")`` renders offscreen instead (``QT_QPA_PLATFORM=offscreen`` is set
when there is no display): it loads the trace and runs the analyses in this thread, fits the
trace, optionally selects an event, saves the window as a PNG and returns 0. Both return
the process exit status.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from explorer.errors import OutputError, UsageError
from explorer.processes import signals_close
from explorer.readers import input_files
from explorer.safe_write import atomic_write, check_target
from explorer.ui.qt_platform import check_window_platform, has_display, quiet_qt_messages
from explorer.ui.qt_types import present

__all__ = ["application", "has_display", "main", "open_headless", "select_event", "wait_idle"]

_APP: Any = None


def application() -> Any:
    """The QApplication, created once (offscreen when there is no display)."""
    if not has_display():
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PyQt6.QtWidgets import QApplication

    quiet_qt_messages()
    global _APP
    app = QApplication.instance()
    if app is None:
        app = QApplication(sys.argv[:1])
        app.setOrganizationName("Explorer")
        app.setApplicationName("explorer")
        _APP = app  # kept alive here: a collected QApplication takes every widget with it
    return app


def wait_idle(window: Any, timeout_s: float = 20.0) -> None:
    """Process events until the panels' background jobs are done (or the timeout)."""
    from PyQt6.QtCore import QThreadPool
    from PyQt6.QtWidgets import QApplication

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        QApplication.processEvents()
        busy = any(p.busy() for p in window.panels.values())
        if not busy and present(QThreadPool.globalInstance()).activeThreadCount() == 0:
            break
        time.sleep(0.01)
    QApplication.processEvents()


def select_event(window: Any, select: str) -> int:
    """Select an event by id (``"1234"``) or by name (substring, first in time); returns its id."""
    trace = window.trace
    if select.isdigit():
        sid = int(select)
        if not 0 <= sid < len(trace):
            raise UsageError(
                f"--select {select}: the trace has {len(trace)} events (ids 0..{len(trace) - 1})"
            )
    else:
        from explorer.ui.search import search_slices

        hits = search_slices(trace, select)
        if not len(hits):
            raise UsageError(f"--select {select!r}: no event name contains it")
        sid = int(hits[0])
    window.timeline.zoom_to_slices([sid])
    window.timeline.select_slice(sid)
    return sid


def show_finding(window: Any, number: int) -> Any:
    """Open finding ``number`` (1 = the costliest, as ``explorer report`` numbers them): its
    evidence marked and zoomed, its first evidence event selected, its first source line in
    the Source panel. Returns the finding."""
    findings = window.findings.findings
    if not 1 <= number <= len(findings):
        have = f"findings 1..{len(findings)}" if findings else "no findings"
        raise UsageError(
            f"--finding {number}: this trace has {have} (list them with 'explorer report TRACE')"
        )
    window.findings.select(number - 1)
    finding = findings[number - 1]
    if len(window.findings.evidence):
        window.timeline.select_slice(int(window.findings.evidence[0]))
    if finding.source_lines:
        file, line, _ = finding.source_lines[0]
        window.show_source(str(file), int(line))
    return finding


def open_headless(
    path: str,
    size: tuple[int, int] = (1600, 1000),
    select: str | None = None,
    finding: int | None = None,
) -> Any:
    """A window with the trace loaded and analysed in this thread, laid out at ``size``."""
    import explorer
    from explorer.ui.loader import run_analyses_now
    from explorer.ui.main_window import MainWindow

    application()
    from PyQt6.QtCore import QSettings

    # A headless run neither reads nor writes the user's layout and recent files.
    settings = QSettings(
        QSettings.Format.IniFormat, QSettings.Scope.UserScope, "Explorer", "headless"
    )
    window = MainWindow(settings=settings, restore=False, remember=False)
    window.resize(*size)
    window.size_docks()
    window.show()  # laid out before any panel draws, as in an interactive session
    trace = explorer.load(path)
    window.set_trace(trace)
    window.timeline.wait_for_lanes()  # a large trace's timeline is indexed in the background
    if window.analysis is not None:
        window.analysis.cancel()  # headless runs them here, in order
        window.analysis.wait()
    window.analysis = None
    results, errors = run_analyses_now(trace)
    for name, value in results.items():
        window.on_analysis(name, value)
    for name, message in errors.items():  # in the picture (dialog, status) and on stderr
        window.analysis_failed(name, message)
        print(f"explorer view: {name.replace('_', ' ')} failed: {message}", file=sys.stderr)
    window.analyses_done()  # the status bar as an interactive session ends: its summary
    wait_idle(window)
    window.timeline.fit_all()
    if finding is not None:
        show_finding(window, finding)
        wait_idle(window)
    if select:
        select_event(window, select)
    wait_idle(window)
    return window


def save_screenshot(window: Any, screenshot: str, inputs: list[Path], force: bool) -> None:
    """Save ``window`` as a PNG at ``screenshot`` (never over an input), then close it."""
    image = window.grab()

    def save(tmp: Path) -> None:
        if not image.save(str(tmp), "PNG"):
            raise OutputError(screenshot, "could not write the PNG", "check the folder")

    atomic_write(screenshot, save, inputs=inputs, force=force)
    window.close()


def windowed_application(what: str) -> Any:
    """The QApplication for an on-screen window; without a display, one line saying what to
    do instead (``what`` is how the argument is named: TRACE or RUN_DIR)."""
    if not has_display():
        raise UsageError(
            "no display to open a window on (DISPLAY is not set): save a picture with "
            f"'explorer view {what} --screenshot out.png', or read 'explorer report {what}'"
        )
    from PyQt6.QtWidgets import QApplication

    if QApplication.instance() is None:
        check_window_platform()  # one line naming the missing packages, not Qt's abort
    return application()


def _python_moment() -> None:
    """A timer's slot that does nothing: Python runs, and with it any signal handler due."""


def exec_until_closed(app: Any) -> int:
    """Run ``app``'s event loop until its windows are closed — or until Ctrl-C or SIGTERM
    reaches the process, which close them as the close button does (settings saved,
    background jobs cancelled) and then end it as those signals ask: Ctrl-C as
    :class:`KeyboardInterrupt` (``explorer: interrupted``, status 130), SIGTERM by the
    signal itself. While Qt's loop runs, Python cannot run a signal handler: a timer hands
    it control five times a second (before, Ctrl-C in the terminal did nothing)."""
    from PyQt6.QtCore import QTimer

    def close_now() -> None:
        app.closeAllWindows()
        app.quit()

    def close() -> None:
        # Python runs a signal handler between any two bytecodes of the main thread — in
        # the middle of a slot too (the window's set_trace, between showing a trace and
        # starting its analyses: the close then waited for nothing, the analyses started
        # after it, and their thread still running at exit aborted the process). The
        # close is posted instead, to run between two events.
        QTimer.singleShot(0, close_now)

    with signals_close(close):
        tick = QTimer(app)  # the application's: deleted with it, never by Python mid-teardown
        tick.timeout.connect(_python_moment)
        tick.start(200)
        try:
            status = int(app.exec())
        finally:
            tick.stop()
    return status


def main(
    path: str | None = None,
    screenshot: str | None = None,
    size: tuple[int, int] = (1600, 1000),
    select: str | None = None,
    force: bool = False,
    finding: int | None = None,
) -> int:
    """Open the explorer on ``path`` (or empty), or save a screenshot of it and return
    (through :func:`explorer.safe_write.atomic_write`: never over the trace, nor over an
    existing file unless ``force``)."""
    if screenshot is not None:
        if path is None:
            raise UsageError("--screenshot needs a trace to show")
        inputs = input_files(path)
        check_target(screenshot, inputs=inputs, force=force)  # before the (slow) load
        window = open_headless(path, size, select, finding)
        for w in window.trace.metadata.get("warnings", []) or []:  # no status bar to read
            print(f"explorer: warning: {w}", file=sys.stderr)
        save_screenshot(window, screenshot, inputs, force)
        return 0
    app = windowed_application("TRACE")
    from explorer.ui.main_window import MainWindow

    window = MainWindow()
    window.show()
    if path:
        window.open_path(path)
        assert window.loader is not None
        window.loader.finished.connect(lambda: _when_loaded(window, select, finding))
    return exec_until_closed(app)


def _when_loaded(window: Any, select: str | None, finding: int | None) -> None:
    """Apply ``--select`` now and ``--finding`` once the findings are in; a bad value is
    shown in the window's error dialog."""
    if window.trace is None:
        return
    try:
        if select:
            select_event(window, select)
    except UsageError as exc:
        window.show_error(str(exc))
    if finding is None or window.analysis is None:
        return

    def on_result(name: str, _value: Any) -> None:
        if name == "findings":
            try:
                show_finding(window, finding)
            except UsageError as exc:
                window.show_error(str(exc))

    window.analysis.result.connect(on_result)

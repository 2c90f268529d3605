"""Starting the job overview, interactively or headless for a screenshot.

``main(run)`` opens :class:`~explorer.ui.job_window.JobWindow` and analyses the job in the
background; ``main(run, screenshot="out.png")`` analyses it in this thread, shows the
straggler's timeline (else rank 0's), saves the window as a PNG and returns 0.
"""

from __future__ import annotations

import time
from typing import Any

from explorer.job import job_document
from explorer.job.run_dir import job_files
from explorer.readers import input_files
from explorer.safe_write import check_target
from explorer.ui.app import (
    application,
    exec_until_closed,
    save_screenshot,
    windowed_application,
)
from explorer.ui.job_model import step_categories


def open_headless(run: str, size: tuple[int, int] = (1600, 1000)) -> Any:
    """A job window with ``run`` analysed in this thread and one rank's timeline shown."""
    application()
    from PyQt6.QtCore import QSettings
    from PyQt6.QtWidgets import QApplication

    from explorer.ui.job_window import JobWindow

    settings = QSettings(
        QSettings.Format.IniFormat, QSettings.Scope.UserScope, "Explorer", "headless"
    )
    window = JobWindow(settings=settings)
    window.resize(*size)
    window.show()
    doc = job_document(run)
    window.set_document(doc, step_categories(doc))
    straggler = doc["straggler"]
    rank = int(straggler["rank"]) if straggler is not None else int(doc["ranks"][0]["rank"])
    window.heatmap.selectRow(window.heatmap.row_of(rank))  # starts reading its trace
    if window.rank_loader is not None:
        window.rank_loader.wait()
    deadline = time.monotonic() + 30
    while rank not in window.stack.views and time.monotonic() < deadline:
        QApplication.processEvents()  # the loader's result arrives as a queued signal
        time.sleep(0.01)
    window.stack.set_aligned_range(*window.stack.aligned_range())
    QApplication.processEvents()
    return window


def main(
    run: str,
    screenshot: str | None = None,
    size: tuple[int, int] = (1600, 1000),
    force: bool = False,
) -> int:
    """Open the job overview on ``run``, or save a screenshot of it and return."""
    if screenshot is not None:
        inputs = input_files(run) + [f for _, f in job_files(run)]
        check_target(screenshot, inputs=inputs, force=force)  # before the (slow) analysis
        window = open_headless(run, size)
        save_screenshot(window, screenshot, inputs, force)
        return 0
    app = windowed_application("RUN_DIR")
    from explorer.ui.job_window import JobWindow

    window = JobWindow()
    window.show()
    window.open_job(run)
    return exec_until_closed(app)

"""The progress bar and Cancel button a window shows in its status bar while it loads or
analyses in the background; both hidden until work starts."""

from __future__ import annotations

from collections.abc import Callable

from PyQt6.QtWidgets import QMainWindow, QProgressBar, QPushButton


def add_progress(
    window: QMainWindow, on_cancel: Callable[[], object], width: int
) -> tuple[QProgressBar, QPushButton]:
    """Add a hidden progress bar ``width`` pixels wide and a hidden Cancel button calling
    ``on_cancel`` to ``window``'s status bar."""
    progress = QProgressBar(window)
    progress.setMaximumWidth(width)
    progress.hide()
    cancel = QPushButton("Cancel", window)
    cancel.clicked.connect(on_cancel)
    cancel.hide()
    bar = window.statusBar()
    assert bar is not None  # a QMainWindow makes its status bar on first request
    bar.addPermanentWidget(progress)
    bar.addPermanentWidget(cancel)
    return progress, cancel

"""The one way a window shows an error: a window-modal warning that does not block the
event loop (``open``, not ``exec``), so a test or a busy analysis thread carries on."""

from __future__ import annotations

from PyQt6.QtCore import Qt
from PyQt6.QtWidgets import QMessageBox, QWidget


def open_warning(parent: QWidget, message: str) -> QMessageBox:
    """Show ``message`` over ``parent``; keep the returned box (tests read its text)."""
    box = QMessageBox(
        QMessageBox.Icon.Warning, "Explorer", message, QMessageBox.StandardButton.Ok, parent
    )
    box.setWindowModality(Qt.WindowModality.WindowModal)
    box.open()
    return box

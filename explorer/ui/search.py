"""The search box: find slices by name (substring or regular expression), count the hits,
step through them in time order.

Matching runs once per *distinct* name and maps through the name codes, so searching a
million slices with a few thousand distinct names is a few milliseconds.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from PyQt6.QtCore import Qt, pyqtSignal
from PyQt6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QLineEdit, QToolButton, QWidget

from explorer.errors import UsageError
from explorer.trace.columns import category_matches
from explorer.trace.model import TraceData
from explorer.trace_api import Trace, model_of


def search_slices(trace: TraceData, pattern: str, regex: bool = False) -> np.ndarray:
    """Ids of slices whose name matches, ordered by start time. Substring search ignores
    case; a regex that does not compile raises :class:`~explorer.errors.UsageError`."""
    if not pattern:
        return np.zeros(0, np.int64)
    names = trace.slices["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names.astype(str).astype("category")
    if regex:
        try:
            rx = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise UsageError(f"bad regular expression {pattern!r}: {exc}") from exc
    else:
        rx = re.compile(re.escape(pattern), re.IGNORECASE)
    ids = np.flatnonzero(category_matches(names, rx))
    ts = trace.slices["ts"].to_numpy()[ids]
    return ids[np.argsort(ts, kind="stable")].astype(np.int64)


class SearchBar(QWidget):
    """Search field, regex toggle, hit count and previous/next. Enter goes to the next hit,
    Shift+Enter to the previous. Emits ``results_changed(ids)`` and ``current_changed(id)``."""

    results_changed = pyqtSignal(object)
    current_changed = pyqtSignal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.trace: Trace | TraceData | None = None  # as given: the window's Trace, or a model
        self.results = np.zeros(0, np.int64)
        self.index = -1
        self.field = QLineEdit(self)
        self.field.setPlaceholderText("Search events by name (Ctrl+F)")
        self.field.setClearButtonEnabled(True)
        self.field.returnPressed.connect(self._enter)
        self.field.textChanged.connect(lambda _: self.run())
        self.regex = QCheckBox("regex", self)
        self.regex.toggled.connect(lambda _: self.run())
        self.count = QLabel("", self)
        self.count.setMinimumWidth(110)
        self.prev_button = QToolButton(self)
        self.prev_button.setText("◀")
        self.prev_button.setToolTip("Previous match (Shift+Enter)")
        self.prev_button.clicked.connect(self.previous)
        self.next_button = QToolButton(self)
        self.next_button.setText("▶")
        self.next_button.setToolTip("Next match (Enter)")
        self.next_button.clicked.connect(self.next)
        row = QHBoxLayout(self)
        row.setContentsMargins(4, 2, 4, 2)
        row.addWidget(self.field, 1)
        row.addWidget(self.regex)
        row.addWidget(self.count)
        row.addWidget(self.prev_button)
        row.addWidget(self.next_button)

    def set_trace(self, trace: Trace | TraceData | None) -> None:
        self.trace = trace
        self.run()

    def search(self, text: str, regex: bool = False) -> int:
        """Set the query and run it; returns the number of hits."""
        self.regex.setChecked(regex)
        self.field.setText(text)
        self.run()
        return len(self.results)

    def run(self) -> None:
        text = self.field.text()
        self.index = -1
        if self.trace is None or not text:
            self.results = np.zeros(0, np.int64)
            self.count.setText("")
        else:
            try:
                self.results = search_slices(model_of(self.trace), text, self.regex.isChecked())
                self.count.setText(f"{len(self.results):,} matches")
                self.count.setStyleSheet("")
            except UsageError:
                self.results = np.zeros(0, np.int64)
                self.count.setText("bad regex")
                self.count.setStyleSheet("color: #d9453d")
        self.results_changed.emit(self.results)

    def next(self) -> None:
        self._go(+1)

    def previous(self) -> None:
        self._go(-1)

    def _go(self, step: int) -> None:
        if not len(self.results):
            return
        self.index = (self.index + step) % len(self.results)
        self.count.setText(f"{self.index + 1:,} of {len(self.results):,}")
        self.current_changed.emit(int(self.results[self.index]))

    def _enter(self) -> None:
        from PyQt6.QtWidgets import QApplication

        if QApplication.keyboardModifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.previous()
        else:
            self.next()

"""Source panel: the user's source file behind the selection, with a heat map per line.

The question Explorer answers is "which line of my code is responsible?", so this panel
shows that line in its file. The gutter colours each line by the time attributed to it
(host, device or stall time from ``by_source()``, picked in a combo box) and marks CPU
fallbacks (``F``) and synchronisations (``S``). Clicking a line selects all the events
attributed to it on the timeline.

Traces are often read on another machine than the one that ran the job, so paths in the
trace may not exist here. The panel says so and lets the user set a *source root*
(remembered in ``QSettings``): a missing ``/home/ci/job/src/model/train.py`` is looked up as
``ROOT/home/ci/job/src/model/train.py``, ``ROOT/ci/job/...``, … ``ROOT/train.py``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from PyQt6.QtCore import QEvent, QRect, QSettings, QSize, Qt, pyqtSlot
from PyQt6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QHelpEvent,
    QPainter,
    QTextCursor,
    QTextFormat,
)
from PyQt6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTextEdit,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from explorer.trace_api import Trace
from explorer.ui.panels import TracePanel
from explorer.ui.qt_types import present
from explorer.units import fmt_ns

SETTINGS_KEY = "source_panel/root"

#: Heat metrics offered in the combo box: label → ``by_source`` column.
METRICS: dict[str, str] = {
    "host time": "host_ns",
    "device time": "device_ns",
    "stall time": "stall_ns",
}
_HEAT = QColor("#d9453d")
_HIGHLIGHT = QColor("#fff2a8")


def resolve_source(file: str, root: str | None, trace_dir: str | None = None) -> Path | None:
    """Where ``file`` (as written in the trace) is on this machine, or None.

    In this order: beside the trace (the code a user keeps with the trace, or the copy
    ``explorer demo`` writes there — found however the trace recorded its path), then the
    path as recorded, then under the source ``root``; beside the trace and under the root,
    leading components are dropped one at a time until a file is found. Relative paths
    last try this process's ``sys.path``.
    """
    if not file:
        return None
    path = Path(file)
    parts = [p for p in path.parts if p not in (path.anchor, "")]

    def under(base: str | None) -> Path | None:
        if not base:
            return None
        for k in range(len(parts)):
            candidate = Path(base, *parts[k:])
            if candidate.is_file():
                return candidate
        return None

    found = under(trace_dir)
    if found is not None:
        return found
    if path.is_file():
        return path
    found = under(root)
    if found is not None:
        return found
    if not path.is_absolute():
        # torch.profiler writes user files relative to the sys.path entry they were imported
        # from; when Explorer runs in that same environment (``explorer demo``, a notebook),
        # those entries find them. Joined as is: stripping here would match strangers'
        # files of the same name in site-packages.
        for entry in sys.path:
            candidate = Path(entry or ".", path)
            if candidate.is_file():
                return candidate
    return None


@dataclass
class SourceData:
    """What the panel reads for one trace, computed off the UI thread: ``sources`` is
    ``slice_sources()`` (file, line, function per slice id; device ops through the call that
    launched them) and ``lines`` is ``by_source()`` (one row per user line)."""

    sources: pd.DataFrame
    lines: pd.DataFrame


class _Gutter(QWidget):
    """Line numbers, the heat bar and fallback/sync marks, painted beside the text."""

    def __init__(self, editor: SourceView) -> None:
        super().__init__(editor)
        self.editor = editor

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt API
        return QSize(self.editor.gutter_width(), 0)

    def paintEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        self.editor.paint_gutter(self, event)

    def event(self, event: QEvent | None) -> bool:
        if isinstance(event, QHelpEvent) and event.type() == QEvent.Type.ToolTip:
            block = self.editor.cursorForPosition(event.pos()).block()
            text = self.editor.line_tooltip(block.blockNumber() + 1)
            if text:
                QToolTip.showText(event.globalPos(), text, self)
            else:
                QToolTip.hideText()
            return True
        return super().event(event)


class SourceView(QPlainTextEdit):
    """A read-only code view with a gutter heat map (the Qt "code editor" pattern)."""

    HEAT_WIDTH = 10
    MARK_WIDTH = 30

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.heat: dict[int, float] = {}  # line → 0..1
        self.marks: dict[int, str] = {}  # line → "F2 S1"
        self.times: dict[int, str] = {}  # line → "12.5 ms" (the heat metric, in words)
        self.tips: dict[int, str] = {}
        self.gutter = _Gutter(self)
        self.blockCountChanged.connect(self._update_margins)
        self.updateRequest.connect(self._scrolled)
        self._update_margins()

    def gutter_width(self) -> int:
        digits = len(str(max(1, self.blockCount())))
        number = self.fontMetrics().horizontalAdvance("9") * (digits + 1)
        return number + self.HEAT_WIDTH + self.time_width() + self.MARK_WIDTH + 8

    def time_width(self) -> int:
        return self.fontMetrics().horizontalAdvance("999 µs ") if self.times else 0

    def _update_margins(self, *_: Any) -> None:
        self.setViewportMargins(self.gutter_width(), 0, 0, 0)

    def _scrolled(self, rect: QRect, dy: int) -> None:
        if dy:
            self.gutter.scroll(0, dy)
        else:
            self.gutter.update(0, rect.y(), self.gutter.width(), rect.height())

    def resizeEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        if event is not None:
            super().resizeEvent(event)
        cr = self.contentsRect()
        self.gutter.setGeometry(QRect(cr.left(), cr.top(), self.gutter_width(), cr.height()))

    def paint_gutter(self, gutter: QWidget, event: Any) -> None:
        painter = QPainter(gutter)
        painter.fillRect(event.rect(), QColor("#f4f4f4"))
        block = self.firstVisibleBlock()
        top = round(self.blockBoundingGeometry(block).translated(self.contentOffset()).top())
        height = round(self.blockBoundingRect(block).height())
        time_width = self.time_width()
        number_width = gutter.width() - self.HEAT_WIDTH - time_width - self.MARK_WIDTH - 8
        time_x = number_width + self.HEAT_WIDTH + 5
        mark_x = time_x + time_width + 2
        small = QFont(self.font())
        small.setPointSizeF(max(6.0, small.pointSizeF() * 0.8))
        # The small-text columns right of the heat bar: the line's time, its finding marks.
        text_columns = (
            (self.times, time_x, time_width, QColor("#8a2a24"), Qt.AlignmentFlag.AlignRight),
            (self.marks, mark_x, self.MARK_WIDTH, QColor("#c2185b"), Qt.AlignmentFlag.AlignLeft),
        )
        while block.isValid() and top <= event.rect().bottom():
            line = block.blockNumber() + 1
            if block.isVisible() and top + height >= event.rect().top():
                painter.setPen(QColor("#888"))
                painter.setFont(self.font())
                painter.drawText(
                    0, top, number_width, height, Qt.AlignmentFlag.AlignRight, str(line)
                )
                heat = self.heat.get(line, 0.0)
                if heat > 0:
                    color = QColor(_HEAT)
                    color.setAlphaF(0.15 + 0.85 * min(1.0, heat))
                    painter.fillRect(number_width + 3, top, self.HEAT_WIDTH, height, color)
                painter.setFont(small)
                for texts, x, width, colour, align in text_columns:
                    text = texts.get(line)
                    if text:
                        painter.setPen(colour)
                        painter.drawText(
                            x, top, width, height, align | Qt.AlignmentFlag.AlignVCenter, text
                        )
            block = block.next()
            top += height
            height = round(self.blockBoundingRect(block).height())
        painter.end()

    def line_tooltip(self, line: int) -> str:
        return self.tips.get(line, "")

    def go_to_line(self, line: int) -> None:
        """Put the cursor on ``line`` (1-based), centre it and highlight it."""
        block = present(self.document()).findBlockByNumber(max(0, line - 1))
        cursor = QTextCursor(block)
        self.setTextCursor(cursor)
        self.centerCursor()
        selection = QTextEdit.ExtraSelection()
        selection.format.setBackground(_HIGHLIGHT)
        selection.format.setProperty(QTextFormat.Property.FullWidthSelection, True)
        selection.cursor = cursor
        self.setExtraSelections([selection])


class SourcePanel(TracePanel):
    """The source line behind the selection, its file, and the heat of every line in it."""

    READS_WINDOW = True

    def __init__(self, parent: QWidget | None = None, settings: QSettings | None = None) -> None:
        super().__init__(parent)
        self.settings = settings if settings is not None else QSettings("Explorer", "Explorer")
        self.data: SourceData | None = None
        self.current_file = ""  # as written in the trace
        self.current_path: Path | None = None  # where it was found here
        self.current_line = -1
        self._pending: tuple[str, int] | int | None = None
        self._moving = False

        self.location = QLabel("No trace")
        self.location.setWordWrap(True)
        self.location.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.root_edit = QLineEdit(str(self.settings.value(SETTINGS_KEY, "") or ""))
        self.root_edit.setPlaceholderText(
            "Source root: where this trace's files are on this machine"
        )
        self.root_edit.editingFinished.connect(lambda: self.set_source_root(self.root_edit.text()))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse_root)
        self.heat_metric = QComboBox()
        self.heat_metric.addItems(list(METRICS))
        self.heat_metric.currentIndexChanged.connect(self._refresh_heat)
        self.view = SourceView()
        self.view.cursorPositionChanged.connect(self._line_clicked)

        root_bar = QHBoxLayout()
        root_bar.addWidget(QLabel("Source root:"))
        root_bar.addWidget(self.root_edit, 1)
        root_bar.addWidget(browse)
        root_bar.addWidget(QLabel("Heat:"))
        root_bar.addWidget(self.heat_metric)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.location)
        layout.addLayout(root_bar)
        layout.addWidget(self.view, 1)

    # -- contract ----------------------------------------------------------------------------
    def set_trace(self, trace: Trace | None) -> None:
        super().set_trace(trace)
        self.data = None
        self._show_text("")
        self.current_file, self.current_path, self.current_line = "", None, -1
        if trace is None:
            self.location.setText("No trace")
            return
        self.location.setText("Attributing events to source lines…")
        subject = present(self.subject, "the trace").data  # whole, or the steps that fit

        def work() -> SourceData:
            from explorer.analysis.attribution import slice_sources
            from explorer.analysis.by_source import by_source

            return SourceData(slice_sources(subject), by_source(subject))

        self.run_in_background(work, self._data_ready, self._failed)

    def show_status(self, text: str) -> None:
        self.location.setText(text)

    @pyqtSlot(int)
    def on_selection(self, slice_id: int) -> None:
        """Show the user source line of the selected slice."""
        if self.trace is None:
            return
        if self.data is None:
            self._pending = int(slice_id)
            return
        sources = self.data.sources
        known = 0 <= slice_id < len(self.trace.slices)
        row = self.subject_row(slice_id) if known else -1
        if known and row < 0:  # outside the steps that fit in memory
            self.location.setText(self.outside_text(slice_id))
            return
        if not 0 <= row < len(sources) or sources["file"].iat[row] == "":
            name = (
                self.trace.slices["name"].iat[slice_id]
                if slice_id < len(self.trace.slices)
                else "?"
            )
            self.location.setText(f"No source line is known for “{name}”.")
            return
        self.show_location(str(sources["file"].iat[row]), int(sources["line"].iat[row]))

    def set_source_root(self, root: str) -> None:
        """Resolve missing files against ``root`` from now on (and remember it)."""
        root = root.strip()
        self.settings.setValue(SETTINGS_KEY, root)
        if self.root_edit.text() != root:
            self.root_edit.setText(root)
        if self.current_file:
            self.show_location(self.current_file, self.current_line)

    def source_root(self) -> str:
        return self.root_edit.text().strip()

    # -- showing a file ----------------------------------------------------------------------
    def show_location(self, file: str, line: int) -> bool:
        """Open ``file`` (as named in the trace) at ``line``; False when it is not found here."""
        if self.data is None:
            self._pending = (file, line)
            return False
        self.current_file, self.current_line = file, int(line)
        trace_dir = (
            str(Path(self.trace.path).parent)
            if self.trace is not None and self.trace.path
            else None
        )
        path = resolve_source(file, self.source_root(), trace_dir)
        if path is None:
            self.current_path = None
            self._show_text("")
            self.location.setText(
                f"{file}:{line} is not on this machine. Set the source root to the folder that "
                "holds your code (leading parts of the path are dropped until the file is found)."
            )
            return False
        if path != self.current_path:
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                self.current_path = None
                self._show_text("")
                self.location.setText(f"Cannot read {path}: {exc.strerror or exc}")
                return False
            self.current_path = path
            self._show_text(text)
        self._refresh_heat()
        self._moving = True
        try:
            self.view.go_to_line(int(line))
        finally:
            self._moving = False
        self.location.setText(self._describe(file, int(line), path))
        return True

    def _show_text(self, text: str) -> None:
        self._moving = True
        try:
            self.view.setPlainText(text)
            self.view.setExtraSelections([])
        finally:
            self._moving = False

    def _describe(self, file: str, line: int, path: Path) -> str:
        where = f"{path}:{line}" if str(path) == file else f"{file}:{line} (found at {path})"
        row = self._line_row(file, line)
        if row is None:
            return where
        parts = [f"{label} {fmt_ns(row[col])}" for label, col in METRICS.items() if row[col]]
        counts = [
            f"{int(row[c])} {c.split('_')[0]}" for c in ("fallback_count", "sync_count") if row[c]
        ]
        return " · ".join([where, *parts, *counts])

    def _line_row(self, file: str, line: int) -> pd.Series | None:
        if self.data is None:
            return None
        lines = self.data.lines
        hit = lines[(lines["file"] == file) & (lines["line"] == line)]
        return None if hit.empty else hit.iloc[0]

    def _refresh_heat(self, *_: Any) -> None:
        view = self.view
        view.heat, view.marks, view.tips, view.times = {}, {}, {}, {}
        if self.data is not None and self.current_file:
            lines = self.data.lines
            mine = lines[lines["file"] == self.current_file]
            column = METRICS[self.heat_metric.currentText()]
            values = mine[column].to_numpy(np.float64)
            top = values.max() if len(values) else 0.0
            for row, value in zip(mine.itertuples(index=False), values, strict=True):  # per line
                line = int(row.line)
                if top > 0 and value > 0:
                    view.heat[line] = float(value / top)
                    view.times[line] = fmt_ns(value)
                mark = " ".join(
                    f"{tag}{int(n)}"
                    for tag, n in (("F", row.fallback_count), ("S", row.sync_count))
                    if n
                )
                if mark:
                    view.marks[line] = mark
                view.tips[line] = (
                    f"host {fmt_ns(row.host_ns)} · device {fmt_ns(row.device_ns)} · "
                    f"stall {fmt_ns(row.stall_ns)} · {int(row.count)} events"
                    + (f" · {int(row.fallback_count)} fallbacks" if row.fallback_count else "")
                    + (f" · {int(row.sync_count)} syncs" if row.sync_count else "")
                )
        view._update_margins()
        view.resizeEvent(None)
        view.gutter.update()

    # -- interaction -------------------------------------------------------------------------
    def slices_at(self, file: str, line: int) -> np.ndarray:
        """Ids (the whole trace's) of the slices attributed to ``file:line``."""
        if self.data is None:
            return np.zeros(0, np.int64)
        sources = self.data.sources
        mask = sources["file"].eq(file).to_numpy() & (sources["line"].to_numpy() == line)
        return self.whole_ids(np.flatnonzero(mask))

    def _line_clicked(self) -> None:
        if self._moving or not self.current_file or self.current_path is None:
            return
        line = self.view.textCursor().blockNumber() + 1
        self.current_line = line
        ids = self.slices_at(self.current_file, line)
        self.location.setText(self._describe(self.current_file, line, self.current_path))
        if len(ids):
            self.slices_selected.emit(ids)

    def _browse_root(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Source root", self.source_root())
        if folder:
            self.set_source_root(folder)

    def _data_ready(self, data: SourceData) -> None:
        self.data = data
        known = int(data.sources["file"].ne("").sum())
        self.location.setText(
            f"{known:,} of {len(data.sources):,} events"
            + ("" if self._window() is None else f" in {self.scope_label().lower()}")
            + " have a source line; select one to see its file."
            if known
            else "This trace has no Python stacks: record with with_stack=True (or explorer.collect) "
            "to see source lines."
        )
        pending, self._pending = self._pending, None
        if isinstance(pending, int):
            self.on_selection(pending)
        elif pending is not None:
            self.show_location(*pending)
        self.updated.emit()

    def _failed(self, message: str) -> None:
        self.location.setText(f"Could not attribute source lines: {message}")
        self.updated.emit()


__all__ = ["SourcePanel", "SourceView", "resolve_source"]

"""The Findings panel: what costs time, ranked, and what to do about it.

Selecting a finding asks the timeline to mark its evidence and zoom to it
(``evidence_selected`` with the evidence ids, or ``range_requested`` when a finding has time
ranges but no events), and shows its explanation, recommendation and source lines; a source
line opens in the Source panel (``source_requested``). *Previous* / *Next* (``[`` / ``]``)
step through the evidence in time order, one event at a time (``evidence_step``).
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np
from PyQt6.QtCore import Qt, QUrl, pyqtSignal, pyqtSlot
from PyQt6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from explorer.report.sections import step_range
from explorer.trace_api import Trace
from explorer.ui.qt_types import present
from explorer.units import fmt_ns

_COLUMNS = ("#", "finding", "time lost", "share", "steps")


class FindingsPanel(QWidget):
    """A ranked table of findings over the selected finding's explanation."""

    slices_selected = pyqtSignal(object)
    range_requested = pyqtSignal(int, int)
    finding_selected = pyqtSignal(object)
    evidence_selected = pyqtSignal(object)
    evidence_step = pyqtSignal(int)
    source_requested = pyqtSignal(str, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.trace: Trace | None = None
        self.findings: list[Any] = []
        self.evidence = np.zeros(0, np.int64)  # the selected finding's, in time order
        self.evidence_index = -1
        self.table = QTableWidget(0, len(_COLUMNS), self)
        self.table.setHorizontalHeaderLabels(list(_COLUMNS))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        present(self.table.verticalHeader()).setVisible(False)
        header = present(self.table.horizontalHeader())
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        for c in (0, 2, 3, 4):
            header.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.text = QTextBrowser(self)
        self.text.setOpenLinks(False)
        self.text.anchorClicked.connect(self._link)
        self.prev_button = QPushButton("◀ Previous", self)
        self.next_button = QPushButton("Next ▶", self)
        self.prev_button.setShortcut("[")
        self.next_button.setShortcut("]")
        self.prev_button.setToolTip("The finding's previous evidence event ([)")
        self.next_button.setToolTip("The finding's next evidence event (])")
        self.prev_button.clicked.connect(lambda: self.step_evidence(-1))
        self.next_button.clicked.connect(lambda: self.step_evidence(1))
        self.evidence_label = QLabel("", self)
        steps = QWidget(self)
        row = QHBoxLayout(steps)
        row.setContentsMargins(4, 2, 4, 2)
        row.addWidget(QLabel("Evidence:", self))
        row.addWidget(self.prev_button)
        row.addWidget(self.next_button)
        row.addWidget(self.evidence_label, 1)
        below = QWidget(self)
        below_box = QVBoxLayout(below)
        below_box.setContentsMargins(0, 0, 0, 0)
        below_box.setSpacing(0)
        below_box.addWidget(steps)
        below_box.addWidget(self.text)
        split = QSplitter(Qt.Orientation.Vertical, self)
        split.addWidget(self.table)
        split.addWidget(below)
        split.setSizes([160, 240])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)
        self.note = QLabel("", self)  # which steps the findings cover, under a memory limit
        self.note.setObjectName("findings_note")
        self.note.setStyleSheet("color:#8a5300; padding:2px 4px")
        self.note.setWordWrap(True)
        self.note.hide()
        layout.insertWidget(0, self.note)
        self.set_findings([])

    def set_note(self, text: str) -> None:
        """One line above the findings (which steps they cover); "" hides it."""
        self.note.setText(text)
        self.note.setVisible(bool(text))

    def set_trace(self, trace: Trace) -> None:
        """A new trace: the findings arrive later from the analysis worker."""
        self.trace = trace
        self.set_note("")
        self.set_findings([], message="Analysing…" if trace is not None else "")

    def show_progress(self, text: str) -> None:
        """While the findings are computed: which analysis runs, how far (``Analysing:
        steps (2 of 5)…``)."""
        if not self.findings:
            self.text.setHtml(f"<p style='color:#5c6670'>{html.escape(text)}</p>")

    def set_findings(self, findings: list[Any], message: str = "") -> None:
        """Show ranked findings (already ranked by time lost)."""
        self.findings = list(findings)
        self._set_evidence(np.zeros(0, np.int64))
        self.table.setRowCount(len(self.findings))
        for r, f in enumerate(self.findings):
            cells = (
                str(r + 1),
                f.title,
                fmt_ns(int(f.time_lost_ns)),
                f"{float(f.share) * 100:.1f}%",
                _steps_text(f.steps),
            )
            for c, value in enumerate(cells):
                item = QTableWidgetItem(value)
                if c in (0, 2, 3):
                    item.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                item.setToolTip(f.title if c == 1 else value)
                self.table.setItem(r, c, item)
        if self.findings:
            self.text.setHtml("<p style='color:#5c6670'>Select a finding.</p>")
        else:
            empty = message or (
                "No findings: nothing here costs notable time." if self.trace is not None else ""
            )
            self.text.setHtml(f"<p style='color:#5c6670'>{html.escape(empty)}</p>")

    def show_error(self, message: str) -> None:
        self.text.setHtml(f"<p style='color:#d9453d'>Findings failed: {html.escape(message)}</p>")

    def select(self, row: int) -> None:
        """Select the finding in ``row`` (as a click would)."""
        self.table.selectRow(row)

    @pyqtSlot(int)
    def on_selection(self, slice_id: int) -> None:
        """Findings do not follow the timeline's selection."""

    @pyqtSlot(int, int)
    def on_range(self, start_ns: int, end_ns: int) -> None:
        """Findings are for the whole trace."""

    def _selection_changed(self) -> None:
        rows = present(self.table.selectionModel()).selectedRows()
        if not rows:
            return
        f = self.findings[rows[0].row()]
        self.text.setHtml(_finding_html(f))
        self.finding_selected.emit(f)
        evidence = np.asarray(f.evidence, dtype=np.int64)
        if self.trace is not None and len(evidence):
            evidence = evidence[(evidence >= 0) & (evidence < len(self.trace.slices))]
            ts = self.trace.slices["ts"].to_numpy()[evidence]
            evidence = evidence[np.argsort(ts, kind="stable")]
        self._set_evidence(evidence)
        if f.source_lines:  # its first line in the Source panel, as --finding N shows it
            path, line, _ = f.source_lines[0]
            self.source_requested.emit(str(path), int(line))
        if len(evidence):
            self.evidence_selected.emit(evidence)
        elif f.ranges:
            lo = min(int(a) for a, _ in f.ranges)
            hi = max(int(b) for _, b in f.ranges)
            self.range_requested.emit(lo, hi)

    def step_evidence(self, delta: int) -> None:
        """Go to the previous (``-1``) or next (``+1``) evidence event, wrapping around."""
        if not len(self.evidence):
            return
        if self.evidence_index < 0:
            self.evidence_index = 0 if delta > 0 else len(self.evidence) - 1
        else:
            self.evidence_index = (self.evidence_index + delta) % len(self.evidence)
        self._show_evidence_position()
        self.evidence_step.emit(int(self.evidence[self.evidence_index]))

    def _set_evidence(self, evidence: np.ndarray) -> None:
        self.evidence = evidence
        self.evidence_index = -1
        self._show_evidence_position()

    def _show_evidence_position(self) -> None:
        n = len(self.evidence)
        self.prev_button.setEnabled(n > 0)
        self.next_button.setEnabled(n > 0)
        if n == 0:
            self.evidence_label.setText("")
        elif self.evidence_index < 0:
            self.evidence_label.setText(f"{n:,} events, all shown")
        else:
            self.evidence_label.setText(f"{self.evidence_index + 1:,} of {n:,}")

    def _link(self, url: QUrl) -> None:
        text = url.toString()
        if text.startswith("source:"):
            _, line, path = text.split(":", 2)
            self.source_requested.emit(path, int(line))


def _steps_text(steps: list[int]) -> str:
    """``[0, 1, ..., 7]`` → ``"0-7"`` (the report's step ranges), ``[]`` → ``""``."""
    return step_range(sorted(int(s) for s in steps)) if steps else ""


def _finding_html(f: Any) -> str:
    esc = html.escape
    out = [
        f"<h3 style='margin:2px 0'>{esc(f.title)}</h3>",
        f"<p><b>{esc(fmt_ns(int(f.time_lost_ns)))}</b> lost "
        f"({float(f.share) * 100:.1f}% of step time)"
        + (f" on {esc(str(f.device))}" if f.device else "")
        + (
            f" · {'step' if len(f.steps) == 1 else 'steps'} {esc(_steps_text(f.steps))}"
            if f.steps
            else ""
        )
        + f" · {len(f.evidence):,} events</p>",
    ]
    if f.explanation:
        out.append(f"<p><b>Why</b>: {esc(f.explanation)}</p>")
    if f.recommendation:
        out.append(f"<p><b>What to do</b>: {esc(f.recommendation)}</p>")
    if f.source_lines:
        out.append("<p><b>Source lines</b></p><ul style='margin-top:0'>")
        for path, line, fn in f.source_lines[:12]:
            out.append(
                f"<li><a href='source:{int(line)}:{esc(str(path))}'>{esc(str(path))}:{int(line)}</a>"
                f" <code>{esc(str(fn))}</code></li>"
            )
        out.append("</ul>")
    return "".join(out)

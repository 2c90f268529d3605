"""The job overview: ``explorer view RUN_DIR`` on a job (several ranks).

Above, the report's headline and the straggler's causes with their source lines; in the
middle, the rank × step heatmap (step time, or any breakdown category per rank and step),
the straggler's row marked; below, in tabs, the selected ranks' timelines stacked on the
aligned clock and the collectives table (sortable). The job analysis runs in
:class:`~explorer.ui.job_loader.JobAnalysis` with ranks done / total in the status bar and
a Cancel button; the GUI thread only draws.

Click a rank: its timeline. Ctrl/Shift-click more: theirs, stacked and aligned.
Double-click (or Enter): the rank's trace in the full single-trace window.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
from PyQt6.QtCore import QSettings, Qt
from PyQt6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QTableView,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from explorer.job.render.sections import headline, where
from explorer.ui.dataframe_model import DataFrameModel
from explorer.ui.dialogs import open_warning
from explorer.ui.job_heatmap import HeatmapView
from explorer.ui.job_loader import JobAnalysis, RankTraces
from explorer.ui.job_model import (
    COLLECTIVE_COLUMNS,
    STEP_TIME,
    aligned_shifts,
    categories,
    collectives_frame,
    heatmap,
)
from explorer.ui.job_stack import StackedTimelines
from explorer.ui.main_window import MainWindow
from explorer.ui.qt_types import only_while, present
from explorer.ui.status_bar import add_progress
from explorer.units import fmt_ns

#: At most this many ranks' timelines are stacked at once.
MAX_STACKED = 8
#: What the heatmap's colour can stand for, and where the numbers come from.
PER_STEP_NOTE = "per rank × step (each rank's stored step breakdown, summed over its devices)"


def causes_text(doc: dict[str, Any]) -> str:
    """The straggler's causes, one line each with its source line (empty: no straggler)."""
    s = doc["straggler"]
    if s is None:
        return ""
    lines = []
    for c in s["causes"]:
        at = where(c)
        lines.append(
            f"• {c['title']} — {fmt_ns(c['excess_ns_per_step'])}/step more than the other "
            f"ranks' median" + (f", at {at}" if at else "")
        )
    return "\n".join(lines)


def _format(name: str) -> Any:
    """A collectives column's format: a DataFrameModel format name, or significant digits."""
    if name == "3g":
        return lambda v: "" if v is None or pd.isna(v) else f"{float(v):.3g}"
    return name


class JobWindow(QMainWindow):
    """The job overview window; :meth:`open_job` analyses in the background, and
    :meth:`set_document` shows a document already made (the headless screenshot)."""

    def __init__(self, settings: QSettings | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.settings = settings  # passed on to the ranks' windows (tests: a temp file)
        self.setWindowTitle("Explorer — job")
        self.doc: dict[str, Any] | None = None
        self.per_step: pd.DataFrame | None = None
        self.analysis: JobAnalysis | None = None
        self.rank_loader: RankTraces | None = None
        self.rank_windows: dict[int, MainWindow] = {}
        self.error_box: QMessageBox | None = None
        self._build_summary()
        self._build_heatmap()
        self._build_tabs()
        splitter = QSplitter(Qt.Orientation.Vertical, self)
        top = QWidget(splitter)
        box = QVBoxLayout(top)
        box.setContentsMargins(6, 6, 6, 0)
        box.addWidget(self.headline)
        box.addWidget(self.causes)
        box.addWidget(self.warnings)
        box.addLayout(self._colour_row)
        box.addWidget(self.heatmap, 1)
        splitter.addWidget(top)
        splitter.addWidget(self.tabs)
        splitter.setSizes([380, 520])
        self.splitter = splitter
        self.setCentralWidget(splitter)
        self._build_status_bar()
        self.resize(1400, 950)

    # -- construction -------------------------------------------------------------------
    def _build_summary(self) -> None:
        self.headline = QLabel("Analysing the job…", self)
        self.headline.setObjectName("job_headline")
        self.headline.setWordWrap(True)
        self.headline.setStyleSheet("font-weight:bold; font-size:11pt")
        self.causes = QLabel("", self)
        self.causes.setObjectName("straggler_causes")
        self.causes.setWordWrap(True)
        self.causes.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.warnings = QLabel("", self)  # the report's warnings (ranks missing, clocks...)
        self.warnings.setObjectName("job_warnings")
        self.warnings.setWordWrap(True)
        self.warnings.setStyleSheet("color:#7a5200")
        self.warnings.hide()

    def _build_heatmap(self) -> None:
        self.quantity = QComboBox(self)
        self.quantity.setObjectName("heatmap_quantity")
        self.quantity.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.quantity.currentTextChanged.connect(self._quantity_changed)
        self.quantity_note = QLabel("", self)
        row = QHBoxLayout()
        row.addWidget(QLabel("Colour:", self))
        row.addWidget(self.quantity)
        row.addWidget(self.quantity_note, 1)
        self._colour_row = row
        self.heatmap = HeatmapView(self)
        self.heatmap.ranks_selected.connect(self.show_ranks)
        self.heatmap.rank_activated.connect(self.open_rank_window)

    def _build_tabs(self) -> None:
        self.tabs = QTabWidget(self)
        self.stack = StackedTimelines(self)
        self.stack_hint = QLabel(
            "Click a rank in the heatmap for its timeline; Ctrl/Shift-click more to stack "
            "them on the aligned clock; double-click for the rank's full window.",
            self,
        )
        page = QWidget(self)
        box = QVBoxLayout(page)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.stack_hint)
        box.addWidget(self.stack, 1)
        self.tabs.addTab(page, "Timelines")
        self.collectives_model = DataFrameModel(
            pd.DataFrame(),
            formats={c: _format(f) for c, _, f in COLLECTIVE_COLUMNS if f},
            headers={c: title for c, title, _ in COLLECTIVE_COLUMNS},
            parent=self,
        )
        self.collectives = QTableView(self)
        self.collectives.setObjectName("job_collectives")
        self.collectives.setModel(self.collectives_model)
        self.collectives.setSortingEnabled(True)
        # Rows come in time order until the user sorts: no arrow until then (enabling
        # sorting shows one on the first column, descending, that the empty model could
        # not apply — an arrow over rows in another order)
        present(self.collectives.horizontalHeader()).setSortIndicator(
            -1, Qt.SortOrder.AscendingOrder
        )
        self.tabs.addTab(self.collectives, "Collectives")

    def _build_status_bar(self) -> None:
        self.progress, self.cancel_button = add_progress(self, self.cancel, 260)
        self.progress.setFormat("%v / %m ranks")

    # -- the analysis -------------------------------------------------------------------
    def open_job(self, run: str, workers: int | None = None) -> None:
        """Analyse the job at ``run`` in the background (Dask workers, as ``report``)."""
        self.cancel()
        analysis = JobAnalysis(run, self, workers=workers)
        self.analysis = analysis

        def current() -> bool:
            return analysis is self.analysis

        analysis.progress.connect(only_while(current, self._progress))
        analysis.analysed.connect(only_while(current, self._analysed))
        analysis.failed.connect(only_while(current, self._failed))
        analysis.cancelled.connect(
            only_while(current, partial(self._end_progress, "Analysis cancelled"))
        )
        self.setWindowTitle(f"{Path(run).name or run} — job — Explorer")
        self.progress.setRange(0, 0)  # busy until the first rank is in
        self.progress.show()
        self.cancel_button.setEnabled(True)
        self.cancel_button.show()
        present(self.statusBar()).showMessage(f"Analysing the ranks of {run}…")
        analysis.start()

    def cancel(self) -> None:
        """Stop the analysis: its workers are stopped within moments (once the cluster is
        up; the reduce after the last rank runs to its end)."""
        if self.analysis is not None and self.analysis.isRunning():
            self.analysis.cancel()
            self.cancel_button.setEnabled(False)
            present(self.statusBar()).showMessage("Cancelling: stopping the workers…")

    def _progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        present(self.statusBar()).showMessage(f"{done} of {total} ranks analysed")

    def _end_progress(self, message: str) -> None:
        self.progress.hide()
        self.cancel_button.hide()
        present(self.statusBar()).showMessage(message, 10000)
        if self.doc is None:
            self.headline.setText(message)

    def _analysed(self, doc: dict[str, Any], per_step: pd.DataFrame) -> None:
        self._end_progress(f"{doc['ranks_present']} ranks analysed")
        self.set_document(doc, per_step)

    def _failed(self, message: str) -> None:
        self._end_progress("The job could not be analysed")
        self.show_error(message)

    def show_error(self, message: str) -> None:
        self.error_box = open_warning(self, message)

    # -- showing a job ------------------------------------------------------------------
    def set_document(self, doc: dict[str, Any], per_step: pd.DataFrame) -> None:
        """Show the job report ``doc`` and its per-step breakdown (``step_categories``)."""
        self.doc, self.per_step = doc, per_step
        self.headline.setText(headline(doc))
        self.causes.setText(causes_text(doc))
        self.causes.setVisible(bool(self.causes.text()))
        self.warnings.setText("\n".join(f"⚠ {w}" for w in doc["warnings"]))
        self.warnings.setVisible(bool(doc["warnings"]))
        self.quantity.blockSignals(True)
        self.quantity.clear()
        self.quantity.addItems([STEP_TIME, *categories(per_step)])
        self.quantity.blockSignals(False)
        self._quantity_changed(STEP_TIME)
        self._fit_heatmap()
        frame = collectives_frame(doc)
        self.collectives_model.set_frame(frame)
        self.collectives.resizeColumnsToContents()
        self.tabs.setTabText(1, f"Collectives ({doc['collectives']['matched']:,})")
        if doc["synthetic"]:
            self.headline.setText("SYNTHETIC TRACES — " + self.headline.text())

    def _fit_heatmap(self) -> None:
        """Give the heatmap the height its rows need (a few ranks leave the timelines more
        room), at most 45% of the window."""
        rows = self.heatmap.heat.rowCount()
        table = present(self.heatmap.horizontalHeader()).height() + 4
        table += sum(self.heatmap.rowHeight(r) for r in range(min(rows, 64)))
        top_pane = present(self.splitter.widget(0))
        above = top_pane.sizeHint().height() - self.heatmap.sizeHint().height()
        top = min(above + table + 8, int(0.45 * self.height()))
        self.splitter.setSizes([top, max(self.height() - top, 200)])

    def _quantity_changed(self, quantity: str) -> None:
        if self.doc is None or not quantity:
            return
        straggler = self.doc["straggler"]
        self.heatmap.heat.set_heatmap(
            heatmap(self.doc, quantity, self.per_step),
            None if straggler is None else int(straggler["rank"]),
        )
        self.quantity_note.setText(
            "step time per rank × step" if quantity == STEP_TIME else f"{quantity} {PER_STEP_NOTE}"
        )

    def show_ranks(self, ranks: list[int]) -> None:
        """Load the ranks' traces from the job's store and stack their timelines (the
        first :data:`MAX_STACKED` of them: each is a whole trace in memory)."""
        if self.doc is None or not ranks:
            return
        ranks = ranks[:MAX_STACKED]
        loader = RankTraces(self.doc["store"], list(ranks), self)
        self.rank_loader = loader

        def current() -> bool:
            return loader is self.rank_loader

        loader.loaded.connect(only_while(current, self._stack))
        loader.failed.connect(only_while(current, self.show_error))
        present(self.statusBar()).showMessage(
            f"Reading rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}…"
        )
        self.tabs.setCurrentIndex(0)
        loader.start()

    def _stack(self, traces: dict[int, Any]) -> None:
        assert self.doc is not None
        start = {r: int(t.metadata.get("start_ns", 0)) for r, (t, _) in traces.items()}
        offsets = {int(r["rank"]): int(r["clock_offset_ns"]) for r in self.doc["ranks"]}
        self.stack.set_ranks(traces, aligned_shifts(start, self.doc), offsets)
        self.stack_hint.setText(
            f"Ranks {', '.join(map(str, sorted(traces)))} on the aligned clock "
            "(each shifted by the clock offset the report measured); zoom or pan any of them."
            if len(traces) > 1
            else f"Rank {next(iter(traces))}; Ctrl/Shift-click more ranks to stack them."
        )
        selected = len(self.heatmap.selected_ranks())
        if selected > len(traces):
            self.stack_hint.setText(
                f"{self.stack_hint.text()} ({selected} ranks selected: the first "
                f"{len(traces)} are shown.)"
            )
        present(self.statusBar()).clearMessage()

    def open_rank_window(self, rank: int) -> MainWindow:
        """The rank's trace in the full single-trace window (loaded in the background)."""
        assert self.doc is not None
        source = next(str(r["source"]) for r in self.doc["ranks"] if int(r["rank"]) == rank)
        window = self.rank_windows.get(rank)
        if window is None or not window.isVisible():
            window = MainWindow(settings=self.settings, remember=False)
            window.show()
            window.open_path(source)
            self.rank_windows[rank] = window
        window.raise_()
        return window

    def closeEvent(self, event: Any) -> None:  # noqa: N802 (Qt name)
        # A running analysis stops within moments; the window goes away at once meanwhile
        # (the thread must end before its QThread object is destroyed with the window).
        self.hide()
        for worker in (self.analysis, self.rank_loader):
            if worker is not None and worker.isRunning():
                if worker is self.analysis:
                    self.analysis.cancel()
                worker.wait(60000)
        for window in self.rank_windows.values():
            window.close()
        super().closeEvent(event)

"""Dockable panels beside the timeline: Source, Dependency graph, Memory, Operators.

Every panel is a plain ``QWidget`` with the same small contract, so the main window can
dock any of them and wire them together without knowing what they show:

- ``set_trace(trace)`` — show a new trace (``None`` clears);
- signal ``slices_selected(object)`` — an ``np.ndarray`` of slice ids the timeline should
  highlight and select;
- signal ``range_requested(int, int)`` — ask the timeline to zoom to ``[start_ns, end_ns)``;
- slots ``on_selection(slice_id)`` and ``on_range(start_ns, end_ns)`` — what the timeline
  tells the panel;
- signal ``updated()`` — the panel finished showing new results (tests and the screenshot
  mode wait on it);
- ``set_analysed(analysed)`` — under a memory limit, the window of steps the analyses cover
  (:mod:`explorer.ui.analysed`): a panel that :attr:`~TracePanel.READS_WINDOW` aggregates
  those steps (:attr:`~TracePanel.subject`) and names slices by their whole-trace ids
  (:meth:`~TracePanel.whole_ids`, :meth:`~TracePanel.subject_row`); the others say, when
  they refuse, which steps the other analyses cover.

Aggregations over all events run off the UI thread through :meth:`TracePanel.run_in_background`:
the work is a pure function, the result comes back through a queued signal, and results of
superseded requests (the user picked another step meanwhile) are dropped by generation number.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from PyQt6 import sip
from PyQt6.QtCore import QObject, QRunnable, Qt, QThreadPool, pyqtSignal, pyqtSlot
from PyQt6.QtWidgets import QAbstractItemView, QHeaderView, QLabel, QTableView, QWidget

from explorer.analysis.memory_need import check_analyses_fit
from explorer.errors import ExplorerError
from explorer.trace.memory_limits import release_freed_memory
from explorer.trace_api import Trace
from explorer.ui.analysed import AnalysedTrace
from explorer.ui.one_at_a_time import HEAVY_WORK
from explorer.ui.qt_types import present


class _JobSignals(QObject):
    finished = pyqtSignal(int, object)
    failed = pyqtSignal(int, str)


class _Job(QRunnable):
    """Runs one function in the thread pool and reports its result or its error."""

    def __init__(self, generation: int, work: Callable[[], Any]) -> None:
        super().__init__()
        self.generation = generation
        self.work = work
        self.signals = _JobSignals()

    def run(self) -> None:  # runs in a pool thread
        try:
            with HEAVY_WORK:  # taking turns with the graph (explorer.ui.one_at_a_time)
                result = self.work()
        except ExplorerError as exc:  # already one line for the user
            self.signals.failed.emit(self.generation, str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - any failure must reach the panel, not vanish
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            self.signals.failed.emit(self.generation, detail)
            return
        finally:
            # The job's temporaries, which this pool thread's heap keeps otherwise (the
            # viewer held 420 MB of them on a 1M-slice trace).
            release_freed_memory()
        self.signals.finished.emit(self.generation, result)


class TracePanel(QWidget):
    """Base of the panels: the shared signals, default slots and the background runner."""

    slices_selected = pyqtSignal(object)
    range_requested = pyqtSignal(int, int)
    updated = pyqtSignal()
    #: Whether the panel's aggregations can read a window of steps (:attr:`subject`) when a
    #: memory limit keeps the analyses to one; a panel that cannot refuses there.
    READS_WINDOW: ClassVar[bool] = False
    #: The panel's status line, made by the panel (:meth:`show_status` writes there).
    status: QLabel

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.trace: Trace | None = None
        self.analysed: AnalysedTrace | None = None
        self._generation = 0
        self._jobs: dict[int, _Job] = {}

    # -- contract (panels override what they use) ---------------------------------------------
    def set_trace(self, trace: Trace | None) -> None:
        self.trace = trace
        if self.analysed is not None and self.analysed.whole is not trace:
            self.analysed = None  # another trace: its window is gone with it

    def set_analysed(self, analysed: AnalysedTrace) -> None:
        """The analyses cover ``analysed.trace``, a window of the steps of ``analysed.whole``
        that fit in memory: show the trace again, over those steps where the panel can."""
        self.analysed = analysed
        self.set_trace(analysed.whole)

    def hold(self, message: str) -> None:
        """Show no trace, and ``message`` (why), until :meth:`set_trace` or
        :meth:`set_analysed`: under a hard memory limit, while the analyses choose what to
        read, so that no aggregation over the whole trace runs beside them."""
        self.set_trace(None)  # panels take None: no trace
        self._generation += 1  # what was still running for the last trace is dropped
        self.show_status(message)

    def show_status(self, text: str) -> None:
        """Say ``text`` on the panel's status line (:attr:`status`; a panel whose line is
        another widget says it there)."""
        self.status.setText(text)

    def trace_with(self, slice_id: int) -> Trace | None:
        """The shown trace, if ``slice_id`` is one of its slices; None if no trace is shown
        or the id is not one of its slices."""
        if self.trace is None or not 0 <= slice_id < len(self.trace.slices):
            return None
        return self.trace

    @property
    def subject(self) -> Trace | None:
        """What the panel's aggregations read: the window of steps the analyses cover, for
        a panel that :attr:`READS_WINDOW`; else the whole trace."""
        if self.READS_WINDOW and self.analysed is not None:
            return self.analysed.trace
        return self.trace

    def _window(self) -> AnalysedTrace | None:
        """The analysed window of steps :attr:`subject` is (None: the whole trace)."""
        a = self.analysed
        return a if self.READS_WINDOW and a is not None and a.window is not None else None

    def whole_ids(self, ids: Any) -> np.ndarray:
        """The whole trace's ids (what the timeline selects) of :attr:`subject`'s slices."""
        window = self._window()
        return np.asarray(ids, np.int64) if window is None else window.whole_ids(ids)

    def subject_row(self, slice_id: int) -> int:
        """:attr:`subject`'s id of the whole trace's slice ``slice_id`` (-1: not in it)."""
        window = self._window()
        return int(slice_id) if window is None else window.row_of(slice_id)

    def outside_text(self, slice_id: int) -> str:
        """What the panel says of a whole-trace slice outside the window of steps it reads."""
        window = self._window()
        assert self.trace is not None and window is not None
        name = str(self.trace.slices["name"].iat[int(slice_id)])
        name = name if len(name) <= 60 else name[:59] + "…"
        return f"“{name}” is outside {window.steps_text()}, the steps that fit in memory."

    def scope_label(self) -> str:
        """What the panel's "whole" scope covers: ``Whole trace``, or the analysed steps."""
        window = self._window()
        if window is None:
            return "Whole trace"
        steps = window.steps_text()
        return f"{steps[0].upper()}{steps[1:]} (those that fit in memory)"

    @pyqtSlot(int)
    def on_selection(self, slice_id: int) -> None:
        """The timeline selected a slice; panels that follow the selection override this."""

    @pyqtSlot(int, int)
    def on_range(self, start_ns: int, end_ns: int) -> None:
        """The timeline's visible or selected range; panels that follow it override this."""

    # -- background work ------------------------------------------------------------------------
    def run_in_background(
        self,
        work: Callable[[], Any],
        done: Callable[[Any], None],
        failed: Callable[[str], None] | None = None,
    ) -> int:
        """Run ``work()`` in the thread pool; call ``done(result)`` on the UI thread.

        Only the latest request's result is delivered; earlier ones are dropped, so a user
        clicking quickly through steps never sees an old step's table arrive last. Under a
        memory limit the whole-trace analyses certainly cannot fit in, ``work`` does not run
        and ``failed`` says so in one line (:mod:`explorer.analysis.memory_need`), rather
        than the window being killed half-way through it; nor does it when the analyses
        cover a window of steps (:meth:`set_analysed`) and the panel reads the whole trace.
        """
        subject, analysed = self.subject, self.analysed
        if subject is not None:
            data, task = subject.data, work
            if analysed is not None and analysed.window is not None and subject is self.trace:
                # The analyses cover some steps because the whole trace's do not fit: this
                # panel, which reads the whole trace, does not run there either.
                refusal = (
                    f"{subject.path or 'the trace'}: {analysed.window.reason}, so this panel, "
                    f"which reads the whole trace, stays empty; the other analyses cover "
                    f"{analysed.steps_text()}"
                )

                def work() -> Any:
                    raise ExplorerError(refusal)

            else:

                def work() -> Any:
                    check_analyses_fit(data, "this panel's analyses", "the panel stays empty")
                    return task()

        self._generation += 1
        generation = self._generation
        job = _Job(generation, work)
        self._jobs[generation] = job

        def deliver(gen: int, result: Any) -> None:
            self._jobs.pop(gen, None)
            if sip.isdeleted(self) or gen != self._generation:
                return
            done(result)

        def report(gen: int, message: str) -> None:
            self._jobs.pop(gen, None)
            if sip.isdeleted(self) or gen != self._generation:
                return
            if failed is not None:
                failed(message)

        job.signals.finished.connect(deliver)
        job.signals.failed.connect(report)
        job.setAutoDelete(False)  # the Python side keeps it (self._jobs) until it reports
        present(QThreadPool.globalInstance()).start(job)
        return generation

    def busy(self) -> bool:
        """Whether a background request is still running."""
        return bool(self._jobs)


def results_table(model: Any, widths: dict[int, int] | None = None) -> QTableView:
    """A read-only, sortable, single-row-selection table as every panel shows results.

    One line per row with long names elided at the end (kernel names run to hundreds of
    characters; eliding the middle made different kernels look the same — the whole name
    is the cell's tooltip), fixed row heights and explicit column widths — sizing columns
    to their contents would visit every row of a million-row table (see
    :func:`fit_columns`, which reads the top rows only).
    """
    table = QTableView()
    table.setModel(model)
    # No sort until the user clicks a header: the analysis' own order (largest first) stands.
    header = present(table.horizontalHeader())
    header.setSortIndicator(-1, Qt.SortOrder.DescendingOrder)
    table.setSortingEnabled(True)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setWordWrap(False)
    table.setTextElideMode(Qt.TextElideMode.ElideRight)
    rows = present(table.verticalHeader())
    rows.setVisible(False)
    rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
    rows.setDefaultSectionSize(table.fontMetrics().height() + 6)
    header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
    header.setDefaultSectionSize(90)
    header.setStretchLastSection(True)
    for column, width in (widths or {}).items():
        header.resizeSection(column, width)
    return table


#: Rows :func:`fit_columns` reads to size a column (the top of the table, as shown).
FIT_ROWS = 200


def fit_columns(table: QTableView, stretch: int = 0) -> None:
    """Size every column but ``stretch`` to its header and its first :data:`FIT_ROWS`
    rows' text; ``stretch`` takes the rest of the width (the table scrolls sideways when
    that leaves it less than 160 px)."""
    model = present(table.model())
    header = present(table.horizontalHeader())
    fm = table.fontMetrics()
    header_fm = header.fontMetrics()
    rows = min(model.rowCount(), FIT_ROWS)
    used = 0
    for column in range(model.columnCount()):
        if column == stretch:
            continue
        title = str(model.headerData(column, Qt.Orientation.Horizontal) or "")
        width = header_fm.horizontalAdvance(title) + 28  # room for the sort arrow
        for row in range(rows):
            text = str(model.data(model.index(row, column)) or "")
            width = max(width, fm.horizontalAdvance(text) + 14)
        header.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
        header.resizeSection(column, width)
        used += width
    if 0 <= stretch < model.columnCount():
        room = present(table.viewport()).width() - used
        if room >= 160:
            header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
        else:
            header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Interactive)
            header.resizeSection(stretch, 160)


def trace_steps(trace: Trace) -> pd.DataFrame:
    """The trace's steps ``[step, name, start_ns, dur_ns, end_ns, slice]`` as the analyses
    define them (``ProfilerStep#N``, else one step for the whole trace)."""
    from explorer.analysis.steps import steps

    return steps(trace.data)


__all__ = ["TracePanel", "fit_columns", "results_table", "trace_steps"]

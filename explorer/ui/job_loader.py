"""The job overview's background work: the job analysis, and reading ranks for timelines.

:class:`JobAnalysis` runs :func:`explorer.job.job_document` (Dask workers map the ranks,
DuckDB reduces, as ``explorer report RUN_DIR`` does) in a ``QThread`` and reports ranks
done / total. :meth:`JobAnalysis.cancel` makes the map step's next check (every 0.1 s while
ranks run, once the cluster is up) raise, which leaves
:func:`~explorer.job.engine.map_ranks` and so closes the local cluster (its workers stop);
the job's store, then holding some ranks only, is removed, so no half job is ever read
back. :class:`RankTraces` reads ranks' traces from the store entries the workers wrote
(no re-parse) for the stacked timelines.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from PyQt6.QtCore import QThread, pyqtSignal

from explorer import store
from explorer.analysis.steps import steps
from explorer.errors import ExplorerError
from explorer.job import job_document
from explorer.job.document import default_store
from explorer.job.rank_map import rank_dir
from explorer.ui.job_model import step_categories


class AnalysisCancelled(Exception):
    """Raised inside the progress callback when the user cancelled."""


class JobAnalysis(QThread):
    """Analyses the job at ``run``. Signals: ``progress(done, total)``, ``analysed(doc,
    per_step)`` (the document and :func:`~explorer.ui.job_model.step_categories`),
    ``failed(one-line message)``, ``cancelled()``."""

    progress = pyqtSignal(int, int)
    analysed = pyqtSignal(object, object)
    failed = pyqtSignal(str)
    cancelled = pyqtSignal()

    def __init__(self, run: str, parent: Any = None, workers: int | None = None) -> None:
        super().__init__(parent)
        self.run_dir = run
        self.workers = workers
        self.store = default_store(run)
        self._cancel = False

    def cancel(self) -> None:
        self._cancel = True

    def _report(self, done: int, total: int, _eta: float | None) -> None:
        self._check()
        self.progress.emit(done, total)

    def _check(self) -> None:
        if self._cancel:
            raise AnalysisCancelled()

    def run(self) -> None:  # runs in the worker thread
        try:
            doc = job_document(
                self.run_dir, workers=self.workers, progress=self._report, check_cancel=self._check
            )
            per_step = step_categories(doc)
        except AnalysisCancelled:
            shutil.rmtree(self.store, ignore_errors=True)  # some ranks only: never read back
            self.cancelled.emit()
            return
        except ExplorerError as exc:
            self.failed.emit(str(exc))
            return
        except (RuntimeError, OSError) as exc:  # the local cluster failed to start, a disk
            self.failed.emit(f"{self.run_dir}: the job analysis failed ({exc})")
            return
        if self._cancel:  # asked after the last rank: the store is whole, the view is not
            self.cancelled.emit()
            return
        self.analysed.emit(doc, per_step)


class RankTraces(QThread):
    """Reads the ranks' traces (and their steps) from the job's store. Signals:
    ``loaded({rank: (trace, steps)})``, ``failed(one-line message)``."""

    loaded = pyqtSignal(object)
    failed = pyqtSignal(str)

    def __init__(self, store_dir: str, ranks: list[int], parent: Any = None) -> None:
        super().__init__(parent)
        self.store_dir = Path(store_dir)
        self.ranks = ranks

    def run(self) -> None:  # runs in the worker thread
        out = {}
        try:
            for r in self.ranks:
                trace = store.open_trace(rank_dir(self.store_dir, r))
                out[r] = (trace, steps(trace))
        except ExplorerError as exc:
            self.failed.emit(f"{exc} (run the job analysis again)")
            return
        self.loaded.emit(out)

"""Loading and analysis off the UI thread.

:class:`TraceLoader` reads a trace in a ``QThread`` and reports progress through signals;
:meth:`TraceLoader.cancel` makes the reader's progress callback raise, which unwinds the
read at its next progress report. :class:`AnalysisRunner` then computes steps, breakdown,
findings and the dependency graph one after the other, handing each result back as soon as
it is ready, so the timeline is usable while findings are still being computed.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any

from PyQt6.QtCore import QThread, pyqtSignal

import explorer
from explorer.analysis.attribution import slice_sources
from explorer.analysis.breakdown import breakdown
from explorer.analysis.dependency_graph import dependency_graph
from explorer.analysis.findings import findings
from explorer.analysis.steps import step_times, steps
from explorer.errors import ExplorerError
from explorer.trace.memory_limits import release_freed_memory
from explorer.trace_api import Trace
from explorer.ui.analysed import AnalysedTrace, analysed_trace, in_whole_ids
from explorer.ui.one_at_a_time import HEAVY_WORK


class LoadCancelled(Exception):
    """Raised inside the reader's progress callback when the user cancelled."""


def _one_line(exc: BaseException) -> str:
    """The last line of ``exc``'s traceback (``TypeError: ...``): what the user is shown."""
    return traceback.format_exception_only(type(exc), exc)[-1].strip()


class _CancellableThread(QThread):
    """A worker thread that :meth:`cancel` asks to stop at its next check of ``_cancel``."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._cancel = False

    def cancel(self) -> None:
        self._cancel = True


class TraceLoader(_CancellableThread):
    """Reads one trace. Signals: ``progress(percent, message)``, ``loaded(trace)``,
    ``failed(one-line message)``, ``cancelled()``."""

    progress = pyqtSignal(int, str)
    loaded = pyqtSignal(object)
    failed = pyqtSignal(str)
    cancelled = pyqtSignal()

    def __init__(self, path: str, parent: Any = None, use_cache: bool = True) -> None:
        super().__init__(parent)
        self.path = path
        self.use_cache = use_cache

    def _report(self, fraction: float, message: str = "") -> None:
        if self._cancel:
            raise LoadCancelled()
        self.progress.emit(int(round(float(fraction) * 100)), str(message))

    def run(self) -> None:  # runs in the worker thread
        try:
            trace = explorer.load(self.path, use_cache=self.use_cache, progress=self._report)
        except LoadCancelled:
            self.cancelled.emit()
            return
        except ExplorerError as exc:
            self.failed.emit(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - an unexpected reader bug must not kill the UI
            self.failed.emit(f"{self.path}: could not be read ({_one_line(exc)})")
            return
        if self._cancel:
            self.cancelled.emit()
        else:
            self.loaded.emit(trace)


#: The analyses the window shows, cheapest first: (name, function of the trace). The one
#: registry; an analysis that raises is reported by name (status bar, Findings panel).
ANALYSES: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    ("slice_sources", slice_sources),
    ("steps", steps),
    ("step_times", step_times),
    ("breakdown", breakdown),
    ("findings", findings),
    ("dependency_graph", dependency_graph),
)


#: The analyses that take turns with the panels' jobs (:mod:`explorer.ui.one_at_a_time`):
#: the one with the most temporaries. The others overlap them, as before.
TAKES_TURNS: frozenset[str] = frozenset({"dependency_graph"})

#: What the progress line calls each analysis.
LABELS: dict[str, str] = {
    "slice_sources": "source lines",
    "steps": "steps",
    "step_times": "step times",
    "breakdown": "step breakdown",
    "findings": "findings",
    "dependency_graph": "dependency graph",
}


def progress_text(name: str, done: int, total: int) -> str:
    """``"Analysing: findings (4 of 5)…"``: which analysis runs and how far they are."""
    return f"Analysing: {LABELS.get(name, name.replace('_', ' '))} ({done + 1} of {total})…"


#: The first result under a memory limit the whole trace's analyses cannot fit in: the
#: :class:`~explorer.ui.analysed.AnalysedTrace` whose window of steps the others cover.
WINDOW = "window"


def _each_analysis(
    trace: Trace,
    names: tuple[str, ...] | None = None,
    starting: Callable[[str, int, int], object] | None = None,
) -> Iterator[tuple[str, Any, str | None]]:
    """Runs the analyses of :data:`ANALYSES` (those in ``names``, or all) one at a time,
    lazily: ``(name, value, None)``, or ``(name, None, one-line error)`` for one that raised.

    Under a memory limit the whole trace's analyses cannot fit in, they run over the
    steps that fit (:func:`~explorer.ui.analysed.analysed_trace`), announced first as
    ``(WINDOW, analysed trace, None)``, and every slice id in their results is the whole
    trace's. When not even one step fits, none runs and each says so, rather than the
    window being killed by the kernel half-way through them. ``starting(name, k, n)`` is
    told before the ``k``-th of the ``n`` analyses runs (the progress line)."""
    analysed: AnalysedTrace | None = None
    refused = None
    try:
        analysed = analysed_trace(trace)
    except ExplorerError as exc:
        refused = str(exc)
    if analysed is not None and analysed.window is not None:
        yield WINDOW, analysed, None
    chosen = [(name, fn) for name, fn in ANALYSES if names is None or name in names]
    for k, (name, fn) in enumerate(chosen):
        if starting is not None:
            starting(name, k, len(chosen))
        if analysed is None:
            yield name, None, refused
            continue
        try:
            with HEAVY_WORK if name in TAKES_TURNS else nullcontext():
                value = fn(analysed.trace)
        except Exception as exc:  # noqa: BLE001 - reported per analysis, the others still run
            yield name, None, _one_line(exc)
            continue
        finally:
            release_freed_memory()  # its temporaries, held by this thread's heap otherwise
        yield name, in_whole_ids(name, value, analysed.window), None


class AnalysisRunner(_CancellableThread):
    """Runs the window's analyses on one trace. Signals: ``starting(name, k, n)`` before
    the ``k``-th of ``n``, ``result(name, value)`` per analysis, ``failed(name, message)``,
    and ``finished`` (QThread's) at the end."""

    starting = pyqtSignal(str, int, int)
    result = pyqtSignal(str, object)
    failed = pyqtSignal(str, str)

    def __init__(
        self, trace: Trace, parent: Any = None, names: tuple[str, ...] | None = None
    ) -> None:
        super().__init__(parent)
        self.trace = trace
        self.names = names

    def run(self) -> None:  # runs in the worker thread
        if self._cancel:
            return
        # The generator runs the next analysis only when asked: a cancel stops before it.
        for name, value, error in _each_analysis(self.trace, self.names, self.starting.emit):
            if error is None:
                self.result.emit(name, value)
            else:
                self.failed.emit(name, error)
            if self._cancel:
                return


def run_analyses_now(trace: Trace) -> tuple[dict[str, Any], dict[str, str]]:
    """The same analyses, synchronously (for the headless screenshot mode): the results
    (first :data:`WINDOW` when they cover a window of steps), and a one-line message for
    each analysis that raised (the caller says so)."""
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, value, error in _each_analysis(trace):
        if error is None:
            results[name] = value
        else:
            errors[name] = error
    return results, errors

"""What the viewer's analyses read: the whole trace, or, under a memory limit the whole
trace's analyses cannot fit in, the run of steps that fits — the window ``explorer report``
analyses there (:func:`explorer.analysis.memory_need.analysed_window`).

A window is a trace of its own with its own slice ids. Everything the analyses hand the
views is turned back into the whole trace's ids here (:func:`in_whole_ids`), so clicking
a finding's evidence, a graph neighbour or a source line selects the right slice on the
timeline, which always shows the whole trace. Times need no mapping: a window keeps the
whole trace's clock (``ts`` relative to the whole trace's start).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from explorer.analysis.dependency_graph import DependencyGraph
from explorer.analysis.finding import Finding
from explorer.analysis.memory_need import analysed_window, check_analyses_fit
from explorer.errors import ExplorerError
from explorer.trace.memory_limits import hard_limit
from explorer.trace.model import Window
from explorer.trace_api import Trace

#: What the refusal says when not even one step's analyses fit (the viewer's words since
#: before windows: :func:`~explorer.analysis.memory_need.check_analyses_fit`'s arguments).
REFUSED = ("the panels' analyses", "the panels stay empty")


@dataclass(frozen=True)
class AnalysedTrace:
    """``whole``: the trace the window shows; ``trace``: what the analyses read — ``whole``
    itself, or a window of its steps (``window`` is then not None)."""

    whole: Trace
    trace: Trace

    @property
    def window(self) -> Window | None:
        return self.trace.data.window

    def whole_ids(self, ids: Any) -> np.ndarray:
        """The whole trace's ids of some of ``trace``'s slice ids (-1 stays -1)."""
        ids = np.asarray(ids, dtype=np.int64)
        w = self.window
        if w is None:
            return ids
        return np.where(ids >= 0, w.ids[np.maximum(ids, 0)], -1).astype(np.int64)

    def row_of(self, whole_id: int) -> int:
        """``trace``'s id of one of the whole trace's slices: -1 outside the window."""
        w = self.window
        return int(whole_id) if w is None else int(w.rows_of([int(whole_id)])[0])

    def steps_text(self) -> str:
        """``steps 0-499 of 1,124`` (the steps analysed), or ``all steps``."""
        w = self.window
        if w is None:
            return "all steps"
        numbers = w.steps["step"].to_numpy(np.int64)
        first, last = int(numbers.min()), int(numbers.max())
        which = f"step {first}" if first == last else f"steps {first}-{last}"
        return f"{which} of {w.whole_steps:,}"

    @property
    def short_note(self) -> str:
        """The note in a few words, for the status bar ("" for all steps)."""
        if self.window is None:
            return ""
        return f"Analyses: {self.steps_text()} (those that fit in memory)"

    @property
    def note(self) -> str:
        """One line for the user: which steps the analyses cover and why ("" for all)."""
        w = self.window
        if w is None:
            return ""
        return f"Analyses cover {self.steps_text()} only: {w.reason}"


def analysed_trace(trace: Trace) -> AnalysedTrace:
    """The whole trace when no hard memory limit binds this process, or when its analyses
    fit under the one that does; else the longest run of steps from the first whose
    analyses fit. :class:`~explorer.errors.ExplorerError` (one line) when not even one
    step's do. Without a hard limit nothing is measured: the viewer runs as it always has.

    Choosing the steps takes memory too (a step number per slice, then the window's
    copy): where even that fails, the limit is as tight as a refusal says.
    """
    if hard_limit(certain=True) is None:
        return AnalysedTrace(trace, trace)
    try:
        data, _ = analysed_window(trace.data)
    except (ExplorerError, MemoryError):
        check_analyses_fit(trace.data, *REFUSED)  # nothing fits for certain: refused
        return AnalysedTrace(trace, trace)  # the least need fits: try, as before windows
    return AnalysedTrace(trace, trace if data is trace.data else Trace(data))


def _steps(w: Window, table: pd.DataFrame) -> pd.DataFrame:
    out = table.copy()
    s = out["slice"].to_numpy(np.int64)
    out["slice"] = np.where(s >= 0, w.ids[np.maximum(s, 0)], -1)
    return out


def _sources(w: Window, table: pd.DataFrame) -> pd.DataFrame:
    """One row per window slice, indexed by its whole-trace id (the Details panel looks
    rows up by id; a whole-trace-sized table would cost what the window saves)."""
    return table.set_axis(pd.Index(w.ids, dtype=np.int64), axis=0)


def _findings(w: Window, findings: list[Finding]) -> list[Finding]:
    return [replace(f, evidence=w.whole_ids(f.evidence)) for f in findings]


def _graph(w: Window, graph: DependencyGraph) -> DependencyGraph:
    """Nodes and edges in whole-trace ids; the per-slice arrays of the window, which no
    view reads, are dropped rather than left in the other numbering."""
    edges = graph.edges.copy()
    edges["src"] = w.ids[edges["src"].to_numpy(np.int64)]
    edges["dst"] = w.ids[edges["dst"].to_numpy(np.int64)]
    return replace(graph, nodes=w.ids[graph.nodes], edges=edges, arrays=None, owner_after=None)


#: Per analysis of :data:`explorer.ui.loader.ANALYSES` that names slices: its result in the
#: whole trace's ids. ``breakdown`` names steps, devices and times only.
_TO_WHOLE: dict[str, Callable[[Window, Any], Any]] = {
    "slice_sources": _sources,
    "steps": _steps,
    "findings": _findings,
    "dependency_graph": _graph,
}


def in_whole_ids(name: str, value: Any, window: Window | None) -> Any:
    """Analysis ``name``'s result ``value``, computed over ``window`` (None: the whole
    trace, returned as it is), with every slice id it holds the whole trace's."""
    if window is None or name not in _TO_WHOLE:
        return value
    return _TO_WHOLE[name](window, value)


__all__ = ["REFUSED", "AnalysedTrace", "analysed_trace", "in_whole_ids"]

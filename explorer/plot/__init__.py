"""Charts for notebooks: matplotlib figures of analysis results, shown inline by Jupyter.

A renderer, like :mod:`explorer.report` and :mod:`explorer.export`: each figure module
draws what one analysis returned and computes nothing of its own, so a bar on a chart is
the number the report prints. :class:`TracePlots` (``trace.plot``) runs the analyses the
report runs (the attributed steps, :func:`~explorer.analysis.breakdown.breakdown`, the
memory curve, the critical path of the report's scope) and hands their results to
:mod:`~explorer.plot.breakdown`, :mod:`~explorer.plot.memory` and
:mod:`~explorer.plot.critical_path`; :class:`JobPlots` (``job.plot``) draws the job
report's rank × step matrix (:mod:`~explorer.plot.heatmap`).

matplotlib is an optional dependency (``pip install 'explorer[notebook]'``): without it
every plot raises one :class:`~explorer.errors.ExplorerError` line that says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from explorer.errors import ExplorerError

if TYPE_CHECKING:
    from explorer.plot.figure import Figure
    from explorer.trace.model import TraceData

MISSING = (
    "Explorer's plots need matplotlib, which is not installed: pip install 'explorer[notebook]'"
)


def matplotlib_available() -> bool:
    """Whether the plots can be drawn here (the rich displays leave their charts out, and
    say why, when not)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def require_matplotlib() -> None:
    """Raise one clear line when matplotlib is missing (it is an optional extra)."""
    if not matplotlib_available():
        raise ExplorerError(MISSING)


class TracePlots:
    """``trace.plot``: the figures of one trace (each a new :class:`matplotlib.figure.Figure`
    that a notebook shows inline)."""

    __slots__ = ("_trace",)

    def __init__(self, trace: TraceData) -> None:
        self._trace = trace

    def breakdown(self) -> Figure:
        """One stacked bar per step and device: the step's time split into the breakdown
        categories (they add up to the step's time, as in the report's per-step table);
        partial steps are hatched."""
        require_matplotlib()
        from explorer.analysis.breakdown import breakdown
        from explorer.analysis.steps import select_steps
        from explorer.plot.breakdown import breakdown_figure

        t = self._trace
        return breakdown_figure(breakdown(t), select_steps(t, attributed=True))

    def memory(self) -> Figure:
        """Allocated and reserved bytes over trace time per device, the peak marked and the
        steps shaded (a note in the figure when the trace holds no memory events)."""
        require_matplotlib()
        from explorer.analysis.memory import memory_timeline, peaks
        from explorer.analysis.steps import steps
        from explorer.plot.memory import memory_figure

        t = self._trace
        return memory_figure(memory_timeline(t), peaks(t), steps(t))

    def critical_path(self, step: int | None = None) -> Figure:
        """What the critical path is made of (its categories, adding up to its length) and
        the ops that hold most of it: of step ``step``, or of every step as the report."""
        require_matplotlib()
        from explorer.analysis.critical_path import critical_path
        from explorer.plot.critical_path import critical_path_figure

        return critical_path_figure(critical_path(self._trace, step, all_steps=step is None))


class JobPlots:
    """``job.plot``: the figures of a job report document."""

    __slots__ = ("_doc",)

    def __init__(self, doc: dict[str, Any]) -> None:
        self._doc = doc

    def heatmap(self) -> Figure:
        """Step time per rank (rows) and step (columns), the straggler's row marked."""
        require_matplotlib()
        from explorer.plot.heatmap import heatmap_figure

        return heatmap_figure(self._doc)


__all__ = ["MISSING", "JobPlots", "TracePlots", "matplotlib_available", "require_matplotlib"]

"""The user-facing :class:`Trace`: the tables of :class:`~explorer.trace.model.TraceData`
plus the analyses as methods, so a notebook reads ``trace.findings()``.

The methods are thin: each calls the pure function in ``explorer.analysis`` that does the
work (and keeps its result in ``trace.memo``). Keeping them here, above both layers, lets the trace
model stay ignorant of the analyses built on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from explorer.trace.model import TraceData

if TYPE_CHECKING:
    from explorer.analysis.critical_path import CriticalPath
    from explorer.analysis.dependency_graph import DependencyGraph
    from explorer.analysis.finding import Finding


class Trace(TraceData):
    """One loaded trace. See :mod:`explorer.trace.model` for the tables."""

    def steps(self, pattern: str | None = None) -> pd.DataFrame:
        """Training steps: ``ProfilerStep#N`` annotations, else ``pattern``, else one step."""
        from explorer.analysis.steps import steps

        return steps(self, pattern=pattern)

    def use_steps(self, pattern: str | None) -> None:
        """Take steps from host annotations matching ``pattern`` (a regex) in every
        analysis, instead of ``ProfilerStep#N``; ``None`` restores the default."""
        self.step_pattern = pattern

    def breakdown(self, step: int | None = None) -> pd.DataFrame:
        """Per step and device: step time split into categories that add up exactly."""
        from explorer.analysis.breakdown import breakdown

        return breakdown(self, step=step)

    def findings(self) -> list[Finding]:
        """Ranked findings (what costs time, why, which line, what to do)."""
        from explorer.analysis.findings import findings

        return findings(self)

    def by_source(self) -> pd.DataFrame:
        """One row per user source line: host, device, stall time, bytes, fallbacks, syncs."""
        from explorer.analysis.by_source import by_source

        return by_source(self)

    def dependency_graph(self, step: int | None = None) -> DependencyGraph:
        """What waited for what: a typed, weighted DAG over slices."""
        from explorer.analysis.dependency_graph import dependency_graph

        return dependency_graph(self, step=step)

    def critical_path(self, step: int | None = None) -> CriticalPath:
        """The chain of work that set the step's time."""
        from explorer.analysis.critical_path import critical_path

        return critical_path(self, step=step)

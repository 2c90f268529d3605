"""The user-facing :class:`Trace`: a loaded trace model plus the analyses as methods, so a
notebook reads ``trace.findings()``.

``Trace`` wraps a :class:`~explorer.trace.model.TraceData` (``trace.data``) by composition:
loaders return the model, and only this layer, above both the model and the analyses,
knows the analyses exist. The model's tables (typed properties here) and every other
public member of the model read through (``trace.slices`` is ``trace.data.slices``,
``trace.args(i)`` is ``trace.data.args(i)``), so code written for the model works on a
``Trace`` unchanged; setting anything but ``data`` on a ``Trace`` is an error. The
methods are thin: each calls the pure function in ``explorer.analysis`` that does the work
(and keeps its result in the model's ``memo``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import pandas as pd

from explorer.trace.model import TraceData

T = TypeVar("T")

if TYPE_CHECKING:
    from explorer.analysis.critical_path import CriticalPath
    from explorer.analysis.dependency_graph import DependencyGraph
    from explorer.analysis.diff import TraceDiff
    from explorer.analysis.finding import Finding
    from explorer.analysis.whatif import WhatIf
    from explorer.plot import TracePlots


class _ModelMember(Generic[T]):
    """A member of the wrapped model, read through with its type (one line per member
    in :class:`Trace` instead of a property each). Read-only: a ``Trace`` has no state
    of its own to set."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _ModelMember[T]: ...
    @overload
    def __get__(self, obj: Trace, owner: type) -> T: ...
    def __get__(self, obj: Trace | None, owner: type) -> T | _ModelMember[T]:
        if obj is None:
            return self
        value: T = getattr(obj.data, self.name)
        return value


class Trace:
    """One loaded trace. See :mod:`explorer.trace.model` for the tables."""

    __slots__ = ("data",)

    def __init__(self, data: TraceData) -> None:
        self.data = data

    def __repr__(self) -> str:
        return f"Trace({self.path!r}, {len(self)} slices)"

    def _repr_html_(self) -> str:
        """In a notebook a trace shows its report: headline, the per-step breakdown chart,
        the top findings with their lines, the top source lines."""
        return self.report()._repr_html_()

    # -- the model, read through (typed here; anything else through __getattr__) ----------
    slices = _ModelMember[pd.DataFrame]()
    tracks = _ModelMember[pd.DataFrame]()
    flows = _ModelMember[pd.DataFrame]()
    counters = _ModelMember[pd.DataFrame]()
    instants = _ModelMember[pd.DataFrame]()
    memory = _ModelMember[pd.DataFrame]()
    metadata = _ModelMember[dict[str, Any]]()
    args_store = _ModelMember[Any]()
    execution_trace = _ModelMember["pd.DataFrame | None"]()
    step_pattern = _ModelMember["str | None"]()
    step_nesting = _ModelMember[str]()

    def __len__(self) -> int:
        return len(self.data)

    def __getattr__(self, name: str) -> Any:
        """Every other public member of the model (``args``, ``stack``, ``span_ns``, the
        analyses' memo, ...) reads through, so the façade never lags behind the model.
        Only called for names this class does not define."""
        if name.startswith("_") or name == "data":  # ``data`` unset: not a trace yet
            raise AttributeError(name)
        return getattr(self.data, name)

    @property
    def plot(self) -> TracePlots:
        """The trace's figures (``trace.plot.breakdown()``, ``.memory()``,
        ``.critical_path()``): matplotlib figures a notebook shows inline."""
        from explorer.plot import TracePlots

        return TracePlots(self.data)

    # -- analyses ------------------------------------------------------------------------
    def steps(self, pattern: str | None = None) -> pd.DataFrame:
        """Training steps: ``ProfilerStep#N`` annotations, else ``pattern``, else one step."""
        from explorer.analysis.steps import steps

        return steps(self.data, pattern=pattern)

    def with_steps(self, pattern: str | None = None, nesting: str = "outermost") -> Trace:
        """This trace with steps taken from host annotations matching ``pattern`` (a regex)
        in every analysis, instead of ``ProfilerStep#N`` (``None``: the default). Where
        matches nest on a thread, ``nesting`` says which are the steps: the
        ``"outermost"`` or the ``"innermost"``. A new ``Trace`` over the same tables, its
        own results for what depends on the steps (see
        :meth:`~explorer.trace.model.TraceData.with_steps`); this one is unchanged."""
        return Trace(self.data.with_steps(pattern, nesting))

    def use_steps(self, pattern: str | None, nesting: str = "outermost") -> None:
        """Make this ``Trace`` the one :meth:`with_steps` gives (for a notebook that keeps
        one name): the one setter of the step options."""
        self.data = self.data.with_steps(pattern, nesting)

    def breakdown(self, step: int | None = None) -> pd.DataFrame:
        """Per step and device: step time split into categories that add up exactly."""
        from explorer.analysis.breakdown import breakdown

        return breakdown(self.data, step=step)

    def findings(self, predict: bool = False) -> Findings:
        """Ranked findings (what costs time, why, which line, what to do). ``predict``:
        each with ``predicted_saving_ns`` (what its fix saves, by replaying the dependency
        graph without it), ranked by that."""
        from explorer.analysis.findings import findings, no_finding_sentence

        found = findings(self.data)
        if predict:
            from explorer.analysis.whatif import predicted_findings

            found = predicted_findings(self.data)
        return Findings(found, none="" if found else no_finding_sentence(self.data))

    def report(self, step: int | None = None, top: int = 10) -> Report:
        """The report (``explorer report``): ``str(report)`` is its text, ``.document`` its
        data (the JSON schema), and a notebook shows it with its charts. ``step``: that
        step only; ``top``: how many findings and source lines."""
        return Report(self.data, step=step, top=top)

    def what_if(
        self, remove: list[str] | tuple[str, ...] = (), scale: dict[str, float] | None = None
    ) -> WhatIf:
        """Each step's time if the slices ``remove`` names were gone and those ``scale``
        names took their factor of the time (``{"aten::mm": 0.5, "stream 7": 0.8}``), by
        replaying the dependency graph; with the new critical path. A selector is a
        finding kind (``"input_stall"``: what its fix removes), ``"stream N"`` or a slice
        name."""
        from explorer.analysis.whatif import what_if

        return what_if(self.data, remove=remove, scale=scale)

    def user_frame(self, slice_id: int) -> tuple[str, int, str] | None:
        """The user line responsible for a slice: its own or an enclosing user frame, and
        for device work the line that launched it (None when the trace cannot say)."""
        from explorer.analysis.attribution import user_line

        return user_line(self.data, slice_id)

    def by_source(self) -> pd.DataFrame:
        """One row per user source line: host, device, stall time, bytes, fallbacks, syncs."""
        from explorer.analysis.by_source import by_source

        return by_source(self.data)

    def dependency_graph(self, step: int | None = None) -> DependencyGraph:
        """What waited for what: a typed, weighted DAG over slices."""
        from explorer.analysis.dependency_graph import dependency_graph

        return dependency_graph(self.data, step=step)

    def critical_path(self, step: int | None = None) -> CriticalPath:
        """The chain of work that set the step's time."""
        from explorer.analysis.critical_path import critical_path

        return critical_path(self.data, step=step)

    def window_of_steps(self, first_step: int, last_step: int) -> Trace:
        """Steps ``first_step`` to ``last_step`` (both included) as a trace of their own, to
        analyse a long trace a part at a time: each step's breakdown and critical path are
        this trace's, findings are ranked within the window, and ``.window.ids`` maps
        its slice ids to this trace's (see :mod:`explorer.trace.window`)."""
        from explorer.analysis.steps import window_of_steps

        return Trace(
            window_of_steps(
                self.data, first_step, last_step, f"requested (steps {first_step}-{last_step})"
            )
        )


def model_of(trace: Trace | TraceData) -> TraceData:
    """The model under ``trace``, given a :class:`Trace` or the model itself: the viewer's
    widgets are shown either (the window's ``Trace``, a job rank's model) and keep what they
    were given, and hand the analyses the model."""
    return trace.data if isinstance(trace, Trace) else trace


class Findings(list["Finding"]):
    """``trace.findings()``: the ranked :class:`~explorer.analysis.finding.Finding` list,
    which a notebook shows with each finding's time lost, steps, lines and fix (``none``:
    the sentence shown when the list is empty, which says what was looked for)."""

    def __init__(self, found: Iterable[Finding] = (), none: str = "") -> None:
        super().__init__(found)
        self.none = none

    def _repr_html_(self) -> str:
        from explorer.notebook import findings_html

        return findings_html([f.to_dict() for f in self], none=self.none)


class Report:
    """One trace's report: ``document`` is what every format renders (see
    :func:`explorer.report.document`), ``render(format)`` one of them; ``str()`` is the
    text report and a notebook shows the headline, the breakdown chart, the findings and
    the source lines."""

    __slots__ = ("data", "document", "step", "top")

    def __init__(self, data: TraceData, step: int | None = None, top: int = 10) -> None:
        from explorer.report import document

        self.data = data
        self.step = step
        self.top = top
        self.document: dict[str, Any] = document(data, step=step, top=top)

    def render(self, format: str = "text") -> str:
        """The report in ``format`` (text, markdown, json or html), as ``explorer report``."""
        from explorer.report import render

        return render(self.data, format, step=self.step, top=self.top)

    def __str__(self) -> str:
        return self.render("text")

    def __repr__(self) -> str:
        s = self.document["summary"]
        return (
            f"Report({self.data.path!r}, {s['steps']} steps, "
            f"{self.document['findings_total']} findings)"
        )

    def _repr_html_(self) -> str:
        from explorer.notebook import report_html

        return report_html(self.document)


class Diff:
    """``explorer.diff(a, b)``: the :class:`~explorer.analysis.diff.TraceDiff` (``data``;
    its tables read through: ``diff.steps``, ``diff.lines``...), whose ``str()`` is the
    text of ``explorer diff`` and which a notebook shows with a chart."""

    __slots__ = ("data",)

    def __init__(self, data: TraceDiff) -> None:
        self.data = data

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "data":
            raise AttributeError(name)
        return getattr(self.data, name)

    def render(self, format: str = "text") -> str:
        """The diff in ``format`` (text, markdown, json or html), as ``explorer diff``."""
        from explorer.report.diff_render import render_diff

        return render_diff(self.data, format)

    def __str__(self) -> str:
        return self.render("text")

    def __repr__(self) -> str:
        return f"Diff({self.data.a_path!r} -> {self.data.b_path!r})"

    def _repr_html_(self) -> str:
        from explorer.notebook import diff_html

        return diff_html(self.data)

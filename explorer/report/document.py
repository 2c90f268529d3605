"""The one document every report builds: the trace report, the job report, a diff and the
critical-path section are a :class:`Document` — a head of lines and a list of
:class:`Section` holding :class:`Table`, :class:`Entry` and :class:`Chart` values, every
string already formatted (units from :mod:`explorer.units`).

The renderers in :mod:`explorer.report.formats` lay a document out, one module per
format; none of them computes or decides what a section holds. A builder that wants to
show more (a predicted saving per finding, a cause per rank) adds a field or a table here
in its own section builder, and every format shows it.

This module imports nothing of Explorer's: it is the contract between the builders
(:mod:`explorer.report.sections`, :mod:`explorer.report.critical_path_section`,
:mod:`explorer.report.diff_render`, :mod:`explorer.job.render`) and the renderers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

#: How a head line is set: ``""`` plain, ``"alarm"`` (a synthetic or test-backend trace:
#: read before anything else), ``"caution"`` (the report covers part of the trace) and
#: ``"warning"`` (a loader warning).
STYLES = ("", "alarm", "caution", "warning")


class Line(NamedTuple):
    """A line of prose and how it is set (one of :data:`STYLES`)."""

    text: str
    style: str = ""


class Field(NamedTuple):
    """A labelled value of an :class:`Entry`. ``code``: a source line or identifier;
    ``link``: the anchor (a row's :attr:`Table.anchors`) the value points at, or ``""``."""

    label: str
    value: str
    code: bool = False
    link: str = ""


@dataclass(frozen=True)
class Table:
    """Rows of formatted cells. ``numeric`` columns align right; ``code`` columns are source
    lines or identifiers. Optional, one per row: ``shares`` (0–1, drawn as bars where the
    medium has them), ``colours`` (``#rrggbb``, the row's category colour, shown as a
    swatch in column ``swatch``), ``anchors`` (a target other parts of the document link
    to) and ``tones`` (``"good"``, ``"bad"`` or ``""``: a change for the better or worse)."""

    header: list[str]
    rows: list[list[str]]
    numeric: frozenset[int] = frozenset()
    code: frozenset[int] = frozenset()
    title: str = ""
    """A caption above the table ("" for none), for a section of several tables."""
    shares: list[float] | None = None
    colours: list[str] | None = None
    swatch: int = 0
    anchors: list[str] | None = None
    tones: list[str] | None = None


@dataclass(frozen=True)
class Entry:
    """A numbered item with labelled fields (a finding)."""

    number: int
    kind: str
    title: str
    severe: bool
    fields: list[Field]
    anchor: str = ""


@dataclass(frozen=True)
class Segment:
    """One part of a stacked bar: its colour, its size (ns, bytes: the chart's unit) and
    the tooltip a reader sees over it."""

    colour: str
    value: float
    tip: str


@dataclass(frozen=True)
class Bar:
    label: str
    segments: list[Segment]


@dataclass(frozen=True)
class Series:
    """One curve of a :class:`Curve` chart (``ys`` at the chart's ``xs``)."""

    label: str
    colour: str
    ys: list[float]
    dashed: bool = False


@dataclass(frozen=True)
class Chart:
    """A picture of numbers the section's tables already hold, drawn where the medium can.

    ``kind``: ``"bars"`` (one stacked bar per :class:`Bar`, height = its total; the per-step
    breakdown), ``"composition"`` (one bar of 100% split into ``bars[0]``'s segments; what
    the critical path is made of), ``"curve"`` (``series`` over ``xs``; memory over time) or
    ``"heatmap"`` (``grid[row][column]`` shaded by value, ``None`` for no value, with
    ``row_labels``, ``column_labels`` and ``grid_tips``; a job's step time by rank).
    ``x_labels``/``y_labels``: the formatted ends of the axes (first, last / top)."""

    kind: str
    title: str
    bars: list[Bar] = field(default_factory=list)
    xs: list[float] = field(default_factory=list)
    series: list[Series] = field(default_factory=list)
    x_labels: tuple[str, str] = ("", "")
    y_label: str = ""
    legend: list[tuple[str, str]] = field(default_factory=list)
    """(label, colour) of what the colours mean."""
    grid: list[list[float | None]] = field(default_factory=list)
    grid_tips: list[list[str]] = field(default_factory=list)
    row_labels: list[str] = field(default_factory=list)
    column_labels: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    lead: list[str] = field(default_factory=list)
    """Prose before the tables (a headline, what the columns mean)."""
    tables: list[Table] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Prose after the tables (what was left out, what "none" means)."""
    charts: list[Chart] = field(default_factory=list)


@dataclass(frozen=True)
class Document:
    """A whole report: ``title`` (and its ``subject``, a path, set as code where the medium
    can), the ``head`` lines read first, the sections, the ``foot`` lines read last, and
    ``data``: the JSON-able document the JSON format writes as it is (its schema is the
    builder's: :mod:`explorer.report.json_report`, ``docs/job_report_schema.md``)."""

    title: str
    subject: str = ""
    head: list[Line] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    foot: list[Line] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

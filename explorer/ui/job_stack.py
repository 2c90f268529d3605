"""Several ranks' timelines one above the other, on the job's aligned clock.

One :class:`~explorer.ui.timeline.view.TimelineView` per rank under a ``rank N`` header.
Each view keeps its rank's own times; rank ``r`` is placed on the shared clock by adding
``shifts[r]`` (:func:`explorer.ui.job_model.aligned_shifts`: its start, less the clock
offset the job report measured, counted from the earliest shown rank). Zooming or panning
one view moves the others to the same stretch of the aligned clock, and every view's
extent is the union of all of theirs, so the views clamp a range alike and stay aligned.
"""

from __future__ import annotations

from typing import Any

from PyQt6.QtWidgets import QLabel, QScrollArea, QSizePolicy, QVBoxLayout, QWidget

from explorer.trace.model import TraceData
from explorer.ui.timeline.view import TimelineView
from explorer.units import fmt_ns

#: Height of one rank's timeline in the stack (the scroll area holds the rest).
RANK_H = 260


def _header(rank: int, events: int, shift_ns: int, offset_ns: int) -> str:
    """``rank 3 — 5,674 events — its 0 ms is +81.8 ms on the aligned clock (its clock
    shifted by -500 ms)``: each view's axis is the rank's own time."""
    text = f"rank {rank} — {events:,} events"
    if shift_ns:
        text += f" — its 0 ms is +{fmt_ns(shift_ns)} on the aligned clock"
    if offset_ns:
        text += f" (its clock shifted by {fmt_ns(-offset_ns)})"
    return text


class StackedTimelines(QScrollArea):
    """The chosen ranks' timelines, stacked; empty until :meth:`set_ranks`."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("stacked_timelines")
        self.setWidgetResizable(True)
        self.views: dict[int, TimelineView] = {}
        self.headers: dict[int, QLabel] = {}
        self.shifts: dict[int, int] = {}
        self._syncing = False
        self._body = QWidget(self)
        self._box = QVBoxLayout(self._body)
        self._box.setContentsMargins(0, 0, 0, 0)
        self._box.setSpacing(2)
        self.setWidget(self._body)

    def set_ranks(
        self,
        traces: dict[int, tuple[TraceData, Any]],
        shifts: dict[int, int],
        offsets: dict[int, int],
    ) -> None:
        """Show ``traces`` (rank → (trace, its steps)), rank ``r`` shifted by ``shifts[r]``;
        ``offsets`` (the report's clock offsets) are named in the headers."""
        self.clear()
        self.shifts = dict(shifts)
        self._syncing = True
        try:
            for r, (trace, steps) in sorted(traces.items()):
                label = QLabel(_header(r, len(trace.slices), shifts[r], offsets.get(r, 0)))
                label.setParent(self._body)
                label.setObjectName(f"rank_header_{r}")
                label.setStyleSheet("font-weight:bold; padding:2px 6px; background:#eef1f4")
                view = TimelineView(self._body)
                view.setMinimumHeight(RANK_H)
                view.set_trace(trace)
                view.set_steps(steps)
                label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
                self._box.addWidget(label, 0)
                self._box.addWidget(view, 1)
                self.views[r] = view
                self.headers[r] = label
            lo = min((v.extent[0] + self.shifts[r] for r, v in self.views.items()), default=0)
            hi = max((v.extent[1] + self.shifts[r] for r, v in self.views.items()), default=1)
            for r, view in self.views.items():
                view.extent = (lo - self.shifts[r], hi - self.shifts[r])
                view.visible_range_changed.connect(lambda t0, t1, r=r: self._follow(r, t0, t1))
        finally:
            self._syncing = False
        self.set_aligned_range(lo, hi)

    def clear(self) -> None:
        for w in [*self.headers.values(), *self.views.values()]:
            self._box.removeWidget(w)
            w.deleteLater()
        self.views, self.headers, self.shifts = {}, {}, {}

    def set_aligned_range(self, t0: float, t1: float) -> None:
        """Show [t0, t1] of the aligned clock (ns from the earliest shown rank) in every view."""
        self._syncing = True
        try:
            for r, view in self.views.items():
                view.set_visible_range(t0 - self.shifts[r], t1 - self.shifts[r])
        finally:
            self._syncing = False

    def aligned_range(self) -> tuple[float, float]:
        """The aligned-clock range the views show."""
        r, view = next(iter(self.views.items()))
        return view.t0 + self.shifts[r], view.t1 + self.shifts[r]

    def _follow(self, rank: int, t0: int, t1: int) -> None:
        if self._syncing:
            return
        view = self.views[rank]
        self.set_aligned_range(view.t0 + self.shifts[rank], view.t1 + self.shifts[rank])

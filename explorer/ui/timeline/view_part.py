"""What the timeline view's parts (its painter and its input handler, held by composition)
read of the view they serve: the shown trace's model, its lane index and its layout."""

from __future__ import annotations

from typing import TYPE_CHECKING

from explorer.trace_api import model_of

if TYPE_CHECKING:
    from explorer.trace.model import TraceData
    from explorer.ui.timeline.layout import TrackLayout
    from explorer.ui.timeline.lod import LaneIndex
    from explorer.ui.timeline.view import TimelineView


class ViewPart:
    """A part of ``view``. Painting and handling input only happen once a trace is shown
    (``paint`` and the handlers check ``view.trace`` first), so these are never None."""

    def __init__(self, view: TimelineView) -> None:
        self.view = view

    @property
    def trace(self) -> TraceData:
        assert self.view.trace is not None, "no trace shown"
        return model_of(self.view.trace)

    @property
    def lanes(self) -> LaneIndex:
        assert self.view.lanes is not None, "no trace shown"
        return self.view.lanes

    @property
    def layout(self) -> TrackLayout:
        assert self.view.layout_ is not None, "no trace shown"
        return self.view.layout_

"""The trace model and its readers: files on disk → columnar tables (:class:`TraceData`).

Nothing in this package imports Qt, torch or the analyses built on it. The model (numpy,
pandas) is imported on first use, so that its light modules (the memo, the step options)
can be imported without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from explorer.trace.build import trace_from_events
    from explorer.trace.model import DEVICE_KINDS, KINDS, TRACK_TYPES, TraceData

_FROM_MODEL = frozenset({"DEVICE_KINDS", "KINDS", "TRACK_TYPES", "TraceData"})


def __getattr__(name: str) -> Any:
    if name == "trace_from_events":
        from explorer.trace.build import trace_from_events

        return trace_from_events
    if name in _FROM_MODEL:
        from explorer.trace import model

        return getattr(model, name)
    raise AttributeError(f"module 'explorer.trace' has no attribute {name!r}")


__all__ = ["DEVICE_KINDS", "KINDS", "TRACK_TYPES", "TraceData", "trace_from_events"]

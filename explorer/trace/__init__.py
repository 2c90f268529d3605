"""The trace model and its readers: files on disk → columnar tables (:class:`TraceData`).

Nothing in this package imports Qt, torch or the analyses built on it.
"""

from explorer.trace.build import trace_from_events
from explorer.trace.model import DEVICE_KINDS, KINDS, TRACK_TYPES, TraceData

__all__ = ["DEVICE_KINDS", "KINDS", "TRACK_TYPES", "TraceData", "trace_from_events"]

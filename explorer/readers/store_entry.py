"""Explorer's own store entries (:mod:`explorer.store`): a directory that a job's rank
tables, ``explorer.store.write_trace`` or the trace cache wrote is read as the trace it
holds, its tables mapped rather than parsed."""

from __future__ import annotations

from pathlib import Path

from explorer.readers.json_trace import Options
from explorer.store import open_trace
from explorer.store.entry import is_entry
from explorer.trace.model import TraceData


def claims(path: Path) -> bool:
    """Is ``path`` a store entry (a directory with the store's header)?"""
    return is_entry(path)


def read(path: Path, options: Options) -> TraceData:
    """The trace the entry holds (damage is a :class:`~explorer.store.StoreDamaged`)."""
    if options.progress:
        options.progress(1.0, "loaded from the store")
    return open_trace(path)

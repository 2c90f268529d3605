"""The timeline's lane index, made off the GUI thread and kept beside the trace cache.

Indexing 10M slices into lanes (:func:`~explorer.ui.timeline.lod.build_lanes`: the row of
every slice, one stable sort, a running maximum) takes seconds; the GUI thread never waits
for it. :class:`LaneBuilder` runs in a ``QThread``:

1. colours and a fingerprint of the columns the index is made from;
2. the index cached for exactly those columns (:mod:`explorer.store.lod`, a directory next
   to the trace's cache entry), memory-mapped — done, ``ready(index, "cached")``;
3. otherwise the coarse index first (:func:`~explorer.ui.timeline.lod.track_lanes`, one lane
   per track: busy or idle per pixel, a tenth of the cost), ``coarse(index)``; then the full
   one, ``ready(index, "built")``; then it is written to the cache for the next open (a
   cache that cannot be written is not an error: the next open builds again).

:meth:`cancel` stops it at the next phase (a new trace was opened meanwhile). Builders that
run are held by this module until they finish, whoever started them: a ``QThread`` destroyed
while it runs aborts the process, so neither a closed view nor the interpreter's exit may
drop one (:func:`wait_for_builders` runs at exit).
"""

from __future__ import annotations

import atexit
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from PyQt6.QtCore import QThread, pyqtSignal

from explorer.analysis.memory_need import check_fits
from explorer.errors import ExplorerError
from explorer.store.cache import entry_path
from explorer.store.lod import fingerprint, open_lod, write_lod
from explorer.ui.timeline.colors import color_ids
from explorer.ui.timeline.lod import LANE_GROUP, LaneIndex, build_lanes, track_lanes


def lod_directory(trace_path: str, root: Path | None = None) -> Path | None:
    """Where the lane index of the trace read from ``trace_path`` is cached: beside its
    trace-cache entry (``<entry>.lanes``). None for a trace that was not read from a file."""
    if not trace_path:
        return None
    entry = entry_path(Path(trace_path), root)
    return entry.with_name(entry.name + ".lanes")


def lane_key(slices: pd.DataFrame, color: np.ndarray) -> str:
    """What a cached index must have been built from: the slices' track, depth, start,
    duration and colour, exactly."""
    return fingerprint(
        [slices[c].to_numpy() for c in ("track", "depth", "ts", "dur")] + [np.asarray(color)]
    )


#: The least memory per slice the lane index takes, as :mod:`explorer.analysis.memory_need`
#: counts: what it keeps (26 B: order, position, start, running end, colour), the coarse
#: index shown meanwhile (12 B) and the colour ids; and, while a group of
#: :data:`~explorer.ui.timeline.lod.LANE_GROUP` slices is sorted into rows, 250 B a slice of
#: the group. A floor, not the need: 8.4M slices (one track of 4.7M) took +187 MB for the
#: colours, +333 MB for the coarse index (keeping 112) and +611 MB for the full one
#: (keeping 192), over the mapped trace.
LANES_LEAST_BYTES_PER_SLICE = 40
LANES_LEAST_BYTES_PER_GROUPED_SLICE = 250


def index_phases(
    slices: pd.DataFrame, directory: Path | None, *, coarse: bool = False
) -> Iterator[tuple[str, LaneIndex]]:
    """The lane index of ``slices`` phase by phase: ``("cached", index)`` when
    ``directory`` holds one made from exactly these slices; else ``("coarse", index)``
    (with ``coarse``) and ``("built", index)``, written to ``directory`` once the consumer
    asks for more. Each phase runs only when asked for: a consumer that stops early (a
    cancelled builder) skips the rest. A cached index is mapped, not held: it is opened
    whatever the memory; building one is refused in one line when it cannot fit."""
    cache = directory is not None and directory.is_dir()
    if not cache:  # nothing to map: refuse before any work
        _check_lanes_fit(len(slices))
    color = color_ids(slices["kind"], slices["name"])
    key = lane_key(slices, color)
    cached = open_lod(directory, key) if directory is not None and cache else None
    if cached is not None:
        yield "cached", LaneIndex.from_arrays(cached, slices["dur"].to_numpy())
        return
    if cache:
        _check_lanes_fit(len(slices))
    if coarse:
        yield "coarse", track_lanes(slices, color)
    lanes = build_lanes(slices, color)
    yield "built", lanes
    if directory is not None:
        save_lanes(lanes, directory, key)


def _check_lanes_fit(n: int) -> None:
    need = LANES_LEAST_BYTES_PER_SLICE * n + LANES_LEAST_BYTES_PER_GROUPED_SLICE * min(
        n, LANE_GROUP
    )
    check_fits(
        "the trace",
        n,
        -(-need // max(n, 1)),
        "the timeline's lane index",
        "info, sql and export --no-results work within it",
    )


def open_or_build(slices: pd.DataFrame, directory: Path | None) -> tuple[LaneIndex, str]:
    """The full lane index, synchronously (scripts, tests): ``(index, "cached" | "built")``.
    The viewer uses :class:`LaneBuilder`."""
    for how, lanes in index_phases(slices, directory):
        result = lanes, how
    return result


def save_lanes(lanes: LaneIndex, directory: Path, key: str) -> bool:
    """Cache ``lanes`` under ``key``; False when the cache cannot be written."""
    try:
        write_lod(directory, lanes.arrays(), key)
    except (OSError, ExplorerError):
        return False
    return True


#: Builders started and not yet finished (see the module docstring).
_RUNNING: set[LaneBuilder] = set()


def wait_for_builders() -> None:
    """Cancel every running builder and wait for each to finish (at exit, or on quit)."""
    for builder in list(_RUNNING):
        builder.cancel()
        builder.wait()
    _RUNNING.clear()


atexit.register(wait_for_builders)


class LaneBuilder(QThread):
    """Makes one trace's lane index. Signals: ``coarse(builder, index)`` (one lane per
    track, only when the full index has to be built), ``ready(builder, index, "cached" |
    "built")``, or ``failed(builder, message)`` — each names its builder, so a view ignores
    one it has replaced."""

    coarse = pyqtSignal(object, object)  # (this builder, index)
    ready = pyqtSignal(object, object, str)  # (this builder, index, how)
    failed = pyqtSignal(object, str)  # (this builder, one-line message)

    def __init__(self, slices: pd.DataFrame, directory: Path | None, parent: Any = None) -> None:
        super().__init__(parent)
        self.slices = slices
        self.directory = directory
        self._cancel = False

    def cancel(self) -> None:
        self._cancel = True

    def begin(self) -> None:
        """Start the thread, held by this module until it has finished."""
        _RUNNING.difference_update([b for b in _RUNNING if b.isFinished()])
        _RUNNING.add(self)
        self.start()

    @staticmethod
    def running() -> int:
        """How many builders are still running."""
        return sum(not b.isFinished() for b in _RUNNING)

    def run(self) -> None:  # runs in the worker thread
        try:
            self._index()
        except Exception as exc:  # noqa: BLE001 - a failed index (memory) must not kill the UI
            self.failed.emit(self, traceback.format_exception_only(type(exc), exc)[-1].strip())

    def _index(self) -> None:
        for how, lanes in index_phases(self.slices, self.directory, coarse=True):
            if self._cancel:
                return
            if how == "coarse":
                self.coarse.emit(self, lanes)
            else:
                self.ready.emit(self, lanes, how)

"""Which rows the timeline shows, in what order, and where (no Qt here).

Rows are grouped by process: a host process with its threads, each device with its
streams, and counter rows (the trace's counters, plus allocated memory per device from the
``memory`` table). Groups collapse to their header; any track or counter row can be pinned,
which moves it into a "Pinned" group at the top.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from explorer.analysis.memory import memory_timeline
from explorer.trace.model import TraceData
from explorer.ui.timeline.lod import LaneIndex

LANE_H = 18
COMPACT_LANES = 8  # lanes a compacted track shows
AUTO_COMPACT = 40  # tracks deeper than this start compacted (runaway Python stacks)
HEADER_H = 22
COUNTER_H = 40
PINNED = "g:pinned"
#: A device with more stream/queue rows than this starts collapsed to its summary row, so
#: the host threads stay on screen (MTIA traces have 24 queues); a click expands it.
MANY_STREAMS = 8

_ACCELERATORS = ("device", "gpu", "mtia", "xpu", "hpu", "npu", "tpu", "neuron", "cuda", "hip")


def _names_a_device(label: str) -> bool:
    """Whether a process label already says it is an accelerator (``GPU 0``, ``MTIA 17``)."""
    low = label.lower()
    return any(word in low for word in _ACCELERATORS)


@dataclass
class CounterSeries:
    """One counter row's samples, sorted by time."""

    label: str
    ts: np.ndarray
    values: np.ndarray
    unit: str = ""
    peak: float | None = None  # the row's scale, filled in when first drawn


@dataclass
class Row:
    """One visible row. ``kind`` is ``group`` (a collapsible header), ``track`` (a slice
    track with one lane per row of :func:`~explorer.trace.nesting.timeline_rows`, parents
    above children) or ``counter``; ``key`` is stable across layouts."""

    kind: str
    key: str
    label: str
    height: int
    group: str
    track: int = -1
    lanes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    series: int = -1
    device: bool = False
    y: int = 0
    all_lanes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def hidden_lanes(self) -> int:
        """Lanes of a compacted track that are not shown."""
        return len(self.all_lanes) - len(self.lanes)


def counter_series(trace: TraceData) -> tuple[list[CounterSeries], list[tuple[str, str]]]:
    """Counter rows: every counter track, then allocated memory per device.
    Returns the series and, for each, (group key, group label)."""
    series: list[CounterSeries] = []
    groups: list[tuple[str, str]] = []
    counters = trace.counters
    if len(counters):
        tracks = trace.tracks.set_index("id")
        for track_id, part in counters.groupby("track", sort=True, observed=True):
            part = part.sort_values("ts", kind="stable")
            t = tracks.loc[int(track_id)] if int(track_id) in tracks.index else None
            label = str(t["thread"] or t["label"]) if t is not None else f"counter {track_id}"
            process = str(t["process"]) if t is not None else "Counters"
            series.append(
                CounterSeries(label, part["ts"].to_numpy(), part["value"].to_numpy(float))
            )
            groups.append((f"g:{t['pid'] if t is not None else 'counters'}", process))
    # The Memory panel's curves (the allocator's totals, or the running sum where a trace
    # lacks them), so a memory row and the panel never disagree.
    curves = memory_timeline(trace)
    for device, part in curves.groupby("device", sort=True):
        values = part["allocated"].to_numpy(float)
        series.append(CounterSeries(f"allocated {device}", part["ts"].to_numpy(), values, "B"))
        groups.append(("g:memory", "Memory"))
    return series, groups


class TrackLayout:
    """The ordered rows of one trace, with collapse and pin state."""

    def __init__(
        self, trace: TraceData, lanes: LaneIndex, expanded: frozenset[str] = frozenset()
    ) -> None:
        """``expanded``: labels of many-stream device groups the user opened before."""
        self.collapsed: set[str] = set()
        self.pinned: list[str] = []
        self.compact: set[str] = set()  # track rows showing only their first lanes
        self.series, series_groups = counter_series(trace)
        self._groups: dict[str, str] = {}  # key -> label, in display order
        self._members: dict[str, list[Row]] = {}
        # Device streams first (what the accelerator did is the first question), then the
        # host, each in the reader's display order.
        tracks = trace.tracks.assign(_host=trace.tracks["type"] != "device_stream")
        tracks = tracks.sort_values(["_host", "order", "id"], kind="stable")
        lane_tracks = lanes.lane_track
        for t in tracks.itertuples(index=False):
            tid = int(t.id)
            lo = int(np.searchsorted(lane_tracks, tid, "left"))
            hi = int(np.searchsorted(lane_tracks, tid, "right"))
            if hi == lo:
                continue  # counter tracks and empty tracks have no slices
            group = f"g:{t.pid}"
            is_device = str(t.type) == "device_stream"
            label = str(t.process) or str(t.pid)
            if is_device and int(t.device) >= 0 and not _names_a_device(label):
                label = f"Device {int(t.device)} · {label}"
            self._add_group(group, label)
            self._members[group].append(
                Row(
                    kind="track",
                    key=f"t:{tid}",
                    label=str(t.thread) or str(t.label),
                    height=(hi - lo) * LANE_H + 4,
                    group=group,
                    track=tid,
                    lanes=np.arange(lo, hi),
                    device=is_device,
                    all_lanes=np.arange(lo, hi),
                )
            )
            if hi - lo > AUTO_COMPACT:
                self.compact.add(f"t:{tid}")
        for i, (group, label) in enumerate(series_groups):
            self._add_group(group, label)
            s = self.series[i]
            self._members[group].append(
                Row("counter", f"c:{i}", s.label, COUNTER_H, group, series=i)
            )
        for group, label in self._groups.items():
            streams = [r for r in self._members[group] if r.device]
            if len(streams) > MANY_STREAMS and label not in expanded:
                self.collapsed.add(group)
        self.rows: list[Row] = []
        self.height = 0
        self.relayout()

    def _add_group(self, key: str, label: str) -> None:
        if key not in self._groups:
            self._groups[key] = label
            self._members[key] = []

    # -- state ---------------------------------------------------------------------------
    def toggle_collapsed(self, group: str) -> None:
        self.collapsed.symmetric_difference_update({group})
        self.relayout()

    def toggle_pinned(self, key: str) -> None:
        if key in self.pinned:
            self.pinned.remove(key)
        else:
            self.pinned.append(key)
        self.relayout()

    def toggle_compact(self, key: str) -> None:
        """Show a deep track's first lanes only, or all of them again."""
        self.compact.symmetric_difference_update({key})
        self.relayout()

    def members(self, group: str) -> list[Row]:
        """The track and counter rows of one group (shown or not)."""
        return list(self._members.get(group, []))

    def group_labels(self) -> dict[str, str]:
        return dict(self._groups)

    def all_rows(self) -> list[Row]:
        """Every track and counter row, collapsed or not."""
        return [r for rows in self._members.values() for r in rows]

    # -- geometry ------------------------------------------------------------------------
    def relayout(self) -> None:
        """Recompute the visible rows and their y positions."""
        by_key = {r.key: r for r in self.all_rows()}
        for r in by_key.values():
            if r.kind == "track":
                n = COMPACT_LANES if r.key in self.compact else len(r.all_lanes)
                r.lanes = r.all_lanes[:n]
                r.height = len(r.lanes) * LANE_H + 4 + (LANE_H if r.hidden_lanes else 0)
        out: list[Row] = []
        pinned = [by_key[k] for k in self.pinned if k in by_key]
        if pinned:
            out.append(Row("group", PINNED, "Pinned", HEADER_H, PINNED))
            if PINNED not in self.collapsed:
                out.extend(pinned)
        pinned_keys = set(self.pinned)
        for group, label in self._groups.items():
            members = [r for r in self._members[group] if r.key not in pinned_keys]
            if not members:
                continue
            n_dev = sum(r.device for r in members)
            out.append(Row("group", group, label, HEADER_H, group, device=n_dev > 0))
            if group not in self.collapsed:
                out.extend(members)
        y = 0
        for r in out:
            r.y = y
            y += r.height
        self.rows = out
        self.height = y
        self._tops = np.array([r.y for r in out] + [y], dtype=np.int64)

    def row_at(self, y: float) -> Row | None:
        """The row at content height ``y`` (0 = top of the first row)."""
        if not self.rows or y < 0 or y >= self.height:
            return None
        return self.rows[int(np.searchsorted(self._tops, y, "right")) - 1]

    def rows_between(self, y0: float, y1: float) -> list[Row]:
        """The rows that overlap content heights [y0, y1)."""
        if not self.rows:
            return []
        first = max(int(np.searchsorted(self._tops, y0, "right")) - 1, 0)
        last = int(np.searchsorted(self._tops, y1, "left"))
        return self.rows[first:last]

    def row_of_track(self, track: int) -> Row | None:
        for r in self.rows:
            if r.kind == "track" and r.track == track:
                return r
        return None

    def group_of_track(self, track: int) -> str | None:
        for r in self.all_rows():
            if r.kind == "track" and r.track == track:
                return r.group
        return None

    def lane_y(self, row: Row, lane: int) -> int:
        """Content y of a lane's top inside its track row."""
        return row.y + 2 + int(lane - row.lanes[0]) * LANE_H

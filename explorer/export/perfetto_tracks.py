"""The track layout of an exported Perfetto trace: which rows a person sees and how they
are grouped.

- one process per host process (``ProcessDescriptor``, named with its rank in a
  distributed trace), its threads beneath (``ThreadDescriptor``);
- one group per device (``GPU 0``, ``MTIA 17``...) with one row per stream or queue;
- counter rows (memory allocated/reserved per device, host CPU and memory samples,
  device utilisation) beside the process or device they describe;
- sibling rows (``"stream 7 (overlap 1)"``) for slices that overlap without nesting on
  their source track (see :mod:`explorer.export.lanes`);
- an ``Explorer`` group holding Explorer's own results (findings, critical path).

Track uuids are small integers handed out in order, so they cost one or two bytes on
every packet. Everything here is one loop per track, never per event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from explorer.trace.kinds import DEVICE_TYPES
from explorer.trace.model import TraceData

EXPLICIT = pb.TrackDescriptor.ChildTracksOrdering.EXPLICIT
BYTES = pb.CounterDescriptor.Unit.UNIT_SIZE_BYTES

#: Synthetic pids/tids for processes and threads whose id in the file is not a number.
SYNTHETIC_ID_BASE = 1 << 22


@dataclass
class IdSpace:
    """Where one trace's ids start, so that several traces can share one file (a job's
    ranks): track uuids, flow ids and synthetic pids/tids are unique across the file only
    when each trace starts where the previous one stopped
    (:attr:`~explorer.export.perfetto.PerfettoExport.next_ids`).

    ``group`` = ``(name, pid)`` puts every row of the trace under one process of that name
    (threads, devices, counters, Explorer's rows): a rank's process group in a job trace.
    ``shift_ns`` is subtracted from every timestamp (a rank's clock offset)."""

    first_uuid: int = 1
    first_flow: int = 1
    first_synthetic: int = SYNTHETIC_ID_BASE
    group: tuple[str, int] | None = None
    shift_ns: int = 0


@dataclass
class TrackLayout:
    """Descriptors to write first, and the uuid every slice, counter and instant goes to."""

    descriptors: list[pb.TrackDescriptor] = field(default_factory=list)
    track_uuid: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Lane-0 uuid of each trace track (``tracks.id`` → uuid)."""
    slice_uuid: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """uuid of the row each slice is drawn on (its track, or a sibling lane)."""
    memory_uuids: dict[tuple[int, int, str], int] = field(default_factory=dict)
    """(device_type, device, "allocated"|"reserved") → counter track uuid."""
    group_uuid: dict[str, int] = field(default_factory=dict)
    """Named top-level groups: ``"explorer"`` and ``"instants"`` when present."""
    lane_tracks: int = 0
    """How many sibling rows were added for overlapping slices."""
    root: int = 0
    """The process every top-level group hangs under (0: none; see :class:`IdSpace`)."""
    next_synthetic: int = SYNTHETIC_ID_BASE
    """The first synthetic pid/tid this layout did not use."""
    _next: int = 1

    def new_uuid(self) -> int:
        uuid = self._next
        self._next += 1
        return uuid

    def add(self, **kw: object) -> int:
        """Describe one track (keyword args of ``TrackDescriptor``); returns its uuid."""
        uuid = self.new_uuid()
        self.descriptors.append(pb.TrackDescriptor(uuid=uuid, **kw))
        return uuid

    def add_top(self, **kw: object) -> int:
        """A top-level group: under :attr:`root` when the layout has one."""
        return self.add(parent_uuid=self.root, **kw) if self.root else self.add(**kw)

    def add_lanes(self, parent: int, name: str, count: int, rank: int, start: int = 0) -> list[int]:
        """Rows ``start..count-1`` under ``parent`` for one source track: row 0 is named
        ``name``, the others are its overlap siblings."""
        out = []
        for k in range(start, count):
            label = name if k == 0 else f"{name} (overlap {k})"
            out.append(self.add(parent_uuid=parent, name=label, sibling_order_rank=rank * 64 + k))
        self.lane_tracks += max(count - 1, 0)
        return out


def _as_int(text: str) -> int | None:
    """A pid or tid as Perfetto's descriptors hold it (int32); None when it is not a number
    or beyond int32 (pid -2^63, a 64-bit thread handle): a synthetic one stands in, and
    the track's name keeps the trace's."""
    try:
        num = int(str(text))
    except ValueError:
        return None
    return num if -(2**31) <= num < 2**31 else None


class _Groups:
    """The process and device groups of a layout, made on first use."""

    def __init__(self, trace: TraceData, layout: TrackLayout, ids: IdSpace) -> None:
        self.layout = layout
        self.rank = trace.rank
        self.device_names = _device_names(trace)
        self.process_uuid: dict[str, int] = {}
        self.process_pid: dict[str, int] = {}
        self.device_uuid: dict[int, int] = {}
        n = len(trace.tracks)
        first = ids.first_synthetic
        layout.next_synthetic = first + 10 * n + 10
        self.synthetic = iter(range(first, layout.next_synthetic))
        self.group = ids.group
        if ids.group is not None:
            name, pid = ids.group
            desc = pb.ProcessDescriptor(pid=pid, process_name=name)
            layout.root = layout.add(process=desc, child_ordering=EXPLICIT)

    def process(self, pid: str, label: str, track_rank: int) -> int:
        if self.group is not None:  # one process for the whole trace: its threads beneath
            self.process_uuid.setdefault(pid, self.layout.root)
            self.process_pid.setdefault(pid, self.group[1])
        if pid not in self.process_uuid:
            num = _as_int(pid)
            num = next(self.synthetic) if num is None else num
            r = track_rank if track_rank >= 0 else self.rank
            name = label + (f" [rank {r}]" if r >= 0 else "")
            desc = pb.ProcessDescriptor(pid=num, process_name=name)
            if r >= 0:
                desc.process_labels.append(f"rank {r}")
            self.process_uuid[pid] = self.layout.add(process=desc, child_ordering=EXPLICIT)
            self.process_pid[pid] = num
        return self.process_uuid[pid]

    def device(self, device: int, label: str) -> int:
        if device not in self.device_uuid:
            # the device as the trace names it ("GPU 0", "MTIA 17", "Neuron 0")
            name = label or (f"Device {device}" if device >= 0 else "Device")
            if device in self.device_names:
                name += f" ({self.device_names[device]})"
            if self.rank >= 0:
                name += f" [rank {self.rank}]"
            self.device_uuid[device] = self.layout.add_top(name=name, child_ordering=EXPLICIT)
        return self.device_uuid[device]


def build_layout(
    trace: TraceData, lanes: np.ndarray, *, has_global_instants: bool, ids: IdSpace | None = None
) -> TrackLayout:
    """Lay out every track of ``trace``; ``lanes`` is each slice's lane (0 = own row)."""
    ids = ids or IdSpace()
    layout = TrackLayout(_next=ids.first_uuid)
    tracks = trace.tracks
    layout.track_uuid = np.zeros(len(tracks), np.int64)
    slice_track = trace.slices["track"].to_numpy()
    lane_count = np.ones(len(tracks), np.int64)
    if len(slice_track):
        np.maximum.at(lane_count, slice_track, lanes.astype(np.int64) + 1)
    groups = _Groups(trace, layout, ids)
    ordered = tracks.sort_values("order", kind="stable")
    lane_uuid = _slice_rows(ordered, groups, lane_count)
    # counters after the slice rows, so they can sit beside their process or device
    lane_uuid |= _counter_rows(ordered[ordered["type"] == "counter"], groups)
    _memory_tracks(trace, layout, groups)
    layout.slice_uuid = np.zeros(len(slice_track), np.int64)
    for tid, uuids in lane_uuid.items():
        layout.track_uuid[tid] = uuids[0]
        sel = slice_track == tid
        if sel.any():
            layout.slice_uuid[sel] = np.asarray(uuids, np.int64)[lanes[sel]]
    if has_global_instants:
        layout.group_uuid["instants"] = layout.add_top(name="Global instants")
    return layout


def _slice_rows(ordered: Any, groups: _Groups, lane_count: np.ndarray) -> dict[int, list[int]]:
    """Each thread or stream's row and its overlap lanes: track id → lane uuids."""
    layout = groups.layout
    out: dict[int, list[int]] = {}
    for row in ordered.itertuples(index=False):
        tid, order = int(row.id), int(row.order)
        if row.type == "device_stream":
            group = groups.device(int(row.device), str(row.process))
            out[tid] = layout.add_lanes(group, str(row.thread), int(lane_count[tid]), order)
        elif row.type != "counter":
            parent = groups.process(str(row.pid), str(row.process), int(row.rank))
            num_tid = _as_int(row.tid)
            thread = pb.ThreadDescriptor(
                pid=groups.process_pid[str(row.pid)],
                tid=next(groups.synthetic) if num_tid is None else num_tid,
                thread_name=str(row.thread),
            )
            first = layout.add(parent_uuid=parent, thread=thread, sibling_order_rank=order * 64)
            rest = layout.add_lanes(parent, str(row.thread), int(lane_count[tid]), order, start=1)
            out[tid] = [first, *rest]
    return out


def _counter_rows(counters: Any, groups: _Groups) -> dict[int, list[int]]:
    """Counter tracks beside their device, else their process: track id → [uuid]."""
    out: dict[int, list[int]] = {}
    for row in counters.itertuples(index=False):
        if int(row.device) >= 0 and int(row.device) in groups.device_uuid:
            parent = groups.device_uuid[int(row.device)]
        elif str(row.pid) in groups.process_uuid:
            parent = groups.process_uuid[str(row.pid)]
        else:
            parent = groups.process(str(row.pid), str(row.process), int(row.rank))
        out[int(row.id)] = [
            groups.layout.add(
                parent_uuid=parent,
                name=str(row.thread) or str(row.label),
                counter=pb.CounterDescriptor(),
                sibling_order_rank=int(row.order) * 64,
            )
        ]
    return out


def _memory_tracks(trace: TraceData, layout: TrackLayout, groups: _Groups) -> None:
    """Counter rows for the allocator's running totals, one pair per device."""
    mem = trace.memory
    if mem is None or len(mem) == 0:
        return
    keys = mem[["device_type", "device"]].drop_duplicates().sort_values(["device_type", "device"])
    for dtype, dev in keys.itertuples(index=False):
        dtype, dev = int(dtype), int(dev)
        if dtype == 0:  # host memory: beside the process that allocated it
            first = mem[(mem["device_type"] == 0)]
            track = int(first["track"].iat[0]) if len(first) else -1
            pid = str(trace.tracks["pid"].iat[track]) if track >= 0 else ""
            parent = groups.process_uuid.get(pid) or next(iter(groups.process_uuid.values()), None)
            label = "CPU memory"
        else:
            parent = groups.device_uuid.get(dev) or groups.device(dev, f"device {dev}")
            label = f"{DEVICE_TYPES.get(dtype, f'device_type{dtype}')}:{dev} memory"
        for what in ("allocated", "reserved"):
            parent = parent or layout.root
            kw = {"parent_uuid": parent} if parent else {}
            layout.memory_uuids[(dtype, dev, what)] = layout.add(
                name=f"{label} {what}",
                counter=pb.CounterDescriptor(unit=BYTES),
                sibling_order_rank=-2 if what == "allocated" else -1,
                **kw,
            )


def _device_names(trace: TraceData) -> dict[int, str]:
    """Device index → model name, from the ``deviceProperties`` the profiler recorded."""
    out: dict[int, str] = {}
    props = trace.metadata.get("deviceProperties")
    if isinstance(props, list):
        for p in props:
            if isinstance(p, dict) and "id" in p and p.get("name"):
                try:
                    out[int(p["id"])] = str(p["name"])
                except (TypeError, ValueError):
                    continue
    return out

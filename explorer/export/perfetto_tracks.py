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

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from explorer.trace.model import TraceData

EXPLICIT = pb.TrackDescriptor.ChildTracksOrdering.EXPLICIT
BYTES = pb.CounterDescriptor.Unit.UNIT_SIZE_BYTES

#: Synthetic pids/tids for processes and threads whose id in the file is not a number.
_SYNTHETIC_ID_BASE = 1 << 22


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
    try:
        return int(str(text))
    except ValueError:
        return None


def build_layout(trace: TraceData, lanes: np.ndarray, *, has_global_instants: bool) -> TrackLayout:
    """Lay out every track of ``trace``; ``lanes`` is each slice's lane (0 = own row)."""
    layout = TrackLayout()
    tracks = trace.tracks
    n_tracks = len(tracks)
    layout.track_uuid = np.zeros(n_tracks, np.int64)
    slice_track = trace.slices["track"].to_numpy()
    lane_count = np.ones(n_tracks, np.int64)
    if len(slice_track):
        np.maximum.at(lane_count, slice_track, lanes.astype(np.int64) + 1)
    lane_uuid: dict[int, list[int]] = {}

    ordered = tracks.sort_values("order", kind="stable")
    process_uuid: dict[str, int] = {}
    process_pid: dict[str, int] = {}
    device_uuid: dict[int, int] = {}
    synthetic = iter(range(_SYNTHETIC_ID_BASE, _SYNTHETIC_ID_BASE + 10 * n_tracks + 10))
    rank = trace.rank

    def process_for(pid: str, label: str, track_rank: int) -> int:
        if pid not in process_uuid:
            num = _as_int(pid)
            num = next(synthetic) if num is None else num
            r = track_rank if track_rank >= 0 else rank
            name = label + (f" [rank {r}]" if r >= 0 else "")
            desc = pb.ProcessDescriptor(pid=num, process_name=name)
            if r >= 0:
                desc.process_labels.append(f"rank {r}")
            process_uuid[pid] = layout.add(process=desc, child_ordering=EXPLICIT)
            process_pid[pid] = num
        return process_uuid[pid]

    device_names = _device_names(trace)

    def device_group(device: int, label: str) -> int:
        if device not in device_uuid:
            # the device as the trace names it ("GPU 0", "MTIA 17", "Neuron 0")
            name = label or (f"Device {device}" if device >= 0 else "Device")
            if device in device_names:
                name += f" ({device_names[device]})"
            if rank >= 0:
                name += f" [rank {rank}]"
            device_uuid[device] = layout.add(name=name, child_ordering=EXPLICIT)
        return device_uuid[device]

    for row in ordered.itertuples(index=False):
        tid = int(row.id)
        order = int(row.order)
        if row.type == "device_stream":
            group = device_group(int(row.device), str(row.process))
            uuids = layout.add_lanes(group, str(row.thread), int(lane_count[tid]), order)
        elif row.type == "counter":
            continue  # after the slice rows, so they can sit beside their process or device
        else:
            parent = process_for(str(row.pid), str(row.process), int(row.rank))
            count = int(lane_count[tid])
            num_tid = _as_int(row.tid)
            thread = pb.ThreadDescriptor(
                pid=process_pid[str(row.pid)],
                tid=next(synthetic) if num_tid is None else num_tid,
                thread_name=str(row.thread),
            )
            first = layout.add(parent_uuid=parent, thread=thread, sibling_order_rank=order * 64)
            uuids = [first, *layout.add_lanes(parent, str(row.thread), count, order, start=1)]
        lane_uuid[tid] = uuids
        layout.track_uuid[tid] = uuids[0]

    for row in ordered[ordered["type"] == "counter"].itertuples(index=False):
        tid = int(row.id)
        if int(row.device) >= 0 and int(row.device) in device_uuid:
            parent = device_uuid[int(row.device)]
        elif str(row.pid) in process_uuid:
            parent = process_uuid[str(row.pid)]
        else:
            parent = process_for(str(row.pid), str(row.process), int(row.rank))
        layout.track_uuid[tid] = layout.add(
            parent_uuid=parent,
            name=str(row.thread) or str(row.label),
            counter=pb.CounterDescriptor(),
            sibling_order_rank=int(row.order) * 64,
        )
        lane_uuid[tid] = [int(layout.track_uuid[tid])]

    _memory_tracks(trace, layout, process_uuid, device_uuid, device_group)

    layout.slice_uuid = np.zeros(len(slice_track), np.int64)
    for tid, uuids in lane_uuid.items():
        sel = slice_track == tid
        if not sel.any():
            continue
        layout.slice_uuid[sel] = np.asarray(uuids, np.int64)[lanes[sel]]
    if has_global_instants:
        layout.group_uuid["instants"] = layout.add(name="Global instants")
    return layout


def _memory_tracks(trace, layout, process_uuid, device_uuid, device_group) -> None:
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
            parent = process_uuid.get(pid) or next(iter(process_uuid.values()), None)
            label = "CPU memory"
        else:
            parent = device_uuid.get(dev) or device_group(dev, f"device {dev}")
            label = f"{_device_type_name(dtype)}:{dev} memory"
        for what in ("allocated", "reserved"):
            kw = {"parent_uuid": parent} if parent else {}
            layout.memory_uuids[(dtype, dev, what)] = layout.add(
                name=f"{label} {what}",
                counter=pb.CounterDescriptor(unit=BYTES),
                sibling_order_rank=-2 if what == "allocated" else -1,
                **kw,
            )


def _device_type_name(device_type: int) -> str:
    """torch's DeviceType numbers as Kineto writes them into ``[memory]`` events."""
    names = {
        0: "cpu",
        1: "cuda",
        2: "mkldnn",
        3: "opengl",
        4: "opencl",
        5: "ideep",
        6: "hip",
        7: "fpga",
        8: "maia",
        9: "xla",
        10: "vulkan",
        11: "metal",
        12: "xpu",
        13: "mps",
        14: "meta",
        15: "hpu",
        16: "ve",
        17: "lazy",
        18: "ipu",
        19: "mtia",
        20: "privateuse1",
    }
    return names.get(device_type, f"device_type{device_type}")


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

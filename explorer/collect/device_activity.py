"""Device activity written by backends that have no profiler plugin of their own.

A PrivateUse1 backend implemented in Python (Explorer's ``neuron`` test backend, or an
early port of a real one) runs its kernels and copies where Kineto cannot see them: the
trace would show the host ops and nothing on the device. Such a backend reports each kernel
and copy here, with the times it measured; while a collector records, they become standard
Kineto events — a host runtime call (``privateuse1_runtime``) linked by a correlation id and
an ``ac2g`` flow to a device slice (``kernel`` / ``gpu_memcpy``) on the device's own process
— so every reader, analysis and export treats them like a GPU's. Outside a collector the
calls cost one attribute check.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

from explorer.collect.event_buffer import EventBuffer

_lock = threading.Lock()
_buffer: EventBuffer | None = None
_correlation = itertools.count(1 << 40)  # far above Kineto's own ids in the same trace
_named: set[tuple[int, str]] = set()


def attach(buffer: EventBuffer) -> None:
    """Send device activity to ``buffer`` (called by the collector as it starts)."""
    global _buffer
    with _lock:
        _buffer = buffer
        _named.clear()


def detach(buffer: EventBuffer) -> None:
    """Stop sending to ``buffer`` (a no-op if another collector took over since)."""
    global _buffer
    with _lock:
        if _buffer is buffer:
            _buffer = None


def recording() -> bool:
    """Whether a collector is recording device activity now."""
    return _buffer is not None


def device_pid(index: int) -> int:
    """The trace process id of device ``index`` (Kineto's convention: the device index)."""
    return int(index)


def _name_device(buffer: EventBuffer, index: int, label: str, ts_ns: int) -> None:
    key = (index, label)
    if key in _named:
        return
    _named.add(key)
    for name, args in (("process_name", {"name": label}), ("process_labels", {"labels": label})):
        buffer.events.append(
            {"ph": "M", "name": name, "pid": device_pid(index), "tid": 0, "ts_ns": ts_ns,
             "args": args}
        )  # fmt: skip


def record(
    *,
    device_type: str,
    index: int,
    kind: str,
    name: str,
    runtime_call: str,
    start_ns: int,
    end_ns: int,
    args: dict[str, Any] | None = None,
    stream: int = 0,
) -> None:
    """One kernel (``kind="kernel"``) or copy (``kind="gpu_memcpy"``) measured by a backend.

    The host side is a runtime call on the calling thread over the same interval (the
    backend ran it synchronously); the device side a slice on ``stream`` of the device's
    process, labelled as the device names itself (``"Neuron 0"`` → ``neuron:0``)."""
    buffer = _buffer
    if buffer is None:
        return
    corr = next(_correlation)
    host_tid = threading.get_native_id()
    label = f"{device_type.capitalize()} {index}"
    with _lock:
        _name_device(buffer, index, label, start_ns)
    dur = max(int(end_ns) - int(start_ns), 0)
    common = {"correlation": corr}
    buffer.events.append(
        {"ph": "X", "cat": "privateuse1_runtime", "name": runtime_call, "pid": buffer.pid,
         "tid": host_tid, "ts_ns": int(start_ns), "dur_ns": dur, "args": dict(common)}
    )  # fmt: skip
    buffer.events.append(
        {"ph": "X", "cat": kind, "name": name, "pid": device_pid(index), "tid": stream,
         "ts_ns": int(start_ns), "dur_ns": dur,
         "args": {**common, "device": index, "stream": stream, **(args or {})}}
    )  # fmt: skip
    for ph, pid, tid in (("s", buffer.pid, host_tid), ("f", device_pid(index), stream)):
        flow = {"ph": ph, "cat": "ac2g", "name": "ac2g", "id": corr, "pid": pid, "tid": tid,
                "ts_ns": int(start_ns)}  # fmt: skip
        if ph == "f":
            flow["bp"] = "e"
        buffer.events.append(flow)

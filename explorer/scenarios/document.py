"""The Kineto JSON document around a simulated run: metadata events, device properties,
the profiler's own span, and the top-level keys that mark it synthetic."""

from __future__ import annotations

from typing import Any

from explorer.scenarios.simulator import (
    BASE_NS,
    COMPUTE_STREAM,
    COPY_STREAM,
    DEVICE,
    HOST_PID,
    MAIN_TID,
    us,
)

DEVICE_PROPERTIES = [
    {
        "id": DEVICE,
        "name": "Synthetic GPU (simulated A100-class)",
        "totalGlobalMem": 42297524224,
        "computeMajor": 8,
        "computeMinor": 0,
        "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536,
        "regsPerMultiprocessor": 65536,
        "warpSize": 32,
        "sharedMemPerBlock": 49152,
        "sharedMemPerMultiprocessor": 167936,
        "numSms": 108,
        "sharedMemPerBlockOptin": 166912,
    }
]
#: The earliest timestamp in every generated file (its metadata events), a whole µs: a
#: reader that puts ``ts == 0`` at the earliest event puts it here.
ORIGIN_NS = BASE_NS - 50_000
#: Wall-clock ns of ``BASE_NS`` on the trace clock, as Kineto writes it.
BASE_TIME_NANOSECONDS = 1_764_000_000_000_000_000


def metadata_events(
    start_ns: int, streams: tuple[int, ...] = (COMPUTE_STREAM, COPY_STREAM)
) -> list[dict[str, Any]]:
    """``ph: M`` events naming the host process/thread and the device and its streams, the
    way recent torch writes them (device process named after the host, labelled ``GPU 0``)."""
    ts = us(start_ns)

    def m(name: str, pid: Any, tid: Any, args: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "ph": "M", "ts": ts, "pid": pid, "tid": tid, "args": args}

    out = [
        m("process_name", HOST_PID, 0, {"name": "python3"}),
        m("process_labels", HOST_PID, 0, {"labels": "CPU"}),
        m("process_sort_index", HOST_PID, 0, {"sort_index": HOST_PID}),
        m("process_name", DEVICE, 0, {"name": "python3"}),
        m("process_labels", DEVICE, 0, {"labels": f"GPU {DEVICE}"}),
        m("process_sort_index", DEVICE, 0, {"sort_index": 16777216 + DEVICE}),
        m("thread_name", HOST_PID, MAIN_TID, {"name": f"thread {MAIN_TID} (python3)"}),
        m("thread_sort_index", HOST_PID, MAIN_TID, {"sort_index": MAIN_TID}),
    ]
    for s in streams:
        out.append(m("thread_name", DEVICE, s, {"name": f"stream {s} "}))
        out.append(m("thread_sort_index", DEVICE, s, {"sort_index": s}))
    out.append(m("process_sort_index", "Spans", 0, {"sort_index": 536870912}))
    return out


def profiler_span(start_ns: int, end_ns: int) -> list[dict[str, Any]]:
    """The ``PyTorch Profiler (0)`` span and iteration instant every Kineto trace carries."""
    return [
        {
            "ph": "X",
            "cat": "Trace",
            "ts": us(start_ns),
            "dur": us(end_ns - start_ns),
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "name": "PyTorch Profiler (0)",
            "args": {"Op count": 0},
        },
        {
            "name": "Iteration Start: PyTorch Profiler",
            "ph": "i",
            "s": "g",
            "pid": "Traces",
            "tid": "Trace PyTorch Profiler",
            "ts": us(start_ns),
        },
    ]


def kineto_document(
    name: str,
    events: list[dict[str, Any]],
    end_ns: int,
    injected: list[dict[str, Any]],
    scenario: dict[str, Any],
) -> dict[str, Any]:
    """The whole file: ``traceEvents`` plus the top-level keys torch writes, and Explorer's
    ``synthetic`` / ``explorer_injected`` / ``explorer_scenario`` labels."""
    start = ORIGIN_NS
    return {
        "schemaVersion": 1,
        "deviceProperties": DEVICE_PROPERTIES,
        "record_shapes": 1,
        "with_stack": 1,
        "profile_memory": 1,
        "traceName": f"synthetic:{name}",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASE_TIME_NANOSECONDS,
        "synthetic": True,
        "explorer_scenario": scenario,
        "explorer_injected": injected,
        "traceEvents": metadata_events(start) + events + profiler_span(start, end_ns + 50_000),
    }

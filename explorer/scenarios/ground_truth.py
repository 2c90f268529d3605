"""Exact sizes of what a simulated run injected, measured on the simulator's own records.

The detectors are checked against these numbers, so each function states precisely what it
sums. All times here are ns on the simulator's clock (the file's ``ts`` × 1000);
:func:`explorer.scenarios.generate` makes ``ranges`` relative to the file's earliest
timestamp, which is where a loaded trace's ``ts == 0`` is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from explorer.scenarios.simulator import DeviceOp, HostSpan, Simulator
from explorer.scenarios.workload import LINES, TRAIN_FILE


class DeviceBusy:
    """When the (single) device was doing anything, on any stream: a merged interval list
    with a running total, so busy time in any window is two ``searchsorted`` calls."""

    def __init__(self, ops: list[DeviceOp]) -> None:
        if not ops:
            self.starts = self.ends = self.before = np.zeros(0, np.int64)
            return
        st = np.array([o.start for o in ops], np.int64)
        en = np.array([o.end for o in ops], np.int64)
        order = np.argsort(st, kind="stable")
        st, en = st[order], en[order]
        run_end = np.maximum.accumulate(en)
        new = np.r_[True, st[1:] > run_end[:-1]]
        group = np.cumsum(new) - 1
        self.starts = st[new]
        self.ends = np.zeros(len(self.starts), np.int64)
        np.maximum.at(self.ends, group, en)
        lengths = self.ends - self.starts
        self.before = np.r_[0, np.cumsum(lengths)[:-1]]  # busy time before each interval

    def busy_until(self, t: np.ndarray | int) -> np.ndarray:
        """Total busy ns in (-inf, t)."""
        t = np.asarray(t, np.int64)
        k = np.searchsorted(self.starts, t, side="right") - 1
        kk = np.clip(k, 0, None)
        inside = (
            np.clip(t - self.starts[kk], 0, self.ends[kk] - self.starts[kk])
            if len(self.starts)
            else 0
        )
        return (
            np.where(k >= 0, self.before[kk] + inside, 0) if len(self.starts) else np.zeros_like(t)
        )

    def idle_within(
        self, a: np.ndarray | list[int] | int, b: np.ndarray | list[int] | int
    ) -> np.ndarray:
        """Idle ns of the device inside each window [a, b)."""
        a = np.asarray(a, np.int64)
        b = np.asarray(b, np.int64)
        return (b - a) - (self.busy_until(b) - self.busy_until(a))

    def gap_containing(self, t: int) -> tuple[int, int]:
        """The idle gap around ``t`` as (last end before, next start after); (t, t) when busy
        at ``t`` or when nothing runs after it."""
        k = int(np.searchsorted(self.starts, t, side="right")) - 1
        if k >= 0 and self.ends[k] > t:
            return t, t
        if k + 1 >= len(self.starts):
            return t, t
        prev_end = int(self.ends[k]) if k >= 0 else t
        return prev_end, int(self.starts[k + 1])


#: What a ground-truth function measures: the time lost per step, the ranges it lies in,
#: and the extra fields its finding is checked on.
Measured = tuple[dict[int, int], list[tuple[int, int]], dict[str, Any]]


def _measures(
    kind: str, function: str
) -> Callable[[Callable[[Simulator], Measured]], Callable[[Simulator], dict[str, Any]]]:
    """Declare a ground-truth function: the finding ``kind`` it sizes and the workload
    ``function`` whose line that finding must name. The entry (kind, totals, steps,
    ranges, the function's docstring as its definition, the source line) is built here,
    once, from what the function measured."""

    def declare(measure: Callable[[Simulator], Measured]) -> Callable[[Simulator], dict[str, Any]]:
        @functools.wraps(measure)
        def entry(sim: Simulator) -> dict[str, Any]:
            per_step, ranges, extra = measure(sim)
            steps = sorted(s for s, v in per_step.items() if v > 0)
            return {
                "kind": kind,
                "time_lost_ns": int(sum(per_step.values())),
                "steps": steps,
                "per_step": [[s, int(per_step[s])] for s in steps],
                "ranges": [[int(a), int(b)] for a, b in ranges],
                "definition": measure.__doc__,
                **extra,
                "source_line": [TRAIN_FILE, int(LINES[function])],
                "function": function,
            }

        return entry

    return declare


def _spans(records: Sequence[HostSpan | DeviceOp]) -> list[tuple[int, int]]:
    """Each record's ``(start, end)``."""
    return [(r.start, r.end) for r in records]


@_measures("input_stall", "load_batch")
def input_stall(sim: Simulator) -> Measured:
    """time_lost_ns = device idle time (no op on any stream) inside the host's
    ``enumerate(DataLoader)#...__next__`` annotations."""
    busy = DeviceBusy(sim.device_ops)
    spans = [s for s in sim.host_spans if s.tag == "dataloader" and s.step >= 0]
    idle = busy.idle_within([s.start for s in spans], [s.end for s in spans])
    per: dict[int, int] = {}
    for s, v in zip(spans, idle, strict=True):
        per[s.step] = per.get(s.step, 0) + int(v)
    return per, _spans(spans), {"host_wait_ns": int(sum(s.end - s.start for s in spans))}


@_measures("memcpy_stall", "to_device")
def memcpy_stall(sim: Simulator) -> Measured:
    """time_lost_ns = Σ over the batch's Pageable→Device copies of (copy duration + the
    device idle gap right after it, until the next device op starts). The host is blocked
    in ``cudaMemcpyAsync`` for each copy and no other device work overlaps them."""
    busy = DeviceBusy(sim.device_ops)
    copies = [
        o
        for o in sim.device_ops
        if o.tag == "input_copy" and o.src_mem == "Pageable" and o.step >= 0
    ]
    per: dict[int, int] = {}
    copy_ns = idle_ns = 0
    for o in copies:
        a, b = busy.gap_containing(o.end)
        per[o.step] = per.get(o.step, 0) + (o.end - o.start) + (b - a)
        copy_ns += o.end - o.start
        idle_ns += b - a
    return per, _spans(copies), {"copy_ns": copy_ns, "idle_after_ns": idle_ns, "count": len(copies)}


@_measures("sync_stall", "check_finite")
def sync_stall(sim: Simulator) -> Measured:
    """time_lost_ns = Σ over the ``cudaStreamSynchronize`` calls made for ``.item()`` of the
    device idle gap in which the call returns: from the end of the last device op the sync
    waited for to the start of the next device op (the queue the sync drained, refilled)."""
    busy = DeviceBusy(sim.device_ops)
    syncs = [s for s in sim.host_spans if s.tag == "sync"]
    per: dict[int, int] = {}
    ranges = []
    for s in syncs:
        a, b = busy.gap_containing(s.end)
        per[s.step] = per.get(s.step, 0) + (b - a)
        ranges.append((a, b))
    return per, ranges, {"count": len(syncs)}


@_measures("cpu_fallback", "augment")
def cpu_fallback(sim: Simulator) -> Measured:
    """time_lost_ns = Σ per fallback (one ``aten::linalg_eig`` per step, wrapped in an
    ``explorer_fallback`` event unless generated with ``collector_events=False``) of the
    device time from the start of its Device→Host
    copy to the start of the next device op after its Host→Device copy (the device did
    nothing else meanwhile: copy out, wait for the CPU, copy back, wait for the next launch).
    These two copies are part of the fallback, not a separate memcpy stall."""
    busy = DeviceBusy(sim.device_ops)
    ops = [o for o in sim.device_ops if o.tag == "fallback"]
    per: dict[int, int] = {}
    ranges = []
    copies_ns = 0
    for dtoh, htod in zip(ops[0::2], ops[1::2], strict=True):
        _, nxt = busy.gap_containing(htod.end)
        end = max(nxt, htod.end)
        per[dtoh.step] = per.get(dtoh.step, 0) + end - dtoh.start
        ranges.append((dtoh.start, end))
        copies_ns += (dtoh.end - dtoh.start) + (htod.end - htod.start)
    return per, ranges, {"copies_ns": copies_ns, "count": len(ranges), "op": "aten::linalg_eig"}


@_measures("launch_bound", "compute_metrics")
def launch_bound(sim: Simulator) -> Measured:
    """time_lost_ns = device idle time between the first and the last of the tiny kernels
    launched by ``compute_metrics`` in each step (the host was busy launching them)."""
    busy = DeviceBusy(sim.device_ops)
    per: dict[int, int] = {}
    ranges = []
    tiny = [o for o in sim.device_ops if o.tag == "tiny_ops"]
    for step in sorted({o.step for o in tiny}):
        mine = [o for o in tiny if o.step == step]
        a, b = min(o.start for o in mine), max(o.end for o in mine)
        per[step] = int(busy.idle_within(a, b))
        ranges.append((a, b))
    mean = int(np.mean([o.end - o.start for o in tiny])) if tiny else 0
    return per, ranges, {"kernels": len(tiny), "mean_kernel_ns": mean}


@_measures("compile", "compiled_block")
def compile_pause(sim: Simulator) -> Measured:
    """time_lost_ns = Σ duration of the ``explorer_compile`` slices with event ``compile`` or
    ``recompile`` (graph-break markers inside them add nothing); in a trace generated with
    ``collector_events=False``, Σ duration of dynamo's ``_compile.compile_inner
    (dynamo_timed)`` annotations instead. ``device_idle_ns`` is the device idle time inside
    them (smaller by the work queued before compiling began)."""
    busy = DeviceBusy(sim.device_ops)
    spans = [s for s in sim.host_spans if s.tag == "compile"]
    per = {s.step: s.end - s.start for s in spans}
    idle = (
        int(busy.idle_within([s.start for s in spans], [s.end for s in spans]).sum())
        if spans
        else 0
    )
    return (
        per,
        _spans(spans),
        {
            "device_idle_ns": idle,
            "compiles": len(spans),
            "graph_breaks": len(spans),
            "graph_break_line": [TRAIN_FILE, 50],
        },
    )


@_measures("memory", "remember")
def memory_growth(sim: Simulator) -> Measured:
    """time_lost_ns = 0 (a leak costs memory, not time). ``leaked_bytes`` = bytes allocated by
    ``remember`` (``aten::clone``) in every step and never freed; ``bytes_per_step`` each."""
    frame = f"{TRAIN_FILE}({LINES['remember']}): remember"
    leaks = [
        m for m in sim.memory if m["frame"] == frame and m["bytes"] > 0 and m["addr"] in sim.live
    ]
    steps = sorted({m["step"] for m in leaks})
    grown = {
        "device": "cuda:0",
        "leaked_bytes": int(sum(m["bytes"] for m in leaks)),
        "bytes_per_step": int(leaks[0]["bytes"]) if leaks else 0,
        "allocations": len(leaks),
        "op": "aten::clone",
    }
    # No time is lost, so no step would be listed: the steps are those the leak grew in.
    return {}, [], {**grown, "steps": steps}

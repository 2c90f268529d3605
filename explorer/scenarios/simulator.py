"""A small discrete-event model of one host thread driving one accelerator.

It writes exactly the events torch.profiler writes on CUDA (Kineto JSON): host slices
(``python_function``, ``user_annotation``, ``cpu_op``, ``cuda_runtime``), device slices
(``kernel``, ``gpu_memcpy``, ``gpu_memset``) with ``ac2g`` launch flows, ``[memory]`` instants,
and Explorer's own collector categories. Because it *simulates* the host/device interplay
(a stream runs its ops in order; a launch blocks when the device queue is full; a
synchronise blocks until the stream drains; a pageable copy blocks the host), the gaps and
stalls in its traces arise the way they do on hardware, and the generator knows their exact
size: that is the ground truth the detectors are checked against.

Times are int64 ns on one clock (``BASE_NS`` + elapsed); the JSON writes µs with three
decimals, as Kineto does.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Absolute ns of the first event: the same order of magnitude as a real Kineto clock, small
#: enough that µs with three decimals survive a float64 round trip exactly.
BASE_NS = 2_000_000_000_000_000
HOST_PID = 4242
MAIN_TID = 4242
DEVICE = 0
COMPUTE_STREAM = 7
COPY_STREAM = 20
CUDA_ADDR_BASE = 0x7F3A_0000_0000
CPU_ADDR_BASE = 0x55D0_0000_0000
#: torch's DeviceType numbering, as written in ``[memory]`` events.
DEVICE_TYPE_CPU = 0
DEVICE_TYPE_CUDA = 1
#: cudaLaunchKernel-style calls whose correlation always has a device op.
LAUNCH_CALLS = ("cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync")
_CBID = {
    "cudaLaunchKernel": 211,
    "cudaMemcpyAsync": 41,
    "cudaMemsetAsync": 51,
    "cudaStreamSynchronize": 131,
    "cudaDeviceSynchronize": 165,
    "cudaEventRecord": 135,
    "cudaStreamWaitEvent": 147,
}
_DEVICE_CAT = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}


def us(ns: float) -> float:
    """ns → the µs float Kineto writes (three decimals, exact after a round trip)."""
    return int(ns) / 1000.0


@dataclass
class DeviceOp:
    """One op the simulated device ran: what the ground-truth sums are computed over."""

    name: str
    kind: str  # kernel | memcpy | memset
    stream: int
    start: int
    end: int
    step: int
    tag: str  # the workload phase that launched it (e.g. "tiny_ops", "fallback")
    src_mem: str = ""


@dataclass
class HostSpan:
    """A host interval the ground truth refers to (a DataLoader wait, a sync call...)."""

    tag: str
    start: int
    end: int
    step: int


@dataclass
class _Open:
    name: str
    cat: str
    start: int
    args: dict[str, Any]
    ext: int  # External id given to runtime calls inside it (-1: inherit)


@dataclass
class Simulator:
    """Builds the events of one trace by running a host program against a device model.

    ``jitter`` scales every duration by a seeded uniform factor in ``1 ± jitter``.
    ``queue_depth`` is how many device ops may be launched but unfinished before a launch
    blocks the host (a real launch queue is deeper; a short one keeps the host's lead over
    the device — and so every stall's size — close to what a reader sees on the timeline).
    """

    seed: int = 0
    jitter: float = 0.08
    queue_depth: int = 6
    launch_latency_ns: int = 3_000
    base_allocated: int = 256 << 20
    t: int = BASE_NS
    step: int = -1
    events: list[dict[str, Any]] = field(default_factory=list)
    event_step: list[int] = field(default_factory=list)
    device_ops: list[DeviceOp] = field(default_factory=list)
    host_spans: list[HostSpan] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self._stack: list[_Open] = []
        self._py: list[int] = []
        self._ids = {"ext": 0, "corr": 0, "py": 0, "fwdbwd": 0, "rf": 0}
        self.stream_free: dict[int, int] = {COMPUTE_STREAM: BASE_NS, COPY_STREAM: BASE_NS}
        self._pending: list[int] = []  # heap of unfinished device op ends
        self.allocated = {(DEVICE_TYPE_CUDA, DEVICE): self.base_allocated, (DEVICE_TYPE_CPU, -1): 0}
        self.reserved = {
            (DEVICE_TYPE_CUDA, DEVICE): _round_up(self.base_allocated, 20 << 20),
            (DEVICE_TYPE_CPU, -1): 0,
        }
        self._next_addr = {DEVICE_TYPE_CUDA: CUDA_ADDR_BASE, DEVICE_TYPE_CPU: CPU_ADDR_BASE}
        self.live: dict[int, tuple[int, int, int]] = {}  # addr → (device_type, device, bytes)
        self.tag = ""

    # -- ids and durations -------------------------------------------------------------------
    def next_id(self, which: str) -> int:
        self._ids[which] += 1
        return self._ids[which]

    def dur(self, ns: float) -> int:
        """A duration with seeded jitter (never below 1 ns)."""
        if self.jitter:
            ns *= 1.0 + self.jitter * (2.0 * self.rng.random() - 1.0)
        return max(int(ns), 1)

    def work(self, ns: float) -> None:
        """The host thread is busy (in whatever slice is open) for about ``ns``."""
        self.t += self.dur(ns)

    def _emit(self, ev: dict[str, Any]) -> None:
        self.events.append(ev)
        self.event_step.append(self.step)

    # -- host slices ---------------------------------------------------------------------------
    @contextmanager
    def slice(
        self,
        name: str,
        cat: str,
        args: dict[str, Any] | None = None,
        pre_ns: float = 1_000,
        post_ns: float = 1_000,
        tid: int = MAIN_TID,
    ) -> Iterator[_Open]:
        """A host slice that encloses whatever the body does; closes when the body ends."""
        args = dict(args or {})
        ext = -1
        if cat in ("cpu_op", "user_annotation"):
            ext = self.next_id("ext")
            args = {"External id": ext, "Record function id": self.next_id("rf"), **args}
        op = _Open(name, cat, self.t, args, ext)
        self._stack.append(op)
        self.t += max(int(pre_ns), 1)
        try:
            yield op
        finally:
            self.t += max(int(post_ns), 1)
            self._stack.pop()
            self._emit(
                {
                    "ph": "X",
                    "cat": cat,
                    "name": name,
                    "pid": HOST_PID,
                    "tid": tid,
                    "ts": us(op.start),
                    "dur": us(self.t - op.start),
                    "args": op.args,
                }
            )

    def op(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        pre_ns: float = 2_000,
        post_ns: float = 1_000,
    ):
        """An ``aten::`` operator (``cpu_op``) with its dispatch overhead before and after."""
        return self.slice(name, "cpu_op", args, self.dur(pre_ns), self.dur(post_ns))

    def annotation(self, name: str, args: dict[str, Any] | None = None):
        """A ``record_function`` range (``user_annotation``)."""
        return self.slice(name, "user_annotation", args, 500, 500)

    @contextmanager
    def py(self, file: str, line: int, function: str) -> Iterator[_Open]:
        """A Python frame as ``with_stack=True`` writes it: ``file(line): function``."""
        pid = self.next_id("py")
        parent = self._py[-1] if self._py else None
        self._py.append(pid)
        try:
            with self.slice(
                f"{file}({line}): {function}",
                "python_function",
                {"Python parent id": parent, "Python id": pid},
                500,
                500,
            ) as frame:
                yield frame
        finally:
            self._py.pop()

    def _current_ext(self) -> int:
        for op in reversed(self._stack):
            if op.ext >= 0:
                return op.ext
        return self.next_id("ext")

    # -- the device ------------------------------------------------------------------------------
    def _wait_for_queue_slot(self) -> None:
        while self._pending and self._pending[0] <= self.t:
            heapq.heappop(self._pending)
        while len(self._pending) >= self.queue_depth:
            self.t = max(self.t, heapq.heappop(self._pending))

    def launch(
        self,
        name: str,
        dur_ns: float,
        *,
        kind: str = "kernel",
        stream: int = COMPUTE_STREAM,
        runtime: str = "cudaLaunchKernel",
        runtime_ns: float = 5_000,
        nbytes: int | None = None,
        src_mem: str = "",
        blocking: bool = False,
        kernel_args: dict[str, Any] | None = None,
    ) -> DeviceOp:
        """A runtime call on the host that puts one op on a device stream.

        The op starts when the call has reached the device and the stream is free (a
        :meth:`wait_event` moves the stream's free time past another stream's event).
        ``blocking`` calls (pageable copies) return only when the op has finished.
        """
        ext = self._current_ext()
        corr = self.next_id("corr")
        rt_start = self.t
        self._wait_for_queue_slot()
        self.t += self.dur(runtime_ns)
        dev_start = max(rt_start + self.launch_latency_ns, self.stream_free[stream])
        dev_end = dev_start + self.dur(dur_ns)
        self.stream_free[stream] = dev_end
        heapq.heappush(self._pending, dev_end)
        if blocking:
            self.t = max(self.t, dev_end + self.dur(2_000))
        self._emit(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": runtime,
                "pid": HOST_PID,
                "tid": MAIN_TID,
                "ts": us(rt_start),
                "dur": us(self.t - rt_start),
                "args": {"External id": ext, "cbid": _CBID.get(runtime, 0), "correlation": corr},
            }
        )
        dev_args = _device_args(ext, stream, corr, kind, kernel_args, nbytes, dev_end - dev_start)
        self._emit(
            {
                "ph": "X",
                "cat": _DEVICE_CAT[kind],
                "name": name,
                "pid": DEVICE,
                "tid": stream,
                "ts": us(dev_start),
                "dur": us(dev_end - dev_start),
                "args": dev_args,
            }
        )
        self._emit_launch_flow(corr, stream, rt_start, dev_start)
        op = DeviceOp(name, kind, stream, dev_start, dev_end, self.step, self.tag, src_mem)
        self.device_ops.append(op)
        return op

    def _emit_launch_flow(self, corr: int, stream: int, call_ts: float, op_ts: float) -> None:
        """The ``ac2g`` flow from the runtime call to the device op it launched."""
        ends: tuple[tuple[str, int, int, float, dict[str, str]], ...] = (
            ("s", HOST_PID, MAIN_TID, call_ts, {}),
            ("f", DEVICE, stream, op_ts, {"bp": "e"}),
        )
        for ph, pid, tid, ts, extra in ends:
            self._emit({"ph": ph, "id": corr, "pid": pid, "tid": tid, "ts": us(ts), "cat": "ac2g",
                        "name": "ac2g", **extra})  # fmt: skip

    def _emit_runtime(self, name: str, start: float) -> None:
        """A host runtime call from ``start`` to now, with its own correlation id."""
        self._emit(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": name,
                "pid": HOST_PID,
                "tid": MAIN_TID,
                "ts": us(start),
                "dur": us(self.t - start),
                "args": {
                    "External id": self._current_ext(),
                    "cbid": _CBID.get(name, 0),
                    "correlation": self.next_id("corr"),
                },
            }
        )

    def runtime_call(self, name: str, dur_ns: float = 3_000) -> None:
        """A runtime call with no device op (event record, stream wait...)."""
        start = self.t
        self.t += self.dur(dur_ns)
        self._emit_runtime(name, start)

    def synchronize(
        self, name: str = "cudaStreamSynchronize", stream: int | None = COMPUTE_STREAM
    ) -> HostSpan:
        """Block the host until the stream (or, with ``stream=None``, the device) drains."""
        start = self.t
        done = max(self.stream_free.values()) if stream is None else self.stream_free[stream]
        self.t = max(self.t + self.dur(2_000), done + self.dur(2_500))
        self._emit_runtime(name, start)
        span = HostSpan(self.tag or "sync", start, self.t, self.step)
        self.host_spans.append(span)
        return span

    def record_event(self, stream: int) -> int:
        """``cudaEventRecord`` on ``stream``: returns when the event completes on the device."""
        self.runtime_call("cudaEventRecord", 2_000)
        return self.stream_free[stream]

    def wait_event(self, waiter: int, ready_ns: int) -> None:
        """``cudaStreamWaitEvent``: later work on ``waiter`` starts after ``ready_ns``."""
        self.runtime_call("cudaStreamWaitEvent", 2_000)
        self.stream_free[waiter] = max(self.stream_free[waiter], ready_ns)

    # -- memory ------------------------------------------------------------------------------------
    def alloc(self, nbytes: int, device_type: int = DEVICE_TYPE_CUDA) -> int:
        """A caching-allocator allocation, written as a ``[memory]`` instant at the host's now."""
        dev = DEVICE if device_type == DEVICE_TYPE_CUDA else -1
        addr = self._next_addr[device_type]
        self._next_addr[device_type] += _round_up(nbytes, 512)
        self.live[addr] = (device_type, dev, nbytes)
        self._memory_event(device_type, dev, addr, nbytes)
        return addr

    def free(self, addr: int) -> None:
        device_type, dev, nbytes = self.live.pop(addr)
        self._memory_event(device_type, dev, addr, -nbytes)

    def _memory_event(self, device_type: int, dev: int, addr: int, nbytes: int) -> None:
        key = (device_type, dev)
        self.allocated[key] += nbytes
        if device_type == DEVICE_TYPE_CUDA:  # the caching allocator keeps what it reserved
            self.reserved[key] = max(self.reserved[key], _round_up(self.allocated[key], 20 << 20))
        args = {
            "Total Reserved": self.reserved[key],
            "Total Allocated": self.allocated[key],
            "Bytes": nbytes,
            "Device Id": dev,
            "Device Type": device_type,
            "Addr": addr,
        }
        self._emit(
            {
                "ph": "i",
                "cat": "cpu_instant_event",
                "s": "t",
                "name": "[memory]",
                "pid": HOST_PID,
                "tid": MAIN_TID,
                "ts": us(self.t),
                "args": args,
            }
        )
        inner = self._stack[-1].name if self._stack else ""
        frame = next((o.name for o in reversed(self._stack) if o.cat == "python_function"), "")
        self.memory.append(
            {
                "ts": self.t,
                "device_type": device_type,
                "device": dev,
                "addr": addr,
                "bytes": nbytes,
                "op": inner,
                "frame": frame,
                "step": self.step,
            }
        )
        self.t += 200  # the allocator's own cost; keeps instants strictly inside their op

    # -- bookkeeping the ground truth needs ------------------------------------------------------
    def span(self, tag: str, start: int, end: int) -> HostSpan:
        """Remember a host interval the ground truth measures (a DataLoader wait, a compile)."""
        s = HostSpan(tag, start, end, self.step)
        self.host_spans.append(s)
        return s

    def fwdbwd_flow(self, phase: str, flow_id: int, ts_ns: int) -> None:
        """Forward op → its backward function (``fwdbwd`` flow), as torch links them."""
        ev = {
            "ph": "s" if phase == "s" else "f",
            "id": flow_id,
            "pid": HOST_PID,
            "tid": MAIN_TID,
            "ts": us(ts_ns),
            "cat": "fwdbwd",
            "name": "fwdbwd",
        }
        if phase != "s":
            ev["bp"] = "e"
        self._emit(ev)


def _round_up(n: int, multiple: int) -> int:
    return -(-int(n) // multiple) * multiple


def _device_args(
    ext: int,
    stream: int,
    corr: int,
    kind: str,
    kernel_args: dict[str, Any] | None,
    nbytes: int | None,
    dur_ns: float,
) -> dict[str, Any]:
    """The args Kineto writes on a device op: a kernel's launch shape, a copy's bytes."""
    args: dict[str, Any] = {
        "External id": ext,
        "device": DEVICE,
        "context": 1,
        "stream": stream,
        "correlation": corr,
    }
    if kind == "kernel":
        args.update(
            {
                "queued": 0,
                "registers per thread": 32,
                "shared memory": 0,
                "blocks per SM": 4.0,
                "warps per SM": 32.0,
                "grid": [432, 1, 1],
                "block": [256, 1, 1],
                "est. achieved occupancy %": 50,
            }
        )
        args.update(kernel_args or {})
    else:
        args["bytes"] = int(nbytes or 0)
        args["memory bandwidth (GB/s)"] = round(int(nbytes or 0) / max(dur_ns, 1), 3)
    return args

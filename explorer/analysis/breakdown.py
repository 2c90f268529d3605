"""Where each step's wall time went, per device, in categories that add up exactly.

For every step and every device (or the host, when the trace has no device tracks) the
step window ``[start, end)`` is cut into elementary segments at every slice boundary, and
each segment gets exactly one *reason* — the highest-priority thing happening then:

Device mode (priority from first to last; the first that covers an instant wins):

==============  ===============  ======================================================
reason          category         covered when
==============  ===============  ======================================================
dev_compute     compute          a kernel runs on any stream of the device
dev_comm        communication    a collective runs and no compute does (exposed comm)
dev_copy        data_movement    a memcpy/memset/DMA runs and no compute/collective does
dev_wait        sync_stall       the device only waits (``cuda_sync``, MTIA event_wait)
host_sync       sync_stall       device idle, host blocked in a sync (``.item()``, ...)
host_compile    compile          device idle, host compiling (dynamo/inductor/collector)
host_fallback   host_bound       device idle, host running an op's CPU fallback
host_input      host_bound       device idle, host in the DataLoader / input code
host_comm       communication    device idle, host in a collective it runs itself (gloo)
host_busy       host_bound       device idle, host running Python, ops or launches
sync_refill     sync_stall       device idle from the instant a host sync returns until
                                 the next device work: the drained queue being refilled
fallback_refill host_bound       the same after a CPU-fallback slice returns
copy_refill     data_movement    the same after a blocking copy ends (pageable memory, or a
                                 synchronous call such as cudaMemcpy / hipMemcpyWithStream)
(none)          other_idle       device idle and the host idle too
==============  ===============  ======================================================

Compute outranks communication and copies on purpose: time a collective or a copy spends
hidden behind compute costs nothing, so ``communication`` and ``data_movement`` are the
*exposed* part — the part a fix can win back. Device annotations (``gpu_user_annotation``,
profiler ranges) are labels, never work, and are ignored.

Host mode (no device tracks; CPU training): host_sync, host_compile, host_input (→
host_bound), host_comm (→ communication: gloo/c10d ops), host_copy (→ data_movement),
host_compute (ops → compute), host_busy (Python or annotations only → host_bound), then
other_idle.

Every category is an integer ns sum over disjoint segments, ``other_idle`` is what is left,
so per (step, device) the categories sum to the step's ``dur_ns`` and none is negative.
The segments are computed once per device over the whole trace with one sort and a
cumulative sum per reason; steps are then answered with binary searches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from explorer.analysis.classify import classes
from explorer.analysis.steps import select_steps
from explorer.trace.columns import category_in
from explorer.trace.kinds import device_label, device_vendor, process_vendor
from explorer.trace.memo import memoised
from explorer.trace.model import TraceData

CATEGORIES: tuple[str, ...] = (
    "compute",
    "data_movement",
    "communication",
    "host_bound",
    "sync_stall",
    "compile",
    "other_idle",
)

DEVICE_REASONS: tuple[tuple[str, str], ...] = (
    ("dev_compute", "compute"),
    ("dev_comm", "communication"),
    ("dev_copy", "data_movement"),
    ("dev_wait", "sync_stall"),
    ("host_sync", "sync_stall"),
    ("host_compile", "compile"),
    ("host_fallback", "host_bound"),
    ("host_input", "host_bound"),
    ("host_comm", "communication"),
    ("host_busy", "host_bound"),
    ("sync_refill", "sync_stall"),
    ("fallback_refill", "host_bound"),
    ("copy_refill", "data_movement"),
)
HOST_REASONS: tuple[tuple[str, str], ...] = (
    ("host_sync", "sync_stall"),
    ("host_compile", "compile"),
    ("host_fallback", "compute"),
    ("host_input", "host_bound"),
    ("host_comm", "communication"),
    ("host_copy", "data_movement"),
    ("host_compute", "compute"),
    ("host_busy", "host_bound"),
)


@dataclass
class ReasonTimeline:
    """One device's time cut into disjoint segments, each with one reason.

    Segment ``i`` is ``[bounds[i], bounds[i+1])`` with reason ``reasons[seg[i]]`` (or no
    reason when ``seg[i] == -1``, which is ``other_idle``); ``seg`` is int8.
    """

    device: str
    reasons: tuple[tuple[str, str], ...]
    bounds: np.ndarray
    seg: np.ndarray
    _per_reason: dict[str, tuple[int, np.ndarray, np.ndarray]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _runs: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    def _reason(self, name: str) -> tuple[int, np.ndarray, np.ndarray]:
        """(code, its segments, their lengths' running sum from 0) of one reason, computed
        once: detectors ask for the same reason per step and per slice many times. Kept
        per reason's own segments, so all reasons together hold one entry per segment."""
        if name not in self._per_reason:
            k = [r for r, _ in self.reasons].index(name)
            at = np.flatnonzero(self.seg == k)
            cum = np.concatenate([[0], np.cumsum(self.bounds[at + 1] - self.bounds[at])])
            self._per_reason[name] = (k, at, cum.astype(np.int64, copy=False))
        return self._per_reason[name]

    def reason_ns(self, name: str, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """ns of reason ``name`` inside each window ``[starts[j], ends[j])``."""
        k, at, cum = self._reason(name)
        starts = np.asarray(starts, np.int64)
        ends = np.asarray(ends, np.int64)
        if len(self.seg) == 0:
            return np.zeros(len(starts), np.int64)
        return np.maximum(self._upto(k, at, cum, ends) - self._upto(k, at, cum, starts), 0)

    def _upto(self, k: int, at: np.ndarray, cum: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Length of the reason's segments in ``(-inf, t)``, exactly (see :func:`_covered`)."""
        bounds, n = self.bounds, len(self.seg)
        i = np.searchsorted(bounds, t, side="right") - 1  # the segment holding t
        i_c = np.clip(i, 0, n - 1)
        inside = (i >= 0) & (i < n)
        partial = np.where(inside & (self.seg[i_c] == k), t - bounds[i_c], 0)
        full = cum[np.searchsorted(at, np.clip(i, 0, n), side="left")]  # segments before i
        return np.where(i < 0, 0, full + partial)

    def _runs_of(self, name: str) -> np.ndarray:
        """The maximal runs of one reason, computed once."""
        if name not in self._runs:
            k = self._reason(name)[0]
            self._runs[name] = _runs(self.bounds, self.seg == k, None, None)
        return self._runs[name]

    def ranges(self, name: str, start: int | None = None, end: int | None = None) -> np.ndarray:
        """Maximal ``(start, end)`` runs of reason ``name`` (n x 2 int64), optionally clipped."""
        runs = self._runs_of(name)
        if start is not None:
            runs = runs[runs[:, 1] > start]
        if end is not None:
            runs = runs[runs[:, 0] < end]
        out = runs.copy()
        if start is not None:
            out[:, 0] = np.maximum(out[:, 0], start)
        if end is not None:
            out[:, 1] = np.minimum(out[:, 1], end)
        return out[out[:, 1] > out[:, 0]]

    def ranges_in(self, name: str, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """:meth:`ranges` clipped to each window ``[starts[j], ends[j])`` in turn, all
        concatenated in window order (n x 2 int64): one binary search, not a scan per window."""
        runs = self._runs_of(name)
        starts = np.asarray(starts, np.int64)
        ends = np.asarray(ends, np.int64)
        lo = np.searchsorted(runs[:, 1], starts, side="right")  # first run ending after start
        hi = np.searchsorted(runs[:, 0], ends, side="left")  # runs starting before end
        n = np.maximum(hi - lo, 0)
        win = np.repeat(np.arange(len(starts)), n)
        at = lo[win] + (np.arange(len(win)) - (np.cumsum(n) - n)[win])
        out = runs[at].copy()
        out[:, 0] = np.maximum(out[:, 0], starts[win])
        out[:, 1] = np.minimum(out[:, 1], ends[win])
        return out[out[:, 1] > out[:, 0]]


def track_device_labels(trace: TraceData) -> dict[int, str]:
    """Device track id → device label (``cuda:0``, ``rocm:2``, ``mtia:17``, ``gpu:3`` when the vendor
    is unknown; :func:`explorer.trace.kinds.device_label`)."""
    tracks = trace.device_tracks()
    if tracks.empty:
        return {}
    backend = trace.privateuse1_backend
    vendor = device_vendor(
        trace.slices["cat"].cat.categories, trace.slices["name"].cat.categories, backend
    )
    return {
        int(tid): device_label(process_vendor(proc, vendor), int(dev))
        for tid, dev, proc in zip(
            tracks["id"].to_numpy(),
            tracks["device"].to_numpy(),
            tracks["process"].astype(str),
            strict=True,
        )
    }


def name_flags(trace: TraceData, rx: re.Pattern[str]) -> np.ndarray:
    """Per slice: does its name match ``rx``? (:meth:`TraceData.name_matches`)"""
    return trace.name_matches(rx)


def host_reason_intervals(
    trace: TraceData, device_mode: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, reason index) of host slices for the reason table of the mode."""
    s = trace.slices
    code = host_slice_reasons(trace, device_mode)
    keep = code >= 0
    ts = s["ts"].to_numpy()[keep]
    return ts, ts + s["dur"].to_numpy()[keep], code[keep]


@memoised("host_slice_reasons", depends_on=("slice_classes",))
def host_slice_reasons(trace: TraceData, device_mode: bool) -> np.ndarray:
    """Per slice, the index of its reason in the mode's table (:data:`DEVICE_REASONS` or
    :data:`HOST_REASONS`), -1 for slices that give none (device slices, whole-step spans).
    Read-only, computed once per trace and mode.

    The one classifier of host time: the breakdown sweeps these intervals, and the critical
    path names its host edges with the same reasons.
    """
    s = trace.slices
    reasons = [r for r, _ in (DEVICE_REASONS if device_mode else HOST_REASONS)]
    cls = classes(trace)
    kind = trace.kind_in
    host = trace.on_host() & ~cls.span & ~kind("other", "device_annotation")
    code = np.full(len(s), -1, np.int8)  # a dozen reasons: a byte per slice, held per trace

    def put(name: str, mask: np.ndarray) -> None:
        if name in reasons:
            m = mask & host & (code == -1)
            code[m] = reasons.index(name)

    put("host_sync", cls.host_sync)
    put("host_compile", cls.compile)
    put("host_fallback", kind("fallback"))
    put("host_input", cls.input)
    put("host_comm", cls.blocking_collective)
    put("host_copy", kind("copy"))
    put("host_compute", kind("cpu_op", "kernel", "runtime"))
    put("host_busy", np.ones(len(s), bool))
    code.flags.writeable = False
    return code


def device_reason_intervals(
    trace: TraceData, track_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, reason index, blocking) of the device slices on ``track_ids``;
    ``blocking`` marks copies from/to pageable memory (the host waits for them)."""
    s = trace.slices
    on = np.isin(s["track"].to_numpy(), track_ids)
    ts, te, owned = device_work_intervals(trace)
    code = np.where(on & owned, device_slice_reasons(trace), -1)
    copy = code == 2
    keep = code >= 0
    pageable = category_in(s["src_mem"], ["Pageable"]) | category_in(s["dst_mem"], ["Pageable"])
    blocking = copy & (pageable | synchronous_copies(trace))
    return ts[keep], te[keep], code[keep], blocking[keep]


def device_work_intervals(trace: TraceData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per slice, the ``(start, end)`` the breakdown counts it over and whether it counts.

    Device work counts in the step that launched it (:func:`explorer.analysis.steps.
    launching_step`), so it is clipped to that step's window: work of step N+1 that runs on
    another stream while step N's window is still open is not step N's compute (nor, for
    the part before its own window opens, step N+1's: the windows tile time). Work launched
    before the capture (:func:`explorer.analysis.attribution.launched_before_capture`) is
    no step's and does not count. Work launched between steps, or whose launch is not in
    the trace, counts where it runs.
    """
    from explorer.analysis.attribution import launched_before_capture
    from explorer.analysis.steps import attributed_steps, launching_step

    s = trace.slices
    ts = s["ts"].to_numpy(np.int64, copy=True)
    te = ts + s["dur"].to_numpy(np.int64)
    owned = ~launched_before_capture(trace)
    k = launching_step(trace)
    if trace.window is not None:
        owned &= ~_launched_by_steps_outside(trace, k)
    mine = np.flatnonzero(k >= 0)
    if len(mine):
        att = attributed_steps(trace)
        w0 = att["start_ns"].to_numpy(np.int64)[k[mine]]
        w1 = att["end_ns"].to_numpy(np.int64)[k[mine]]
        a = np.clip(ts[mine], w0, w1)
        b = np.clip(te[mine], w0, w1)
        owned[mine[(b <= a) & (te[mine] > ts[mine])]] = False  # all of it outside the window
        ts[mine], te[mine] = a, b
    return ts, te, owned


def _launched_by_steps_outside(trace: TraceData, k: np.ndarray) -> np.ndarray:
    """In a window of a trace: device work launched before its first step's host range or
    after its last one's — by steps outside the window, whose it is in the whole trace, so
    it counts in none of the window's steps (as in the whole trace)."""
    from explorer.analysis.attribution import launcher
    from explorer.analysis.steps import steps

    st = steps(trace)
    src = launcher(trace)
    out = (src >= 0) & (k < 0) & trace.on_device()
    if not out.any() or len(st) == 0:
        return out
    at = trace.slices["ts"].to_numpy(np.int64)[np.clip(src, 0, None)]
    first, last = int(st["start_ns"].min()), int(st["end_ns"].max())
    return out & ((at < first) | (at >= last))


@memoised("device_slice_reasons", depends_on=("slice_classes",))
def device_slice_reasons(trace: TraceData) -> np.ndarray:
    """Per slice, the index in :data:`DEVICE_REASONS` of what it is as device work
    (0 compute, 1 communication, 2 data movement, 3 a wait; -1 none), by kind and name alone
    — callers pick the slices that run on a device. Read-only, computed once per trace."""
    kind = trace.kind_in
    cls = classes(trace)
    code = np.full(len(trace.slices), -1, np.int64)
    code[kind("kernel", "fallback")] = 0
    code[kind("collective") | cls.device_collective] = 1
    code[kind("memcpy", "memset", "copy") | cls.dma] = 2
    code[kind("sync")] = 3
    code.flags.writeable = False
    return code


#: Runtime calls that copy synchronously whatever the memory: plain ``cudaMemcpy``/
#: ``hipMemcpy``, ``hipMemcpyWithStream`` (the call ROCm's ``.to()`` uses), memsets...
#: — every Memcpy/Memset call but the ``*Async`` ones.
SYNC_COPY_CALL = re.compile(r"^(cu|cuda|hip)?Mem(cpy|set)(?!.*Async)", re.I)


def synchronous_copies(trace: TraceData) -> np.ndarray:
    """Device copies launched by a synchronous runtime call (the host blocks until they end)."""
    s = trace.slices
    out = np.zeros(len(s), bool)
    launch = trace.flows[trace.flows["type"] == "launch"]
    if len(launch):
        src = launch["src"].to_numpy()
        out[launch["dst"].to_numpy()[name_flags(trace, SYNC_COPY_CALL)[src]]] = True
    return out


def sweep(
    starts: np.ndarray, ends: np.ndarray, codes: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Cut time at every boundary; each segment gets the smallest code covering it (-1: none).

    Vectorised: one sort over the boundaries, then either one ``bincount``/``cumsum`` per
    code or :func:`_cover_minima`'s passes, one per power of two of the segments' count,
    whichever is fewer (a pass of the latter costs about a quarter of the former's,
    measured on 0.2-2M ranges). ``exclusive_ns`` gives a code per nesting depth: real
    traces' Python stacks are 40-60 deep, where one pass per code took 1.3 s of a report
    of a 1M-slice H100 trace.
    """
    if len(starts) == 0:
        return np.zeros(1, np.int64), np.zeros(0, np.int64)
    # sort + mask, not np.unique (numpy 2's hash-based unique is ~50x slower on 1M int64);
    # each start's and end's bound read off the same sort, where two binary searches of
    # unsorted keys cost as much again (0.29 -> 0.14 s on 1M ranges)
    # each temporary let go as soon as the next one exists (the sweep was the breakdown's
    # peak, ~75 MB over its inputs on the synthetic 1M-event trace's 650k ranges)
    points = np.concatenate([starts, ends]).astype(np.int64, copy=False)
    total = len(points)
    order = np.argsort(points, kind="stable")
    ordered = points[order]
    del points
    first = np.concatenate([[True], ordered[1:] != ordered[:-1]])
    bounds = ordered[first]
    del ordered
    # positions in int32 where they fit (a million-slice thread's sweep holds them)
    at = np.empty(total, np.int32 if total < np.iinfo(np.int32).max else np.int64)
    rank = np.cumsum(first, dtype=at.dtype)
    del first
    rank -= 1
    at[order] = rank
    del rank, order
    i_start, i_end = at[: len(starts)], at[len(starts) :]
    nseg = len(bounds) - 1
    if n * LEVELS_PER_CODE_PASS > max(nseg, 1).bit_length() and bool(np.all(i_end >= i_start)):
        return bounds, _cover_minima(i_start, i_end, np.asarray(codes, np.int64), nseg, n)
    seg = np.full(nseg, -1, np.int64)
    for k in range(n):
        m = codes == k
        if not m.any():
            continue
        delta = np.bincount(i_start[m], minlength=len(bounds)) - np.bincount(
            i_end[m], minlength=len(bounds)
        )
        active = np.cumsum(delta)[:-1] > 0
        seg[active & (seg == -1)] = k
    return bounds, seg


#: How many of :func:`_cover_minima`'s passes cost what one code's pass of :func:`sweep`
#: does (measured: equal at 5 codes and 22 levels, 2M ranges).
LEVELS_PER_CODE_PASS = 4


def _cover_minima(
    i_start: np.ndarray, i_end: np.ndarray, codes: np.ndarray, nseg: int, n: int
) -> np.ndarray:
    """Per segment ``0..nseg-1``, the smallest of ``codes`` (each < ``n``) whose range
    ``[i_start, i_end)`` covers it (-1: none) — :func:`sweep`'s answer in passes over the
    segments per power of two rather than per code. Each range is two overlapping blocks
    of the largest power-of-two length it holds, one at each end; a block's minimum is
    pushed down into the two halves below it, from the longest blocks to single segments."""
    # the ranges' codes in the blocks' type once (not per level), each input let go once
    # read: with the sweep's inputs, the breakdown's peak — beside the Operators panel's
    # job, the viewer's (~8 MB of int64 codes and a length per range on 1M slices)
    length = i_end - i_start
    keep = length > 0
    lo, hi = i_start[keep], i_end[keep]
    dtype = np.int16 if n < np.iinfo(np.int16).max else np.int64
    code = codes[keep].astype(dtype)
    # floor(log2(length)), exact for int64 below 2**53
    level = (np.frexp(length[keep])[1] - 1).astype(np.int8)
    del length, keep
    none = n  # above every code
    cur: np.ndarray | None = None
    for j in range(int(level.max()) if len(level) else 0, -1, -1):
        half = 1 << j
        nxt = np.full(nseg - half + 1, none, dtype)  # the blocks [i, i + 2**j)
        if cur is not None:  # the blocks twice as long: each holds the two here at i, i + half
            np.minimum(nxt[: len(cur)], cur, out=nxt[: len(cur)])
            np.minimum(nxt[half : half + len(cur)], cur, out=nxt[half : half + len(cur)])
        at = level == j
        if at.any():
            np.minimum.at(nxt, lo[at], code[at])
            np.minimum.at(nxt, hi[at] - half, code[at])
        cur = nxt
    del lo, hi, code, level
    seg = np.full(nseg, -1, np.int64) if cur is None else cur.astype(np.int64)
    seg[seg == none] = -1
    return seg


def _covered(
    bounds: np.ndarray,
    mask: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    cum: np.ndarray | None = None,
) -> np.ndarray:
    """Length of the masked segments inside each window, exactly, in int64 (``cum``: the
    masked lengths' running sum, when the caller has it)."""
    starts = np.asarray(starts, np.int64)
    ends = np.asarray(ends, np.int64)
    if len(mask) == 0:
        return np.zeros(len(starts), np.int64)
    if cum is None:
        cum = np.concatenate([[0], np.cumsum(np.diff(bounds) * mask)])

    def upto(t: np.ndarray) -> np.ndarray:
        # covered length of masked segments in (-inf, t)
        i = np.searchsorted(bounds, t, side="right") - 1  # segment holding t
        i_c = np.clip(i, 0, len(mask) - 1)
        inside = (i >= 0) & (i < len(mask))
        partial = np.where(inside & mask[i_c], t - bounds[i_c], 0)
        full = cum[np.clip(i, 0, len(mask))]
        return np.where(i < 0, 0, full + partial)

    return np.maximum(upto(ends) - upto(starts), 0)


def _runs(bounds: np.ndarray, mask: np.ndarray, start: int | None, end: int | None) -> np.ndarray:
    if len(mask) == 0 or not mask.any():
        return np.zeros((0, 2), np.int64)
    m = np.concatenate([[False], mask, [False]]).astype(np.int8)
    d = np.diff(m)
    first = np.flatnonzero(d == 1)
    last = np.flatnonzero(d == -1)
    out = np.stack([bounds[first], bounds[last]], axis=1).astype(np.int64)
    if start is not None:
        out[:, 0] = np.maximum(out[:, 0], start)
    if end is not None:
        out[:, 1] = np.minimum(out[:, 1], end)
    return out[out[:, 1] > out[:, 0]]


@memoised("reason_timelines", depends_on=("slice_classes", "attributed_steps", "before_capture"))
def timelines(trace: TraceData) -> dict[str, ReasonTimeline]:
    """Per device label (or ``"host"``), the reason of every instant. Cached on the trace."""
    labels = track_device_labels(trace)
    out: dict[str, ReasonTimeline] = {}
    if not labels:
        hs, he, hc = host_reason_intervals(trace, device_mode=False)
        bounds, seg = sweep(hs, he, hc, len(HOST_REASONS))
        out["host"] = ReasonTimeline("host", HOST_REASONS, bounds, seg.astype(np.int8))
    else:
        hs, he, hc = host_reason_intervals(trace, device_mode=True)
        by_label: dict[str, list[int]] = {}
        for tid, label in labels.items():
            by_label.setdefault(label, []).append(tid)
        for label in sorted(by_label, key=_label_order):
            ds, de, dc, blocking = device_reason_intervals(trace, np.array(by_label[label]))
            bounds, seg = sweep(
                np.concatenate([ds, hs]),
                np.concatenate([de, he]),
                np.concatenate([dc, hc]),
                len(DEVICE_REASONS),
            )
            _relabel_refill(bounds, seg, he[hc == _R["host_sync"]], _R["sync_refill"])
            _relabel_refill(bounds, seg, he[hc == _R["host_fallback"]], _R["fallback_refill"])
            _relabel_refill(bounds, seg, de[blocking], _R["copy_refill"])
            out[label] = ReasonTimeline(label, DEVICE_REASONS, bounds, seg.astype(np.int8))
    return out


_R = {r: i for i, (r, _) in enumerate(DEVICE_REASONS)}


def _relabel_refill(bounds: np.ndarray, seg: np.ndarray, after: np.ndarray, code: int) -> None:
    """Idle runs (device idle, host busy or idle) that begin exactly at one of the ``after``
    instants become ``code``: the device waits because the blocking call that just returned
    had drained its queue."""
    idle = (seg == _R["host_busy"]) | (seg == -1)
    if not idle.any() or len(after) == 0:
        return
    first = idle & ~np.concatenate([[False], idle[:-1]])
    run = np.cumsum(first)  # run number (1-based) of each idle segment
    starts = bounds[:-1][first]
    hit = np.concatenate([[False], np.isin(starts, after)])
    seg[idle & hit[run]] = code


def _label_order(label: str) -> tuple[str, int]:
    vendor, _, idx = label.partition(":")
    return vendor, int(idx) if idx.lstrip("-").isdigit() else 0


@memoised("breakdown", depends_on=("steps", "attributed_steps", "reason_timelines"))
def breakdown(trace: TraceData, step: int | None = None) -> pd.DataFrame:
    """Long table ``[step, device, category, ns]``: for each (step, device) the rows of
    :data:`CATEGORIES` sum to the step's ``dur_ns`` exactly, and none is negative.

    A step is its attributed window (:func:`explorer.analysis.steps.attributed_steps`):
    its host range plus the device work it launched, so each step is charged its own
    kernels, not the tail of the previous step's."""
    st = select_steps(trace, step, attributed=True)
    starts = st["start_ns"].to_numpy(np.int64)
    ends = st["end_ns"].to_numpy(np.int64)
    frames = []
    for label, tl in timelines(trace).items():
        per_cat = {c: np.zeros(len(st), np.int64) for c in CATEGORIES}
        for reason, cat in tl.reasons:
            per_cat[cat] += tl.reason_ns(reason, starts, ends)
        used = sum(per_cat[c] for c in CATEGORIES if c != "other_idle")
        per_cat["other_idle"] = (ends - starts) - used
        for cat in CATEGORIES:
            frames.append(
                pd.DataFrame(
                    {
                        "step": st["step"].to_numpy(np.int64),
                        "device": label,
                        "category": cat,
                        "ns": per_cat[cat],
                    }
                )
            )
    out = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["step", "device", "category", "ns"])
    )
    out["category"] = pd.Categorical(out["category"], categories=list(CATEGORIES))
    out = out.sort_values(["step", "device", "category"], kind="stable").reset_index(drop=True)
    out["ns"] = out["ns"].astype(np.int64)
    out["step"] = out["step"].astype(np.int64)
    return out


def breakdown_wide(trace: TraceData, step: int | None = None) -> pd.DataFrame:
    """The same numbers, one row per (step, device) and one column per category."""
    bd = breakdown(trace, step)
    wide = bd.pivot_table(
        index=["step", "device"], columns="category", values="ns", aggfunc="sum", observed=False
    )
    return wide.reindex(columns=list(CATEGORIES)).fillna(0).astype(np.int64).reset_index()


def _union_ns(starts: np.ndarray, ends: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """Length of the union of ``[starts, ends)`` inside each window ``[w0, w1)``."""
    bounds, seg = sweep(starts, ends, np.zeros(len(starts), np.int64), 1)
    return _covered(bounds, seg == 0, w0, w1)


def _host_intervals(trace: TraceData) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Host time that is communication and host time that is compute, as intervals
    (comm starts, comm ends, compute starts, compute ends). Each thread is swept on its own
    with the breakdown's priorities, so an op that encloses a collective on the same thread
    is not compute beside it: only another thread's compute overlaps communication."""
    s = trace.slices
    code = host_slice_reasons(trace, device_mode=False)
    names = [r for r, _ in HOST_REASONS]
    comm_k = np.array([names.index("host_comm")])
    comp_k = np.array([i for i, (_, c) in enumerate(HOST_REASONS) if c == "compute"])
    ts = s["ts"].to_numpy(np.int64)
    te = ts + s["dur"].to_numpy(np.int64)
    track = s["track"].to_numpy()
    out: list[list[np.ndarray]] = [[], [], [], []]
    keep = code >= 0
    for t in np.unique(track[keep]):
        m = keep & (track == t)
        bounds, seg = sweep(ts[m], te[m], code[m], len(HOST_REASONS))
        for k, codes in ((0, comm_k), (2, comp_k)):
            on = np.isin(seg, codes)
            out[k].append(bounds[:-1][on])
            out[k + 1].append(bounds[1:][on])
    empty = np.zeros(0, np.int64)
    a, b, c, d = (np.concatenate(x) if x else empty for x in out)
    return a, b, c, d


def comm_overlap(trace: TraceData, step: int | None = None) -> pd.DataFrame:
    """Per step and device (``"host"`` for CPU training): ``comm_ns``, the time any
    communication runs, and ``overlap_ns``, the part of it during which compute runs too
    (hidden: it costs no step time); ``comm_ns - overlap_ns`` is exposed. On a device the
    breakdown's ``communication`` is that exposed part (less what outranks it); on the host
    the breakdown ranks a collective above other threads' compute, so its
    ``communication`` includes the hidden part, and this is where the two are told apart.

    Device mode: collectives and kernels on the device's streams. Host mode: collective
    ops against other threads' compute (see :func:`_host_intervals`)."""
    st = select_steps(trace, step, attributed=True)
    w0 = st["start_ns"].to_numpy(np.int64)
    w1 = st["end_ns"].to_numpy(np.int64)
    labels = track_device_labels(trace)
    groups: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
    if not labels:
        groups["host"] = _host_intervals(trace)
    else:
        s = trace.slices
        ts, te, owned = device_work_intervals(trace)
        code = np.where(owned, device_slice_reasons(trace), -1)
        track = s["track"].to_numpy()
        by_label: dict[str, list[int]] = {}
        for tid, label in labels.items():
            by_label.setdefault(label, []).append(tid)
        for label in sorted(by_label, key=_label_order):
            on = np.isin(track, by_label[label])
            comm = on & (code == _R["dev_comm"])
            comp = on & (code == _R["dev_compute"])
            groups[label] = (ts[comm], te[comm], ts[comp], te[comp])
    frames = []
    for label, (cs, ce, ps, pe) in groups.items():
        comm = _union_ns(cs, ce, w0, w1)
        both = _union_ns(np.concatenate([cs, ps]), np.concatenate([ce, pe]), w0, w1)
        overlap = comm + _union_ns(ps, pe, w0, w1) - both  # |A ∩ B| = |A| + |B| - |A ∪ B|
        frames.append(
            pd.DataFrame(
                {
                    "step": st["step"].to_numpy(np.int64),
                    "device": label,
                    "comm_ns": comm.astype(np.int64),
                    "overlap_ns": overlap.astype(np.int64),
                }
            )  # fmt: skip
        )
    if not frames:
        return pd.DataFrame(
            {"step": np.zeros(0, np.int64), "device": np.zeros(0, str),
             "comm_ns": np.zeros(0, np.int64), "overlap_ns": np.zeros(0, np.int64)}
        )  # fmt: skip
    return pd.concat(frames, ignore_index=True)

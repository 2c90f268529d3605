"""What the time on the critical path is: the breakdown's reasons, instant by instant.

The path names its time with the same classifier the breakdown uses
(:func:`~explorer.analysis.breakdown.host_slice_reasons` and
:func:`~explorer.analysis.breakdown.device_slice_reasons`), so a ``gloo:all_reduce`` that is
communication in the breakdown is communication on the path, and compile time is compile
time in both: on a host thread, an instant is what the breakdown's sweep says it is on
that thread (an ``aten::mm`` run while dynamo traces the frame is compile time).

The path adds one distinction the breakdown does not draw: a runtime call that launches
device work is launch overhead; one that launches nothing (``cudaMalloc``, ``cudaFree``,
``cudaGetDevice``...) is host runtime.
"""

from __future__ import annotations

import numpy as np

from explorer.analysis.breakdown import (
    DEVICE_REASONS,
    HOST_REASONS,
    device_slice_reasons,
    host_slice_reasons,
    sweep,
)
from explorer.analysis.classify import classes
from explorer.analysis.graph.edges import PATH_CATEGORIES
from explorer.analysis.graph.nodes import SliceArrays, graph_device_mode
from explorer.trace.model import TraceData

#: Path category of each breakdown reason of host time.
HOST_REASON_CATEGORY: dict[str, str] = {
    "host_sync": "sync_wait",
    "host_compile": "compile",
    "host_fallback": "host_compute",
    "host_input": "input",
    "host_comm": "communication",
    "host_copy": "data_movement",
    "host_compute": "host_compute",
    "host_busy": "host_compute",
}
#: Path category of each breakdown reason of device time.
DEVICE_REASON_CATEGORY: dict[str, str] = {
    "dev_compute": "device_compute",
    "dev_comm": "communication",
    "dev_copy": "data_movement",
    "dev_wait": "sync_wait",
}


#: How many (owner, instant) questions :class:`TimeCategories` answers at a time: each
#: makes a dozen temporaries its length (int64: 2 MB each at 1 << 18, which were the top of
#: a first report's path on 1M events), so fewer at a time, in more pieces, for the same time.
ASKED_AT_ONCE = 1 << 16

#: A thread's segments where nothing gives a reason: no bounds inside, no segment.
_NO_SEGMENTS = (np.zeros(1, np.int64), np.zeros(0, np.int8))


class TimeCategories:
    """What the time a slice holds at an instant is, as an index into
    :data:`PATH_CATEGORIES`; prepared once per graph, asked for many edges at once.

    On a host thread it is the breakdown's reason for that instant on that thread: the
    highest-priority reason among the slices covering it there (:func:`sweep` over
    :func:`host_slice_reasons`, one thread at a time) — so an op run while dynamo traces a
    frame is compile time, as in the breakdown, whatever the parent column says. A device
    slice is what :func:`device_slice_reasons` says it is. ``launches``: per slice, whether
    it launched device work (a runtime call that did is launch overhead, one that did not
    is host runtime).
    """

    def __init__(self, trace: TraceData, arrays: SliceArrays, launches: np.ndarray) -> None:
        self.arrays = arrays
        self.launches = launches
        device_mode = graph_device_mode(trace)
        self.table = DEVICE_REASONS if device_mode else HOST_REASONS
        self.lookup = np.array(
            [
                PATH_CATEGORIES.index(HOST_REASON_CATEGORY.get(r, "host_compute"))
                for r, _ in self.table
            ]
            # No reason (only a step span covers the instant): the breakdown's idle time.
            + [PATH_CATEGORIES.index("idle_gap")],
            np.int64,
        )
        code = host_slice_reasons(trace, device_mode)
        coded = np.flatnonzero(code >= 0)
        coded = coded[np.argsort(arrays.track[coded], kind="stable")]
        self._coded, self._code = coded, code
        self._track_of_coded = arrays.track[coded]
        self._sweeps: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._all_swept = False
        # A host collective is communication in device traces too (the device's reasons
        # rank host time without one), as it is in a CPU trace's breakdown.
        self.comm = classes(trace).collective
        dev_lookup = np.array(
            [
                PATH_CATEGORIES.index(DEVICE_REASON_CATEGORY.get(r, "device_compute"))
                for r, _ in DEVICE_REASONS
            ]
            + [PATH_CATEGORIES.index("device_compute")],
            np.int8,  # per slice below: a byte each, not eight
        )
        self.device = dev_lookup[device_slice_reasons(trace)]

    def sweep_all(self) -> None:
        """Sweep every host thread now, rather than when first asked: a caller about to
        hold per-edge arrays does it first, so that the sweeps' temporaries (~130 MB on a
        million-slice thread) are not on top of them; what only the sweeps read is then let
        go."""
        tracks = self._track_of_coded
        if len(tracks):
            for tr in tracks[np.r_[True, tracks[1:] != tracks[:-1]]].tolist():
                self._sweep(int(tr))
        self._coded = self._track_of_coded = np.empty(0, np.int64)
        self._all_swept = True

    def _sweep(self, track: int) -> tuple[np.ndarray, np.ndarray]:
        """The reason segments of one host thread: bounds, and per segment the reason's
        index (int8: the tables have a few dozen reasons at most; -1 for none)."""
        if track not in self._sweeps:
            if self._all_swept:  # a thread with no reason anywhere
                return _NO_SEGMENTS
            lo, hi = np.searchsorted(self._track_of_coded, [track, track + 1])
            mine = self._coded[lo:hi]
            a = self.arrays
            bounds, seg = sweep(a.ts[mine], a.end[mine], self._code[mine], len(self.table))
            self._sweeps[track] = (bounds, seg.astype(np.int8))
        return self._sweeps[track]

    def on_track(self, track: np.ndarray, at_ns: np.ndarray) -> np.ndarray:
        """Category of host thread ``track[i]``'s time at ``at_ns[i]``: the breakdown's
        reason there on that thread, idle_gap where no slice gives one."""
        track = np.asarray(track, np.int64)
        at_ns = np.asarray(at_ns, np.int64)
        out = np.empty(len(track), np.int64)
        for tr in np.unique(track):
            q = np.flatnonzero(track == tr)
            bounds, seg = self._sweep(int(tr))
            i = np.searchsorted(bounds, at_ns[q], side="right") - 1
            ok = (i >= 0) & (i < len(seg))
            c = np.full(len(q), -1, np.int64)
            c[ok] = seg[i[ok]]
            out[q] = self.lookup[c]  # -1 -> the idle_gap appended above
        return out

    def __call__(self, owner: np.ndarray, at_ns: np.ndarray) -> np.ndarray:
        """Category of the time ``owner[i]`` holds at ``at_ns[i]``. Asked in chunks of
        :data:`ASKED_AT_ONCE`: each question makes a dozen temporaries its length, on top
        of a million-edge path (or graph) that is held meanwhile."""
        if len(owner) <= ASKED_AT_ONCE:
            return self._categories(owner, at_ns)
        return np.concatenate(
            [
                self._categories(owner[i : i + ASKED_AT_ONCE], at_ns[i : i + ASKED_AT_ONCE])
                for i in range(0, len(owner), ASKED_AT_ONCE)
            ]
        )

    def _categories(self, owner: np.ndarray, at_ns: np.ndarray) -> np.ndarray:
        a = self.arrays
        owner = np.asarray(owner, np.int64)
        at_ns = np.asarray(at_ns, np.int64)
        host_compute = PATH_CATEGORIES.index("host_compute")
        out = np.full(len(owner), host_compute, np.int64)
        if len(owner) == 0:
            return out
        on_host = a.host[owner]
        out[on_host] = self.on_track(a.track[owner[on_host]], at_ns[on_host])
        out[on_host & self.comm[owner] & (out == host_compute)] = PATH_CATEGORIES.index(
            "communication"
        )
        # Runtime calls doing plain host work: launch overhead when they launch, else runtime.
        plain = on_host & (out == host_compute) & a.kind_in(("runtime",), owner)
        out[plain & self.launches[owner]] = PATH_CATEGORIES.index("launch_overhead")
        out[plain & ~self.launches[owner]] = PATH_CATEGORIES.index("host_runtime")
        on_device = a.device[owner]
        out[on_device] = self.device[owner[on_device]]
        return out

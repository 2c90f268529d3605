"""The in-memory trace model: columnar tables joined by integer ids.

Every reader fills a :class:`TraceData`; every analysis, exporter and view reads one.
Nothing here knows where the data came from, and nothing here imports Qt or torch.

Tables (pandas DataFrames; ids are row positions, so ``slices.iloc[i]`` is slice ``i``):

``slices`` — one row per duration event (Chrome ``X`` events and matched ``B``/``E`` pairs),
sorted by ``(track, ts, -dur)`` so that each track's rows are contiguous and parents come
before their children.

    ===============  ==========  ==========================================================
    column           dtype       meaning
    ===============  ==========  ==========================================================
    ts               int64       start, ns relative to ``metadata["start_ns"]``
    dur              int64       duration in ns (never negative)
    name             category    event name
    cat              category    the category as written in the file
    kind             category    normalised kind, one of :data:`KINDS`
    track            int32       id into ``tracks``
    depth            int16       nesting depth on its track (0 = top level)
    parent           int64       shortest slice on the same track containing it, -1 for none
    correlation      int64       runtime↔device correlation id, -1 when absent
    external_id      int64       ``External id`` (op ↔ runtime ↔ kernel), -1 when absent
    stream           int64       device stream / queue, -1 when absent
    device           int64       device index, -1 when absent
    bytes            int64       bytes moved (memcpy/memset/copy), -1 when absent
    seq              int64       autograd sequence number, -1 when absent
    copy_kind        category    memcpy direction: HtoD, DtoH, DtoD, PtoP, HtoH, or ""
    src_mem          category    memcpy source memory: Pageable, Pinned, Device, Managed, Host
                                 (host memory of unknown kind, as ROCm writes it), or ""
    dst_mem          category    memcpy destination memory, likewise
    ===============  ==========  ==========================================================

The raw ``args`` of each slice are kept (never dropped) and read with
:meth:`TraceData.args` — they are decoded lazily because most analyses never need them.

``tracks`` — one row per timeline row: ``id`` (int32, = row position), ``pid`` and ``tid``
(as strings, exactly as in the file), ``process`` (process label), ``thread`` (thread or
stream label), ``label`` (what a person reads: ``"python3 (597913) / thread 598009"``,
``"GPU 0 / stream 7"``), ``type`` (one of :data:`TRACK_TYPES`), ``device`` (int64, -1 for host),
``stream`` (int64, -1 for host), ``rank`` (int64, -1 when unknown), ``order`` (int64 display
order: processes by their sort index, then threads). Counter tracks live here too.

``flows`` — ``src`` and ``dst`` slice ids (int64) and ``type`` (category: ``launch`` for
runtime call → device op, ``fwdbwd`` for forward → backward, ``other`` for any other explicit
flow), ``flow_id`` (the id in the file, -1 for flows derived from correlation ids).

``counters`` — ``track`` (int32), ``ts`` (int64 ns), ``value`` (float64); one row per sample.

``instants`` — ``ts``, ``name``, ``cat``, ``track`` (-1 for global instants), ``scope``.

``memory`` — the profiler's ``[memory]`` events: ``ts``, ``device_type`` (int64, as torch
writes it: 0 CPU, 1 CUDA, ...), ``device`` (int64), ``addr`` (int64), ``bytes`` (int64, +alloc /
-free), ``total_allocated`` (int64), ``total_reserved`` (int64), ``track`` (host thread that
allocated, int32), ``slice`` (the innermost host slice enclosing the event, -1 for none).

``metadata`` — a dict: every top-level key of the file other than ``traceEvents``, plus
``start_ns`` (absolute ns of ``ts == 0``), ``end_ns``, ``source`` (the path read), ``format``
(``"kineto"``, ``"chrome"``...), ``rank`` / ``world_size`` (from ``distributedInfo``),
``synthetic`` (True only for traces written by Explorer's scenario generator),
``warnings`` (list of strings the reader wants the user to see).

``window`` — None for a whole trace; for a time window cut from one
(:func:`explorer.trace.window.cut`), a :class:`Window`: what it was cut from, each row's id
in the whole trace, and the whole trace's steps over the window.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from explorer.errors import UsageError
from explorer.trace.columns import category_in, category_matches
from explorer.trace.memo import Memo, declare_options, memoised
from explorer.trace.source import stack_of
from explorer.trace.step_options import StepOptions

#: Normalised slice kinds. ``copy``, ``fallback`` and ``compile`` come from Explorer's own
#: collector categories; the rest from the profiler's categories.
KINDS: tuple[str, ...] = (
    "cpu_op",
    "python",
    "annotation",
    "runtime",
    "kernel",
    "memcpy",
    "memset",
    "sync",
    "device_annotation",
    "copy",
    "fallback",
    "compile",
    "collective",
    "other",
)

#: Kinds that run on a device (their rows sit on device tracks).
DEVICE_KINDS: frozenset[str] = frozenset(
    {"kernel", "collective", "memcpy", "memset", "device_annotation"}
)

TRACK_TYPES: tuple[str, ...] = ("host_thread", "device_stream", "counter", "other")

#: Where a slice runs (:meth:`TraceData.sides`): a host thread, a device stream or queue, or
#: another row — the profiler's own span ("PyTorch Profiler (0)" on Kineto's ``Spans``
#: process), which is neither host work nor device work.
HOST, DEVICE, OTHER = 0, 1, 2
SIDES: tuple[str, ...] = ("host", "device", "other")

NO_ID = -1

#: The trace's options that analyses read (memo keys computed from them name them).
declare_options("step_pattern", "step_nesting")

#: The step annotations ``torch.profiler`` writes around each ``prof.step()``.
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")


#: Every column of ``slices``, in order, with its dtype ("category": categorical).
SLICE_DTYPES: dict[str, str] = {
    "ts": "int64", "dur": "int64", "name": "category", "cat": "category", "kind": "category",
    "track": "int32", "depth": "int16", "parent": "int64", "correlation": "int64",
    "external_id": "int64", "stream": "int64", "device": "int64", "bytes": "int64",
    "seq": "int64", "copy_kind": "category", "src_mem": "category", "dst_mem": "category",
}  # fmt: skip
SLICE_COLUMNS: list[str] = list(SLICE_DTYPES)


def empty_slices() -> pd.DataFrame:
    """A slices table with no rows and every column typed, for traces without events."""
    columns: dict[str, Any] = {
        c: pd.Categorical([]) if d == "category" else np.empty(0, d)
        for c, d in SLICE_DTYPES.items()
    }
    columns["kind"] = pd.Categorical([], categories=list(KINDS))
    return pd.DataFrame(columns)


@dataclass(frozen=True)
class Window:
    """What a windowed trace (:func:`explorer.trace.window.cut`) is a window of.

    Its slices are those of the whole trace that overlap ``[start_ns, end_ns)``, with their
    enclosing slices; ``ids[i]`` is row ``i``'s id in the whole trace, so what a user clicks
    (evidence, the critical path) names the whole trace's slices. ``steps`` and
    ``attributed_steps`` are the whole trace's step tables for the steps in the window (slice
    ids already of the window): a step at the window's edge cannot be derived from the cut,
    since the work around it is gone, so the analyses take them from here.
    """

    start_ns: int
    end_ns: int
    ids: np.ndarray
    whole_slices: int
    whole_steps: int
    steps: pd.DataFrame
    attributed_steps: pd.DataFrame
    reason: str
    """Why the window: "requested", or what limit the whole trace's analyses would pass."""

    def whole_ids(self, ids: Any) -> list[int]:
        """The whole trace's ids of some of the window's slice ids."""
        return [int(i) for i in self.ids[np.asarray(ids, dtype=np.int64)]]

    def rows_of(self, whole_ids: Any) -> np.ndarray:
        """The window's ids of some of the whole trace's slice ids: -1 for those outside
        the window (the inverse of :meth:`whole_ids`; ``ids`` ascends)."""
        whole = np.asarray(whole_ids, dtype=np.int64)
        at = np.searchsorted(self.ids, whole)
        inside = at < len(self.ids)
        inside[inside] = self.ids[at[inside]] == whole[inside]
        return np.where(inside, at, -1).astype(np.int64)


@dataclass
class TraceData:
    """The tables of one trace (one rank). See the module docstring for every column.

    ``args_store`` holds the per-slice args; use :meth:`args` rather than touching it.
    ``memo`` keeps the analyses' results for this trace under declared names
    (:mod:`explorer.trace.memo`); for a trace opened from the cache, the expensive ones are
    also kept beside its tables (:mod:`explorer.store.results`). ``step_options`` say which
    annotations are the steps (:class:`StepOptions`); they are a value, fixed for a trace:
    :meth:`with_steps` gives the trace under others.
    """

    slices: pd.DataFrame
    tracks: pd.DataFrame
    flows: pd.DataFrame
    counters: pd.DataFrame
    instants: pd.DataFrame
    memory: pd.DataFrame
    metadata: dict[str, Any]
    args_store: Any = None
    execution_trace: pd.DataFrame | None = None
    window: Window | None = field(default=None, compare=False)
    memo: Memo = field(default_factory=Memo, repr=False, compare=False)
    step_options: StepOptions = field(default_factory=lambda: StepOptions(), compare=False)

    # -- options -------------------------------------------------------------------------
    @property
    def step_pattern(self) -> str | None:
        """The regex that names this trace's steps for every analysis (None: the default)."""
        return self.step_options.pattern

    @property
    def step_nesting(self) -> str:
        """Which of nested step annotations are the steps: ``"outermost"`` (the default)
        or ``"innermost"`` (:data:`STEP_NESTINGS`)."""
        return self.step_options.nesting

    def with_steps(self, pattern: str | None = None, nesting: str = "outermost") -> TraceData:
        """This trace with steps taken from host annotations matching ``pattern`` (None:
        ``ProfilerStep#N``), the ``nesting`` level of them where they nest: a view over
        the same tables whose memo keeps its own results for what depends on the steps
        and shares the rest with this trace's (see :class:`StepOptions`)."""
        return self.with_step_options(StepOptions(pattern, nesting))

    def with_step_options(self, options: StepOptions) -> TraceData:
        """This trace under other step options (:meth:`with_steps`); itself when they are
        its own. A window's steps are the whole trace's: a :class:`UsageError` there."""
        if options == self.step_options:
            return self
        if self.window is not None:
            raise UsageError("a window's steps are the whole trace's: choose them there")
        changed = [
            name
            for name, mine, theirs in (
                ("step_pattern", self.step_pattern, options.pattern),
                ("step_nesting", self.step_nesting, options.nesting),
            )
            if mine != theirs
        ]
        view = copy.copy(self)
        view.step_options = options
        view.memo = self.memo.view(changed)
        if self.memo.store is not None:  # results of the view's own steps are stored too
            view.memo.store = self.memo.store.for_trace(view)
        return view

    # -- sizes and identity -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.slices)

    @property
    def path(self) -> str:
        return str(self.metadata.get("source", ""))

    @property
    def span_ns(self) -> int:
        """From the first event's start to the last event's end."""
        if len(self.slices) == 0:
            return 0
        end = (self.slices["ts"].to_numpy() + self.slices["dur"].to_numpy()).max()
        return int(max(end, 0))

    @property
    def rank(self) -> int:
        return int(self.metadata.get("rank", -1))

    @property
    def synthetic(self) -> bool:
        return bool(self.metadata.get("synthetic", False))

    @property
    def test_backend(self) -> str:
        """What a trace recorded on a test backend says about it ("" for real hardware):
        Explorer's ``neuron`` test backend runs on the CPU, and every view says so."""
        label = self.metadata.get("explorer_test_backend")
        if not isinstance(label, dict):
            return ""
        return str(label.get("description") or label.get("name") or "test backend")

    @property
    def privateuse1_backend(self) -> str:
        """The PrivateUse1 backend's name the trace records (``"neuron"``; "" when none was
        named): Explorer's collector writes ``torch._C._get_privateuse1_backend_name()``."""
        block = self.metadata.get("explorer")
        name = (block.get("privateuse1_backend") if isinstance(block, dict) else None) or (
            self.metadata.get("privateuse1_backend")
        )
        return "" if not name or name == "privateuseone" else str(name)

    # -- args ----------------------------------------------------------------------------
    def args(self, slice_id: int) -> dict[str, Any]:
        """The args of one slice exactly as the file had them (empty dict when none)."""
        if self.args_store is None:
            return {}
        return self.args_store.get(int(slice_id))

    def arg_column(self, key: str, ids: np.ndarray | None = None) -> list[Any]:
        """One arg for many slices (None where missing). Decodes those slices' args."""
        if ids is None:
            ids = np.arange(len(self.slices))
        return [self.args(int(i)).get(key) for i in ids]

    # -- source frames ------------------------------------------------------------------
    def stack(self, slice_id: int) -> list[tuple[str, int, str]]:
        """The Python stack of a slice, innermost frame first, as (file, line, function)."""
        return stack_of(self, int(slice_id))

    # -- where slices run, and what encloses them ------------------------------------------
    @memoised("slice_sides")
    def sides(self) -> np.ndarray:
        """Per slice, where it runs: :data:`HOST`, :data:`DEVICE` or :data:`OTHER` (int8,
        read-only), from its track's type. A trace whose tracks are not typed at all (no
        host thread, no device stream) is split by kind (:data:`DEVICE_KINDS` on a device)."""
        s = self.slices
        types = self.tracks["type"].astype(str).to_numpy() if len(self.tracks) else np.zeros(0)
        if np.isin(types, ["host_thread", "device_stream"]).any():
            codes = np.full(int(self.tracks["id"].max()) + 1, OTHER, np.int8)
            codes[self.tracks["id"].to_numpy()] = np.select(
                [types == "host_thread", types == "device_stream"], [HOST, DEVICE], OTHER
            )
            track = s["track"].to_numpy(np.int64)
            ok = (track >= 0) & (track < len(codes))
            out = np.full(len(s), OTHER, np.int8)
            out[ok] = codes[track[ok]]
        else:
            out = np.where(s["kind"].astype(str).isin(DEVICE_KINDS), DEVICE, HOST).astype(np.int8)
        out.flags.writeable = False
        return out

    def on_device(self) -> np.ndarray:
        """Per slice: does it run on a device stream or queue? (see :meth:`sides`)"""
        return self.sides() == DEVICE

    def on_host(self) -> np.ndarray:
        """Per slice: does it run on a host thread? (not the profiler's own span row)"""
        return self.sides() == HOST

    @memoised("slice_depth_order")
    def _depth_order(self) -> tuple[np.ndarray, np.ndarray]:
        """The slices that have a parent, shallowest first (by id within a depth), and
        their depths: what :meth:`inherit_down` walks, sorted once per trace."""
        parent = self.slices["parent"].to_numpy(np.int64)
        depth = self.slices["depth"].to_numpy()  # the table's narrow ints: compared only
        rows = np.flatnonzero(parent >= 0)
        rows = rows[np.argsort(depth[rows], kind="stable")]
        if len(parent) < np.iinfo(np.int32).max:  # held per trace: half the bytes
            rows = rows.astype(np.int32)
        out = (rows, depth[rows])
        for a in out:
            a.flags.writeable = False
        return out

    def inherit_down(self, values: np.ndarray, keep: np.ndarray) -> np.ndarray:
        """A copy of ``values`` in which every slice whose ``keep`` is False takes its
        parent's value, shallowest first, so a value flows down any number of levels
        (a user line to the ops under it, "inside the data loader" to its children).

        One vectorised step per nesting depth, never a walk per slice.
        """
        out = values.copy()
        parent = self.slices["parent"].to_numpy(np.int64)
        order, depth = self._depth_order()
        take = ~keep[order]
        rows = order[take]
        cuts = np.flatnonzero(np.diff(depth[take])) + 1
        for level in np.split(rows, cuts):
            out[level] = out[parent[level]]
        return out

    def kind_in(self, *kinds: str) -> np.ndarray:
        """Per slice: is its kind one of ``kinds``? (compared per category, not per row)"""
        return category_in(self.slices["kind"], kinds)

    def name_matches(self, rx: re.Pattern[str]) -> np.ndarray:
        """Per slice: does its name match ``rx``? One regex call per distinct name."""
        return category_matches(self.slices["name"], rx)

    # -- convenience for views and analyses -----------------------------------------------
    def device_tracks(self) -> pd.DataFrame:
        return self.tracks[self.tracks["type"] == "device_stream"]

    def host_tracks(self) -> pd.DataFrame:
        return self.tracks[self.tracks["type"] == "host_thread"]

    def ends(self) -> np.ndarray:
        return self.slices["ts"].to_numpy() + self.slices["dur"].to_numpy()

"""The event array → typed columns, a chunk at a time.

Holding a million decoded event objects costs several times the JSON's size, so the
array is decoded in chunks (:mod:`explorer.trace.event_chunk`: each chunk's fields go
straight into numpy columns and the chunk's own small vocabularies, its slices' args into
one byte blob, and its objects are dropped before the next one is decoded). Chunks are
decoded one after another here or in worker processes (:mod:`explorer.trace.chunked_load`);
:class:`ColumnsMerger` joins them in file order by concatenation, mapping each chunk's
vocabularies into the trace's, so the columns are those of one pass over the file.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from explorer.errors import TraceError
from explorer.trace.event_chunk import ChunkColumns, Vocabulary, decode_chunk
from explorer.trace.event_types import (
    MEMORY_ARGS,
    PH_M,
    PH_OTHER,
    PH_X,
    SLICE_ARG_FILL,
    MemoryArgs,
    struct_columns,
)
from explorer.trace.spill import Spill

#: Events per chunk when the array is split by events (:class:`~explorer.trace.decode.EventChunks`).
CHUNK = 10_000

_ANY = msgspec.json.Decoder()


@dataclass
class EventColumns:
    """Every event's fields as columns (file order), plus what some kinds of event need."""

    n: int = 0
    ph: np.ndarray = field(default_factory=lambda: np.empty(0, np.int8))
    name: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    cat: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    pid: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    tid: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    ts: np.ndarray = field(default_factory=lambda: np.empty(0, np.float64))
    dur: np.ndarray = field(default_factory=lambda: np.empty(0, np.float64))
    dur_missing: np.ndarray = field(default_factory=lambda: np.empty(0, bool))
    names: Vocabulary = field(default_factory=lambda: Vocabulary(True))
    cats: Vocabulary = field(default_factory=lambda: Vocabulary(True))
    pids: Vocabulary = field(default_factory=lambda: Vocabulary(False))
    tids: Vocabulary = field(default_factory=lambda: Vocabulary(False))
    # X and B events ("args rows"), in file order: raw args and the args that become columns
    # (a column none of them has is left out: see SLICE_ARG_FILL).
    args_rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    args_blob: bytes | bytearray | memoryview = b""
    args_offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    slice_args: dict[str, np.ndarray] = field(default_factory=dict)
    # Flow events: their rows, ids (int64 codes: equal ids, equal codes; ids that are not
    # numbers get codes below -1) and whether the event binds to its enclosing slice.
    flow_rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    flow_id: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    flow_bp: np.ndarray = field(default_factory=lambda: np.empty(0, bool))
    # Instant events: scope; [memory] instants: their args.
    instant_rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    instant_scope: list[str] = field(default_factory=list)
    memory_rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    memory_args: dict[str, np.ndarray] = field(default_factory=dict)
    # Counter and metadata events: decoded args (few of them).
    counter_args: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    meta_args: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    #: What was dropped or guessed while decoding, for the user (see :func:`check_times`).
    warnings: list[str] = field(default_factory=list)

    def release(self, *columns: str) -> None:
        """Drop these columns (each becomes empty): the caller has built what they make."""
        for c in columns:
            old = getattr(self, c)
            setattr(self, c, b"" if c == "args_blob" else np.empty(0, old.dtype))

    def name_text(self, i: int) -> str:
        return self.names.values[self.name[i]]

    def where(self, i: int) -> str:
        """How a message names event ``i``."""
        n = self.name_text(i) if 0 <= i < len(self.name) else ""
        return f"event {i}" + (f" ({n!r})" if n else "")


#: Row columns of a chunk, shifted by the chunk's first event when merged.
_ROWS = ("args_rows", "flow_rows", "instant_rows", "memory_rows", "counter_rows", "meta_rows")
#: Per-event columns of a chunk, joined as they are, with their dtypes.
_PER_EVENT = {
    "ph": np.int8,
    "ts": np.float64,
    "dur": np.float64,
    "dur_missing": np.bool_,
    "flow_bp": np.bool_,
    "args_lengths": np.int64,
}
_VOCABULARIES = (("name", "names"), ("cat", "cats"), ("pid", "pids"), ("tid", "tids"))


class InMemoryColumns:
    """Columns appended to chunk by chunk in memory (the in-memory counterpart of
    :class:`~explorer.trace.spill.Spill`, same interface), each into one buffer that
    doubles when full and is cut to its length when asked for. A piece is copied in as it
    arrives and then freed, so the next chunk's pieces reuse its memory: only the columns
    themselves touch fresh memory. A large buffer grows and shrinks by being remapped
    (:meth:`numpy.ndarray.resize`, ``realloc``), not copied, and its unused end is never
    touched. Against keeping every piece and joining them at the end, run by run at 10M
    events: the loading process's system time 6.7 -> 4.6 s, its peak 2,120 -> 2,057 MB
    (fresh memory is slow on a virtual machine whose host takes back what its guest frees:
    0.2-0.6 GB/s here, against 5-9 GB/s for memory just freed)."""

    def __init__(self) -> None:
        self._buffers: dict[str, np.ndarray] = {}
        self._used: dict[str, int] = {}
        self._scale = 0.0
        self._most_bytes = 0

    def expect(self, text_bytes: int, first_chunk_bytes: int) -> None:
        """Size each column's buffer, when its first piece comes, for the whole text: the
        piece's rows scaled by how many times the first chunk the text is (a tenth more,
        at most a quarter of the text's bytes a column). A buffer that has to grow while
        it is small is copied within the heap (1M events: the loader's peak 10 MB higher
        and its parse 15% slower, run by run); a buffer's end beyond its rows is never
        touched."""
        self._scale = 1.1 * text_bytes / max(first_chunk_bytes, 1)
        self._most_bytes = text_bytes // 4

    def add(self, key: str, data: np.ndarray | bytes | bytearray) -> None:
        a = data if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)
        buffer = self._buffers.get(key)
        used = self._used.get(key, 0)
        if buffer is None:
            rows = min(int(len(a) * self._scale), self._most_bytes // a.itemsize)
            buffer = self._buffers[key] = np.empty(max(len(a), _FIRST_ROWS, rows), a.dtype)
        elif buffer.dtype != a.dtype:  # never in practice: each column keeps one dtype
            buffer = self._buffers[key] = buffer.astype(np.result_type(buffer, a))
        if used + len(a) > len(buffer):
            buffer.resize(max(2 * len(buffer), used + len(a)), refcheck=False)
        buffer[used : used + len(a)] = a
        self._used[key] = used + len(a)

    def array(self, key: str, dtype: Any) -> np.ndarray:
        """Column ``key`` (empty when nothing was added)."""
        buffer = self._buffers.pop(key, None)
        if buffer is None:
            return np.empty(0, dtype)
        buffer.resize(self._used.pop(key), refcheck=False)
        return buffer


#: Rows a column's buffer starts with (it doubles when full).
_FIRST_ROWS = 1 << 16


class ColumnsMerger:
    """Chunks' columns, added in file order, joined into one :class:`EventColumns`.

    Each chunk's vocabulary codes are mapped to the trace's as it is added (the trace's
    vocabularies grow in order of first appearance, as one pass over the file would grow
    them). Columns, the args blob among them, go to ``spill`` (files, for a trace too
    large for memory) or else grow in memory (:class:`InMemoryColumns`)."""

    def __init__(self, spill: Spill | None = None, spill_columns: bool = True) -> None:
        """With ``spill``, the args blob goes to it, and the other columns too when
        ``spill_columns``."""
        self.out = EventColumns()
        self.n = 0
        self._sink: Spill | InMemoryColumns = (
            spill if spill is not None and spill_columns else InMemoryColumns()
        )
        self._blob_sink = spill if spill is not None else self._sink
        self._text_ids: dict[str, int] = {}
        self._memory_raws: list[bytes] = []
        self._n_no_ph = 0
        self._n_slices = 0
        self._slice_args_seen: set[str] = set()

    def expect(self, text_bytes: int, first_chunk_bytes: int) -> None:
        """The text's size and its first chunk's, before any chunk is added: columns kept
        in memory are sized for the whole text (:meth:`InMemoryColumns.expect`)."""
        for sink in (self._sink, self._blob_sink):
            if isinstance(sink, InMemoryColumns):
                sink.expect(text_bytes, first_chunk_bytes)

    def _put(self, key: str, value: np.ndarray) -> None:
        self._sink.add(key, value)

    def add(self, chunk: ChunkColumns) -> None:
        out, start = self.out, self.n
        for key, vocabulary_key in _VOCABULARIES:
            vocabulary: Vocabulary = getattr(out, vocabulary_key)
            self._put(key, vocabulary.absorb(getattr(chunk, vocabulary_key))[getattr(chunk, key)])
        for key in _PER_EVENT:
            self._put(key, getattr(chunk, key))
        for key in _ROWS:
            self._put(key, getattr(chunk, key) + start)
        self._add_slice_args(chunk)
        self._put("flow_id", self._flow_ids(chunk))
        self._blob_sink.add("args_blob", chunk.args_blob)
        out.instant_scope.extend(chunk.instant_scope)
        self._memory_raws.extend(chunk.memory_args)
        out.counter_args.extend(
            zip((chunk.counter_rows + start).tolist(), map(_dict, chunk.counter_args), strict=True)
        )
        out.meta_args.extend(
            zip((chunk.meta_rows + start).tolist(), map(_dict, chunk.meta_args), strict=True)
        )
        self._n_no_ph += chunk.n_no_ph
        self.n += chunk.n

    def _add_slice_args(self, chunk: ChunkColumns) -> None:
        """The chunk's slice-arg columns; one it left out (none of its slices has it) is
        filled in (:data:`SLICE_ARG_FILL`) once some chunk has had it, and a column no chunk
        has is left out of the trace's too, so that most are never written at all."""
        n = len(chunk.args_rows)
        for key, fill in SLICE_ARG_FILL.items():
            column = chunk.slice_args.get(key)
            if column is None and key not in self._slice_args_seen:
                continue
            if column is None:
                column = np.full(n, fill, np.asarray(fill).dtype)
            elif key not in self._slice_args_seen:
                self._slice_args_seen.add(key)
                if self._n_slices:
                    self._put("slice_args." + key, np.full(self._n_slices, fill, column.dtype))
            self._put("slice_args." + key, column)
        self._n_slices += n

    def _flow_ids(self, chunk: ChunkColumns) -> np.ndarray:
        """The chunk's flow ids, its ids that are not numbers as the trace's codes: -2, -3,
        ... in order of first appearance (-1 means "derived from correlation ids" in the
        flows table)."""
        if not chunk.flow_texts:
            return chunk.flow_id
        codes = np.array(
            [-2 - self._text_ids.setdefault(t, len(self._text_ids)) for t in chunk.flow_texts],
            np.int64,
        )
        text = chunk.flow_text >= 0
        return np.where(text, codes[np.where(text, chunk.flow_text, 0)], chunk.flow_id)

    def _cat(self, key: str, dtype: Any) -> np.ndarray:
        return self._sink.array(key, dtype)

    def finish(self, path: object) -> EventColumns:
        """The joined columns, with their times checked (see :func:`check_times`)."""
        out = self.out
        out.n = self.n
        for key in ("name", "cat", "pid", "tid"):
            setattr(out, key, self._cat(key, np.int32))
        for key in ("ph", "ts", "dur", "dur_missing", "flow_bp"):
            setattr(out, key, self._cat(key, _PER_EVENT[key]))
        for key in ("args_rows", "flow_rows", "instant_rows", "memory_rows"):
            setattr(out, key, self._cat(key, np.int64))
        out.flow_id = self._cat("flow_id", np.int64)
        lengths = self._cat("args_lengths", np.int64)
        out.args_offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=out.args_offsets[1:])
        out.args_blob = self._blob_sink.array("args_blob", np.uint8).data
        out.slice_args = {
            key: self._cat("slice_args." + key, np.asarray(fill).dtype)
            for key, fill in SLICE_ARG_FILL.items()
            if key in self._slice_args_seen
        }
        out.memory_args = struct_columns(MEMORY_ARGS, MemoryArgs, self._memory_raws)
        if out.dur_missing.any():  # absent: zero-length (and a warning)
            out.dur = np.where(out.dur_missing, 0.0, out.dur)
        check_times(path, out)
        if self._n_no_ph:
            out.warnings.append(
                f"{self._n_no_ph} events have no 'ph' (event type) and were ignored"
            )
        return out


def merge_chunks(path: object, chunks: Iterable[ChunkColumns]) -> EventColumns:
    """Chunks' columns (in file order) joined into the trace's."""
    merger = ColumnsMerger()
    for chunk in chunks:
        merger.add(chunk)
    return merger.finish(path)


def decode_columns(path: object, chunks: Any, progress: Any = None) -> EventColumns:
    """Columns of every event of ``chunks`` (``(first event, JSON array)`` pairs in file
    order, :class:`~explorer.trace.decode.EventChunks`), decoded one after another."""
    merger = ColumnsMerger()
    total = max(len(chunks), 1)
    for start, text in chunks:
        merger.add(decode_chunk(path, text, start))
        if progress:
            progress(0.2 + 0.35 * min(1.0, merger.n / total), "decoding events")
    return merger.finish(path)


def _dict(raw: bytes) -> dict[str, Any]:
    try:
        a = _ANY.decode(raw)
    except msgspec.DecodeError:
        return {}
    return a if isinstance(a, dict) else {}


#: Every time, in µs, must lie within ±2^62 ns: then it and any difference of two of them
#: fit int64 nanoseconds (±146 years around 1970 — every real clock).
MAX_ABS_US = float(2**62 // 1000)


#: Events checked at a time by :func:`check_times`: its temporaries stay a few MB (made
#: whole, at 10M events, they were five arrays of 80 MB of fresh memory).
_CHECK_BLOCK = 1 << 20


def check_times(path: object, ev: EventColumns) -> None:
    """Validate the time range once, here, so nothing downstream meets a wrapped or
    negative time: a timestamp or end that is not finite or beyond :data:`MAX_ABS_US` is an
    error naming the event (the first bad timestamp, else the first bad end). An ``X``
    event without ``dur`` is taken as zero-length, with a warning."""
    first_bad: dict[str, int] = {}
    missing, first_missing = 0, -1
    for lo in range(0, len(ev.ph), _CHECK_BLOCK):
        block = slice(lo, lo + _CHECK_BLOCK)
        ph, ts, dur = ev.ph[block], ev.ts[block], ev.dur[block]
        timed = (ph != PH_M) & (ph != PH_OTHER) & ~np.isnan(ts)  # missing: see build
        is_x = ph == PH_X
        with np.errstate(invalid="ignore", over="ignore"):
            end = np.where(is_x, ts + dur, ts)
            bad_ts = timed & ~(np.abs(ts) <= MAX_ABS_US)
            bad_end = timed & is_x & ~np.isnan(dur) & ~(np.abs(end) <= MAX_ABS_US)
        for bad, what in ((bad_ts, "timestamp"), (bad_end, "duration")):
            if what not in first_bad and bad.any():
                first_bad[what] = lo + int(np.flatnonzero(bad)[0])
        no_dur = is_x & ev.dur_missing[block]
        if no_dur.any():
            missing += int(np.count_nonzero(no_dur))
            if first_missing < 0:
                first_missing = lo + int(np.flatnonzero(no_dur)[0])
    for what, values in (("timestamp", ev.ts), ("duration", ev.dur)):
        if what in first_bad:
            i = first_bad[what]
            v = float(values[i])
            text = repr(v) if not math.isfinite(v) else f"{v:.6g} µs"
            raise TraceError(
                path,
                f"{ev.where(i)} has a {what} of {text}, beyond what 64-bit nanoseconds hold "
                "(±146 years around 1970)",
                "the file is damaged or was not written by a profiler",
            )
    if missing:
        ev.warnings.append(
            f"{missing} 'X' events have no 'dur' and are shown as zero-length "
            f"(the first: {ev.where(first_missing)})"
        )


def absolute_start(base_ns: int, t0_us: int, span_ns: int, warnings: list[str]) -> int:
    """The trace's first time in ns since 1970: ``baseTimeNanoseconds`` plus the first
    timestamp (whole µs). A start before 1970 (negative timestamps) or an end beyond int64
    cannot be written by any exporter: then absolute times start at 0, with a warning
    (times within the trace are unchanged)."""
    start = base_ns + t0_us * 1000
    if 0 <= start and start + span_ns <= 2**63 - 1:
        return start
    warnings.append(
        "the trace's timestamps lie before 1970 or beyond 2262 (negative or huge 'ts'): "
        "absolute times start at 0; times within the trace are unchanged"
    )
    return 0

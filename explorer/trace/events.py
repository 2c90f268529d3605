"""The event array → typed columns, a chunk at a time.

Holding a million decoded event objects costs several times the JSON's size, so the
array is split into byte ranges of :data:`CHUNK` events (:class:`~explorer.trace.decode.
EventChunks`) and decoded one range at a time; each chunk's fields go straight into numpy
columns and small vocabularies (names, categories, pids, tids), its slices' args into one
byte blob, and the chunk's objects are dropped before the next one is decoded. (Small
chunks are also faster: their objects stay in the CPU caches.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from explorer.errors import TraceError
from explorer.trace import columns
from explorer.trace.json_position import too_deep

CHUNK = 10_000

#: ``ph`` values the model knows, as small integer codes.
PH = {
    "X": 0,
    "B": 1,
    "E": 2,
    "i": 3,
    "I": 3,
    "C": 4,
    "s": 5,
    "t": 6,
    "f": 7,
    "M": 8,
    "b": 9,
    "e": 10,
    "n": 11,
}
PH_X, PH_B, PH_E, PH_I, PH_C, PH_S, PH_T, PH_F, PH_M = 0, 1, 2, 3, 4, 5, 6, 7, 8
PH_ASYNC = (9, 10, 11)
PH_OTHER = 12


class Event(msgspec.Struct, gc=False):
    """One Chrome-trace event; every field is optional and of any type (checked later, with
    the event's index in the message)."""

    ph: Any = None
    name: Any = None
    cat: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    bp: Any = None
    s: Any = None
    args: msgspec.Raw = msgspec.Raw(b"{}")


class TypedEvent(msgspec.Struct, gc=False):
    """:class:`Event` with numeric times: the fast path for well-formed chunks (a missing
    ``ts`` or ``dur`` is NaN: JSON has no NaN literal, so NaN here always means missing)."""

    ph: Any = None
    name: Any = None
    cat: Any = None
    pid: Any = None
    tid: Any = None
    ts: float = float("nan")
    dur: float = float("nan")
    id: Any = None
    bp: Any = None
    s: Any = None
    args: msgspec.Raw = msgspec.Raw(b"{}")


class SliceArgs(msgspec.Struct, gc=False):
    """The args of slices that become columns; the rest stay in the raw args."""

    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_old: Any = msgspec.field(default=None, name="external id")
    correlation: Any = None
    stream: Any = None
    device: Any = None
    bytes: Any = None
    Bytes: Any = None
    seq: Any = msgspec.field(default=None, name="Sequence number")
    call_stack: Any = msgspec.field(default=None, name="Call stack")


class MemoryArgs(msgspec.Struct, gc=False):
    """The args of the profiler's ``[memory]`` events."""

    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    addr: Any = msgspec.field(default=None, name="Addr")
    Bytes: Any = None
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")


_EVENTS = msgspec.json.Decoder(list[Event])
_EVENTS_TYPED = msgspec.json.Decoder(list[TypedEvent])
_SLICE_ARGS = msgspec.json.Decoder(list[SliceArgs])
_MEMORY_ARGS = msgspec.json.Decoder(list[MemoryArgs])
_ANY = msgspec.json.Decoder()


class Vocabulary:
    """Distinct values → small ints, shared across chunks. ``as_text`` folds values to the
    strings a person reads (names, categories); otherwise values are kept as written
    (pids and tids, where ``1`` and ``"1"`` are different things)."""

    def __init__(self, as_text: bool) -> None:
        self.as_text = as_text
        self.values: list[Any] = ["" if as_text else None]
        self._ids: dict[Any, int] = {self.values[0]: 0}

    def codes(self, items: list[Any]) -> np.ndarray:
        arr = np.array(items) if not self.as_text else None
        if arr is not None and arr.dtype.kind == "i":  # integer pids/tids: hash ints, not objects
            codes, uniques = pd.factorize(arr)
            uniques = uniques.tolist()
        else:
            codes, uniques = pd.factorize(np.array(items, dtype=object), use_na_sentinel=True)
        table = np.empty(len(uniques) + 1, np.int32)
        table[-1] = 0  # None
        for k, u in enumerate(uniques):
            key = (u if isinstance(u, str) else columns.num_str(u)) if self.as_text else u
            got = self._ids.get(key)
            if got is None:
                got = self._ids[key] = len(self.values)
                self.values.append(key)
            table[k] = got
        return table[codes]


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
    # X and B events ("args rows"), in file order: raw args and the args that become columns.
    args_rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    args_blob: bytes | bytearray = b""
    args_offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    slice_args: dict[str, np.ndarray] = field(default_factory=dict)
    # Flow events: their rows, ids (int64 codes: equal ids, equal codes) and whether the
    # event binds to its enclosing slice (``bp: "e"``). Gathered per chunk, then joined.
    flow_rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    flow_id: Any = field(default_factory=list)
    flow_bp: Any = field(default_factory=list)
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

    def name_text(self, i: int) -> str:
        return self.names.values[self.name[i]]

    def where(self, i: int) -> str:
        """How a message names event ``i``."""
        n = self.name_text(i) if 0 <= i < len(self.name) else ""
        return f"event {i}" + (f" ({n!r})" if n else "")


def _dict(raw: msgspec.Raw) -> dict[str, Any]:
    try:
        a = _ANY.decode(raw)
    except msgspec.DecodeError:
        return {}
    return a if isinstance(a, dict) else {}


def _field_names(spec: type) -> list[str]:
    """The attribute names of a msgspec struct type."""
    return [f.name for f in msgspec.structs.fields(spec)]


def _struct_columns(
    decoder: msgspec.json.Decoder, spec: type, raws: list[Any]
) -> dict[str, np.ndarray]:
    fields = _field_names(spec)
    if not raws:
        return {f: np.empty(0, object) for f in fields}
    try:
        parsed = decoder.decode(b"[" + b",".join(raws) + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError):
        parsed = []  # some args are not objects: take those as empty
        for r in raws:
            try:
                parsed.append(msgspec.json.decode(r, type=spec))
            except (msgspec.DecodeError, msgspec.ValidationError):
                parsed.append(spec())
    return {f: np.array(list(map(attrgetter(f), parsed)), dtype=object) for f in fields}


def decode_columns(path: object, chunks: Any, progress: Any = None) -> EventColumns:
    """Columns of every event, from each event's raw JSON."""
    out = EventColumns(n=len(chunks))
    parts: dict[str, list[Any]] = {
        k: []
        for k in (
            "ph",
            "name",
            "cat",
            "pid",
            "tid",
            "ts",
            "dur",
            "dur_missing",
            "args_rows",
            "flow_rows",
            "instant_rows",
            "memory_rows",
        )
    }
    text_ids: dict[str, int] = {}  # codes for non-integer flow ids, shared by all chunks
    blob = bytearray()  # grown in place: joining pieces at the end would hold the args twice
    lengths: list[np.ndarray] = []
    slice_cols: list[dict[str, np.ndarray]] = []
    mem_cols: list[dict[str, np.ndarray]] = []
    n_no_ph = 0
    for start, chunk in chunks:
        evs: list[Any]
        try:  # any decode of this chunk may meet nesting too deep for the decoder
            try:
                try:
                    evs, typed = _EVENTS_TYPED.decode(chunk), True
                except msgspec.ValidationError:
                    evs, typed = (
                        _EVENTS.decode(chunk),
                        False,
                    )  # odd types somewhere: the general path
            except msgspec.ValidationError as exc:
                k = _index_in_message(str(exc))
                which = f"event {start + k}" if k is not None else "an event"
                raise TraceError(
                    path, f"{which} is not an object", "the file is damaged or is not a trace"
                ) from None
            phs = list(map(attrgetter("ph"), evs))
            _check_scalars(path, phs, "ph", start, text_only=True)
            n_no_ph += phs.count(None)
            ph_codes, ph_uniq = pd.factorize(np.array(phs, dtype=object))
            ph_table = np.array(
                [PH.get(u, PH_OTHER) if isinstance(u, str) else PH_OTHER for u in ph_uniq]
                + [PH_OTHER],
                np.int8,
            )
            ph = ph_table[ph_codes]  # code -1 (no ph) → the appended PH_OTHER
            parts["ph"].append(ph)
            for key in ("name", "cat", "pid", "tid"):
                values = list(map(attrgetter(key), evs))
                _check_scalars(path, values, key, start, text_only=key in ("name", "cat"))
                vocabulary = {"name": out.names, "cat": out.cats, "pid": out.pids, "tid": out.tids}
                parts[key].append(vocabulary[key].codes(values))

            def where(k: int, _s: int = start) -> str:
                return f"event {_s + k}"

            if typed:
                n = len(evs)
                parts["ts"].append(np.fromiter(map(attrgetter("ts"), evs), np.float64, n))
                parts["dur"].append(np.fromiter(map(attrgetter("dur"), evs), np.float64, n))
                parts["dur_missing"].append(
                    np.isnan(parts["dur"][-1])
                )  # NaN: absent (see TypedEvent)
            else:
                parts["ts"].append(
                    columns.floats(
                        list(map(attrgetter("ts"), evs)), path=path, what="a timestamp", where=where
                    )
                )
                durs = list(map(attrgetter("dur"), evs))
                parts["dur_missing"].append(np.equal(np.array(durs, dtype=object), np.array(None)))
                parts["dur"].append(columns.floats(durs, path=path, what="a duration", where=where))
            # Slices' args.
            rows = np.flatnonzero((ph == PH_X) | (ph == PH_B))
            if len(rows):
                arg_raws = list(map(attrgetter("args"), _pick(evs, rows)))
                blob += b"".join(arg_raws)
                lengths.append(np.fromiter(map(len, arg_raws), np.int64, len(arg_raws)))
                slice_cols.append(_slice_arg_columns(path, arg_raws, rows + start, out))
                parts["args_rows"].append(rows + start)
            # Flows.
            rows = np.flatnonzero((ph == PH_S) | (ph == PH_T) | (ph == PH_F))
            if len(rows):
                fe = _pick(evs, rows)
                ids = list(map(attrgetter("id"), fe))
                _check_scalars(path, ids, "id", 0, rows=rows + start)
                out.flow_id.append(_ids(ids, text_ids))
                out.flow_bp.append(
                    np.equal(np.array(list(map(attrgetter("bp"), fe)), dtype=object), "e")
                )
                parts["flow_rows"].append(rows + start)
            # Instants, [memory] among them.
            rows = np.flatnonzero(ph == PH_I)
            if len(rows):
                ie = [evs[k] for k in rows.tolist()]
                is_mem = np.array([e.name == "[memory]" for e in ie], bool)
                inst = rows[~is_mem]
                out.instant_scope.extend(columns.strings([evs[k].s for k in inst.tolist()]))
                parts["instant_rows"].append(inst + start)
                mem = rows[is_mem]
                if len(mem):
                    mem_cols.append(
                        _struct_columns(
                            _MEMORY_ARGS, MemoryArgs, [evs[k].args for k in mem.tolist()]
                        )
                    )
                    parts["memory_rows"].append(mem + start)
            for k in np.flatnonzero(ph == PH_C).tolist():
                out.counter_args.append((start + k, _dict(evs[k].args)))
            for k in np.flatnonzero(ph == PH_M).tolist():
                out.meta_args.append((start + k, _dict(evs[k].args)))
            del evs
            if progress:
                progress(
                    0.2 + 0.35 * min(1.0, (start + CHUNK) / max(len(chunks), 1)), "decoding events"
                )
        except RecursionError:
            raise TraceError(
                path,
                too_deep(chunk, first_event=start),
                "the file is damaged or was not written by a profiler",
            ) from None

    def cat(key: str, dtype: Any) -> np.ndarray:
        return np.concatenate(parts[key]) if parts[key] else np.empty(0, dtype)

    out.ph, out.name, out.cat = cat("ph", np.int8), cat("name", np.int32), cat("cat", np.int32)
    out.pid, out.tid = cat("pid", np.int32), cat("tid", np.int32)
    out.ts, out.dur, out.dur_missing = (
        cat("ts", np.float64),
        cat("dur", np.float64),
        cat("dur_missing", bool),
    )
    out.args_rows, out.flow_rows = cat("args_rows", np.int64), cat("flow_rows", np.int64)
    out.instant_rows, out.memory_rows = cat("instant_rows", np.int64), cat("memory_rows", np.int64)
    out.args_blob = blob
    out.flow_id = np.concatenate(out.flow_id) if out.flow_id else np.empty(0, np.int64)
    out.flow_bp = np.concatenate(out.flow_bp) if out.flow_bp else np.empty(0, bool)
    lens = np.concatenate(lengths) if lengths else np.empty(0, np.int64)
    out.args_offsets = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=out.args_offsets[1:])
    out.slice_args = {
        f: (np.concatenate([p[f] for p in slice_cols]) if slice_cols else np.empty(0, np.int64))
        for f in SLICE_INT_ARGS + ("has_call_stack",)
    }
    out.memory_args = _concat_struct_columns(mem_cols, MemoryArgs)
    out.dur = np.where(out.dur_missing, 0.0, out.dur)  # absent: zero-length (and a warning)
    check_times(path, out)
    if n_no_ph:
        out.warnings.append(f"{n_no_ph} events have no 'ph' (event type) and were ignored")
    return out


#: Every time, in µs, must lie within ±2^62 ns: then it and any difference of two of them
#: fit int64 nanoseconds (±146 years around 1970 — every real clock).
MAX_ABS_US = float(2**62 // 1000)


def check_times(path: object, ev: EventColumns) -> None:
    """Validate the time range once, here, so nothing downstream meets a wrapped or
    negative time: a timestamp or end that is not finite or beyond :data:`MAX_ABS_US` is an
    error naming the event. An ``X`` event without ``dur`` is taken as zero-length, with a
    warning."""
    timed = (ev.ph != PH_M) & (ev.ph != PH_OTHER) & ~np.isnan(ev.ts)  # missing: see build
    is_x = ev.ph == PH_X
    with np.errstate(invalid="ignore", over="ignore"):
        end = np.where(is_x, ev.ts + ev.dur, ev.ts)
        bad_ts = timed & ~(np.abs(ev.ts) <= MAX_ABS_US)
        bad_end = timed & is_x & ~np.isnan(ev.dur) & ~(np.abs(end) <= MAX_ABS_US)
    for bad, what, values in ((bad_ts, "timestamp", ev.ts), (bad_end, "duration", ev.dur)):
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            v = float(values[i])
            text = repr(v) if not math.isfinite(v) else f"{v:.6g} µs"
            raise TraceError(
                path,
                f"{ev.where(i)} has a {what} of {text}, beyond what 64-bit nanoseconds hold "
                "(±146 years around 1970)",
                "the file is damaged or was not written by a profiler",
            )
    n = int((is_x & ev.dur_missing).sum())
    if n:
        first = int(np.flatnonzero(is_x & ev.dur_missing)[0])
        ev.warnings.append(
            f"{n} 'X' events have no 'dur' and are shown as zero-length (the first: {ev.where(first)})"
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


_SCALAR_TYPES = frozenset({str, int, float, bool, type(None)})
_TEXT_TYPES = frozenset({str, type(None)})
_INT64 = (-(2**63), 2**63 - 1)


def _check_scalars(
    path: object,
    values: list[Any],
    field_name: str,
    start: int,
    *,
    text_only: bool = False,
    rows: np.ndarray | None = None,
) -> None:
    """An event field that is a list or an object (or, for ``ph``, anything but a string)
    is an error naming the event and field; so is a number beyond int64 or not finite
    where an id is expected (pid, tid, flow id)."""
    kinds = set(map(type, values))
    allowed = _TEXT_TYPES if field_name == "ph" else _SCALAR_TYPES
    numeric_id = field_name in ("pid", "tid", "id")
    if kinds <= allowed and not (numeric_id and kinds & {int, float}):
        return
    if kinds <= allowed and kinds <= {int, float, bool, type(None)}:
        numbers = np.array([v for v in values if v is not None])  # one C pass, not a loop
        if numbers.dtype.kind in "ib":
            return
        if numbers.dtype.kind == "f":
            with np.errstate(invalid="ignore"):
                if bool((np.abs(numbers) < 2.0**63).all()):
                    return
    for k, v in enumerate(values):
        wrong = type(v) not in allowed
        if not wrong and numeric_id and type(v) in (int, float):
            wrong = not (math.isfinite(v) and _INT64[0] <= v <= _INT64[1])
        if wrong:
            i = int(rows[k]) if rows is not None else start + k
            expected = (
                "a string"
                if field_name == "ph"
                else "a string or a 64-bit integer"
                if numeric_id
                else "a string or a number"
            )
            text = repr(v)
            raise TraceError(
                path,
                f"event {i} has {field_name} = {text if len(text) <= 40 else text[:37] + '...'}, "
                f"not {expected}",
                "the file is damaged or was not written by a profiler",
            )


#: Slice args that become int64 columns (-1 when absent), with how messages name them.
SLICE_INT_ARGS = (
    "external_id",
    "external_id_old",
    "correlation",
    "stream",
    "device",
    "bytes",
    "Bytes",
    "seq",
)
_ARG_WHAT = {
    "external_id": "an External id",
    "external_id_old": "an external id",
    "correlation": "a correlation id",
    "stream": "a stream",
    "device": "a device",
    "bytes": "a byte count",
    "Bytes": "a byte count",
    "seq": "a sequence number",
}


class SliceArgsInts(msgspec.Struct, gc=False):
    """:class:`SliceArgs` typed as plain integers: the fast path, valid for nearly every
    trace. A chunk where any of these is a string, a float or out of range takes the
    general path, which coerces what it can and names the event it cannot."""

    external_id: int = msgspec.field(default=-1, name="External id")
    external_id_old: int = msgspec.field(default=-1, name="external id")
    correlation: int = -1
    stream: int = -1
    device: int = -1
    bytes: int = -1
    Bytes: int = -1
    seq: int = msgspec.field(default=-1, name="Sequence number")
    call_stack: Any = msgspec.field(default=None, name="Call stack")


_SLICE_ARGS_INTS = msgspec.json.Decoder(list[SliceArgsInts])


def _slice_arg_columns(
    path: object, raws: list[Any], rows: np.ndarray, ev: EventColumns
) -> dict[str, np.ndarray]:
    """The chunk's slice args as int64 columns now, so no Python int outlives the chunk."""
    n = len(raws)
    try:
        parsed = _SLICE_ARGS_INTS.decode(b"[" + b",".join(raws) + b"]")
        out = {f: np.fromiter(map(attrgetter(f), parsed), np.int64, n) for f in SLICE_INT_ARGS}
        out["has_call_stack"] = np.not_equal(
            np.array(list(map(attrgetter("call_stack"), parsed)), dtype=object), np.array(None)
        )
        return out
    except (msgspec.DecodeError, msgspec.ValidationError, OverflowError):
        pass
    cols = _struct_columns(_SLICE_ARGS, SliceArgs, raws)

    def at(k: int) -> str:
        return ev.where(int(rows[k]))

    out = {f: columns.ints(cols[f], path=path, what=_ARG_WHAT[f], where=at) for f in SLICE_INT_ARGS}
    out["has_call_stack"] = np.not_equal(cols["call_stack"], np.array(None))
    return out


def _concat_struct_columns(parts: list[dict[str, np.ndarray]], spec: type) -> dict[str, np.ndarray]:
    return {
        f: (np.concatenate([p[f] for p in parts]) if parts else np.empty(0, object))
        for f in _field_names(spec)
    }


def _pick(items: list[Any], rows: np.ndarray) -> list[Any]:
    """``[items[k] for k in rows]`` at C speed."""
    if len(rows) == 1:
        return [items[int(rows[0])]]
    return list(itemgetter(*rows.tolist())(items)) if len(rows) else []


def _ids(ids: list[Any], text_ids: dict[str, int]) -> np.ndarray:
    """Flow ids as int64: integer ids as they are (the usual case, one numpy call), numeric
    strings ("0x1f") parsed; any other id gets a negative code from ``text_ids`` (below -1,
    which the flows table keeps for derived flows), equal ids getting equal codes."""
    arr = np.array(ids)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64)
    out = np.empty(len(ids), np.int64)
    for k, v in enumerate(ids):
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**62:
            out[k] = v
        else:
            try:
                parsed = int(v, 0)  # "0x1f", "42"
                if 0 <= parsed < 2**62:
                    out[k] = parsed
                    continue
            except (TypeError, ValueError):
                pass
            # -1 means "derived from correlation ids" in the flows table: start below it.
            out[k] = -2 - text_ids.setdefault(columns.strings([v])[0], len(text_ids))
    return out


def _index_in_message(msg: str) -> int | None:
    """The event index in a msgspec message such as ``... - at `$[12]```."""
    import re

    m = re.search(r"\$\[(\d+)\]", msg)
    return int(m.group(1)) if m else None

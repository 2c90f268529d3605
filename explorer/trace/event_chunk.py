"""One chunk of the event array (a JSON array of events) → its own columns.

A chunk is decoded on its own, without knowing what came before it: its names,
categories, pids and tids get codes into the chunk's own small vocabularies, its rows are
counted from the chunk's first event, its flow ids that are not numbers get chunk-local
codes. :func:`explorer.trace.events.merge_chunks` then joins chunks in file order by
concatenation, mapping each chunk's vocabulary into the trace's once — so chunks can be
decoded in any order, in any process, and the result is that of one pass over the file.

What a chunk holds is numpy arrays, bytes and short lists of strings: cheap to send from a
worker process, and nothing that refers to the chunk's text once decoded.

The stages of :func:`decode_chunk`, in order: decode the events (typed when every time is
a number), their field codes, their times, then what some kinds of event need — the
slices' args, flows, instants (``[memory]`` among them), counters and metadata.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import count, repeat
from operator import attrgetter, itemgetter
from typing import Any

import msgspec
import numpy as np

from explorer.errors import TraceError
from explorer.trace import columns
from explorer.trace.event_types import (
    EVENTS,
    EVENTS_TYPED,
    PH,
    PH_B,
    PH_C,
    PH_F,
    PH_I,
    PH_M,
    PH_OTHER,
    PH_S,
    PH_T,
    PH_X,
    SLICE_ARGS,
    SLICE_ARGS_INTS,
    SLICE_ARGS_WRITTEN,
    SLICE_INT_ARGS,
    TEXT_TYPES,
    SliceArgs,
    check_scalars,
    struct_columns,
)
from explorer.trace.json_position import too_deep


class Vocabulary:
    """Distinct values → small ints in order of first appearance. ``as_text`` folds values
    to the strings a person reads (names, categories); otherwise values are kept as written
    (pids and tids, where ``1`` and ``"1"`` are different things). Code 0 is "absent"."""

    def __init__(self, as_text: bool) -> None:
        self.as_text = as_text
        self.values: list[Any] = ["" if as_text else None]
        self._ids: dict[Any, int] = {self.values[0]: 0}

    def _key(self, u: Any) -> Any:
        return (u if isinstance(u, str) else columns.num_str(u)) if self.as_text else u

    def _table(self, uniques: list[Any], keyed: bool) -> np.ndarray:
        """Codes of ``uniques`` (added when new), then 0 for the absent value."""
        table = np.empty(len(uniques) + 1, np.int32)
        table[-1] = 0  # None
        for k, u in enumerate(uniques):
            if u is None and not keyed:  # absent
                table[k] = 0
                continue
            key = u if keyed else self._key(u)
            got = self._ids.get(key)
            if got is None:
                got = self._ids[key] = len(self.values)
                self.values.append(key)
            table[k] = got
        return table

    def codes(self, values: Iterable[Any], n: int) -> tuple[np.ndarray, list[Any]]:
        """Codes of the ``n`` ``values`` (added to the vocabulary when new) and their
        distinct values in order of first appearance (None among them when present).
        :class:`TypeError` when one is unhashable (a list or an object).

        One C-level pass: a dict maps each distinct value to the position of its first
        appearance, and those positions, in order, are the distinct values' order. Equal
        values are one (``1``, ``1.0`` and ``True`` too), as in ``pd.factorize``, which
        this replaces: ~35 ns an event less per field on 1M events."""
        first_at: dict[Any, int] = {}
        first = np.fromiter(map(first_at.setdefault, values, count()), np.intp, n)
        uniques = list(first_at)
        if not self.as_text and bool in set(map(type, uniques)):
            uniques = _ints_as_numpy_makes_them(uniques)
        table = np.empty(n, np.int32)
        table[np.fromiter(first_at.values(), np.intp, len(uniques))] = self._table(
            uniques, keyed=False
        )[:-1]
        return table[first], uniques

    def absorb(self, values: list[Any]) -> np.ndarray:
        """How another vocabulary's codes (``values`` in its code order, code 0 absent) map
        to this one's, adding its new values in their order."""
        table = self._table(values[1:], keyed=True)
        return np.concatenate([table[-1:], table[:-1]])


def _ints_as_numpy_makes_them(uniques: list[Any]) -> list[Any]:
    """Booleans among a field's distinct values that are otherwise all integers, as the
    integers ``np.array`` makes of them (``True`` → ``1``): how pids and tids were coded
    when they were factorised as an integer array."""
    kinds = set(map(type, uniques))
    if kinds <= {int, bool} and int in kinds:
        return [int(u) for u in uniques]
    return uniques


@dataclass
class ChunkColumns:
    """One chunk's columns; rows count from the chunk's first event."""

    n: int
    ph: np.ndarray
    name: np.ndarray
    cat: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    dur_missing: np.ndarray
    n_no_ph: int
    #: The chunk's vocabularies' values in code order (code 0: absent).
    names: list[Any]
    cats: list[Any]
    pids: list[Any]
    tids: list[Any]
    # X and B events: rows, raw args (one blob, lengths), the args that become columns
    # (:data:`~explorer.trace.event_types.SLICE_ARG_FILL`): a column none of the chunk's slices has is left out, not
    # sent from a worker as thousands of -1s (most chunks lack 6 of the 9).
    args_rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    args_blob: bytes = b""
    args_lengths: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    slice_args: dict[str, np.ndarray] = field(default_factory=dict)
    # Flow events: rows, numeric ids, the chunk-local code of each id that is not a
    # number (-1 for numbers; its text in ``flow_texts``), ``bp: "e"``.
    flow_rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    flow_id: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    flow_text: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    flow_texts: list[str] = field(default_factory=list)
    flow_bp: np.ndarray = field(default_factory=lambda: np.empty(0, bool))
    # Instants: rows and scope; [memory] instants: rows and raw args.
    instant_rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    instant_scope: list[str] = field(default_factory=list)
    memory_rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    memory_args: list[bytes] = field(default_factory=list)
    # Counter and metadata events: rows and raw args (few of them; decoded when merged).
    counter_rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    counter_args: list[bytes] = field(default_factory=list)
    meta_rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    meta_args: list[bytes] = field(default_factory=list)


def decode_chunk(path: object, text: bytes | bytearray, first_event: int = 0) -> ChunkColumns:
    """The columns of the events in ``text`` (a JSON array), whose first event is event
    ``first_event`` of the file (for messages only: rows count from 0)."""
    try:
        evs, typed = _decode_events(path, text, first_event)
        codes = _field_codes(path, evs, first_event)
        ts, dur, dur_missing = _times(path, evs, typed, first_event)
        out = ChunkColumns(**codes, ts=ts, dur=dur, dur_missing=dur_missing)
        _add_slice_args(path, evs, out, first_event)
        _add_flows(path, evs, out, first_event)
        _add_instants(evs, out)
        _add_counters_and_metadata(evs, out)
        return out
    except RecursionError:
        raise TraceError(
            path,
            too_deep(text, first_event=first_event),
            "the file is damaged or was not written by a profiler",
        ) from None


def _decode_events(path: object, text: bytes | bytearray, start: int) -> tuple[list[Any], bool]:
    """The chunk's events, typed (numeric ``ts``/``dur``) when they all allow it."""
    try:
        try:
            return EVENTS_TYPED.decode(text), True
        except msgspec.ValidationError:
            return EVENTS.decode(text), False  # odd types somewhere: the general path
    except msgspec.ValidationError as exc:
        k = _index_in_message(str(exc))
        which = f"event {start + k}" if k is not None else "an event"
        raise TraceError(
            path, f"{which} is not an object", "the file is damaged or is not a trace"
        ) from None


#: The fields :func:`_field_codes` codes, read together from each event.
_CODED = attrgetter("ph", "name", "cat", "pid", "tid")
_VOCABULARY_FIELDS = (("name", "names"), ("cat", "cats"), ("pid", "pids"), ("tid", "tids"))


def _field_codes(path: object, evs: list[Any], start: int) -> dict[str, Any]:
    """``ph`` as small codes; names, categories, pids and tids as vocabulary codes.

    The five fields are read together, as one tuple an event, and coded by their distinct
    combinations (a few hundred in a chunk of 10,000 events: an op's name on its thread):
    one dict pass over the events instead of five, ~180 ns an event less. Each field's
    codes then come from the combinations alone, in their order of first appearance —
    which is each field's own order of first appearance, so the vocabularies are those of
    a pass per field. A chunk with anything odd (a list, a ``ph`` that is not a string, a
    value the checks refuse) takes the pass per field, which names the event."""
    coded = _codes_by_combination(evs)
    return coded if coded is not None else _codes_per_field(path, evs, start)


def _codes_by_combination(evs: list[Any]) -> dict[str, Any] | None:
    """:func:`_field_codes` from the distinct ``(ph, name, cat, pid, tid)`` combinations;
    None when a value needs the pass per field (to be refused with its event named)."""
    n = len(evs)
    first_at: dict[Any, int] = {}
    try:
        first = np.fromiter(map(first_at.setdefault, map(_CODED, evs), count()), np.intp, n)
    except TypeError:  # a list or an object somewhere
        return None
    combos = list(first_at)
    m = len(combos)
    # each event's combination: its index among the combinations
    which = np.empty(n, np.intp)
    which[np.fromiter(first_at.values(), np.intp, m)] = np.arange(m)
    which = which[first]
    fields = list(zip(*combos, strict=True)) if combos else [()] * 5
    phs = fields[0]
    if not set(map(type, phs)) <= TEXT_TYPES:
        return None
    ph_of = np.fromiter(map(PH.get, phs, repeat(PH_OTHER)), np.int8, m)
    no_ph = np.fromiter(map(_is_none, phs), bool, m)
    out: dict[str, Any] = {
        "n": n,
        "ph": ph_of[which],
        "n_no_ph": int(np.count_nonzero(no_ph[which])) if no_ph.any() else 0,
    }
    for (key, vocabulary_key), values in zip(_VOCABULARY_FIELDS, fields[1:], strict=True):
        vocabulary = Vocabulary(as_text=key in ("name", "cat"))
        codes, uniques = vocabulary.codes(values, m)
        try:
            check_scalars("<chunk>", uniques, key, 0, text_only=key in ("name", "cat"))
        except TraceError:
            return None
        out[key] = codes[which]
        out[vocabulary_key] = vocabulary.values
    return out


def _is_none(v: Any) -> bool:
    return v is None


def _codes_per_field(path: object, evs: list[Any], start: int) -> dict[str, Any]:
    """:func:`_field_codes` a field at a time, naming the event of a value it refuses."""
    n = len(evs)
    out = _ph_codes(path, list(map(attrgetter("ph"), evs)), start)
    for key, vocabulary_key in _VOCABULARY_FIELDS:
        vocabulary = Vocabulary(as_text=key in ("name", "cat"))
        text_only = key in ("name", "cat")
        try:
            out[key], uniques = vocabulary.codes(map(attrgetter(key), evs), n)
        except TypeError:  # a list or an object: named by the check
            check_scalars(path, list(map(attrgetter(key), evs)), key, start, text_only=text_only)
            raise
        _check_distinct(path, evs, uniques, key, start, text_only=text_only)
        out[vocabulary_key] = vocabulary.values
    return out


def _ph_codes(path: object, phs: list[Any], start: int) -> dict[str, Any]:
    """``ph`` as small codes (:data:`PH`; :data:`PH_OTHER` for any other value), how many
    events have none; a ``ph`` that is not a string is an error naming its event."""
    n = len(phs)
    try:
        ph = np.fromiter(map(PH.get, phs, repeat(PH_OTHER)), np.int8, n)
    except TypeError:  # a list or an object: named by the check
        check_scalars(path, phs, "ph", start, text_only=True)
        raise
    other = np.flatnonzero(ph == PH_OTHER)
    odd = [phs[k] for k in other.tolist()]
    if odd:
        check_scalars(path, odd, "ph", start, text_only=True, rows=other + start)
    return {"n": n, "ph": ph, "n_no_ph": odd.count(None)}


def _check_distinct(
    path: object, evs: list[Any], distinct: list[Any], key: str, start: int, text_only: bool
) -> None:
    """:func:`check_scalars` over a field's distinct values (what it checks is a property
    of each value, and a chunk has few distinct pids, tids and phases), then, when one is
    wrong, over every event's to name the first event that has it."""
    try:
        check_scalars(path, distinct, key, start, text_only=text_only)
    except TraceError:
        check_scalars(path, list(map(attrgetter(key), evs)), key, start, text_only=text_only)
        raise


def _times(
    path: object, evs: list[Any], typed: bool, start: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``ts`` and ``dur`` in µs as floats, and which events have no ``dur``."""
    if typed:
        n = len(evs)
        dur = np.fromiter(map(attrgetter("dur"), evs), np.float64, n)
        ts = np.fromiter(map(attrgetter("ts"), evs), np.float64, n)
        return ts, dur, np.isnan(dur)  # NaN: absent (see TypedEvent)

    def where(k: int) -> str:
        return f"event {start + k}"

    durs = list(map(attrgetter("dur"), evs))
    ts = columns.floats(
        list(map(attrgetter("ts"), evs)), path=path, what="a timestamp", where=where
    )
    dur = columns.floats(durs, path=path, what="a duration", where=where)
    return ts, dur, np.equal(np.array(durs, dtype=object), np.array(None))


def _add_slice_args(path: object, evs: list[Any], out: ChunkColumns, start: int) -> None:
    """X and B events' raw args (one blob) and the args that become int64 columns."""
    rows = np.flatnonzero((out.ph == PH_X) | (out.ph == PH_B))
    if not len(rows):
        return
    raws = list(map(attrgetter("args"), _pick(evs, rows)))
    out.args_rows = rows
    out.args_blob = b"".join(raws)
    out.args_lengths = np.fromiter(map(len, raws), np.int64, len(raws))

    def at(k: int) -> str:
        i = int(rows[k])
        name = out.names[out.name[i]]
        return f"event {start + i}" + (f" ({name!r})" if name else "")

    out.slice_args = slice_arg_columns(path, raws, at)


def slice_arg_columns(path: object, raws: list[Any], at: Any) -> dict[str, np.ndarray]:
    """Slice args as int64 columns (-1 when absent) and whether each has a call stack
    (``has_call_stack``); ``at(k)`` names the k-th slice's event in a message. A column
    none of these slices has may be left out (see :attr:`ChunkColumns.slice_args`)."""
    n = len(raws)
    text = b"[" + b",".join(raws) + b"]"
    try:
        parsed = SLICE_ARGS_INTS.decode(text)
        written = _written_fields(SLICE_ARGS_WRITTEN.encode(parsed))
        out = {
            f: np.fromiter(map(attrgetter(f), parsed), np.int64, n)
            for f in SLICE_INT_ARGS
            if f in written
        }
        if "call_stack" in written:
            out["has_call_stack"] = np.not_equal(
                np.array(list(map(attrgetter("call_stack"), parsed)), dtype=object),
                np.array(None),
            )
        return out
    except (msgspec.DecodeError, msgspec.ValidationError, OverflowError):
        pass
    cols = struct_columns(SLICE_ARGS, SliceArgs, raws)
    out = {f: columns.ints(cols[f], path=path, what=_ARG_WHAT[f], where=at) for f in SLICE_INT_ARGS}
    out["has_call_stack"] = np.not_equal(cols["call_stack"], np.array(None))
    return out


#: Each of :class:`SliceArgs`' fields and its key as written in the JSON text.
_ARG_KEYS = {
    f.name: b'"' + f.encode_name.encode() + b'"' for f in msgspec.structs.fields(SliceArgs)
}


def _written_fields(text: bytes) -> set[str]:
    """The fields of :class:`SliceArgs` that the args in ``text`` may hold: those whose key
    is written in it (every field when a key may be spelled with escapes). A column no
    slice of the chunk has is not read, a pass over the slices saved for each (a Kineto
    trace's chunks lack 3 of the 9 at least: the old spellings and call stacks).

    ``text`` is the chunk's parsed args encoded again, holding only these fields where
    they are not -1 (:class:`SliceArgsInts`): a third of the args' text, so the ten
    searches take 60 ns an event less. A field that is -1 (or null) wherever it is
    written gives the column of -1 (or no call stacks) it would have given if read."""
    if b"\\u" in text:
        return set(_ARG_KEYS)
    return {name for name, key in _ARG_KEYS.items() if key in text}


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


def _add_flows(path: object, evs: list[Any], out: ChunkColumns, start: int) -> None:
    """Flow events' ids (numbers, or chunk-local codes for other ids) and ``bp``."""
    rows = np.flatnonzero((out.ph == PH_S) | (out.ph == PH_T) | (out.ph == PH_F))
    if not len(rows):
        return
    fe = _pick(evs, rows)
    ids = list(map(attrgetter("id"), fe))
    as_int64 = _int64_array(ids)
    out.flow_rows = rows
    if as_int64 is not None:  # the usual case: they pass the check as they are
        out.flow_id, out.flow_text = as_int64, np.full(len(ids), -1, np.int64)
    else:
        check_scalars(path, ids, "id", 0, rows=rows + start)
        out.flow_id, out.flow_text, out.flow_texts = _ids(ids)
    # One flag per event, whatever each bp is (a list of them is no binding point).
    out.flow_bp = np.fromiter((bp == "e" for bp in map(attrgetter("bp"), fe)), bool, len(fe))


def _int64_array(values: list[Any]) -> np.ndarray | None:
    """``values`` as int64 when they are all integers within int64, else None."""
    try:
        a = np.array(values)
    except (ValueError, OverflowError):  # ragged lists, or ints beyond int64
        return None
    return a.astype(np.int64) if a.ndim == 1 and a.dtype.kind == "i" else None


def _ids(ids: list[Any]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Flow ids that are not all int64 as int64: integers as they are, numeric strings
    ("0x1f") parsed; any other id gets a local code (its text in the list; equal texts,
    equal codes), which the merge turns into the trace's negative code."""
    out = np.empty(len(ids), np.int64)
    text = np.full(len(ids), -1, np.int64)
    texts: dict[str, int] = {}
    for k, v in enumerate(ids):
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**62:
            out[k] = v
            continue
        try:
            parsed = int(v, 0)  # "0x1f", "42"
            if 0 <= parsed < 2**62:
                out[k] = parsed
                continue
        except (TypeError, ValueError):
            pass
        out[k] = -1
        text[k] = texts.setdefault(columns.strings([v])[0], len(texts))
    return out, text, list(texts)


def _add_instants(evs: list[Any], out: ChunkColumns) -> None:
    """Instants' rows and scopes; ``[memory]`` instants' rows and raw args."""
    rows = np.flatnonzero(out.ph == PH_I)
    if not len(rows):
        return
    ie = _pick(evs, rows)
    is_mem = np.array([e.name == "[memory]" for e in ie], bool)
    inst = rows[~is_mem]
    out.instant_rows = inst
    out.instant_scope = columns.strings([evs[k].s for k in inst.tolist()])
    mem = rows[is_mem]
    out.memory_rows = mem
    out.memory_args = [bytes(evs[k].args) for k in mem.tolist()]


def _add_counters_and_metadata(evs: list[Any], out: ChunkColumns) -> None:
    """Counter and metadata events' rows and raw args."""
    out.counter_rows = np.flatnonzero(out.ph == PH_C)
    out.counter_args = [bytes(evs[k].args) for k in out.counter_rows.tolist()]
    out.meta_rows = np.flatnonzero(out.ph == PH_M)
    out.meta_args = [bytes(evs[k].args) for k in out.meta_rows.tolist()]


def _pick(items: list[Any], rows: np.ndarray) -> list[Any]:
    """``[items[k] for k in rows]`` at C speed."""
    if len(rows) == 1:
        return [items[int(rows[0])]]
    return list(itemgetter(*rows.tolist())(items)) if len(rows) else []


def _index_in_message(msg: str) -> int | None:
    """The event index in a msgspec message such as ``... - at `$[12]```."""
    import re

    m = re.search(r"\$\[(\d+)\]", msg)
    return int(m.group(1)) if m else None

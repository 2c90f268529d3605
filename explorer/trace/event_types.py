"""The shapes of a trace's events as the JSON decoder sees them: ``ph`` codes, the event
structs (every field optional and of any type, checked later with the event's index in the
message), the args that become columns, and the checks on event fields."""

from __future__ import annotations

import math
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from explorer.errors import TraceError

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


class SliceArgsInts(msgspec.Struct, gc=False, omit_defaults=True):
    """:class:`SliceArgs` typed as plain integers: the fast path, valid for nearly every
    trace. A chunk where any of these is a string, a float or out of range takes the
    general path, which coerces what it can and names the event it cannot. Encoded, only
    the fields a slice has (other than -1) are written: which columns a chunk has is read
    from that short text (see :func:`explorer.trace.event_chunk.slice_arg_columns`)."""

    external_id: int = msgspec.field(default=-1, name="External id")
    external_id_old: int = msgspec.field(default=-1, name="external id")
    correlation: int = -1
    stream: int = -1
    device: int = -1
    bytes: int = -1
    Bytes: int = -1
    seq: int = msgspec.field(default=-1, name="Sequence number")
    call_stack: Any = msgspec.field(default=None, name="Call stack")


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
#: Every column of slice args (the int args and whether a slice has a call stack) and the
#: value of a slice without it: a chunk leaves out a column none of its slices has.
SLICE_ARG_FILL: dict[str, int | bool] = {
    **dict.fromkeys(SLICE_INT_ARGS, -1),
    "has_call_stack": False,
}
EVENTS = msgspec.json.Decoder(list[Event])
EVENTS_TYPED = msgspec.json.Decoder(list[TypedEvent])
SLICE_ARGS = msgspec.json.Decoder(list[SliceArgs])
MEMORY_ARGS = msgspec.json.Decoder(list[MemoryArgs])


SLICE_ARGS_INTS = msgspec.json.Decoder(list[SliceArgsInts])
SLICE_ARGS_WRITTEN = msgspec.json.Encoder()


def field_names(spec: type) -> list[str]:
    """The attribute names of a msgspec struct type."""
    return [f.name for f in msgspec.structs.fields(spec)]


def struct_columns(
    decoder: msgspec.json.Decoder, spec: type, raws: list[Any]
) -> dict[str, np.ndarray]:
    fields = field_names(spec)
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


_SCALAR_TYPES = frozenset({str, int, float, bool, type(None)})
#: The types a text-only field (``ph``) may have: a string, or absent.
TEXT_TYPES = frozenset({str, type(None)})
_INT64 = (-(2**63), 2**63 - 1)


def check_scalars(
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
    allowed = TEXT_TYPES if field_name == "ph" else _SCALAR_TYPES
    numeric_id = field_name in ("pid", "tid", "id")
    if kinds <= allowed and not (numeric_id and kinds & {int, float}):
        return
    if kinds <= allowed:  # ids that are numbers (beside strings, e.g. pid "Spans"): in range?
        numbers = np.array([v for v in values if type(v) is int or type(v) is float])
        if numbers.dtype.kind == "i":
            return
        if numbers.dtype.kind == "f":
            with np.errstate(invalid="ignore"):
                if bool((np.abs(numbers) < 2.0**63).all()):
                    return
    for k, v in enumerate(values):
        wrong = type(v) not in allowed
        if not wrong and numeric_id and type(v) in (int, float):
            # (an int may be too large for a float: compare it before any isfinite)
            wrong = not (_INT64[0] <= v <= _INT64[1] and (type(v) is int or math.isfinite(v)))
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

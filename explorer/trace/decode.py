"""Bytes on disk → a list of typed events and the file's top-level metadata.

The fast path decodes the event array with msgspec into small structs whose ``args`` stay
raw JSON bytes (``msgspec.Raw``): nothing in the args is parsed until someone asks, so a
million events cost about their JSON size in memory rather than several times it. Files
that do not fit the fast path (wrong types, ``NaN`` literals) are decoded generically and
checked event by event so the message can say exactly which event is wrong.

A file cut short by a crashed run is recovered: every complete event before the cut is
kept, and a warning says how many.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from explorer.errors import TraceError


class Event(msgspec.Struct, gc=False):
    """One Chrome-trace event. Fields absent in the file take these defaults."""

    ph: str = ""
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


_EVENTS = msgspec.json.Decoder(list[Event])
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY = msgspec.json.Decoder()


@dataclass
class Decoded:
    """What a file holds before it becomes tables."""

    events: list[Any]
    metadata: dict[str, Any]
    raw_args: bool  # True: events are ``Event`` structs with Raw args; False: plain dicts
    warnings: list[str] = field(default_factory=list)
    execution_trace: dict[str, Any] | None = None


def read_bytes(path: Path) -> tuple[bytes, list[str]]:
    """The file's bytes, gunzipped when it is gzip. A truncated gzip gives what it holds."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(path, f"cannot read the file ({exc.strerror or exc})") from None
    if data[:2] != b"\x1f\x8b":
        return data, []
    try:
        return gzip.decompress(data), []
    except EOFError:
        # Cut short while being written: keep what decompresses.
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            part = d.decompress(data)
        except zlib.error:
            part = b""
        return part, ["the gzip stream ends early (the file was cut short)"]
    except (OSError, zlib.error) as exc:
        raise TraceError(
            path, f"the gzip data is corrupt ({exc})", "re-copy or re-capture the trace"
        ) from None


def decode(path: Path, data: bytes) -> Decoded:
    """Decode a trace document (object with ``traceEvents``, or a bare event array)."""
    head = data.lstrip()[:1]
    if head not in (b"{", b"["):
        what = "empty" if not data.strip() else "not JSON"
        raise TraceError(
            path,
            f"this file is {what}, not a trace",
            "give a Kineto/Chrome trace (.json or .json.gz) written by torch.profiler or explorer.collect",
        )
    warnings: list[str] = []
    if head == b"[":
        events, raw, w = _decode_events(path, data)
        return Decoded(events, {}, raw, warnings + w)
    try:
        top = _TOP.decode(data)
    except msgspec.DecodeError as exc:
        if "truncated" not in str(exc):
            if b"NaN" in data or b"Infinity" in data:
                return _decode_generic(path, data)
            raise TraceError(
                path, f"the JSON is malformed ({exc})", "the file is damaged; re-capture it"
            ) from None
        return _recover_truncated_document(path, data)
    if "traceEvents" not in top:
        if "nodes" in top and "schema" in top:
            et = _ANY.decode(data)
            return Decoded([], {}, True, [], execution_trace=et)
        keys = ", ".join(sorted(top)[:6]) or "none"
        raise TraceError(
            path,
            f"no 'traceEvents' in this JSON (top-level keys: {keys})",
            "this is not a Kineto/Chrome trace; give the .pt.trace.json written by torch.profiler",
        )
    metadata: dict[str, Any] = {}
    for key, raw in top.items():
        if key == "traceEvents":
            continue
        try:
            metadata[key] = _ANY.decode(raw)
        except msgspec.DecodeError:
            metadata[key] = json.loads(bytes(raw))
    events, raw_args, w = _decode_events(path, top["traceEvents"])
    return Decoded(events, metadata, raw_args, warnings + w)


def _decode_events(path: Path, data: bytes | msgspec.Raw) -> tuple[list[Any], bool, list[str]]:
    try:
        return _EVENTS.decode(data), True, []
    except msgspec.ValidationError:
        pass  # wrongly typed fields somewhere: the generic path names the event
    except msgspec.DecodeError as exc:
        if "truncated" in str(exc):
            events, n_lost = _recover_events(bytes(data))
            return events, True, [_truncation_warning(len(events))]
        if b"NaN" not in bytes(data) and b"Infinity" not in bytes(data):
            raise TraceError(
                path, f"the JSON is malformed ({exc})", "the file is damaged; re-capture it"
            ) from None
    try:
        events = json.loads(bytes(data))
    except ValueError as exc:
        raise TraceError(
            path, f"the JSON is malformed ({exc})", "the file is damaged; re-capture it"
        ) from None
    if not isinstance(events, list):
        raise TraceError(
            path, "'traceEvents' is not a list of events", "the file is damaged; re-capture it"
        )
    return events, False, []


def _decode_generic(path: Path, data: bytes) -> Decoded:
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise TraceError(
            path, f"the JSON is malformed ({exc})", "the file is damaged; re-capture it"
        ) from None
    if isinstance(doc, list):
        return Decoded(doc, {}, False)
    events = doc.pop("traceEvents", None)
    if not isinstance(events, list):
        raise TraceError(
            path, "no 'traceEvents' list in this JSON", "this is not a Kineto/Chrome trace"
        )
    return Decoded(events, doc, False)


def _truncation_warning(n: int) -> str:
    return (
        f"the trace was cut short (a crashed or killed run?): recovered the {n} complete events "
        "before the cut; events after it are lost"
    )


_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


def _recover_truncated_document(path: Path, data: bytes) -> Decoded:
    """Keep the metadata that precedes ``traceEvents`` and every complete event."""
    m = _EVENTS_KEY.search(data)
    if not m:
        raise TraceError(path, "the file is cut short before any event", "re-capture the trace")
    metadata: dict[str, Any] = {}
    prefix = data[: m.start()].rstrip().rstrip(b",") + b"}"
    try:
        metadata = json.loads(prefix)
    except ValueError:
        metadata = {}
    events, _ = _recover_events(data[m.end() - 1 :])
    return Decoded(events, metadata, True, [_truncation_warning(len(events))])


def _recover_events(array: bytes) -> tuple[list[Any], int]:
    """The longest prefix of a truncated JSON array that decodes as complete events.

    Cuts are tried at each ``}`` followed by a comma, from the end backwards; a ``}`` that
    closes a nested args object fails to decode and the next one back is tried.
    """
    end = len(array)
    for _ in range(10_000):
        pos = array.rfind(b"}", 0, end)
        if pos < 0:
            break
        try:
            return _EVENTS.decode(array[: pos + 1] + b"]"), 0
        except (msgspec.DecodeError, msgspec.ValidationError):
            end = pos
    return [], 0

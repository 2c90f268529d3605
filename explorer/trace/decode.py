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
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from explorer.errors import TraceError

_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY = msgspec.json.Decoder()
_EVENT_ARRAY = msgspec.json.Decoder(list[msgspec.Raw])


@dataclass
class Decoded:
    """What a file holds before it becomes tables: each event's raw JSON (a view into the
    file's bytes, decoded a chunk at a time by :mod:`explorer.trace.events`) and the metadata."""

    raws: list[msgspec.Raw]
    metadata: dict[str, Any]
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


_STRING_FIELD = re.compile(rb'^(\s*"(?:name|cat)": ")(.*)(",?)$', re.M)


def _escape_field(m: re.Match[bytes]) -> bytes:
    body = m.group(2)
    try:
        msgspec.json.decode(b'"' + body + b'"')
        return m.group(0)
    except msgspec.DecodeError:
        fixed = msgspec.json.encode(body.decode("utf-8", "replace"))  # quoted and escaped
        return m.group(1) + fixed[1:-1] + m.group(3)


def repair_unescaped_strings(raw: bytes) -> bytes:
    """Kineto writes some event names unescaped: a Python frame whose "function" is a module
    docstring (``torch/profiler/x.py(0):     \"\"\"``) yields invalid JSON. Kineto puts each
    field on its own line, so we re-escape the names that do not parse, line by line."""
    return _STRING_FIELD.sub(_escape_field, raw)


def decode(path: Path, data: bytes) -> Decoded:
    """Split a trace document (object with ``traceEvents``, or a bare event array) into its
    event array and metadata."""
    head = data.lstrip()[:1]
    if head not in (b"{", b"["):
        what = "empty" if not data.strip() else "not JSON"
        raise TraceError(
            path,
            f"this file is {what}, not a trace",
            "give a Kineto/Chrome trace (.json or .json.gz) written by torch.profiler or explorer.collect",
        )
    if head == b"[":
        return _check_array(path, data, {})
    try:
        top = _TOP.decode(data)
    except msgspec.DecodeError as exc:
        if "truncated" in str(exc):
            return _recover_truncated_document(path, data)
        if b"NaN" in data or b"Infinity" in data:
            return _decode_generic(path, data)
        repaired = repair_unescaped_strings(data)
        if repaired != data:
            doc = decode(path, repaired)
            doc.warnings.append(
                "some event names had unescaped quotes (a known Kineto bug) and were repaired"
            )
            return doc
        raise TraceError(
            path, f"the JSON is malformed ({exc})", "the file is damaged; re-capture it"
        ) from None
    if "traceEvents" not in top:
        if "nodes" in top and "schema" in top:
            return Decoded([], {}, [], execution_trace={})
        keys = ", ".join(sorted(top)[:6]) or "none"
        raise TraceError(
            path,
            f"no 'traceEvents' in this JSON (top-level keys: {keys})",
            "this is not a Kineto/Chrome trace; give the .pt.trace.json written by torch.profiler",
        )
    metadata: dict[str, Any] = {}
    for key, raw in top.items():
        if key != "traceEvents":
            metadata[key] = _ANY.decode(raw)
    return _check_array(path, top["traceEvents"], metadata)


def _check_array(path: Path, events: bytes | msgspec.Raw, metadata: dict[str, Any]) -> Decoded:
    """The event array as is when it is well-formed; recovered or re-encoded when not."""
    try:
        return Decoded(_EVENT_ARRAY.decode(events), metadata)
    except msgspec.ValidationError:
        raise TraceError(
            path, "'traceEvents' is not a list of events", "the file is damaged; re-capture it"
        ) from None
    except msgspec.DecodeError as exc:
        if "truncated" in str(exc):
            raws = _recover_events(bytes(events))
            return Decoded(raws, metadata, [_truncation_warning(len(raws))])
        if b"NaN" in bytes(events) or b"Infinity" in bytes(events):
            return _decode_generic(path, bytes(events), metadata)
        raise TraceError(
            path, f"the JSON is malformed ({exc})", "the file is damaged; re-capture it"
        ) from None


def _decode_generic(path: Path, data: bytes, metadata: dict[str, Any] | None = None) -> Decoded:
    """Files with NaN/Infinity literals (Python's json writes them): parse with json, refuse
    NaN where it matters (durations, timestamps), and re-encode the rest for the fast path."""
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise TraceError(
            path, f"the JSON is malformed ({exc})", "the file is damaged; re-capture it"
        ) from None
    if isinstance(doc, dict):
        events = doc.pop("traceEvents", None)
        metadata = doc
    else:
        events = doc
    if not isinstance(events, list):
        raise TraceError(
            path, "no 'traceEvents' list in this JSON", "this is not a Kineto/Chrome trace"
        )
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            continue
        for key, what in (("dur", "duration"), ("ts", "timestamp")):
            v = e.get(key)
            if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
                name = e.get("name")
                raise TraceError(
                    path,
                    f"event {i}" + (f" ({name!r})" if name else "") + f" has a NaN {what}",
                    "the file is damaged; re-capture it",
                )
    return Decoded(_EVENT_ARRAY.decode(msgspec.json.encode(events)), metadata or {})


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
    prefix = data[: m.start()].rstrip().rstrip(b",") + b"}"
    try:
        metadata = json.loads(prefix)
    except ValueError:
        metadata = {}
    raws = _recover_events(data[m.end() - 1 :])
    return Decoded(raws, metadata, [_truncation_warning(len(raws))])


def _recover_events(array: bytes) -> list[msgspec.Raw]:
    """The events of the longest prefix of a truncated JSON array that decodes.

    Cuts are tried at each ``}`` from the end backwards; a ``}`` that closes a nested args
    object leaves an unbalanced prefix that fails to decode, and the next one back is tried.
    """
    end = len(array)
    for _ in range(10_000):
        pos = array.rfind(b"}", 0, end)
        if pos < 0:
            break
        candidate = array[: pos + 1] + b"]"
        try:
            return _EVENT_ARRAY.decode(candidate)
        except (msgspec.DecodeError, msgspec.ValidationError):
            end = pos
    return []

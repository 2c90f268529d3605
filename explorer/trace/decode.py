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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from explorer.errors import TraceError
from explorer.trace.events import CHUNK

_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY = msgspec.json.Decoder()
_EVENT_ARRAY = msgspec.json.Decoder(list[msgspec.Raw])


class EventChunks:
    """The event array as byte ranges of about ``size`` events each, ready to decode one at
    a time — without keeping a million per-event objects alive while they are decoded.

    Splitting the array needs one cheap pass that yields a view per event; only every
    ``size``-th view's position is kept, then the views are dropped.
    """

    def __init__(self, buffer: Any, raws: list[msgspec.Raw], size: int) -> None:
        self.n = len(raws)
        self.size = size
        self._view = memoryview(buffer) if self.n else memoryview(b"")
        base = _address(buffer) if self.n else 0
        firsts = raws[::size]
        self._starts = np.array([_address(r) - base for r in firsts], np.int64)
        last = raws[-1] if self.n else b""
        self._end = _address(last) - base + len(last) if self.n else 0

    @classmethod
    def of(cls, buffer: Any, size: int = CHUNK) -> EventChunks:
        """Chunks of a JSON array of events held in ``buffer``."""
        return cls(buffer, _EVENT_ARRAY.decode(buffer), size)

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[tuple[int, bytearray]]:
        """``(index of the chunk's first event, the chunk as a JSON array)``."""
        if self.n == 0:
            return
        ends = np.append(self._starts[1:], self._end)
        for k, (a, b) in enumerate(zip(self._starts, ends, strict=True)):
            text = bytearray(b"[")
            text += self._view[int(a) : int(b)]
            while text[-1] in b" \t\r\n,":  # the separator before the next chunk
                del text[-1]
            text += b"]"
            yield k * self.size, text
        # Done: let the file's bytes go before the tables are built (they are the largest
        # thing in memory, and nothing refers to them any more).
        try:
            self._view.release()
        except BufferError:  # a slice of it is still referenced somewhere: just drop ours
            pass
        self._view = memoryview(b"")


def _address(buf: Any) -> int:
    """Where a buffer's bytes start in memory (msgspec's Raw views share their source's)."""
    return int(np.frombuffer(buf, np.uint8).ctypes.data)


@dataclass
class Decoded:
    """What a file holds before it becomes tables: the event array in chunks (views into the
    file's bytes, decoded one at a time by :mod:`explorer.trace.events`) and the metadata."""

    chunks: EventChunks
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
            return Decoded(EventChunks.of(b"[]"), {}, [], execution_trace={})
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
        return Decoded(EventChunks.of(events), metadata)
    except msgspec.ValidationError:
        raise TraceError(
            path, "'traceEvents' is not a list of events", "the file is damaged; re-capture it"
        ) from None
    except msgspec.DecodeError as exc:
        if "truncated" in str(exc):
            chunks = _recover_events(bytes(events))
            return Decoded(chunks, metadata, [_truncation_warning(len(chunks))])
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
    return Decoded(EventChunks.of(msgspec.json.encode(events)), metadata or {})


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
    chunks = _recover_events(data[m.end() - 1 :])
    return Decoded(chunks, metadata, [_truncation_warning(len(chunks))])


def _recover_events(array: bytes) -> EventChunks:
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
            return EventChunks.of(candidate)
        except (msgspec.DecodeError, msgspec.ValidationError):
            end = pos
    return EventChunks.of(b"[]")

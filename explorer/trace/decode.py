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

import codecs
import gzip
import json
import math
import os
import re
import stat
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import psutil
import zstandard

from explorer.errors import TraceError
from explorer.trace.encoding import GZIP_MAGIC, ZSTD_MAGIC, compression, is_utf16, text_start
from explorer.trace.events import CHUNK
from explorer.trace.json_position import last_event_end, locate, too_deep
from explorer.trace.metadata_checks import check_metadata

_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
#: The document's other keys: a number beyond float range is infinite, and the metadata's
#: checks (:mod:`explorer.trace.metadata_checks`) leave it out with a warning.
_ANY = msgspec.json.Decoder(float_hook=float)
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


#: A compressed trace (gzip or zstd) may inflate to at most this many times its compressed
#: size (real traces: 7-20x gzip, 10-30x zstd; a deflate stream can reach ~1000x and a zstd
#: one ~30000x, which only a bomb or padding does) ...
GZIP_MAX_RATIO = 100
#: ... but a small file may always inflate to this much.
GZIP_MIN_LIMIT = 64 << 20

#: Compressed bytes fed to zstd at a time, so the cap is checked between pieces: a zstd block
#: (at most 128 KiB of output) takes at least 4 bytes, so a piece overshoots by <= 64 MiB.
_ZSTD_PIECE = 2 << 10


def memory_limit() -> int:
    """The most bytes a trace's JSON may take in memory: half of what is available now
    (decoding it into tables needs about as much again)."""
    return int(psutil.virtual_memory().available // 2)


def read_bytes(path: Path) -> tuple[bytes | bytearray, list[str]]:
    """The file's bytes, decompressed when it is gzip or zstd (told by its first bytes, not
    its name). A truncated gzip or zstd stream gives what it holds.

    Only a regular file is read (or standard input, given as ``-``): a FIFO, a device or a
    socket is refused rather than waited on or read without end. The bytes are bounded by
    :func:`memory_limit`, and a compressed file by ``GZIP_MAX_RATIO`` times its size too.
    """
    limit = memory_limit()
    if str(path) == "-":
        data = _read_stream(sys.stdin.buffer, limit)
        if len(data) > limit:
            raise _too_big(path, limit)
    else:
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise TraceError(
                    path,
                    "is not a regular file (a device, FIFO or socket)",
                    "give a trace file, or '-' to read standard input",
                )
            if st.st_size > limit:
                raise _too_big(path, limit)
            with open(path, "rb") as f:
                # What the file holds, not the whole budget: a read of n bytes reserves n
                # first, which under an address-space limit fails for a 4 KB file. One
                # more, to see a file that grew past the limit since its stat.
                data = f.read(st.st_size + 1)
                if len(data) > st.st_size:
                    data += _read_stream(f, limit - len(data))
                    if len(data) > limit:
                        raise _too_big(path, limit)
        except OSError as exc:
            raise TraceError(path, f"cannot read the file ({exc.strerror or exc})") from None
    cap = min(limit, max(GZIP_MIN_LIMIT, GZIP_MAX_RATIO * len(data)))
    kind = compression(data[:4])
    if kind == "gzip":
        return _gunzip(path, data, cap)
    if kind == "zstd":
        return _unzstd(path, data, cap)
    return data, []


#: Bytes read at a time from a stream whose size is not known (standard input).
_STREAM_PIECE = 1 << 20


def _read_stream(f: Any, limit: int) -> bytes | bytearray:
    """What ``f`` holds, read a piece at a time until its end or just past ``limit``
    bytes: memory grows with what arrives, never reserved for the whole budget."""
    data = bytearray()
    while len(data) <= limit:
        piece = f.read(min(_STREAM_PIECE, limit + 1 - len(data)))
        if not piece:
            break
        data += piece
    return data


def read_head(path: Path, size: int = 4096) -> bytes:
    """The first ``size`` bytes of the file's text (decompressed when gzip or zstd), to tell
    what a file is without reading it all; empty when it cannot be read."""
    try:
        with open(path, "rb") as f:
            kind = compression(f.read(4))
            f.seek(0)
            if kind == "gzip":
                with gzip.open(f, "rb") as g:
                    return g.read(size)
            if kind == "zstd":
                with zstandard.ZstdDecompressor().stream_reader(f) as z:
                    return z.read(size)
            return f.read(size)
    except (OSError, EOFError, zlib.error, zstandard.ZstdError):
        return b""


def _too_big(path: Path, limit: int, inflated: bool = False) -> TraceError:
    what = "decompresses to" if inflated else "is"
    return TraceError(
        path,
        f"{what} more than {limit / 2**20:,.0f} MiB, more than can be loaded in the memory "
        "available now" + (" or a decompression bomb" if inflated else ""),
        "free memory or load it on a larger machine",
    )


def over_cap(path: Path, compressed: int, limit: int, kind: str) -> TraceError:
    """The error for a stream that inflates past ``limit``: a bomb when the ratio cap set it,
    too big for memory otherwise."""
    if limit < memory_limit():
        ratio = limit / max(compressed, 1)
        return TraceError(
            path,
            f"decompresses to more than {limit / 2**20:,.0f} MiB ({ratio:,.0f}x its "
            f"compressed size, far beyond any real trace): a {kind} bomb or padding, not a trace",
            "check where the file came from",
        )
    return _too_big(path, limit, inflated=True)


#: One compressed member (gzip) or frame (zstd) starting at ``pos``, inflated onto ``out``
#: until its end or just past ``limit``: (did it end, where the next one starts).
Member = Callable[[memoryview, int, bytearray, int], tuple[bool, int]]


def _gzip_member(view: memoryview, pos: int, out: bytearray, limit: int) -> tuple[bool, int]:
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out += d.decompress(view[pos:], limit - len(out) + 1)
    while d.unconsumed_tail and len(out) <= limit:
        out += d.decompress(d.unconsumed_tail, limit - len(out) + 1)
    return d.eof, len(view) - len(d.unused_data)


def _zstd_member(view: memoryview, pos: int, out: bytearray, limit: int) -> tuple[bool, int]:
    """Fed ``_ZSTD_PIECE`` compressed bytes at a time: zstd's streaming API has no output
    cap, so the limit is checked between pieces."""
    d = zstandard.ZstdDecompressor().decompressobj()
    while not d.eof and pos < len(view) and len(out) <= limit:
        piece = view[pos : pos + _ZSTD_PIECE]
        out += d.decompress(piece)
        pos += len(piece)
    return d.eof, pos - len(d.unused_data)


def _inflate(
    path: Path, data: bytes | bytearray, limit: int, kind: str, member: Member, magic: bytes
) -> tuple[bytes | bytearray, list[str]]:
    """Every member of ``data`` inflated, stopping with a clear error past ``limit``; a stream
    cut short (a trace still being written) keeps what decompresses, with a warning."""
    out = bytearray()
    view = memoryview(data)
    pos = 0
    while True:
        try:
            ended, pos = member(view, pos, out, limit)
        except (zlib.error, zstandard.ZstdError) as exc:
            raise TraceError(
                path, f"the {kind} data is corrupt ({exc})", "re-copy or re-capture the trace"
            ) from None
        if len(out) > limit:
            raise over_cap(path, len(data), limit, kind)
        if not ended:
            return out, [f"the {kind} stream ends early (the file was cut short)"]
        if view[pos : pos + len(magic)] != magic:  # no further member (zero padding is common)
            return out, []


def _gunzip(path: Path, data: bytes | bytearray, limit: int) -> tuple[bytes | bytearray, list[str]]:
    return _inflate(path, data, limit, "gzip", _gzip_member, GZIP_MAGIC)


def _unzstd(path: Path, data: bytes | bytearray, limit: int) -> tuple[bytes | bytearray, list[str]]:
    return _inflate(path, data, limit, "zstd", _zstd_member, ZSTD_MAGIC)


_STRING_FIELD = re.compile(rb'^(\s*"(?:name|cat)": ")(.*)(",?)$', re.M)


def _escape_field(m: re.Match[bytes]) -> bytes:
    body = m.group(2)
    try:
        msgspec.json.decode(b'"' + body + b'"')
        return m.group(0)
    except msgspec.DecodeError:
        fixed = msgspec.json.encode(body.decode("utf-8", "replace"))  # quoted and escaped
        return m.group(1) + fixed[1:-1] + m.group(3)


def repair_unescaped_strings(raw: bytes | bytearray) -> bytes | bytearray:
    """Kineto writes some event names unescaped: a Python frame whose "function" is a module
    docstring (``torch/profiler/x.py(0):     \"\"\"``) yields invalid JSON. Kineto puts each
    field on its own line, so we re-escape the names that do not parse, line by line."""
    return _STRING_FIELD.sub(_escape_field, raw)


def decode(path: Path, data: bytes | bytearray) -> Decoded:
    """Split a trace document (object with ``traceEvents``, or a bare event array) into its
    event array and metadata.

    The policy for damage (stated in the README): a value Explorer would have to guess is an
    error naming the event and field — bytes that are not UTF-8, nesting deeper than the
    decoder follows (about 900 levels), an event field of the wrong type; what can be kept exactly is kept
    with a warning — the complete events before a cut, metadata of the wrong type (ignored).
    """
    kind = binary_kind(data[:4096])
    if kind is not None:
        raise TraceError(
            path,
            f"this is {kind}, not a trace",
            "give the .pt.trace.json that torch.profiler wrote",
        )
    data = _utf8_text(path, data)
    try:
        doc = _decode_document(path, data)
    except RecursionError:
        raise TraceError(
            path, too_deep(data), "the file is damaged or was not written by a profiler"
        ) from None
    doc.warnings += check_metadata(doc.metadata)
    return doc


#: The first bytes of files that get passed for a trace by mistake, and what they are.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"RIFF", "a RIFF file (WebP image, WAV or AVI)"),
    (b"%PDF", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive (a torch.save checkpoint?)"),
    (b"\x7fELF", "an ELF executable or library"),
    (b"BZh", "a bzip2 file (decompress it first)"),
    (b"\xfd7zXZ\x00", "an xz file (decompress it first)"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"PAR1", "a Parquet file"),
    (b"ARROW1", "an Arrow file"),
    (b"\x93NUMPY", "a NumPy array file"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file"),
    (b"\x80\x02", "a Python pickle"),
    (b"\x80\x04", "a Python pickle"),
)


def binary_kind(head: bytes | bytearray) -> str | None:
    """What a file that starts with ``head`` is when it is plainly not JSON text: a known
    format by its magic bytes, else binary data when it holds a NUL byte (JSON text never
    does); None otherwise (maybe text)."""
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if head[257:262] == b"ustar":
        return "a tar archive"
    if b"\x00" in head:
        return "binary data (not JSON text)"
    return None


def _utf8_text(path: Path, data: bytes | bytearray) -> bytes | bytearray:
    """``data`` checked to be UTF-8 JSON text; a UTF-8 byte-order mark is dropped (it is not
    data). Invalid UTF-8 is an error naming the event and field that hold it."""
    skip = text_start(data)
    if skip:
        data = data[skip:]
    if is_utf16(data):
        raise TraceError(
            path,
            "this file is UTF-16 text; trace JSON is UTF-8",
            "convert it first, e.g. iconv -f UTF-16 -t UTF-8",
        )
    if data.isascii():  # nearly every trace: one fast pass
        return data
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    block = 16 << 20
    for start in range(0, len(data), block):
        try:
            decoder.decode(view[start : start + block], final=start + block >= len(data))
        except UnicodeDecodeError as exc:
            offset = start + exc.start
            pos = locate(data, max(offset, 0))
            raise TraceError(
                path,
                f"{pos.describe()} holds bytes that are not UTF-8 text "
                f"({bytes(view[offset : offset + 4])!r}...)",
                "the file is damaged or not a JSON trace; re-capture it",
            ) from None
    return data


def _decode_document(path: Path, data: bytes | bytearray) -> Decoded:
    head = data.lstrip()[:1] if data[:1].isspace() else data[:1]
    if head not in (b"{", b"["):
        what = "empty" if not data.strip() else "not JSON"
        raise TraceError(
            path,
            f"this file is {what}, not a trace",
            "give a Kineto/Chrome trace (.json, .json.gz or .json.zst) written by torch.profiler or explorer.collect",
        )
    if head == b"[":
        return _check_array(path, data, {})
    try:
        top = _TOP.decode(data)
    except msgspec.DecodeError as exc:
        if _cut_short(exc, data):
            return _recover_truncated_document(path, data)
        if b"NaN" in data or b"Infinity" in data:
            return _decode_generic(path, data)
        repaired = repair_unescaped_strings(data)
        if repaired != data:
            doc = _decode_document(path, repaired)
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


def _check_array(
    path: Path, events: bytes | bytearray | msgspec.Raw, metadata: dict[str, Any]
) -> Decoded:
    """The event array as is when it is well-formed; recovered or re-encoded when not."""
    try:
        return Decoded(EventChunks.of(events), metadata)
    except msgspec.ValidationError:
        raise TraceError(
            path, "'traceEvents' is not a list of events", "the file is damaged; re-capture it"
        ) from None
    except msgspec.DecodeError as exc:
        if _cut_short(exc, events):
            chunks = _recover_events(bytes(events))
            return Decoded(chunks, metadata, [_truncation_warning(len(chunks))])
        if b"NaN" in bytes(events) or b"Infinity" in bytes(events):
            return _decode_generic(path, bytes(events), metadata)
        raise TraceError(
            path, f"the JSON is malformed ({exc})", "the file is damaged; re-capture it"
        ) from None


_AT_BYTE = re.compile(r"\(byte (\d+)\)")


def _cut_short(exc: msgspec.DecodeError, data: Any) -> bool:
    """Whether ``data`` fails to decode because it ends early: msgspec says "truncated",
    or finds its error at the very end (a cut just after a number's ``.`` or ``e`` is an
    "invalid number" there)."""
    if "truncated" in str(exc):
        return True
    m = _AT_BYTE.search(str(exc))
    if m is None:
        return False
    view = memoryview(data)
    end = len(view)
    while end and view[end - 1] in b" \t\r\n":
        end -= 1
    return int(m.group(1)) >= end


def _decode_generic(
    path: Path, data: bytes | bytearray, metadata: dict[str, Any] | None = None
) -> Decoded:
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
                    f"event {i}"
                    + (f" ({name!r})" if name else "")
                    + f" has {_article(_literal(v))} {_literal(v)} {what}",
                    "the file is damaged; re-capture it",
                )
    return Decoded(EventChunks.of(msgspec.json.encode(events)), metadata or {})


def _literal(v: float) -> str:
    """A non-finite number as JSON writers spell it."""
    return "NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity"


def _article(word: str) -> str:
    return "an" if word[:1] in "AEIOU" else "a"


def _truncation_warning(n: int) -> str:
    return (
        f"the trace was cut short (a crashed or killed run?): recovered the {n} complete events "
        "before the cut; events after it are lost"
    )


_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


def _recover_truncated_document(path: Path, data: bytes | bytearray) -> Decoded:
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


def _recover_events(array: bytes | bytearray) -> EventChunks:
    """The events of the longest prefix of a truncated JSON array that decodes.

    One vectorised pass finds the last ``}`` that closes an event (a brace outside strings
    that brings the depth back to the array's); the prefix up to it is decoded once. Should
    that fail (an escaped quote the scan misread), cuts are tried at the ``}`` before it,
    a bounded number of times.
    """
    end = last_event_end(array)
    for _ in range(_RECOVERY_TRIES):
        if end is None or end < 0:
            break
        try:
            return EventChunks.of(array[: end + 1] + b"]")
        except (msgspec.DecodeError, msgspec.ValidationError):
            end = array.rfind(b"}", 0, end)
    return EventChunks.of(b"[]")


_RECOVERY_TRIES = 64

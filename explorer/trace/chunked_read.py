"""A trace file's event array read in byte-range chunks: never the whole text in memory,
every core decoding.

A plain ``.json`` file is never read whole: the parent reads a small window where a chunk
is to be cut, and the process that decodes a chunk reads that byte range itself (``pread``
on the file descriptor the load opened). Not ``mmap``: a file truncated while mapped kills
the process with SIGBUS (a trace being rewritten in place), where a short read is a
clear case for the careful reader. A gzip or zstd file is inflated as a stream in the parent while the
workers decode the chunks already handed to them. Chunks come back as columns (numpy
arrays, bytes; :class:`~explorer.trace.event_chunk.ChunkColumns`) and are merged in file
order, so the result is that of one pass (:mod:`explorer.trace.events`).

Boundaries are found cheaply: a chunk ends at the first ``}`` ``,`` ``{`` (whitespace
allowed) past its target size, and the array ends where the brackets after the last
boundary close. Such a cut could fall inside an event (an object in its args, or the
characters in a string), but then the chunk cannot decode: a chunk that starts at an
event's start and decodes as an array of objects ends at an event's end, so by induction
from the array's ``[`` every boundary of a load that succeeds is a true one. The metadata
around the array is decoded as the document with the array replaced by ``null``: every
byte of the file is checked by a JSON decoder.

Whatever this path cannot take as it is — a file that is not one well-formed document
with a ``traceEvents`` array (cut short, ``NaN`` literals, an unescaped name, an Execution
Trace, invalid UTF-8) or an event with a wrong field — it hands back (:class:`NeedsCareful`)
to the careful reader (:mod:`explorer.trace.decode`), which recovers what can be kept and
names the event that is wrong, exactly as before.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import zstandard

from explorer.errors import TraceError
from explorer.processes import ForkedWorkers, sigterm_unwinds, spend_wait
from explorer.trace.decode import GZIP_MAX_RATIO, GZIP_MIN_LIMIT, over_cap
from explorer.trace.encoding import GZIP_MAGIC, ZSTD_MAGIC, compression, text_start
from explorer.trace.event_chunk import ChunkColumns, decode_chunk
from explorer.trace.events import ColumnsMerger, EventColumns
from explorer.trace.json_position import array_close
from explorer.trace.memory_limits import release_freed_memory
from explorer.trace.metadata_checks import check_metadata
from explorer.trace.spill import SpillFailed, open_spill, should_spill

Progress = Callable[[float, str], None]

#: Bytes of JSON per chunk (about 10,000 events of a Kineto trace): small enough that a
#: chunk's objects stay in the CPU caches, large enough that a worker's round trip is noise.
CHUNK_BYTES = 2 << 20
#: Files at least this large are decoded by worker processes (when cores are free).
PARALLEL_BYTES = 50 << 20
#: How many times its size a compressed trace's JSON is taken to be at least, to choose
#: workers and whether to spill (real traces: 7-20x gzip, 10-30x zstd), where the file does
#: not say (:func:`inflated_size`).
COMPRESSION_GUESS = 10
#: The most worker processes a load starts.
MAX_WORKERS = 8
#: Seconds the worker processes may take to start before this process decodes alone.
WORKERS_START_S = 60
#: Compressed bytes inflated at a time.
_PIECE = 1 << 20
#: Bytes of a plain file read at a time where a chunk is cut: a boundary lies within a few
#: hundred bytes of where it is looked for, and the bytes between are read by the workers
#: (a larger piece is copied twice by the loading process at every cut).
_FILE_PIECE = 64 << 10
#: Text read before giving up on finding the ``traceEvents`` array.
_HEAD = 4 << 20

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
#: The start of a boundary at the end of the text read so far (the rest is to come).
_BOUNDARY_START = re.compile(rb"\}\s*(?:,\s*)?\Z")
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
#: The document's other keys: a number beyond float range is infinite, and the metadata's
#: checks (:mod:`explorer.trace.metadata_checks`) leave it out with a warning.
_ANY = msgspec.json.Decoder(float_hook=float)


class NeedsCareful(Exception):
    """This file is for the careful reader (see the module docstring)."""


@dataclass
class ChunkedRead:
    """What a chunked read gives: the event columns, the metadata and warnings."""

    events: EventColumns
    metadata: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


def load_workers(size: int) -> int:
    """How many processes decode a file of ``size`` bytes (1: this one, no workers):
    ``EXPLORER_LOAD_WORKERS`` when set, else for a file of at least :data:`PARALLEL_BYTES`
    loaded from a process's only thread, one worker per core and at least two — even
    without a free core, decoding elsewhere keeps the chunks' millions of short-lived
    objects out of this process's heap (a lower peak than decoding in-process, measured
    side by side) — else 1."""
    env = os.environ.get("EXPLORER_LOAD_WORKERS", "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise TraceError(
                Path("EXPLORER_LOAD_WORKERS"),
                f"is {env!r}, not a number of processes",
                "set it to 1 (decode in the loading process) or more, or unset it",
            )
        return min(int(env), MAX_WORKERS)
    if size < PARALLEL_BYTES or threading.active_count() > 1:
        return 1  # forking a process whose other threads may hold locks is not safe
    return max(2, min(len(os.sched_getaffinity(0)), MAX_WORKERS))


def read_chunked(
    path: Path, progress: Progress | None = None, spill_root: Path | None = None
) -> ChunkedRead:
    """The event columns and metadata of the trace file ``path``; :class:`NeedsCareful`
    when the careful reader must take it. Columns kept in files (:mod:`explorer.trace.spill`)
    go under ``spill_root`` (the cache's directory; else the temporary directory): the
    slices' raw args when ``spill_root`` is given, every column when they would not fit in
    memory. When that disk fills up, the file is read again with them elsewhere
    (:func:`_spill_places`); with nowhere left, a :class:`TraceError` says so."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device: never opened here
            raise NeedsCareful
        size = st.st_size
        f = open(path, "rb")
    except OSError:
        raise NeedsCareful from None  # the careful reader says what is wrong
    # A SIGTERM unwinds the read (workers stopped, spilled columns removed) before it
    # ends the process.
    with sigterm_unwinds(), f:
        text, text_size = _text_of(path, f, size)
        # The slices' raw args (half the columns) go to a file whenever there is a cache
        # to write them to anyway, the other columns only when memory is short.
        spill_columns = should_spill(text_size)
        places = _spill_places(spill_root, spill_columns)
        for k, place in enumerate(places):
            if k:  # the last place's disk was full: read again from the start
                f.seek(0)
                text, _ = _text_of(path, f, size)
            spill = open_spill(place) if place is not None else None
            try:
                merger = ColumnsMerger(spill, spill_columns)
                workers = load_workers(text_size)
                return _read(path, text, workers, size, text_size, progress, f, merger)
            except SpillFailed as exc:
                if k + 1 == len(places):
                    raise TraceError(
                        path,
                        f"keeping its columns on disk, as a trace too large for memory is "
                        f"loaded, failed ({exc})",
                        "free disk space there, or set EXPLORER_CACHE_DIR (or TMPDIR) to a "
                        "directory on a disk with more room",
                    ) from None
            finally:
                if spill is not None:
                    spill.close()
    raise AssertionError("unreachable: the last place returns or raises")


def _text_of(path: Path, f: Any, size: int) -> tuple[Text, int]:
    """The trace's text read from ``f`` (at its start; inflated as a stream when gzip or
    zstd) and its size (a guess for a compressed file)."""
    kind = compression(f.read(4))
    f.seek(0)
    if kind is not None:
        return _StreamText(_inflated(path, f, size, kind)), inflated_size(f, size, kind)
    if size == 0:
        raise NeedsCareful
    return _FileText(f.fileno(), size), size


def inflated_size(f: Any, size: int, kind: str) -> int:
    """How many bytes of JSON the compressed file ``f`` (``size`` bytes, ``kind`` gzip or
    zstd) holds, to choose workers and whether to spill before it is inflated: what the
    file records — gzip's last member's ``ISIZE`` (its size mod 2**32: all of a one-member
    file under 4 GiB), zstd's frame content size when the frame header has it — where
    that is more than :data:`COMPRESSION_GUESS` times ``size`` and no more than
    ``GZIP_MAX_RATIO`` times (a wrapped size or trailing garbage gives less, or
    nonsense), else that guess. The shared H100/MI300X TraceLens traces inflate 13-19x:
    guessed at 10x, a 55 MB one was decoded in this process alone, its report's imports
    not overlapped with the decode workers. ``f`` is left at its start."""
    guess = size * COMPRESSION_GUESS
    try:
        if kind == "gzip":
            if size < 18:
                return guess
            f.seek(size - 4)
            recorded = int.from_bytes(f.read(4), "little")
        else:
            recorded = int(zstandard.frame_content_size(f.read(18)))
    except (OSError, zstandard.ZstdError):
        return guess
    finally:
        f.seek(0)
    return recorded if guess < recorded <= GZIP_MAX_RATIO * size else guess


def _spill_places(spill_root: Path | None, spill_columns: bool) -> list[Path | None]:
    """Where a load's spilled columns go, in the order to try them when a disk is full
    (None: nowhere, they stay in memory). Columns that must leave memory go under
    ``spill_root``, else the temporary directory; the args a first load puts beside the
    cache (``spill_root``) stay in memory instead — the cache will not be written either,
    which the load then says in a warning."""
    temporary = Path(tempfile.gettempdir())
    if spill_columns:
        roots = [spill_root, temporary] if spill_root is not None else [temporary]
        return list(dict.fromkeys(roots))
    return [spill_root, None] if spill_root is not None else [None]


class _Window:
    """A window on the trace's text: ``buffer`` holds the text from offset ``base``; a
    subclass says how the next piece is read (:meth:`_piece`)."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.base = 0  # offset of buffer[0] in the text
        self.done = False

    def _piece(self) -> bytes:
        """The text just after the window; empty at the end."""
        raise NotImplementedError

    def more(self) -> bool:
        """Read the next piece onto the window; False at the end of the text."""
        piece = self._piece()
        if not piece:
            self.done = True
            return False
        self.buffer += piece
        return True

    def drop_before(self, offset: int) -> None:
        del self.buffer[: offset - self.base]
        self.base = offset

    def tail(self, offset: int) -> bytes:
        """The text from ``offset`` to the end."""
        self.drop_before(offset)
        while self.more():
            pass
        return bytes(self.buffer)

    def task(self, a: int, b: int) -> tuple[Any, ...]:
        return (_decode_text, bytes(self.buffer[a - self.base : b - self.base]))


class _FileText(_Window):
    """A plain file's text, read a window at a time where chunks are cut: the process that
    decodes a chunk reads its byte range itself (``pread`` on the file the load opened, so
    a file replaced meanwhile is not mixed in). A file that fits the first window is read
    once, all of it."""

    def __init__(self, fd: int, size: int) -> None:
        super().__init__()
        self.fd = fd
        self.size = size

    def reach(self, offset: int) -> None:
        """Move the window to ``offset`` when it lies beyond it (no need to read between)."""
        end = self.base + len(self.buffer)
        if offset > end and end < self.size:
            self.buffer, self.base = bytearray(), min(offset, self.size)

    def _piece(self) -> bytes:
        at = self.base + len(self.buffer)
        return _pread(self.fd, min(_FILE_PIECE, self.size - at), at) if at < self.size else b""

    def drop_before(self, offset: int) -> None:
        if self.base <= offset <= self.base + len(self.buffer):
            del self.buffer[: offset - self.base]
        else:  # outside the window: read again from there
            self.buffer = bytearray()
        self.base = offset

    def task(self, a: int, b: int) -> tuple[Any, ...]:
        if self.base <= a and b <= self.base + len(self.buffer):
            return super().task(a, b)
        return (_decode_file_range, self.fd, a, b)


class _StreamText(_Window):
    """An inflating stream's text, a window at a time: chunks are handed over as bytes."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        super().__init__()
        self._pieces = pieces

    def reach(self, offset: int) -> None:
        """A stream is read in order: :meth:`more` gets there."""

    def _piece(self) -> bytes:
        return next(self._pieces, b"")


Text = _FileText | _StreamText


def _read(
    path: Path,
    text: Text,
    workers: int,
    size: int,
    text_size: int,
    progress: Progress | None,
    f: Any,
    merger: ColumnsMerger,
) -> ChunkedRead:
    prefix, start = _array_start(text)
    if progress:
        progress(0.05, "decoding JSON")
    ends: list[int] = []
    with _Decoders(workers) as decoders:
        for a, b in _event_ranges(text, start, ends):
            if a == start:
                merger.expect(text_size, b - a)
            for chunk in decoders.submit(text.task(a, b)):
                merger.add(chunk)
            if progress:
                done = f.tell() if isinstance(text, _StreamText) else b
                progress(0.05 + 0.5 * min(done / max(size, 1), 1.0), "decoding events")
        for chunk in decoders.finish():
            merger.add(chunk)
    metadata = _metadata(prefix, text.tail(ends[0] + 1))
    events = merger.finish(path)
    release_freed_memory()
    return ChunkedRead(events, metadata, check_metadata(metadata))


def _array_start(text: Text) -> tuple[bytes, int]:
    """The text before the event array (BOM dropped) and the offset of its first byte."""
    while len(text.buffer) < _HEAD and text.more():
        pass
    head = bytes(text.buffer[:_HEAD])
    skip = text_start(head)
    lead = head[skip:].lstrip()[:1]
    if lead == b"[":
        return b"", head.index(b"[", skip) + 1
    if lead != b"{":
        raise NeedsCareful
    m = _EVENTS_KEY.search(head)
    if m is None:
        raise NeedsCareful
    return head[skip : m.start()], m.end()


def _event_ranges(text: Text, start: int, close: list[int]) -> Iterator[tuple[int, int]]:
    """Byte ranges ``[a, b)`` of the text, each whole events of the array (see the module
    docstring); at the end, the offset of the array's ``]`` is put in ``close``."""
    pos = start
    # Where the next search may start: no boundary starts before it (but the array's
    # first), since the text before was searched. Searched from pos + CHUNK_BYTES for each
    # piece read, a long stretch without one (a value of 300 MB) took quadratic time.
    resume = 0
    while True:
        text.reach(pos + CHUNK_BYTES)
        lo = max(pos + CHUNK_BYTES - text.base, resume - text.base, 0)
        m = _BOUNDARY.search(text.buffer, lo)
        if m is not None:
            yield pos, m.start() + 1 + text.base
            pos = m.end() - 1 + text.base
            text.drop_before(pos)
            continue
        # None here: one may yet start at the last "}" when only its start is here.
        last = text.buffer.rfind(b"}", lo)
        open_tail = last >= 0 and _BOUNDARY_START.match(text.buffer, last) is not None
        resume = text.base + (last if open_tail else len(text.buffer))
        if not text.done and text.more():
            continue
        rest = text.tail(pos)
        end = array_close(rest)
        if end is None:
            raise NeedsCareful  # the array never closes: cut short
        close.append(pos + end)
        if rest[:end].strip():
            yield pos, pos + end
        return


class _Decoders:
    """Chunks decoded in this process, or by worker processes with a few chunks in flight
    each; results come back in the order chunks were submitted."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: ForkedWorkers | None = None
        self._pending: deque[Future[ChunkColumns]] = deque()

    def __enter__(self) -> _Decoders:
        if self.workers > 1:
            # Forked workers (see explorer.processes: they leave Ctrl-C and SIGTERM to this
            # process, which stops them). Workers that cannot start (short of memory or
            # threads) leave the decoding to this process rather than a hang.
            pool = ForkedWorkers(self.workers, WORKERS_START_S)
            self._pool = pool if pool.start() else None
        return self

    def submit(self, task: tuple[Any, ...]) -> Iterator[ChunkColumns]:
        """Decode a chunk; yields the chunks whose turn it is to be merged."""
        if self._pool is None:
            yield _run(task)
            return
        self._pending.append(self._pool.submit(_run, task))
        while len(self._pending) > 2 * self.workers:
            yield self._next()

    def finish(self) -> Iterator[ChunkColumns]:
        while self._pending:
            yield self._next()

    def _next(self) -> ChunkColumns:
        """The oldest chunk's columns; waiting for them, the caller's idle work first."""
        spend_wait(self._pending[0])
        return self._pending.popleft().result()

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown()


def _run(task: tuple[Any, ...]) -> ChunkColumns:
    func, *args = task
    result: ChunkColumns = func(*args)
    return result


def _decode_file_range(fd: int, a: int, b: int) -> ChunkColumns:
    """The columns of the events in bytes ``[a, b)`` of the file, read straight between the
    brackets that make them an array (no second copy of the chunk to add them)."""
    text = bytearray(b - a + 2)
    text[0], text[-1] = ord("["), ord("]")
    if _pread_into(fd, memoryview(text)[1:-1], a) != b - a:  # the file shrank under the load
        raise NeedsCareful
    return _decode_array(text)


def _pread(fd: int, n: int, offset: int) -> bytes:
    """``n`` bytes at ``offset`` (fewer only at the end of the file)."""
    parts = []
    while n > 0:
        piece = os.pread(fd, n, offset)
        if not piece:
            break
        parts.append(piece)
        n -= len(piece)
        offset += len(piece)
    return b"".join(parts)


def _pread_into(fd: int, buffer: memoryview, offset: int) -> int:
    """Fill ``buffer`` with the bytes at ``offset``; how many were read (fewer only at the
    end of the file)."""
    done = 0
    while done < len(buffer):
        got = os.preadv(fd, [buffer[done:]], offset + done)
        if not got:
            break
        done += got
    return done


def _decode_text(inner: bytes) -> ChunkColumns:
    """The columns of the events in ``inner`` (an event array without its brackets)."""
    return _decode_array(b"[" + inner + b"]")


def _decode_array(text: bytes | bytearray) -> ChunkColumns:
    """The columns of the events in ``text`` (an event array, brackets included); a chunk
    this path cannot take as it is goes to the careful reader."""
    if not text.isascii():
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            raise NeedsCareful from None
    try:
        return decode_chunk("<chunk>", text)
    except (msgspec.DecodeError, TraceError):
        raise NeedsCareful from None


def _metadata(prefix: bytes, suffix: bytes) -> dict[str, Any]:
    """The document's other keys: the text around the array, the array taken as null."""
    if not prefix:  # a bare array: nothing may follow it
        if suffix.strip():
            raise NeedsCareful
        return {}
    try:
        top = _TOP.decode(prefix + b'"traceEvents":null' + suffix)
    except msgspec.DecodeError:
        raise NeedsCareful from None
    if bytes(top.pop("traceEvents")) != b"null":  # a second traceEvents key: the last wins
        raise NeedsCareful
    try:
        return {key: _ANY.decode(raw) for key, raw in top.items()}
    except msgspec.DecodeError:  # bytes that are not UTF-8 in a key within: named there
        raise NeedsCareful from None


#: Most text inflated from one piece of gzip at a time.
_OUT_PIECE = 8 << 20
#: Compressed bytes fed to zstd at a time (its streaming API has no output cap; see
#: :mod:`explorer.trace.decode`).
_ZSTD_PIECE = 2 << 10


def _inflated(path: Path, f: Any, size: int, kind: str) -> Iterator[bytes]:
    """The decompressed text of a gzip or zstd file, a piece at a time, every member or
    frame; a stream past the bomb cap is an error, one cut short or damaged goes to the
    careful reader (which keeps what it holds, with a warning, or names the damage)."""
    cap = max(GZIP_MIN_LIMIT, GZIP_MAX_RATIO * size)
    magic = GZIP_MAGIC if kind == "gzip" else ZSTD_MAGIC
    read_size = _PIECE if kind == "gzip" else _ZSTD_PIECE
    total = 0
    d = _decompressor(kind)
    pending = b""
    while True:
        data = pending or f.read(read_size)
        pending = b""
        if not data:
            if not d.eof:
                raise NeedsCareful  # cut short
            return
        try:
            out = d.decompress(data, _OUT_PIECE) if kind == "gzip" else d.decompress(data)
            while True:
                total += len(out)
                if total > cap:
                    raise over_cap(path, size, cap, kind)
                if out:
                    yield out
                tail = d.unconsumed_tail if kind == "gzip" else b""
                if not tail:
                    break
                out = d.decompress(tail, _OUT_PIECE)
        except (zlib.error, zstandard.ZstdError):
            raise NeedsCareful from None
        if d.eof:
            rest = d.unused_data
            if len(rest) < len(magic):
                rest += f.read(len(magic))
            if not rest.startswith(magic):  # no further member (zero padding is common)
                return
            d, pending = _decompressor(kind), rest


def _decompressor(kind: str) -> Any:
    if kind == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    return zstandard.ZstdDecompressor().decompressobj()

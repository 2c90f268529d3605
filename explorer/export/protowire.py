"""Protobuf wire encoding of many small messages at once, with numpy.

Why this exists: a million-slice trace is two million ``TracePacket`` messages. Building
each one as a protobuf object costs microseconds of Python per packet, which alone would
miss the export's speed target, and keeping them all would double the trace in memory.
Every slice packet has the same handful of fields, so we encode a whole column of them in
a few vectorised operations instead and write the bytes straight to the file.

A batch of ``n`` messages is a :class:`Block`: a list of :class:`Part` s, each an
``(n, width)`` byte matrix holding one field (or a few fields that always go together)
for every message, and whether each message has it. A message is its parts side by side;
a nested message is a tag-and-length part followed by its own parts. Gathering the bytes
of present parts row by row (one ``np.compress``) gives every message back to back.

Every part has one width for all rows, so varints in a column are written at the
column's widest width: a value that needs fewer bytes is padded with continuation bytes
(``5`` as ``0x85 0x00`` in a two-byte column). The wire format allows these over-long
varints and every protobuf parser reads them; they cost a byte here and there and make
every row of a part the same shape, which is what keeps the encoding a handful of array
operations. Fields come in the order the caller lays them out (parsers accept any
order). Tests parse the result with ``perfetto_trace_pb2`` to prove every message
decodes to what was meant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

VARINT, FIXED64, LEN = 0, 1, 2


class Part(NamedTuple):
    """One field (or fields that go together) for ``n`` messages: ``width`` bytes each,
    written by ``fill`` straight into the columns the block gives it."""

    width: int
    present: np.ndarray  # (n,) bool: whether message i has these bytes
    fill: Callable[[np.ndarray], None]  # writes the (n, width) bytes into a view

    @property
    def lens(self) -> np.ndarray:
        return self.present.astype(np.int64) * self.width

    def matrix(self) -> np.ndarray:
        """The ``(n, width)`` bytes (for tests and nesting; blocks never need it)."""
        out = np.empty((len(self.present), self.width), np.uint8)
        self.fill(out)
        return out


class Block(list):
    """Messages for ``n`` rows, as their parts in order."""

    @property
    def lens(self) -> np.ndarray:
        out = np.zeros(len(self[0].present), np.int64) if self else np.zeros(0, np.int64)
        for p in self:
            out += p.lens
        return out

    def flat(self) -> np.ndarray:
        """Every message's bytes, back to back (uint8): each part writes its columns of
        one matrix (column-major: a part's byte ``j`` of every message is one contiguous
        row, so the varint columns are written without a stride). Where every message has
        every part, the matrix read row by row is the output; else each part's present
        bytes are written at their place (:func:`_scattered`)."""
        if not self:
            return np.zeros(0, np.uint8)
        n = len(self[0].present)
        width = sum(p.width for p in self)
        columns = np.empty((width, n), np.uint8)
        col = 0
        for p in self:
            p.fill(columns[col : col + p.width].T)
            col += p.width
        if all(p.present.all() for p in self):
            return np.ascontiguousarray(columns.T).reshape(-1)
        return _scattered(self, columns)


def _scattered(block: Block, columns: np.ndarray) -> np.ndarray:
    """The messages of ``block`` back to back, from its filled ``columns`` (byte ``j`` of
    each part in one row): each part's bytes, for the messages that have it, written at
    their place in the output. Only present bytes are touched — a masked gather over the
    whole matrix read every absent part's bytes too (a slice packet's matrix is mostly
    parts that packet lacks: 4x the output)."""
    lens = block.lens
    out = np.empty(int(lens.sum()), np.uint8)
    at = np.zeros(len(lens), np.int64)  # where the next part of each message goes
    np.cumsum(lens[:-1], out=at[1:])
    col = 0
    for p in block:
        rows = p.present
        if rows.all():
            dest = at
            for j in range(p.width):
                out[dest + j] = columns[col + j]
            at += p.width
        elif rows.any():
            sel = np.flatnonzero(rows)
            dest = at[sel]
            for j in range(p.width):
                out[dest + j] = columns[col + j, sel]
            at[sel] += p.width
        col += p.width
    return out


def with_column(part: Part, column: int, values: np.ndarray) -> Part:
    """``part`` with byte ``column`` of each row replaced by ``values`` (e.g. a one-byte
    enum written after a constant tag)."""

    def fill(out: np.ndarray) -> None:
        part.fill(out)
        out[:, column] = values

    return Part(part.width, part.present, fill)


def varint_bytes(value: int) -> bytes:
    """One varint (for tags and constants); negative numbers as 64-bit two's complement."""
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(field: int, wire: int) -> bytes:
    """The key that precedes a field's value on the wire."""
    return varint_bytes((field << 3) | wire)


def varint_width(values: np.ndarray) -> int:
    """Bytes the widest value needs as a varint (1..10); negative int64 need 10."""
    v = np.asarray(values).astype(np.int64, copy=False).view(np.uint64)
    if len(v) == 0:
        return 1
    top = int(v.max())
    return max(1, -(-top.bit_length() // 7))


def varint_matrix(
    values: np.ndarray, width: int | None = None, out: np.ndarray | None = None
) -> np.ndarray:
    """``(n, width)`` bytes: each value as a varint padded to ``width`` bytes (written into
    ``out`` when given, so a field's tag and value share one array)."""
    v = np.asarray(values).astype(np.int64, copy=False).view(np.uint64)
    width = width or varint_width(v)
    if out is None:
        out = np.empty((len(v), width), np.uint8)
    for j in range(width):
        byte = ((v >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8)
        if j < width - 1:
            byte |= 0x80
        out[:, j] = byte
    return out


def _all(n: int) -> np.ndarray:
    return np.ones(n, bool)


def _headed(
    head: bytes, width: int, present: np.ndarray, body: Callable[[np.ndarray], object]
) -> Part:
    """A part of ``head`` followed by ``width`` bytes written by ``body``."""
    h = np.frombuffer(head, np.uint8)

    def fill(out: np.ndarray) -> None:
        out[:, : len(h)] = h
        body(out[:, len(h) :])

    return Part(len(h) + width, present, fill)


def constant(blob: bytes, present: np.ndarray) -> Part:
    """The same bytes in every message where ``present`` is true."""
    return _headed(blob, 0, np.asarray(present, bool), lambda out: None)


def field_varint(
    field: int, values: np.ndarray, present: np.ndarray | None = None, prefix: bytes = b""
) -> Part:
    """``prefix`` then a varint field (int32/int64/uint64/enum/bool)."""
    values = np.asarray(values)
    present = _all(len(values)) if present is None else np.asarray(present, bool)
    sel = values[present] if not present.all() else values
    width = varint_width(sel) if len(sel) else 1
    return _headed(
        prefix + tag(field, VARINT), width, present, lambda out: varint_matrix(values, width, out)
    )


def field_fixed64(field: int, values: np.ndarray, present: np.ndarray | None = None) -> Part:
    """A 64-bit fixed field (``fixed64`` flow ids, ``double`` counter values)."""
    v = np.ascontiguousarray(values)
    if v.dtype.itemsize != 8:
        v = v.astype(np.uint64)
    raw = v.astype(v.dtype.newbyteorder("<"), copy=False).view(np.uint8).reshape(len(v), 8)
    present = _all(len(v)) if present is None else np.asarray(present, bool)

    def body(out: np.ndarray) -> None:
        out[...] = raw

    return _headed(tag(field, FIXED64), 8, present, body)


def message_part(field: int, inner: Part) -> Part:
    """A length-delimited field holding a one-part sub-message: still one part."""
    head = tag(field, LEN) + varint_bytes(inner.width)
    return _headed(head, inner.width, inner.present, inner.fill)


def message(field: int, inner: Block, extra_len: np.ndarray | None = None) -> Block:
    """A length-delimited field holding ``inner`` in every row.

    ``extra_len`` counts bytes the caller appends right after ``inner`` (inside the
    field) by other means.
    """
    lens = inner.lens if extra_len is None else inner.lens + extra_len
    return Block([field_varint_len(field, lens), *inner])


def field_varint_len(field: int, lens: np.ndarray) -> Part:
    """The tag and length of a length-delimited field, in every row."""
    width = varint_width(lens)
    return _headed(
        tag(field, LEN), width, _all(len(lens)), lambda out: varint_matrix(lens, width, out)
    )


def frame(packets: Block) -> np.ndarray:
    """Packets as elements of ``Trace.packet`` (field 1): the bytes of a ``.pftrace``."""
    return message(1, packets).flat()


def inserted(
    base: np.ndarray,
    base_lens: np.ndarray,
    pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> np.ndarray:
    """Message ``i`` of ``base`` (messages back to back, ``base_lens`` bytes each) with
    each piece's bytes for it inserted: a piece is ``(data, lens, at)``, message ``i``'s
    ``lens[i]`` bytes (back to back in ``data``) going before byte ``at[i]`` of the base
    message. Pieces come in the order of their places (at one place, in list order).

    Each inserted byte is put at its place and the base's bytes fill the rest in one
    masked copy: a gather of every output byte by an index array took 7x as long on the
    export's packets, which are mostly base (the flow ids it inserts are few)."""
    n = len(base_lens)
    out_lens = base_lens + sum(lens for _, lens, _ in pieces)
    starts = np.zeros(n, np.int64)
    np.cumsum(out_lens[:-1], out=starts[1:])
    out = np.empty(len(base) + sum(len(data) for data, _, _ in pieces), np.uint8)
    keep = np.ones(len(out), bool)
    before = np.zeros(n, np.int64)  # bytes of earlier pieces in each message
    for data, lens, at in pieces:
        if len(data):
            own = np.zeros(n, np.int64)  # where each message's bytes begin in ``data``
            np.cumsum(lens[:-1], out=own[1:])
            put = np.arange(len(data), dtype=np.int64) + np.repeat(starts + at + before - own, lens)
            out[put] = data
            keep[put] = False
        before += lens
    out[keep] = base
    return out

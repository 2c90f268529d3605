"""Protobuf wire encoding of many small messages at once, with numpy.

Why this exists: a million-slice trace is two million ``TracePacket`` messages. Building
each one as a protobuf object costs microseconds of Python per packet, which alone would
miss the export's speed target, and keeping them all would double the trace in memory.
Every slice packet has the same handful of fields, so we encode a whole column of them in
a few vectorised operations instead and write the bytes straight to the file.

A batch of ``n`` messages is built as a :class:`Block`: an ``(n, width)`` byte matrix and
a same-shaped mask of which bytes are real. Each field is a block a few columns wide
(a tag and a varint of at most ten bytes); a message is its fields' blocks side by side,
and a nested message is a tag and length block followed by its fields. Reading the matrix
through the mask row by row (one boolean index) gives every message's bytes back to back.

Fields come in the order the caller lays them out (the protobuf library would sort them by
number; parsers accept either). Tests parse the result with ``perfetto_trace_pb2`` to
prove every message decodes to what was meant.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

VARINT, FIXED64, LEN = 0, 1, 2


class Block(NamedTuple):
    """Bytes of ``n`` messages (or message parts): row ``i`` holds message ``i``."""

    bytes: np.ndarray  # (n, width) uint8
    mask: np.ndarray  # (n, width) bool: which bytes of the row are part of the message

    @property
    def lens(self) -> np.ndarray:
        return self.mask.sum(axis=1, dtype=np.int64)

    def flat(self) -> np.ndarray:
        """Every message's bytes, back to back (uint8)."""
        return self.bytes[self.mask]


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


def varint_len(values: np.ndarray) -> np.ndarray:
    """Bytes each value takes as a varint (1..10)."""
    v = np.asarray(values).astype(np.int64, copy=False).view(np.uint64)
    lens = np.ones(len(v), np.int64)
    for k in range(1, 10):
        over = v >= np.uint64(1 << (7 * k))
        if not over.any():
            break
        lens += over
    return lens


def varints(values: np.ndarray, present: np.ndarray | None = None) -> Block:
    """Each value as a base-128 varint; negative int64 become 10-byte two's complement."""
    v = np.asarray(values).astype(np.int64, copy=False).view(np.uint64)
    n = len(v)
    lens = varint_len(v)
    if present is not None:
        lens = np.where(present, lens, 0)
    width = int(lens.max()) if n else 1
    out = np.empty((n, max(width, 1)), np.uint8)
    for j in range(width):
        byte = ((v >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8)
        byte |= (lens > j + 1).astype(np.uint8) << 7
        out[:, j] = byte
    mask = np.arange(out.shape[1])[None, :] < lens[:, None]
    return Block(out, mask)


def constant(blob: bytes, present: np.ndarray) -> Block:
    """The same bytes in every message where ``present`` is true, nothing elsewhere."""
    present = np.asarray(present, bool)
    row = np.frombuffer(blob, np.uint8)
    out = np.broadcast_to(row, (len(present), len(row)))
    mask = np.broadcast_to(present[:, None], out.shape)
    return Block(out, mask)


def fixed64(values: np.ndarray, present: np.ndarray | None = None) -> Block:
    """Each value as 8 little-endian bytes (``fixed64`` ids, ``double`` values)."""
    v = np.ascontiguousarray(values)
    if v.dtype.itemsize != 8:
        v = v.astype(np.uint64)
    out = v.astype(v.dtype.newbyteorder("<"), copy=False).view(np.uint8).reshape(len(v), 8)
    if present is None:
        present = np.ones(len(v), bool)
    return Block(out, np.broadcast_to(np.asarray(present, bool)[:, None], out.shape))


def join(*blocks: Block) -> Block:
    """Fields side by side: message ``i`` is row ``i`` of every block, in order."""
    return Block(np.hstack([b.bytes for b in blocks]), np.hstack([b.mask for b in blocks]))


def field_varint(field: int, values: np.ndarray, present: np.ndarray | None = None) -> Block:
    """A varint field (int32/int64/uint64/enum/bool), in every message or where present."""
    values = np.asarray(values)
    if present is None:
        present = np.ones(len(values), bool)
    return join(constant(tag(field, VARINT), present), varints(values, present))


def field_fixed64(field: int, values: np.ndarray, present: np.ndarray | None = None) -> Block:
    """A 64-bit fixed field (``fixed64`` flow ids, ``double`` counter values)."""
    values = np.asarray(values)
    if present is None:
        present = np.ones(len(values), bool)
    return join(constant(tag(field, FIXED64), present), fixed64(values, present))


def field_message(field: int, inner: Block, present: np.ndarray | None = None) -> Block:
    """A length-delimited field holding the sub-message ``inner``.

    Where ``present`` is false the field is left out; ``inner`` must be empty there.
    """
    lens = inner.lens
    if present is None:
        present = np.ones(len(lens), bool)
    present = np.asarray(present, bool)
    if np.any(lens[~present]):
        raise ValueError("field_message(): bytes given for a message marked absent")
    return join(constant(tag(field, LEN), present), varints(lens, present), inner)


def field_strings(field: int, values: list[bytes]) -> bytes:
    """A length-delimited field per value, concatenated (for the few rare packets)."""
    return b"".join(tag(field, LEN) + varint_bytes(len(v)) + v for v in values)


def frame(packets: Block) -> np.ndarray:
    """Packets as elements of ``Trace.packet`` (field 1): the bytes of a ``.pftrace``."""
    return field_message(1, packets).flat()


def frame_ragged(data: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Like :func:`frame` for packets already flattened to bytes with their lengths."""
    head = join(constant(tag(1, LEN), np.ones(len(lens), bool)), varints(lens))
    return interleave(head.flat(), head.lens, data, lens)


def interleave(a: np.ndarray, a_lens: np.ndarray, b: np.ndarray, b_lens: np.ndarray) -> np.ndarray:
    """Message ``i`` is ``a``'s message ``i`` followed by ``b``'s: both given flattened."""
    n = len(a_lens)
    lens = a_lens + b_lens
    starts = np.zeros(n, np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    out = np.empty(int(lens.sum()), np.uint8)
    for data, part_lens, offset in ((a, a_lens, starts), (b, b_lens, starts + a_lens)):
        src = np.zeros(n, np.int64)
        np.cumsum(part_lens[:-1], out=src[1:])
        out[np.arange(len(data), dtype=np.int64) + np.repeat(offset - src, part_lens)] = data
    return out

"""Where in a trace's JSON a byte is: which event, which of its fields.

Used on the error path, so that a message can name the event and field of a problem
the JSON decoder reports without a position (invalid UTF-8, nesting too deep), and to find
where a chunked read's event array closes (:func:`array_close`). The bytes are
scanned in blocks with numpy — brackets outside strings give the depth, events are the
objects one level inside the ``traceEvents`` array (or the bare top-level array).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import msgspec
import numpy as np

BLOCK = 16 << 20
_OPEN = np.zeros(256, np.int32)
_OPEN[[ord("{"), ord("[")]] = 1
_OPEN[[ord("}"), ord("]")]] = -1
_QUOTE, _BACKSLASH, _BRACE = ord('"'), ord("\\"), ord("{")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_KEY = re.compile(rb'"((?:[^"\\]|\\.){1,80})"\s*:')
_OBJECT_THEN_CLOSE = re.compile(rb"\}\s*\]")
_ELEMENTS = msgspec.json.Decoder(list[msgspec.Raw])


@dataclass
class Position:
    offset: int
    event: int | None  # index in the event array; None: outside it (the metadata)
    field: str | None  # the event's (or the document's) top-level key holding the offset

    def describe(self) -> str:
        if self.event is None and not self.field:
            return f"the JSON at byte {self.offset}"
        where = f"event {self.event}" if self.event is not None else "the metadata"
        if self.field:
            where += f", field {self.field!r}"
        return f"{where} (byte {self.offset})"


def _depths(block: np.ndarray, depth0: int, in_str0: bool, prev_bs: bool) -> tuple:
    """Depth after each byte, whether each byte is inside a string, and the carry."""
    quote = block == _QUOTE
    bs = block == _BACKSLASH
    escaped = np.zeros(len(block), bool)  # a quote right after a backslash (``\\"`` is rare)
    escaped[1:] = bs[:-1]
    if len(block):
        escaped[0] = prev_bs
    q = quote & ~escaped
    toggles = np.cumsum(q) + int(in_str0)
    in_str = (toggles % 2 == 1) | q  # the quotes themselves count as inside
    step = np.where(in_str, 0, _OPEN[block])
    depth = depth0 + np.cumsum(step)
    carry = (
        int(depth[-1]) if len(block) else depth0,
        bool(toggles[-1] % 2 == 1) if len(block) else in_str0,
        bool(bs[-1]) if len(block) else prev_bs,
    )
    return depth, in_str, carry


def locate(data: bytes | bytearray | memoryview, offset: int | None = None) -> Position:
    """The event and field at byte ``offset`` (the last byte when None)."""
    buf = np.frombuffer(data, np.uint8)
    end = len(buf) if offset is None else min(offset + 1, len(buf))
    head = bytes(buf[: min(len(buf), 1 << 16)])
    m = _EVENTS_KEY.search(head)
    if m:
        array_at = m.end() - 1
    else:
        stripped = len(head) - len(head.lstrip())
        array_at = stripped if head[stripped : stripped + 1] == b"[" else -1
    depth0, in_str0, prev_bs = 0, False, False
    events_level = None
    event = -1
    event_start = 0
    found = end - 1
    closed_at = None  # where the event array's "]" is, once passed: what follows is metadata
    for start in range(0, end, BLOCK):
        block = buf[start : min(start + BLOCK, end)]
        depth, in_str, carry = _depths(block, depth0, in_str0, prev_bs)
        if events_level is None and start <= array_at < start + len(block):
            events_level = int(depth[array_at - start]) + 1
        if events_level is not None and closed_at is None:
            opens = (block == _BRACE) & ~in_str & (depth == events_level)
            outside = depth < events_level - 1
            if start <= array_at < start + len(block):
                opens[: array_at - start + 1] = False
                outside[: array_at - start + 1] = False
            shut = np.flatnonzero(outside)
            if len(shut):
                closed_at = start + int(shut[0])
                opens[int(shut[0]) :] = False
            hits = np.flatnonzero(opens)
            if len(hits):
                event += len(hits)
                event_start = start + int(hits[-1])
        depth0, in_str0, prev_bs = carry
    after = closed_at is not None and found > closed_at
    if events_level is None or event < 0 or found < array_at or after:
        return Position(found, None, _last_key(data, 0, found, 1))
    return Position(found, event, _last_key(data, event_start, found, events_level))


def _last_key(data: bytes | bytearray | memoryview, start: int, end: int, level: int) -> str | None:
    """The last key before ``end`` that sits at ``level`` (the event's own keys)."""
    window = bytes(memoryview(data)[start:end])
    if not window:
        return None
    depth, in_str, _ = _depths(np.frombuffer(window, np.uint8), level - 1, False, False)
    key = None
    for m in _KEY.finditer(window):
        p = m.start()
        outside_strings = p == 0 or not in_str[p - 1]
        if outside_strings and int(depth[p]) == level:
            key = m.group(1).decode("utf-8", "replace")
    return key


def last_event_end(array: bytes | bytearray) -> int | None:
    """In a JSON array of objects that may be cut short, the offset of the ``}`` closing
    the last complete object of the array (None when there is none)."""
    buf = np.frombuffer(array, np.uint8)
    depth0, in_str0, prev_bs = 0, False, False
    last = None
    for start in range(0, len(buf), BLOCK):
        block = buf[start : start + BLOCK]
        depth, in_str, carry = _depths(block, depth0, in_str0, prev_bs)
        closes = np.flatnonzero((block == ord("}")) & ~in_str & (depth == 1))
        if len(closes):
            last = start + int(closes[-1])
        depth0, in_str0, prev_bs = carry
    return last


def array_close(rest: bytes | bytearray | memoryview) -> int | None:
    """In the text of a JSON array from an element's start (or just after its ``[``), the
    offset of the ``]`` that closes the array (None when it does not close).

    First guess: the first ``]`` after a ``}`` (an array of objects closes so), taken when
    the text up to it reads as a JSON array — the reader then ends where the array does,
    outside strings and at its depth, so that ``]`` closes it. ~20× faster than following
    the depth through every byte, which a wrong guess falls back to."""
    guess = _OBJECT_THEN_CLOSE.search(rest)
    if guess is not None:
        end = guess.end() - 1
        try:
            _ELEMENTS.decode(b"[" + bytes(rest[:end]) + b"]")
            return end
        except (msgspec.DecodeError, RecursionError):  # not an array, or nested too deep
            pass
    buf = np.frombuffer(rest, np.uint8)
    depth0, in_str0, prev_bs = 1, False, False
    for start in range(0, len(buf), BLOCK):
        block = buf[start : start + BLOCK]
        depth, _, carry = _depths(block, depth0, in_str0, prev_bs)
        closed = np.flatnonzero(depth == 0)
        if len(closed):
            return start + int(closed[0])
        depth0, in_str0, prev_bs = carry
    return None


def deepest(data: bytes | bytearray | memoryview) -> tuple[int, int]:
    """``(offset, depth)`` of the first byte at the greatest nesting depth."""
    buf = np.frombuffer(data, np.uint8)
    depth0, in_str0, prev_bs = 0, False, False
    best, where = -1, 0
    for start in range(0, len(buf), BLOCK):
        depth, _, carry = _depths(buf[start : start + BLOCK], depth0, in_str0, prev_bs)
        if len(depth) and int(depth.max()) > best:
            best, where = int(depth.max()), start + int(np.argmax(depth))
        depth0, in_str0, prev_bs = carry
    return where, best


def too_deep(data: bytes | bytearray | memoryview, first_event: int = 0) -> str:
    """What to tell a user whose JSON nests deeper than the decoder can follow: the event
    (``first_event`` is the index of ``data``'s first event) and field, and how deep."""
    offset, depth = deepest(data)
    pos = locate(data, offset)
    if pos.event is not None:
        pos.event += first_event
    return f"{pos.describe()} nests {depth:,} levels deep, deeper than the JSON reader follows"

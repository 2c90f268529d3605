"""Per-slice args, kept exactly as the file had them and decoded only when asked for.

Most analyses never look at args, and decoding a million small JSON objects costs more
than reading the whole trace. So the store keeps the slices' raw args as bytes and decodes
one slice's args on demand. The bytes live in one of two places:

* in memory, as the reader made them: one blob with offsets, rows in file order and an
  index from slice to row (the blob may be a memoryview over a memory-mapped spill file);
* in a store entry, as batches of a fixed number of slices in slice order
  (:class:`ArgsBatches`: Arrow IPC record batches mapped from the file, or Parquet row
  groups decoded one at a time), so that neither opening an entry nor reading one slice's
  args ever holds all of a huge trace's args in memory: slice ``i`` is row ``i % size`` of
  batch ``i // size``.

Code that reads many slices' raw args (exporters, the store writer, SQL) reads them a
range of slices at a time with :meth:`ArgsStore.slice_rows`, never as one whole buffer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import msgspec
import numpy as np
import pyarrow as pa

from explorer.trace.spill import drop_resident_pages

_DECODE = msgspec.json.Decoder()
#: Slices copied at a time by :meth:`ArgsStore.slice_rows` (~0.7 MB of real traces' args).
_PIECE = 1 << 13


class ArgsBatches(Protocol):
    """The args of ``n`` slices in slice order, ``size`` slices per batch (the last may be
    shorter): ``batch(k)`` is slices ``k*size .. k*size+size-1``, a ``large_binary`` array."""

    n: int
    size: int

    def batch(self, k: int) -> pa.Array: ...


def binary_parts(column: pa.Array) -> tuple[memoryview, np.ndarray]:
    """``(data, offsets)`` of a ``large_binary`` array without copying: row ``j`` is
    ``data[offsets[j]:offsets[j + 1]]``."""
    _, offsets_buf, data_buf = column.buffers()
    n = len(column)
    offsets = np.frombuffer(offsets_buf, np.int64, count=n + 1, offset=column.offset * 8)
    return memoryview(data_buf if data_buf is not None else b""), offsets


class ArgsStore:
    """``store.get(i)`` is slice ``i``'s args: a fresh dict each call.

    In memory: ``blob[offsets[r]:offsets[r + 1]]`` is args row ``r``'s JSON; ``index[i]`` is
    slice ``i``'s row (rows are in file order, slices in the model's order). From a store
    entry: ``batches`` (see the module docstring).
    """

    def __init__(
        self,
        *,
        blob: bytes | bytearray | memoryview | None = None,
        offsets: np.ndarray | None = None,
        index: np.ndarray | None = None,
        batches: ArgsBatches | None = None,
    ) -> None:
        self._blob = blob
        self._offsets = offsets
        self._index = index
        self._batches = batches
        #: (k, data, offsets) of the batch read last: consecutive slices share a batch.
        self._last: tuple[int, memoryview, np.ndarray] | None = None

    def drop_resident_pages(self) -> None:
        """Let go of the resident pages of args kept in a mapped spill file (see
        :func:`explorer.trace.spill.drop_resident_pages`), e.g. once they are stored."""
        drop_resident_pages(self._blob)

    def __len__(self) -> int:
        if self._batches is not None:
            return self._batches.n
        return 0 if self._index is None else len(self._index)

    def _batch(self, k: int) -> tuple[memoryview, np.ndarray]:
        last = self._last  # read once: another thread may replace it meanwhile
        if last is not None and last[0] == k:
            return last[1], last[2]
        assert self._batches is not None
        data, offsets = binary_parts(self._batches.batch(k))
        self._last = (k, data, offsets)
        return data, offsets

    def raw(self, i: int) -> bytes:
        """Slice ``i``'s args JSON exactly as the trace file had it (``{}`` when none)."""
        if self._batches is not None:
            k, j = divmod(int(i), self._batches.size)
            data, offsets = self._batch(k)
            return bytes(data[offsets[j] : offsets[j + 1]])
        if self._blob is None or self._index is None or self._offsets is None:
            return b"{}"
        r = self._index[i]
        return bytes(self._blob[self._offsets[r] : self._offsets[r + 1]])

    def get(self, i: int) -> dict[str, Any]:
        try:
            out = _DECODE.decode(self.raw(i))
        except msgspec.DecodeError:
            return {}
        return out if isinstance(out, dict) else {}

    def slice_rows(self, lo: int, hi: int) -> pa.Array:
        """Slices ``lo .. hi-1``'s raw args in slice order, a ``large_binary`` array: a copy
        of just those slices' bytes, or a view into a mapped batch of the entry."""
        if self._batches is not None:
            size = self._batches.size
            parts = [
                self._batches.batch(k).slice(max(lo - k * size, 0), hi - max(lo, k * size))
                for k in range(lo // size, (hi - 1) // size + 1)
            ]
            return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
        if self._blob is None or self._index is None or self._offsets is None:
            return pa.array([b"{}"] * (hi - lo), pa.large_binary())
        blob, all_offsets = self._blob, np.ascontiguousarray(self._offsets, np.int64)
        rows = pa.Array.from_buffers(
            pa.large_binary(), len(all_offsets) - 1,
            [None, pa.py_buffer(all_offsets), pa.py_buffer(blob)],
        )  # fmt: skip
        index = np.asarray(self._index[lo:hi], np.int64)
        starts, ends = all_offsets[index], all_offsets[index + 1]
        offsets = np.zeros(len(index) + 1, np.int64)
        np.cumsum(ends - starts, out=offsets[1:])
        # Copied into one buffer of exactly the range's size, a piece of rows at a time
        # (Arrow's take of the whole range grows its buffer as it goes: 22 MB held for a
        # 14.5 MB range), letting go of the mapped pages each piece was copied from (see
        # explorer.trace.spill): reading all slices' args never holds them all resident.
        data = pa.allocate_buffer(int(offsets[-1]))
        out = np.frombuffer(data, np.uint8)
        for a in range(0, len(index), _PIECE):
            b = min(a + _PIECE, len(index))
            piece_data, piece_offsets = binary_parts(rows.take(pa.array(index[a:b])))
            out[offsets[a] : offsets[b]] = np.frombuffer(
                piece_data, np.uint8, int(offsets[b] - offsets[a]), int(piece_offsets[0])
            )
            del piece_data
            drop_resident_pages(blob, int(starts[a:b].min()), int(ends[a:b].max()))
        return pa.Array.from_buffers(
            pa.large_binary(), len(index), [None, pa.py_buffer(offsets), data]
        )

    def slice_batches(self, size: int) -> Iterator[tuple[int, pa.Array]]:
        """``(lo, rows)`` for consecutive ranges of ``size`` slices: :meth:`slice_rows` of
        all slices, one range at a time."""
        n = len(self)
        for lo in range(0, n, size):
            yield lo, self.slice_rows(lo, min(lo + size, n))

    def arrays(self) -> tuple[bytes | bytearray | memoryview, np.ndarray, np.ndarray]:
        """``(blob, offsets, index)`` of every slice at once, for tests and small traces
        (this holds all args in one buffer: an entry's batches are copied into one).
        Row ``index[i]`` of slice ``i`` spans ``blob[offsets[r]:offsets[r + 1]]``."""
        if self._batches is not None:
            column = self.slice_rows(0, len(self)) if len(self) else pa.array([], pa.large_binary())
            data, offsets = binary_parts(column)
            return bytes(data), offsets.copy(), np.arange(len(self), dtype=np.int64)
        return (
            self._blob if self._blob is not None else b"",
            self._offsets if self._offsets is not None else np.zeros(1, np.int64),
            self._index if self._index is not None else np.zeros(0, np.int64),
        )

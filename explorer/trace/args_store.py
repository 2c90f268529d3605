"""Per-slice args, kept exactly as the file had them and decoded only when asked for.

Most analyses never look at args, and decoding a million small JSON objects costs more
than reading the whole trace. So the store keeps the slices' raw args as one byte blob
with offsets (from the reader, or from a store entry, decoded on first use) and decodes
one slice's args on demand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

_DECODE = msgspec.json.Decoder()


class ArgsStore:
    """``store.get(i)`` is slice ``i``'s args: a fresh dict each call.

    ``blob[offsets[r]:offsets[r + 1]]`` is args row ``r``'s JSON; ``index[i]`` is slice ``i``'s
    row (rows are in file order, slices in the model's order).
    """

    def __init__(
        self,
        *,
        blob: bytes | bytearray | memoryview | None = None,
        offsets: np.ndarray | None = None,
        index: np.ndarray | None = None,
        load: Callable[[], tuple[bytes, np.ndarray, np.ndarray]] | None = None,
    ) -> None:
        """Either the arrays themselves, or ``load`` returning ``(blob, offsets, index)``
        when first needed (a store entry's args, already read and verified at open)."""
        self._blob = blob
        self._offsets = offsets
        self._index = index
        self._loader = load

    def _load(self) -> None:
        load = self._loader  # read once: another thread may finish loading meanwhile
        if self._blob is None and load is not None:
            blob, self._offsets, self._index = load()
            self._blob = blob  # last: other threads test ``_blob`` to see it is complete

    def arrays(self) -> tuple[bytes | bytearray | memoryview, np.ndarray, np.ndarray]:
        """``(blob, offsets, index)`` for code that reads many slices' raw args at once
        (exporters): row ``index[i]`` of slice ``i`` spans ``blob[offsets[r]:offsets[r + 1]]``."""
        self._load()
        return (
            self._blob or b"",
            self._offsets if self._offsets is not None else np.zeros(1, np.int64),
            self._index if self._index is not None else np.zeros(0, np.int64),
        )

    def __len__(self) -> int:
        self._load()
        return 0 if self._index is None else len(self._index)

    def raw(self, i: int) -> bytes | bytearray | memoryview:
        self._load()
        if self._blob is None or self._index is None or self._offsets is None:
            return b"{}"
        r = self._index[i]
        return self._blob[self._offsets[r] : self._offsets[r + 1]]

    def get(self, i: int) -> dict[str, Any]:
        try:
            out = _DECODE.decode(self.raw(i))
        except msgspec.DecodeError:
            return {}
        return out if isinstance(out, dict) else {}

"""Per-slice args, kept exactly as the file had them and decoded only when asked for.

Most analyses never look at args, and decoding a million small JSON objects costs more
than reading the whole trace. So the store keeps raw JSON bytes (from the reader or from
the on-disk cache) and decodes one slice's args on demand.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

_DECODE = msgspec.json.Decoder(dict)


class ArgsStore:
    """Args of slice ``i`` is ``store.get(i)``: a fresh dict each call.

    Backed by one of: a list of ``msgspec.Raw``/bytes/dicts (just read), or a blob plus
    offsets (from the cache, loaded from disk on first use).
    """

    def __init__(
        self,
        items: Sequence[Any] | None = None,
        *,
        blob_path: Path | None = None,
        offsets_path: Path | None = None,
    ) -> None:
        self._items = items
        self._blob: bytes | None = None
        self._offsets: np.ndarray | None = None
        self._blob_path = blob_path
        self._offsets_path = offsets_path

    def __len__(self) -> int:
        if self._items is not None:
            return len(self._items)
        self._load()
        assert self._offsets is not None
        return len(self._offsets) - 1

    def _load(self) -> None:
        if self._blob is None and self._blob_path is not None:
            self._blob = self._blob_path.read_bytes()
            self._offsets = np.load(self._offsets_path)

    def raw(self, i: int) -> bytes:
        if self._items is not None:
            item = self._items[i]
            if isinstance(item, dict):
                return msgspec.json.encode(item)
            return bytes(item)
        self._load()
        assert self._offsets is not None and self._blob is not None
        return self._blob[self._offsets[i] : self._offsets[i + 1]]

    def get(self, i: int) -> dict[str, Any]:
        if self._items is not None:
            item = self._items[i]
            if isinstance(item, dict):
                return dict(item)
            if item is None:
                return {}
        try:
            out = _DECODE.decode(self.raw(i))
        except msgspec.DecodeError:
            return {}
        return out if isinstance(out, dict) else {}

    def to_blob(self) -> tuple[bytes, np.ndarray]:
        """All args as one byte string and int64 offsets, for the cache."""
        if self._items is None:
            self._load()
            assert self._blob is not None and self._offsets is not None
            return self._blob, self._offsets
        parts = [
            msgspec.json.encode(it) if isinstance(it, dict) else (b"{}" if it is None else it)
            for it in self._items
        ]
        lengths = np.fromiter((len(p) for p in parts), np.int64, len(parts))
        offsets = np.zeros(len(parts) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return b"".join(parts), offsets

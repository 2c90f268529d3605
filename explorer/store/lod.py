"""Level-of-detail arrays kept beside a trace's store entry, so a viewer that reopens a
large trace maps its index instead of rebuilding it.

A LOD entry is a directory of raw numpy arrays (``<name>.bin``, native byte order) and the
store's ``header.json`` (sizes and CRC-32 of every file, see :mod:`explorer.store.header`),
plus a ``lod_key``: a fingerprint of exactly what the arrays were built from (the caller's
choice: for the timeline, the slices' track, depth, start, duration and colour columns). An
entry whose key differs, or that is damaged, incomplete or of another format, is "no entry":
the caller builds again and replaces it. Like a trace entry it is written complete into a
temporary directory and renamed into place, so a reader never sees half of one; opening
maps the files read-only (no copy) after checking every checksum.

    >>> write_lod(path, {"ts": ts, "order": order}, key)
    >>> open_lod(path, key)["ts"]          # read-only, memory-mapped
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from explorer.processes import interrupts_deferred
from explorer.store.entry import _install, _remove_stale_temporaries
from explorer.store.header import (
    StoreDamaged,
    checksum,
    map_checked,
    read_header,
    write_header,
)

#: Bump when the meaning of the stored arrays changes: entries with another version's key
#: are rebuilt (the key includes it).
LOD_VERSION = 1
_SUFFIX = ".bin"


def fingerprint(columns: Sequence[np.ndarray], version: int = LOD_VERSION) -> str:
    """A key naming exactly these arrays' contents (dtype, length and CRC-32 of each bytes):
    ~2 GB/s, so about 0.1 s for 10M slices' five columns."""
    parts = [f"v{version}"]
    for a in columns:
        data = np.ascontiguousarray(a)
        parts.append(f"{data.dtype.str}:{len(data)}:{zlib.crc32(data.view(np.uint8).data):08x}")
    return "/".join(parts)


def write_lod(
    directory: str | os.PathLike[str], arrays: Mapping[str, np.ndarray], key: str
) -> Path:
    """Write ``arrays`` (1-D numeric) under ``key`` as the LOD entry ``directory``,
    replacing an older one atomically. Raises :class:`OSError` when it cannot be written and
    :class:`~explorer.errors.ExplorerError` when ``directory`` is something else than an
    entry (nothing else is ever replaced)."""
    target = Path(directory)
    files = {name + _SUFFIX: np.ascontiguousarray(a).tobytes() for name, a in arrays.items()}
    layout = {
        name: {"dtype": np.asarray(a).dtype.str, "length": len(a)} for name, a in arrays.items()
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(target)  # left by a writer killed mid-write
    with interrupts_deferred():
        tmp = Path(
            tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".writing", dir=target.parent)
        )
        try:
            for name, data in files.items():
                (tmp / name).write_bytes(data)
            sums = {name: (len(data), checksum(data)) for name, data in files.items()}
            write_header(tmp, sums, None, {"lod_key": key, "arrays": layout})
            _install(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def open_lod(directory: str | os.PathLike[str], key: str) -> dict[str, np.ndarray] | None:
    """The arrays of the LOD entry ``directory`` (read-only memory maps), or None when there
    is none made under ``key``, or it is damaged or of another format."""
    d = Path(directory)
    if not d.is_dir():
        return None
    try:
        header = read_header(d)
        layout = header.get("arrays")
        if header.get("lod_key") != key or not isinstance(layout, dict):
            return None
        out = {}
        for name, spec in layout.items():
            data = map_checked(d, header, name + _SUFFIX)
            array = np.frombuffer(data, dtype=np.dtype(spec["dtype"]))
            if len(array) != spec["length"]:
                return None
            out[name] = array
        return out
    except (StoreDamaged, KeyError, TypeError, ValueError):
        return None

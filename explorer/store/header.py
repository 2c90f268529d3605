"""The small JSON header of a store entry: what it holds, what it was made from, and a
checksum of every file, so that an entry is either exactly what was written or rejected.

``header.json`` is the last file written into an entry (the entry itself only appears by
rename once complete), and the first one read. Its ``source`` is the stamp of the file the
tables were parsed from, taken *before* reading it; a cache compares that stamp with the
file as it is now, so a trace replaced during its own parse is never cached as the new one.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import mmap
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.errors import ExplorerError
from explorer.trace.memory_limits import mapped_read_only
from explorer.trace.spill import drop_resident_pages

#: Bump when the files' layout or the meaning of any column changes.
#: 2: parent is the shortest containing slice (sound nesting); 3: args in batches of
#: ARGS_BATCH slices, in the entry's table format (args.arrow for Arrow IPC entries).
STORE_VERSION = 3
FORMAT = "explorer-store"
HEADER = "header.json"
#: The trace's metadata (its source, format, rank, the load's warnings), as JSON.
METADATA_FILE = "metadata.json"


class StoreDamaged(ExplorerError):
    """A store entry that is missing, unreadable, damaged or of another format version.

    The cache treats it as "no entry" and parses the trace again; a user who pointed at a
    store directory gets this one-line message."""

    def __init__(self, directory: Path, problem: str) -> None:
        self.directory = directory
        super().__init__(
            f"{directory}: {problem} — this store entry cannot be used; write it again "
            "(explorer.store.write_trace) or open the original trace"
        )


@dataclass(frozen=True)
class SourceStamp:
    """What a trace's tables were made from: the exact file (path, size, modification
    time, inode) and the version of the reader that parsed it."""

    path: str
    size: int
    mtime_ns: int
    inode: int
    reader_version: int = 0

    @classmethod
    def of(cls, path: Path, reader_version: int = 0) -> SourceStamp:
        """The stamp of ``path`` as it is now (take it BEFORE reading the file)."""
        st = path.stat()
        return cls(str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino, reader_version)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def checksum(data: bytes | memoryview, running: int = 0) -> int:
    """CRC-32 of a file's bytes: ~3 GB/s, and catches every single-bit flip. ``running``
    is the checksum of the bytes before ``data`` (to checksum a file block by block)."""
    return zlib.crc32(data, running)


def file_size_and_checksum(path: Path) -> tuple[int, int]:
    """A written file's size and :func:`checksum`, read back a block at a time into one
    reused buffer (from the page cache: the file was just written; a fresh 16 MB block per
    read was the last rise of a first load's memory, after the args)."""
    crc, size = 0, 0
    buffer = memoryview(bytearray(CHECKSUM_BLOCK))
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            crc = checksum(buffer[:n], crc)
            size += n
    return size, crc


#: Bytes read at a time to checksum a written file (CRC-32 runs at the same speed from 1 MB).
CHECKSUM_BLOCK = 1 << 20
#: Bytes of a mapped file checked before their pages are dropped (a madvise call per block).
MAPPED_CHECK_BLOCK = 4 << 20


def write_header(
    directory: Path,
    files: dict[str, tuple[int, int]],
    source: SourceStamp | None,
    extra: dict[str, Any],
) -> None:
    """Write ``header.json`` describing ``files`` (name -> (size, :func:`checksum`) of the
    exact bytes written)."""
    doc = {
        "format": FORMAT,
        "version": STORE_VERSION,
        "source": source.to_json() if source is not None else None,
        "files": {name: {"bytes": n, "crc32": crc} for name, (n, crc) in files.items()},
        **extra,
    }
    doc["header_crc32"] = _self_checksum(doc)
    (directory / HEADER).write_text(json.dumps(doc, indent=1, sort_keys=True))


def _self_checksum(doc: dict[str, Any]) -> int:
    """CRC-32 of the header's content (all but this field), so that damage to the header
    itself (a category name, a size) is caught as surely as damage to a table."""
    body = {k: v for k, v in doc.items() if k != "header_crc32"}
    return checksum(json.dumps(body, sort_keys=True).encode())


def read_header(directory: Path) -> dict[str, Any]:
    """The header of the entry in ``directory``, checked for format and version."""
    try:
        doc = json.loads((directory / HEADER).read_bytes())
    except FileNotFoundError as exc:
        raise StoreDamaged(directory, f"no {HEADER} (not a store entry)") from exc
    except (OSError, ValueError) as exc:  # unreadable, or not JSON / not UTF-8
        raise StoreDamaged(directory, f"{HEADER} is unreadable ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise StoreDamaged(directory, f"{HEADER} is not an Explorer store header")
    if doc.get("header_crc32") != _self_checksum(doc):
        raise StoreDamaged(directory, f"{HEADER} is damaged (its checksum differs)")
    if doc.get("version") != STORE_VERSION:
        raise StoreDamaged(
            directory,
            f"store format version {doc.get('version')!r}, this Explorer reads {STORE_VERSION}",
        )
    if not isinstance(doc.get("files"), dict):
        raise StoreDamaged(directory, f"{HEADER} lists no files")
    return doc


def read_checked(directory: Path, header: dict[str, Any], name: str) -> bytes:
    """The bytes of file ``name`` of an entry, after checking size and checksum."""
    meta = _listed(directory, header, name)
    try:
        data = (directory / name).read_bytes()
    except OSError as exc:
        raise _unreadable(directory, name, exc) from exc
    _verify(directory, meta, name, data)
    return data


def map_checked(directory: Path, header: dict[str, Any], name: str) -> memoryview:
    """File ``name`` of an entry memory-mapped read-only (no copy), after checking size and
    checksum. The mapping keeps the file's contents even if the entry is later replaced
    (entries are renamed and unlinked, never rewritten in place)."""
    meta = _listed(directory, header, name)
    try:
        with open(directory / name, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                data = memoryview(b"")
            else:
                data = memoryview(
                    mapped_read_only(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
                )
    except OSError as exc:
        raise _unreadable(directory, name, exc) from exc
    # The check reads every page: each block's given back to the page cache once read, so
    # that this process holds only what is read from here on — an args file the trace's
    # args are rarely read from (68 MB of the synthetic 1M-event trace's), columns until an
    # analysis reads them — and never a whole file at once (dropped after its check, the
    # largest file was still a first report's ~50 MB rise as its tables were adopted).
    crc = 0
    for lo in range(0, len(data), MAPPED_CHECK_BLOCK):
        hi = min(lo + MAPPED_CHECK_BLOCK, len(data))
        crc = checksum(data[lo:hi], crc)
        drop_resident_pages(data, lo, hi)
    _check_listed(directory, meta, name, len(data), crc)
    return data


def _listed(directory: Path, header: dict[str, Any], name: str) -> dict[str, Any]:
    meta = header["files"].get(name)
    if not isinstance(meta, dict):
        raise StoreDamaged(directory, f"{HEADER} does not list {name}")
    return meta


def _unreadable(directory: Path, name: str, exc: OSError) -> StoreDamaged:
    """The entry cannot be used; but no room to read or map it (ENOMEM: a memory limit)
    is the process's trouble, not the entry's: then :class:`MemoryError`, so that the trace
    is not parsed again (needing more memory still) nor its entry rewritten."""
    if exc.errno == errno.ENOMEM:
        raise MemoryError from exc
    return StoreDamaged(directory, f"{name} is unreadable ({exc.strerror or exc})")


def _verify(directory: Path, meta: dict[str, Any], name: str, data: bytes | memoryview) -> None:
    _check_listed(directory, meta, name, len(data), checksum(data))


def _check_listed(directory: Path, meta: dict[str, Any], name: str, size: int, crc: int) -> None:
    """StoreDamaged unless ``size`` and ``crc`` are those the header lists for ``name``."""
    if size != meta.get("bytes") or crc != meta.get("crc32"):
        raise StoreDamaged(directory, f"{name} is damaged (size or checksum differs from {HEADER})")


def source_matches(header: dict[str, Any], stamp: SourceStamp) -> bool:
    """Whether the entry was made from exactly the file ``stamp`` describes."""
    return header.get("source") == stamp.to_json()


def read_metadata(directory: Path, header: dict[str, Any]) -> dict[str, Any]:
    """The entry's trace metadata (:data:`METADATA_FILE`), checked against ``header``,
    without opening its tables; :class:`StoreDamaged` when it is damaged."""
    try:
        metadata = json.loads(read_checked(directory, header, METADATA_FILE))
    except ValueError as exc:
        raise StoreDamaged(directory, f"{METADATA_FILE} does not decode ({exc})") from exc
    if not isinstance(metadata, dict):
        raise StoreDamaged(directory, f"{METADATA_FILE} is not an object")
    return metadata

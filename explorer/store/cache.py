"""The trace cache: each trace file's tables kept as a store entry, so reopening is instant.

Kept in a cache directory (``$EXPLORER_CACHE_DIR``, else ``$XDG_CACHE_HOME/explorer``, else
``~/.cache/explorer``; or a directory the caller names) rather than beside the trace:
traces often sit on read-only or shared storage, and a cache must never be mistaken for,
or overwrite, what a user captured. An entry (see :mod:`explorer.store`; its tables are
Arrow IPC files, memory-mapped on reopen with nothing to decode) is keyed by the
trace's absolute path and used only when it was made from exactly the file as it is now:
same size, modification time and inode, stamped *before* the file was read, so a trace
replaced while it was being parsed is parsed again next time. A damaged, partial or
outdated entry is not an error: the trace is parsed again and the entry rewritten.
A trace opened from (or just written to) an entry keeps its expensive analysis results in
the entry's ``results/`` (:mod:`explorer.store.results`), so the next report reuses them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.errors import ExplorerError
from explorer.safe_write import os_reason
from explorer.store.header import SourceStamp, StoreDamaged, read_header, source_matches

if TYPE_CHECKING:
    from explorer.trace.model import TraceData

# The entry's tables and stored results (Arrow, pandas) are imported where they are
# opened or written: finding an entry (:func:`cached_entry`) needs only its header.

#: Bump when the tables' layout or the reader's output changes: entries made by another
#: version are parsed again (the store's own format has its own version, STORE_VERSION).
CACHE_VERSION = 8


def source_stamp(path: Path) -> SourceStamp:
    """What a cache entry for ``path`` must have been made from: the file as it is now, read
    by this version of the reader. Take it BEFORE reading the file."""
    return SourceStamp.of(path, CACHE_VERSION)


def cache_root() -> Path:
    """The default cache directory."""
    env = os.environ.get("EXPLORER_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "explorer"


def entry_path(path: Path, root: Path | None = None) -> Path:
    """Where the entry of trace file ``path`` lives (under ``root``, default :func:`cache_root`)."""
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:20]
    return (root if root is not None else cache_root()) / digest


def load_cached(
    path: Path, stamp: SourceStamp | None = None, *, root: Path | None = None
) -> TraceData | None:
    """The cached tables of ``path``, or None when there is no entry made from the file as
    ``stamp`` describes it (default: as it is now)."""
    from explorer.store import open_trace, results

    entry = entry_path(path, root)
    try:
        trace = open_trace(entry, source=stamp or source_stamp(path))
        results.attach(trace, entry, read_header(entry))
    except StoreDamaged:
        return None
    return trace


def cached_entry(path: Path, *, root: Path | None = None) -> Path | None:
    """The cache entry of ``path`` when there is one made from the file as it is now (for
    code that reads the entry's files in place rather than loading them), else None."""
    entry = entry_path(path, root)
    try:
        header = read_header(entry)
    except StoreDamaged:
        return None
    return entry if source_matches(header, source_stamp(path)) else None


def save_cached(
    path: Path, trace: TraceData, stamp: SourceStamp, *, root: Path | None = None
) -> str | None:
    """Cache ``trace``, parsed from ``path`` as ``stamp`` (taken before reading) describes it;
    why it could not be written, else None.

    Not cached when the file changed since the stamp (what was parsed may be neither
    version). Failure is not an error: the trace is still loaded, just not cached (read-only
    home, full disk, a cache directory that is a file)."""
    from explorer.store import results, write_trace
    from explorer.store.entry import is_entry

    entry = entry_path(path, root)
    try:
        if source_stamp(path) != stamp:
            return None
        if entry.exists() and not is_entry(entry):
            shutil.rmtree(entry)  # our own damaged or pre-store entry (the cache owns its root)
        write_trace(trace, entry, source=stamp, table_format="arrow")  # mapped on reopen
        results.attach(trace, entry, read_header(entry))  # the first report's results kept
        return None
    except OSError as exc:
        return f"{exc.filename or entry.parent}: {os_reason(exc)}"
    except ExplorerError as exc:
        return str(exc)

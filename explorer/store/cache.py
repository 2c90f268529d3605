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

import copy
import hashlib
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer.errors import ExplorerError
from explorer.safe_write import os_reason
from explorer.store.header import SourceStamp, StoreDamaged, read_header, source_matches
from explorer.trace.memory_limits import release_freed_memory

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
    from explorer.store import results

    failed, entry, header = _write_entry(path, trace, stamp, root)
    if entry is not None and header is not None:
        results.attach(trace, entry, header)  # the first report's results kept
    return failed


def _write_entry(
    path: Path, trace: TraceData, stamp: SourceStamp, root: Path | None
) -> tuple[str | None, Path | None, dict[str, Any] | None]:
    """Write ``trace``'s entry (see :func:`save_cached`): why it was not written, or the
    entry and its header (None, None, None: not written because the file changed)."""
    from explorer.store import write_trace
    from explorer.store.entry import is_entry

    entry = entry_path(path, root)
    try:
        if source_stamp(path) != stamp:
            return None, None, None
        if entry.exists() and not is_entry(entry):
            shutil.rmtree(entry)  # our own damaged or pre-store entry (the cache owns its root)
        write_trace(trace, entry, source=stamp, table_format="arrow")  # mapped on reopen
        return None, entry, read_header(entry)
    except OSError as exc:
        return f"{exc.filename or entry.parent}: {os_reason(exc)}", None, None
    except ExplorerError as exc:
        return str(exc), None, None


def not_cached_warning(reason: str) -> str:
    """The load warning of a trace whose cache entry could not be written."""
    return (
        f"not cached ({reason}): the next load reads the file again; set "
        "EXPLORER_CACHE_DIR to a writable directory with room to cache it"
    )


class CacheWrite:
    """The cache entry of a trace just parsed, written when its reader's caller chooses
    (:meth:`finish`). A first report forks the child that runs its graph-free analyses
    first, then writes the entry while the child works, then builds the dependency graph
    beside the stored tables, mapped (:func:`finish_cache_write`). Written in a thread
    beside the graph's build instead, the parse's heap tables (~100 MB on the synthetic
    1M-event trace) stayed under the build's peak, and the write's own buffers landed on
    it or not as the two threads happened to meet: the report's largest process was
    385-397 MiB, and is 364-367 MiB written first, in the same time (the two cores are
    the child's and this process's either way).

    What is written is the trace as parsed: its tables, and its metadata as they were when
    this was made (a warning or an execution trace added to the trace since is not cached).
    Until the entry is written, the trace's memo has a :class:`~explorer.store.results.
    PendingStore`: no result is stored yet, and what is saved meanwhile is stored once the
    entry is written, as :func:`save_cached` would have. Once written, the trace reads its
    tables from it (:func:`_adopt_stored_tables`). A write that fails adds a
    ``not cached`` warning to the trace's metadata, as a load does."""

    def __init__(self, path: Path, trace: TraceData, stamp: SourceStamp, root: Path | None) -> None:
        from explorer.store.results import PendingStore

        as_parsed = copy.copy(trace)
        as_parsed.metadata = copy.deepcopy(trace.metadata)
        self._job: tuple[Path, TraceData, SourceStamp, Path | None] | None = (
            path,
            as_parsed,
            stamp,
            root,
        )
        self._trace = trace
        self._outcome: tuple[str | None, Path | None, dict[str, Any] | None] | None = None
        self._error: BaseException | None = None
        self._store = PendingStore(self, trace)
        self.failed: str | None = None
        """Why the entry was not written, once :meth:`finish` returned (None: written)."""
        trace.memo.store = self._store

    def _write(self) -> None:
        job, self._job = self._job, None
        if job is None:
            return
        try:
            self._outcome = _write_entry(*job)
        except BaseException as exc:  # noqa: BLE001 - raised again below, once
            self._error = exc

    def finish(self) -> str | None:
        """Write the entry, then store the results saved meanwhile: why it was not
        written, else None. Once; later calls return the same."""
        self._write()
        error, self._error = self._error, None
        if error is not None:
            self._store.resolve(None, None)
            raise error
        if self._outcome is None:  # finished before
            return self.failed
        failed, entry, header = self._outcome
        self._outcome = None
        self._store.resolve(entry, header)
        self._trace.args_store.drop_resident_pages()  # read through once to be stored
        if failed is None and entry is not None:
            _adopt_stored_tables(self._trace, entry)
        if failed is not None:
            self.failed = failed
            meta = self._trace.metadata
            meta["warnings"] = [*meta.get("warnings", []), not_cached_warning(failed)]
        return failed


def _adopt_stored_tables(trace: TraceData, entry: Path) -> None:
    """``trace``'s tables replaced by its just-written entry's, mapped from its files, and
    the parse's own copies freed (but what results computed so far hold of them): what
    every later open of the file reads (the same values, checked by the entry's
    checksums), in ~0.06 s on 1M events. A first report's graph build, path search and
    replays then run beside mapped tables rather than the parse's heap. Measured when only
    the path and the replays did, on the synthetic 1M-event trace: its largest process
    534 -> 519 MiB, the replays' child 500 -> 459 MB, the report 4.61 -> 4.40 s (medians of
    5, interleaved). Nothing when the entry cannot be read back."""
    from explorer.store import open_trace
    from explorer.store.entry import TABLES

    try:
        stored = open_trace(entry)
    except StoreDamaged:
        return
    for name in TABLES:
        setattr(trace, name, getattr(stored, name))
    trace.args_store = stored.args_store
    del stored
    release_freed_memory()


def cache_write_of(trace: TraceData) -> CacheWrite | None:
    """The deferred cache write of ``trace`` (or of the trace it is a view of), if it has
    one, finished or not (:meth:`CacheWrite.finish` is then a no-op)."""
    store = trace.memo.store
    owner = getattr(store, "owner", None)
    return owner if isinstance(owner, CacheWrite) else None


def finish_cache_write(trace: TraceData) -> str | None:
    """Write ``trace``'s pending cache entry (:class:`CacheWrite`), if it has one, and read
    its tables from it from now on: why it was not written, else None (also when there was
    nothing to write)."""
    write = cache_write_of(trace)
    return None if write is None else write.finish()

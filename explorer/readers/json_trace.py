"""Trace JSON files — Kineto's (``torch.profiler``'s) and any other Chrome trace-event
JSON, plain, gzip or zstd, or standard input — read through the trace cache.

A file is read in chunks (:mod:`explorer.trace.chunked_read`, in worker processes for a
large one), or by the careful reader (:mod:`explorer.trace.decode`) when it needs it
(damaged, cut short, standard input); both take the file's bytes as
:mod:`explorer.trace.encoding` decides. Which of the two formats a file is, the tables
say once built (``metadata["format"]``): they share one reader.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from pathlib import Path

from explorer.errors import TraceError
from explorer.store.cache import (
    CacheWrite,
    cache_root,
    cached_entry,
    load_cached,
    not_cached_warning,
    save_cached,
    source_stamp,
)
from explorer.trace.build import build, build_tables
from explorer.trace.chunked_read import NeedsCareful, read_chunked
from explorer.trace.decode import decode, read_bytes, read_head
from explorer.trace.encoding import json_head
from explorer.trace.memory_limits import memory_budget, release_freed_memory
from explorer.trace.model import TraceData

Progress = Callable[[float, str], None]

#: How every Chrome JSON export begins (see :mod:`explorer.export.chrome`).
EXPORT_MARKER = b'{"exportedBy":"explorer",'


@dataclass(frozen=True)
class Options:
    """How a reader reads: through the cache or not, where its entries go (None: the
    cache directory), and whom it tells how far it got."""

    use_cache: bool = True
    progress: Progress | None = None
    store: Path | None = None
    #: Leave a parsed trace's cache entry to be written when the caller chooses (see
    #: :class:`~explorer.store.cache.CacheWrite`; the caller must finish it).
    defer_cache_write: bool = False

    def uncached(self) -> Options:
        return replace(self, use_cache=False)


def is_explorer_output(path: Path) -> bool:
    """True for a file Explorer wrote from a trace (an export or a JSON report), judged
    from its first bytes (see :mod:`explorer.readers`)."""
    head = json_head(read_head(path))
    if head.startswith(EXPORT_MARKER):
        return True
    if b'"traceEvents"' in head:
        return False
    report = b'"schema_version"' in head and b'"explorer_version"' in head
    diff = head.startswith(b"{") and b'"a"' in head and b'"b"' in head and b'"cross_device"' in head
    return report or diff


def read(path: Path, options: Options) -> TraceData:
    """The tables of one trace file, from the cache when it holds them."""
    progress = options.progress
    # Stamped before reading: the cache entry says what was read. Standard input ("-") is
    # read once and never cached.
    stamp = source_stamp(path) if options.use_cache and str(path) != "-" else None
    root = options.store
    if stamp is not None:
        cached = load_cached(path, stamp, root=root)
        if cached is not None:
            if progress:
                progress(1.0, "loaded from cache")
            return cached
    if progress:
        progress(0.05, f"reading {path.name}")
    # A load too large for memory keeps its columns in files beside the cache's entries.
    spill_root = (root or cache_root()) if stamp is not None else None
    trace = _parse(path, progress, spill_root)
    if stamp is not None and options.defer_cache_write:
        CacheWrite(path, trace, stamp, root)  # written when the caller finishes it
    elif stamp is not None:
        if progress:
            progress(0.95, "writing cache")
        failed = save_cached(path, trace, stamp, root=root)
        trace.args_store.drop_resident_pages()  # read through once to be stored
        if failed is not None:
            trace.metadata["warnings"] = [
                *trace.metadata.get("warnings", []),
                not_cached_warning(failed),
            ]
        elif cached_entry(path, root=root) is not None:
            # The trace as its entry holds it, as every later open of the file gets it (in
            # ~0.06 s on 1M events): its tables mapped from the entry's files (clean
            # pages, shared with the page cache), the parse's own copies freed first. A
            # first open then holds what a second does: on the synthetic 1M-event trace
            # ~145 MB less of the process's own memory (RSS after the load 304 -> ~250
            # MB), which every analysis after it adds to.
            del trace
            release_freed_memory()
            stored = load_cached(path, stamp, root=root)
            # (the entry damaged or removed meanwhile: parsed again, not cached)
            trace = stored if stored is not None else _parse(path, None, spill_root)
    if progress:
        progress(1.0, "loaded")
    return trace


def _parse(path: Path, progress: Progress | None, spill_root: Path | None = None) -> TraceData:
    """The tables of one trace file; running out of memory is a :class:`TraceError` that
    says how much this process may use."""
    try:
        return _parse_file(path, progress, spill_root)
    except (MemoryError, BrokenProcessPool):  # a worker killed by the OOM killer: the latter
        raise TraceError(
            path,
            f"does not fit in the memory this process may use ({memory_budget()[1]})",
            "free memory, raise the limit, or load it on a larger machine",
        ) from None


def _parse_file(path: Path, progress: Progress | None, spill_root: Path | None) -> TraceData:
    """Read in chunks, or by the careful reader when the file needs it."""
    if str(path) != "-":
        try:
            read = read_chunked(path, progress, spill_root)
        except NeedsCareful:
            pass
        else:
            return build_tables(read.events, read.metadata, read.warnings, path, progress)
    data, warnings = read_bytes(path)
    if progress:
        progress(0.2, "decoding JSON")
    decoded = decode(path, data)
    del data
    if decoded.execution_trace is not None:
        raise TraceError(
            path,
            "this is a PyTorch Execution Trace, not a timeline trace",
            "load the Kineto trace captured with it (explorer.load(kineto, execution_trace=this_file))",
        )
    decoded.warnings[:0] = warnings
    return build(decoded, path, progress=progress)


#: Compressed forms of a trace that sit where its plain name was asked for.
_COMPRESSED = (".gz", ".zst")


def missing_path(p: Path) -> TraceError:
    """The error for a path that is not there, naming what is there instead: the same trace
    compressed (``trace.json`` asked, ``trace.json.gz`` there) or not, or a symbolic link
    that leads nowhere (a dangling one, or a loop)."""
    if os.path.islink(p):
        return TraceError(
            p,
            "is a symbolic link that leads to no file (it dangles, or links in a loop)",
            "check where it points",
        )
    names = [p.name + ext for ext in _COMPRESSED]
    if p.suffix in _COMPRESSED:
        names.append(p.stem)
        names += [p.stem + ext for ext in _COMPRESSED if ext != p.suffix]
    there = [p.with_name(n) for n in names if n and p.with_name(n).is_file()]
    if there:
        return TraceError(p, "no such file", f"did you mean {there[0]}?")
    return TraceError(p, "no such file or directory", "check the path")

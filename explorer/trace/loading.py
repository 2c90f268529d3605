"""From a path a user typed to loaded tables: files (plain, gzip or zstd), TensorBoard
profile directories, directories of per-rank traces, Execution Traces attached to their
Kineto trace, and the cache in front of it all.

Directory rules (documented for users in the README):

* a TensorBoard log dir (``plugins/profile/<run>/``): the newest run is used;
* a directory holding one trace: that trace;
* a directory holding one trace per rank: :func:`load_trace` gives the lowest rank (and a
  warning naming the others), :func:`load_rank_traces` gives all of them;
* an Execution Trace (``nodes``/``schema`` JSON from ExecutionTraceObserver) beside a Kineto
  trace is attached to it; ``execution_trace=`` attaches one explicitly;
* never a hidden file (a name starting with ``.``: the collector's per-cycle files and every
  temporary file of :mod:`explorer.safe_write`, which a killed writer may leave behind), and
  never one of Explorer's own outputs — a Chrome export (it starts with
  ``{"exportedBy":"explorer"``), a JSON report (``schema_version`` + ``explorer_version``
  in its first bytes) or a JSON diff (``a``, ``b``, ``cross_device``) — so ``explorer export DIR -o DIR/x.json`` does not change what
  ``DIR`` means. Such a file can still be loaded by naming it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from os import PathLike
from pathlib import Path

from explorer.errors import TraceError
from explorer.trace.build import build, build_tables
from explorer.trace.cache import cache_root, load_cached, save_cached, source_stamp
from explorer.trace.chunked_read import NeedsCareful, read_chunked
from explorer.trace.decode import decode, read_bytes, read_head
from explorer.trace.execution_trace import attach_execution_trace, is_execution_trace
from explorer.trace.memory_limits import memory_budget
from explorer.trace.model import TraceData

Progress = Callable[[float, str], None]

_TRACE_SUFFIXES = (".json", ".json.gz", ".json.zst")
#: How every Chrome JSON export begins (see :mod:`explorer.export.chrome`).
EXPORT_MARKER = b'{"exportedBy":"explorer",'

_RANK = re.compile(r"rank[-_]?(\d+)", re.I)


def _is_trace_file(p: Path) -> bool:
    return (
        not p.name.startswith(".")
        and p.name.endswith(_TRACE_SUFFIXES)
        and p.is_file()
        and not is_explorer_output(p)
    )


def is_explorer_output(path: Path) -> bool:
    """True for a file Explorer wrote from a trace (an export or a JSON report), judged
    from its first bytes; see the module docstring."""
    head = read_head(path).lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(EXPORT_MARKER):
        return True
    if b'"traceEvents"' in head:
        return False
    report = b'"schema_version"' in head and b'"explorer_version"' in head
    diff = head.startswith(b"{") and b'"a"' in head and b'"b"' in head and b'"cross_device"' in head
    return report or diff


def trace_files(directory: Path) -> list[Path]:
    """Trace files a directory stands for (see the module docstring)."""
    tb = directory / "plugins" / "profile"
    if tb.is_dir():
        runs = sorted((r for r in tb.iterdir() if r.is_dir()), key=lambda r: r.stat().st_mtime)
        if runs:
            directory = runs[-1]
    files = sorted(p for p in directory.iterdir() if _is_trace_file(p))
    if not files:
        files = sorted(
            p
            for p in directory.rglob("*")
            if not any(part.startswith(".") for part in p.relative_to(directory).parts[:-1])
            and _is_trace_file(p)
        )
    return files


def input_files(path: str | Path) -> list[Path]:
    """What loading ``path`` may read: the path itself and, for a directory, the trace files
    it stands for. Writers refuse to write over any of them."""
    p = Path(path)
    if p.is_dir():
        return [p, *trace_files(p)]
    return [p]


def rank_of(path: Path, trace: TraceData | None = None) -> int:
    if trace is not None and trace.rank >= 0:
        return trace.rank
    m = _RANK.search(path.name)
    return int(m.group(1)) if m else -1


def _read_one(
    path: Path, use_cache: bool, progress: Progress | None, store: Path | None
) -> TraceData:
    # Stamped before reading: the cache entry says what was read. Standard input ("-") is
    # read once and never cached.
    stamp = source_stamp(path) if use_cache else None
    if stamp is not None:
        cached = load_cached(path, stamp, root=store)
        if cached is not None:
            if progress:
                progress(1.0, "loaded from cache")
            return cached
    if progress:
        progress(0.05, f"reading {path.name}")
    # A load too large for memory keeps its columns in files beside the cache's entries.
    trace = _parse(path, progress, (store or cache_root()) if stamp is not None else None)
    if stamp is not None:
        if progress:
            progress(0.95, "writing cache")
        failed = save_cached(path, trace, stamp, root=store)
        trace.args_store.drop_resident_pages()  # read through once to be stored
        if failed is not None:
            trace.metadata["warnings"] = [
                *trace.metadata.get("warnings", []),
                f"not cached ({failed}): the next load reads the file again; set "
                "EXPLORER_CACHE_DIR to a writable directory with room to cache it",
            ]
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
            f"does not fit in the memory this process may use ({_memory_allowed()})",
            "free memory, raise the limit, or load it on a larger machine",
        ) from None


def _memory_allowed() -> str:
    return memory_budget()[1]


def _parse_file(path: Path, progress: Progress | None, spill_root: Path | None) -> TraceData:
    """Read in chunks (:mod:`explorer.trace.chunked_read`), or by the careful reader when
    the file needs it (damaged, cut short, standard input)."""
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


def load_trace(
    path: str | PathLike[str],
    *,
    use_cache: bool = True,
    progress: Progress | None = None,
    execution_trace: str | PathLike[str] | None = None,
    store: str | PathLike[str] | None = None,
) -> TraceData:
    """One trace from a file or directory (the lowest rank of a rank directory).

    ``store`` puts the cache entries in that directory instead of the cache directory."""
    root = Path(store) if store is not None else None
    p = Path(path)
    if str(path) == "-":  # standard input: read once, never cached
        return _read_one(p, False, progress, root)
    if not p.exists():
        raise missing_path(p)
    et_path = Path(execution_trace) if execution_trace else None
    if p.is_dir():
        files = trace_files(p)
        ets = [f for f in files if is_execution_trace(f)]
        kineto = [f for f in files if f not in ets]
        if not kineto:
            raise TraceError(
                p,
                "this directory holds no trace files (*.json, *.json.gz, *.json.zst)",
                "point at a trace file, a TensorBoard log dir or a directory of rank traces",
            )
        if len(kineto) > 1:
            ranked = sorted(kineto, key=lambda f: (rank_of(f), f.name))
            trace = _read_one(ranked[0], use_cache, progress, root)
            trace.metadata["warnings"] = list(trace.metadata.get("warnings", [])) + [
                f"{p} holds {len(kineto)} traces; showing {ranked[0].name} "
                f"(use explorer.load_ranks for all)"
            ]
        else:
            trace = _read_one(kineto[0], use_cache, progress, root)
        if et_path is None and len(ets) == 1:
            et_path = ets[0]
    else:
        trace = _read_one(p, use_cache, progress, root)
    if len(trace.slices) == 0 and len(trace.memory):
        # A memory-only capture (profile_memory with every activity filtered out) still
        # has its memory timeline to show: load it, and say what it holds.
        trace.metadata["warnings"] = [
            *trace.metadata.get("warnings", []),
            f"the trace holds only memory events ({len(trace.memory)}): no slices, so no "
            "steps or time breakdown; its memory timeline is all there is",
        ]
    elif len(trace.slices) == 0:
        # every verb would report zeros (or write an empty file) for what is a bad capture
        raise TraceError(
            p,
            "the trace holds no events (no slices to analyse)",
            "profile at least one step (check the profiler's schedule and that it was stopped)",
        )
    if et_path is not None:
        attach_execution_trace(trace, et_path)
    return trace


def load_rank_traces(
    path: str | PathLike[str], *, use_cache: bool = True, store: str | PathLike[str] | None = None
) -> dict[int, TraceData]:
    """Every rank's trace in a directory, keyed by rank (file order when ranks are unknown)."""
    p = Path(path)
    if not p.is_dir():
        t = load_trace(p, use_cache=use_cache, store=store)
        return {max(t.rank, 0): t}
    root = Path(store) if store is not None else None
    out: dict[int, TraceData] = {}
    for k, f in enumerate(f for f in trace_files(p) if not is_execution_trace(f)):
        t = _read_one(f, use_cache, None, root)
        r = rank_of(f, t)
        out[r if r >= 0 and r not in out else k] = t
    return dict(sorted(out.items()))

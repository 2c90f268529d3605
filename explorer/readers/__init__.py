"""From a path a user typed to a loaded trace: one reader per input kind, behind
:func:`read`, with the sniffing that picks the reader in one place (:func:`sniff`).

The readers, in the order they are asked (the first that claims the path reads it):

* ``store`` — a directory that is an Explorer store entry (:mod:`.store_entry`);
* ``tensorboard`` — a TensorBoard log dir, ``plugins/profile/<run>/`` (:mod:`.tensorboard`);
* ``rank_dir`` — any other directory: its trace files, one per rank (:mod:`.rank_dir`);
* ``execution_trace`` — a PyTorch Execution Trace file, ``nodes``/``schema`` JSON
  (:mod:`.execution_trace`);
* ``json`` — any other file, or ``-`` (standard input): Kineto or Chrome trace JSON,
  plain, gzip or zstd (:mod:`.json_trace`).

What the bytes of a file are (compressed, a byte-order mark) is decided once, in
:mod:`explorer.trace.encoding`, for these and for the trace package's two JSON readers.
Every trace file is read through the trace cache (:mod:`explorer.store.cache`), which is
why this package sits above both the trace model and the store: the model never imports
the store, and the store never imports a reader (import contracts in ``pyproject.toml``).

Directory rules (documented for users in the README):

* a TensorBoard log dir (``plugins/profile/<run>/``): the newest run is used;
* a directory holding one trace: that trace;
* a directory holding one trace per rank: :func:`read` gives the lowest rank (and a
  warning naming the others), :func:`read_ranks` gives all of them;
* an Execution Trace beside a Kineto trace is attached to it; ``execution_trace=``
  attaches one explicitly;
* never a hidden file (a name starting with ``.``: the collector's per-cycle files and every
  temporary file of :mod:`explorer.safe_write`, which a killed writer may leave behind), and
  never one of Explorer's own outputs — a Chrome export (it starts with
  ``{"exportedBy":"explorer"``), a JSON report (``schema_version`` + ``explorer_version``
  in its first bytes) or a JSON diff (``a``, ``b``, ``cross_device``) — so ``explorer
  export DIR -o DIR/x.json`` does not change what ``DIR`` means. Such a file can still be
  loaded by naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from os import PathLike
from pathlib import Path

from explorer.errors import TraceError
from explorer.readers import execution_trace, json_trace, rank_dir, store_entry, tensorboard
from explorer.readers.execution_trace import attach_execution_trace
from explorer.readers.json_trace import Progress, missing_path
from explorer.trace.model import TraceData


@dataclass(frozen=True)
class Reader:
    """One input kind: ``claims(path)`` says whether the path is of this kind (from its
    type, its name and its first bytes: cheap, never a parse), ``read`` loads it."""

    kind: str
    claims: Callable[[Path], bool]
    read: Callable[[Path, json_trace.Options], TraceData]


#: Every input kind, in the order they are asked (see the module docstring).
READERS: tuple[Reader, ...] = (
    Reader("store", store_entry.claims, store_entry.read),
    Reader("tensorboard", tensorboard.claims, rank_dir.read),
    Reader("rank_dir", Path.is_dir, rank_dir.read),
    Reader("execution_trace", execution_trace.claims, execution_trace.read),
    Reader("json", lambda path: True, json_trace.read),
)


def sniff(path: str | PathLike[str]) -> Reader:
    """The reader of ``path`` (the first in :data:`READERS` that claims it)."""
    p = Path(path)
    if str(path) == "-":
        return READERS[-1]
    return next(r for r in READERS if r.claims(p))


def read(
    path: str | PathLike[str],
    *,
    use_cache: bool = True,
    progress: Progress | None = None,
    execution_trace: str | PathLike[str] | None = None,
    store: str | PathLike[str] | None = None,
    defer_cache_write: bool = False,
) -> TraceData:
    """One trace from a file or directory (the lowest rank of a rank directory).

    ``store`` puts the cache entries in that directory instead of the cache directory.
    ``defer_cache_write``: a trace file parsed (not read from the cache) leaves its cache
    entry to be written when the caller chooses, who must then finish it
    (:func:`~explorer.store.cache.cache_write_of`, :class:`~explorer.store.cache.
    CacheWrite`; a report writes it while its analyses run). Only for a plain trace file
    with no execution trace: any other input is cached as it is read."""
    options = json_trace.Options(
        use_cache=use_cache, progress=progress, store=Path(store) if store is not None else None
    )
    p = Path(path)
    if str(path) == "-":  # standard input: read once, never cached
        return json_trace.read(p, options.uncached())
    if not p.exists():
        raise missing_path(p)
    reader = sniff(p)
    if defer_cache_write and reader.kind == "json" and execution_trace is None:
        options = replace(options, defer_cache_write=True)
    trace = reader.read(p, options)
    et_path = Path(execution_trace) if execution_trace else None
    if et_path is None and reader.kind in ("tensorboard", "rank_dir"):
        et_path = rank_dir.execution_trace_beside(p)
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


def read_ranks(
    path: str | PathLike[str], *, use_cache: bool = True, store: str | PathLike[str] | None = None
) -> dict[int, TraceData]:
    """Every rank's trace in a directory, keyed by rank (file order when ranks are unknown)."""
    p = Path(path)
    if not p.is_dir():
        t = read(p, use_cache=use_cache, store=store)
        return {max(t.rank, 0): t}
    options = json_trace.Options(use_cache=use_cache, store=Path(store) if store else None)
    return rank_dir.read_all(p, options)


def input_files(path: str | Path) -> list[Path]:
    """What reading ``path`` may read: the path itself and, for a directory, the trace
    files it stands for. Writers refuse to write over any of them."""
    p = Path(path)
    if p.is_dir() and not store_entry.claims(p):
        return [p, *rank_dir.trace_files(p)]
    return [p]


__all__ = ["READERS", "Reader", "input_files", "read", "read_ranks", "sniff"]

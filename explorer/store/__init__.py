"""The columnar store: a trace's tables as Parquet files plus a small JSON header.

One entry is one directory holding ``slices``, ``tracks``, ``flows``, ``counters``,
``instants``, ``memory`` (and ``execution_trace`` when present) as ``<table>.parquet`` (or
``<table>.arrow``, Arrow IPC, for the trace cache: see :mod:`explorer.store.tables`), the
slices' raw args as ``args.parquet`` or ``args.arrow`` (``slice_id`` and a binary ``json``
column, row ``i`` = slice ``i``, in batches of a fixed number of slices; mapped on open,
one slice's args read on demand),
``metadata.json``, and ``header.json`` (format version, the source file's stamp, and each
file's size and CRC-32). It serves three users:

* the trace cache (:mod:`explorer.store.cache`): an entry per trace file under the cache
  directory, stamped with the file it came from; any damage or mismatch means a re-parse;
* multi-rank jobs: each rank's tables (and its analysis tables, ``extra_tables=``) written
  with :func:`write_trace` into its own entry, then joined across ranks by DuckDB over
  :func:`table_paths` (:func:`explorer.store.query.connect` takes a list of paths per name);
* ``explorer sql``: DuckDB over an entry's tables (:mod:`explorer.store.query`).

    >>> from explorer import store
    >>> entry = store.write_trace(trace_data, "out/store/rank-0")
    >>> same = store.open_trace(entry)           # a TraceData, args decoded lazily
    >>> store.table_paths(entry)["slices"]       # a Parquet file DuckDB can read
    PosixPath('out/store/rank-0/slices.parquet')

Nothing here unpickles anything; an entry is never modified after it is written.
"""

from typing import TYPE_CHECKING, Any

from explorer.allocator import arrow_allocator_for_limits
from explorer.store.header import STORE_VERSION, SourceStamp, StoreDamaged

if TYPE_CHECKING:
    from explorer.store.entry import (
        OPTIONAL_TABLES,
        TABLES,
        open_trace,
        read_table,
        table_paths,
        write_trace,
    )

arrow_allocator_for_limits()  # for a store used without ``import explorer`` first

#: What :mod:`explorer.store.entry` (Arrow, pandas) provides, imported on first use: an
#: entry's header and stored plain results are read without them.
_FROM_ENTRY = frozenset(
    {"OPTIONAL_TABLES", "TABLES", "open_trace", "read_table", "table_paths", "write_trace"}
)


def __getattr__(name: str) -> Any:
    if name in _FROM_ENTRY:
        from explorer.store import entry

        return getattr(entry, name)
    raise AttributeError(f"module 'explorer.store' has no attribute {name!r}")


__all__ = [
    "OPTIONAL_TABLES",
    "STORE_VERSION",
    "TABLES",
    "SourceStamp",
    "StoreDamaged",
    "open_trace",
    "read_table",
    "table_paths",
    "write_trace",
]

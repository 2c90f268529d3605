"""Tables to file bytes and back, exactly: same columns, dtypes and categories.

Two table formats, one per job:

* ``parquet`` (the default): the columnar format every tool reads — DuckDB queries the files
  in place, pandas/polars/Spark open them — compact, with dictionary-encoded categoricals.
  For what other tools and SQL read: multi-rank job stores, ``explorer.store.write_trace``.
* ``arrow`` (Arrow IPC, a.k.a. Feather v2, uncompressed): the in-memory Arrow layout written
  as is, so reading is a memory map with no decoding at all — half the CPU of Parquet for a
  1M-slice trace (0.03 s against 0.07 s, same run). For the trace cache, where a reopen is
  read far more often than written and only Explorer reads it.

Pandas categoricals go through Arrow dictionaries; their category list, order and dtype are
also kept in the header and restored on read, so a category no row uses, or a different
order, never changes a dtype.

Ids are row positions in the model; on disk ``slices`` also carries them as an ``id``
column (what ``flows.src``/``dst``, ``slices.parent`` and ``memory.slice`` refer to), so a
SQL join needs no row numbering. The slices' args become one table, ``args``: ``slice_id``
and a binary ``json`` column (slice ``i``'s args exactly as the trace file had them), which
DuckDB can also query with its JSON functions.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq

from explorer.trace.args_store import ArgsStore

#: Parquet options: dictionary pages for repeated values, uncompressed pages (decoding
#: speed over size: a cached reopen is read far more often than it is written), page CRCs.
_WRITE = {"compression": "none", "write_page_checksum": True, "write_statistics": True}
#: Args: JSON text shrinks ~5x with snappy; no dictionary (rows are nearly all distinct,
#: and hashing them cost more than it saved: 0.041 s against 0.067 s to read 1M slices' args).
_ARGS_WRITE = {**_WRITE, "compression": "snappy", "use_dictionary": False}


def categories_of(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Each categorical column's categories and ordered flag, for the header."""
    return {
        c: {
            "categories": df[c].cat.categories.tolist(),
            "dtype": str(df[c].cat.categories.dtype),
            "ordered": bool(df[c].cat.ordered),
        }
        for c in df.columns
        if isinstance(df[c].dtype, pd.CategoricalDtype)
    }


#: Tables whose row position is an id other tables refer to, stored as an ``id`` column.
_ID_TABLES = frozenset({"slices"})


def arrow_table(name: str, df: pd.DataFrame, ids: bool = True) -> pa.Table:
    """Model table ``name`` as Arrow, as it is stored and queried (with ``id`` where the
    row position is an id, unless ``ids`` is false)."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    if ids and name in _ID_TABLES:
        table = table.add_column(0, "id", pa.array(np.arange(len(df), dtype=np.int64)))
    return table


#: Table formats and their file suffixes.
TABLE_FORMATS: dict[str, str] = {"parquet": ".parquet", "arrow": ".arrow"}


def encode_table(
    name: str, df: pd.DataFrame, sink: pa.NativeFile, table_format: str = "parquet"
) -> None:
    """Write model table ``name`` to ``sink`` in ``table_format`` (see the module docstring)."""
    # Only Explorer reads the cache's Arrow files: no ``id`` column to write, map and drop.
    table = arrow_table(name, df, ids=table_format == "parquet")
    if table_format == "arrow":
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    else:
        pq.write_table(table, sink, row_group_size=max(len(df), 1), **_WRITE)


def decode_table(
    name: str,
    data: bytes | memoryview,
    categories: dict[str, dict[str, Any]],
    table_format: str = "parquet",
) -> pd.DataFrame:
    """The model table :func:`encode_table` wrote, categories restored exactly."""
    buf = pa.py_buffer(data)
    if table_format == "arrow":
        table = pa.ipc.open_file(buf).read_all()  # zero-copy over the mapped file
    else:
        table = pq.ParquetFile(pa.BufferReader(buf)).read()
    if table_format == "parquet" and name in _ID_TABLES:
        table = table.drop_columns(["id"])
    # split_blocks: each numeric column a read-only view of the mapped file rather than a
    # copy (a 10M-slice trace's slices opened with ~40 MB of memory instead of ~650 MB).
    df = table.to_pandas(split_blocks=table_format == "arrow")
    for col, cat in categories.items():
        values = pd.Index(cat["categories"], dtype=cat["dtype"])
        want = pd.CategoricalDtype(values, ordered=cat["ordered"])
        if df[col].dtype != want or df[col].cat.categories.dtype != values.dtype:
            df[col] = df[col].astype(want)
    return df


#: Slices per args batch (an Arrow record batch, a Parquet row group): what one slice's args
#: read from an entry costs at most (~5 MB of JSON for real traces' ~80 bytes per slice), and
#: what writing an entry holds of a trace's args at a time.
ARGS_BATCH = 1 << 16

#: The args table's columns: slice ids and each slice's args JSON, in slice order.
ARGS_SCHEMA = pa.schema([("slice_id", pa.int64()), ("json", pa.large_binary())])


def args_batches(
    store: ArgsStore | None, n_slices: int, size: int = ARGS_BATCH
) -> Iterator[pa.RecordBatch]:
    """The slices' raw args as record batches of ``size`` slices (``slice_id``, ``json``),
    each copied from the store on its own: never a second copy of all args at once."""
    has_args = store is not None and len(store) == n_slices
    for lo in range(0, n_slices, size):
        hi = min(lo + size, n_slices)
        # Built in the yield itself: a local would keep the batch alive (the generator's
        # frame) after the caller is done with it, until the next batch is made.
        yield pa.record_batch(
            [
                pa.array(np.arange(lo, hi, dtype=np.int64)),
                store.slice_rows(lo, hi)
                if has_args and store is not None
                else pa.array([b"{}"] * (hi - lo), pa.large_binary()),
            ],
            schema=ARGS_SCHEMA,
        )


def args_table(store: ArgsStore | None, n_slices: int) -> pa.Table:
    """The slices' raw args as one table: ``slice_id``, ``json`` (one row per slice)."""
    return pa.Table.from_batches(list(args_batches(store, n_slices)), ARGS_SCHEMA)


#: The args file of each table format: Arrow IPC (mapped on reopen) or Parquet.
ARGS_FILES: dict[str, str] = {"parquet": "args.parquet", "arrow": "args.arrow"}


def encode_args(
    store: ArgsStore | None, n_slices: int, sink: pa.NativeFile, table_format: str = "parquet"
) -> None:
    """Write the slices' args to ``sink`` in ``table_format``, :data:`ARGS_BATCH` slices at a
    time (each a record batch, or a Parquet row group).

    Each batch is a copy of its slices' args (:meth:`ArgsStore.slice_rows`, which lets go of
    the pages of a mapped spill file as it copies them), written, then given back: Arrow's
    allocator would otherwise keep the largest batches' memory until the process ends (at
    1M events ~40 MB on top of the tables, at the peak of a first load)."""
    pool = pa.default_memory_pool()
    if table_format == "arrow":
        with pa.ipc.new_file(sink, ARGS_SCHEMA) as writer:
            for batch in args_batches(store, n_slices):
                writer.write_batch(batch)
                del batch
                pool.release_unused()
        return
    with pq.ParquetWriter(sink, ARGS_SCHEMA, **_ARGS_WRITE) as pwriter:
        for batch in args_batches(store, n_slices):
            pwriter.write_batch(batch, row_group_size=ARGS_BATCH)
            del batch
            pool.release_unused()


class _ArrowArgs:
    """An Arrow IPC args file mapped in memory: batch ``k`` is a view, nothing decoded."""

    def __init__(self, data: memoryview) -> None:
        self._reader = pa.ipc.open_file(pa.py_buffer(data))
        self.schema = self._reader.schema
        self.sizes = [
            self._reader.get_batch(k).num_rows for k in range(self._reader.num_record_batches)
        ]
        self.n, self.size = sum(self.sizes), ARGS_BATCH

    def batch(self, k: int) -> pa.Array:
        return self._reader.get_batch(k).column(1)


class _ParquetArgs:
    """A Parquet args file (mapped): row group ``k`` decoded when first read, the last
    few decoded kept."""

    _KEEP = 4

    def __init__(self, data: memoryview) -> None:
        self._file = pq.ParquetFile(pa.BufferReader(pa.py_buffer(data)))
        self.schema = self._file.schema_arrow
        meta = self._file.metadata
        self.sizes = [meta.row_group(k).num_rows for k in range(meta.num_row_groups)]
        self.n, self.size = sum(self.sizes), ARGS_BATCH
        self._decoded: dict[int, pa.Array] = {}

    def batch(self, k: int) -> pa.Array:
        column = self._decoded.get(k)
        if column is None:
            column = self._file.read_row_group(k, columns=["json"]).column(0).combine_chunks()
            kept = dict(list(self._decoded.items())[-(self._KEEP - 1) :])
            kept[k] = column
            self._decoded = kept  # replaced whole: readers on other threads see either
        return column


def open_args(data: memoryview, table_format: str) -> ArgsStore:
    """The :class:`ArgsStore` over an args file :func:`encode_args` wrote (its bytes mapped
    and verified): checks its layout, decodes nothing. Raises ``pa.ArrowException`` or
    ``ValueError`` when the file is not what the writer makes."""
    batches = _ArrowArgs(data) if table_format == "arrow" else _ParquetArgs(data)
    if not batches.schema.equals(ARGS_SCHEMA) or any(s != ARGS_BATCH for s in batches.sizes[:-1]):
        raise ValueError("the args file's layout is not the store's")
    return ArgsStore(batches=batches)

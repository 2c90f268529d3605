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
    df = table.to_pandas()
    for col, cat in categories.items():
        values = pd.Index(cat["categories"], dtype=cat["dtype"])
        want = pd.CategoricalDtype(values, ordered=cat["ordered"])
        if df[col].dtype != want or df[col].cat.categories.dtype != values.dtype:
            df[col] = df[col].astype(want)
    return df


def args_table(store: ArgsStore | None, n_slices: int) -> pa.Table:
    """The slices' raw args as a table: ``slice_id``, ``json`` (one row per slice)."""
    if store is None or len(store) == 0:
        column = pa.array([b"{}"] * n_slices, pa.large_binary())
    else:
        blob, offsets, index = store.arrays()
        rows = pa.Array.from_buffers(
            pa.large_binary(),
            len(offsets) - 1,
            [None, pa.py_buffer(np.ascontiguousarray(offsets, np.int64)), pa.py_buffer(blob)],
        )
        column = rows.take(pa.array(np.asarray(index, np.int64)))
    return pa.table({"slice_id": np.arange(len(column), dtype=np.int64), "json": column})


def encode_args(store: ArgsStore | None, n_slices: int, sink: pa.NativeFile) -> None:
    """Write :func:`args_table` to ``sink`` as Parquet."""
    pq.write_table(args_table(store, n_slices), sink, **_ARGS_WRITE)


def decode_args(data: bytes) -> tuple[bytes, np.ndarray, np.ndarray]:
    """``(blob, offsets, index)`` for an :class:`ArgsStore` from the bytes :func:`encode_args`
    wrote."""
    table = pq.ParquetFile(pa.BufferReader(data)).read(columns=["json"])
    column = table.column("json").combine_chunks()
    n = len(column)
    if n == 0:
        return b"", np.zeros(1, np.int64), np.zeros(0, np.int64)
    _, offsets_buf, data_buf = column.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64, count=n + 1, offset=column.offset * 8)
    blob = data_buf.to_pybytes() if data_buf is not None else b""
    return blob, offsets.copy(), np.arange(n, dtype=np.int64)

"""Tables to Parquet bytes and back, exactly: same columns, dtypes and categories.

Parquet because it is the one columnar format every tool reads (DuckDB queries the files in
place, pandas/polars/Spark open them), it keeps categorical columns dictionary-encoded, and a
1M-slice table decodes in tens of milliseconds. Pandas categoricals go through Arrow
dictionaries; their category list and order are also kept in the header and restored on
read, so a category no row uses, or a different order, never changes a dtype.

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
import pyarrow.parquet as pq

from explorer.trace.args_store import ArgsStore

#: Parquet options: dictionary pages for repeated values, uncompressed pages (decoding
#: speed over size: a cached reopen is read far more often than it is written), page CRCs.
_WRITE = {"compression": "none", "write_page_checksum": True, "write_statistics": True}
_ARGS_WRITE = {**_WRITE, "compression": "snappy"}  # JSON text shrinks ~6x; read lazily


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


def arrow_table(name: str, df: pd.DataFrame) -> pa.Table:
    """Model table ``name`` as Arrow, as it is stored and queried (with ``id`` where the
    row position is an id)."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    if name in _ID_TABLES:
        table = table.add_column(0, "id", pa.array(np.arange(len(df), dtype=np.int64)))
    return table


def encode_table(name: str, df: pd.DataFrame) -> bytes:
    """Model table ``name`` as Parquet file bytes."""
    sink = pa.BufferOutputStream()
    pq.write_table(arrow_table(name, df), sink, row_group_size=max(len(df), 1), **_WRITE)
    return sink.getvalue().to_pybytes()


def decode_table(
    name: str, data: bytes | memoryview, categories: dict[str, dict[str, Any]]
) -> pd.DataFrame:
    """The model table written by :func:`encode_table`, categories restored exactly."""
    table = pq.ParquetFile(pa.BufferReader(pa.py_buffer(data))).read()
    if name in _ID_TABLES:
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


def encode_args(store: ArgsStore | None, n_slices: int) -> bytes:
    """:func:`args_table` as Parquet bytes."""
    sink = pa.BufferOutputStream()
    pq.write_table(args_table(store, n_slices), sink, **_ARGS_WRITE)
    return sink.getvalue().to_pybytes()


def decode_args(data: bytes) -> tuple[bytes, np.ndarray, np.ndarray]:
    """``(blob, offsets, index)`` for an :class:`ArgsStore` from :func:`encode_args` bytes."""
    table = pq.ParquetFile(pa.BufferReader(data)).read(columns=["json"])
    column = table.column("json").combine_chunks()
    n = len(column)
    if n == 0:
        return b"", np.zeros(1, np.int64), np.zeros(0, np.int64)
    _, offsets_buf, data_buf = column.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64, count=n + 1, offset=column.offset * 8)
    blob = data_buf.to_pybytes() if data_buf is not None else b""
    return blob, offsets.copy(), np.arange(n, dtype=np.int64)

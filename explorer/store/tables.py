"""Tables to Parquet bytes and back, exactly: same columns, dtypes and categories.

Parquet because it is the one columnar format every tool reads (DuckDB queries the files in
place, pandas/polars/Spark open them), it keeps categorical columns dictionary-encoded, and a
1M-slice table decodes in tens of milliseconds. Pandas categoricals go through Arrow
dictionaries; their category list and order are also kept in the header and restored on
read, so a category no row uses, or a different order, never changes a dtype.

The slices' args become one table, ``args``, with a binary ``json`` column in slice order
(row ``i`` is slice ``i``'s args exactly as the trace file had them), which DuckDB can also
query with its JSON functions.
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


def encode_table(df: pd.DataFrame) -> bytes:
    """``df`` (index dropped; ids are row positions) as Parquet file bytes."""
    sink = pa.BufferOutputStream()
    table = pa.Table.from_pandas(df, preserve_index=False)
    pq.write_table(table, sink, row_group_size=max(len(df), 1), **_WRITE)
    return sink.getvalue().to_pybytes()


def decode_table(data: bytes, categories: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """The DataFrame written by :func:`encode_table`, categories restored exactly."""
    df = pq.read_table(pa.BufferReader(data)).to_pandas()
    for col, cat in categories.items():
        values = pd.Index(cat["categories"], dtype=cat["dtype"])
        want = pd.CategoricalDtype(values, ordered=cat["ordered"])
        if df[col].dtype != want or df[col].cat.categories.dtype != values.dtype:
            df[col] = df[col].astype(want)
    return df


def encode_args(store: ArgsStore | None, n_slices: int) -> bytes:
    """The slices' raw args as Parquet bytes: one ``json`` row per slice, in slice order."""
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
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"json": column}), sink, **_ARGS_WRITE)
    return sink.getvalue().to_pybytes()


def decode_args(data: bytes) -> tuple[bytes, np.ndarray, np.ndarray]:
    """``(blob, offsets, index)`` for an :class:`ArgsStore` from :func:`encode_args` bytes."""
    column = pq.read_table(pa.BufferReader(data)).column("json").combine_chunks()
    n = len(column)
    if n == 0:
        return b"", np.zeros(1, np.int64), np.zeros(0, np.int64)
    _, offsets_buf, data_buf = column.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64, count=n + 1, offset=column.offset * 8)
    blob = data_buf.to_pybytes() if data_buf is not None else b""
    return blob, offsets.copy(), np.arange(n, dtype=np.int64)

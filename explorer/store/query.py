"""SQL over a trace's tables with DuckDB: in memory (a loaded model) or in place (Parquet
files of store entries, never loaded into pandas first).

:func:`connect` makes a DuckDB connection where each name is a table or view; the model's
tables are exposed as they are stored (``slices`` with its ``id`` column, ``args`` with
``slice_id`` and ``json``). Categorical columns read as text. :func:`run` turns a DuckDB
error (bad SQL, unknown table or column) into one :class:`QueryError` line.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeAlias

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from explorer.errors import ExplorerError
from explorer.store.entry import OPTIONAL_TABLES, TABLES
from explorer.store.header import HEADER, StoreDamaged, map_checked, read_header
from explorer.store.tables import ARGS_FILES, TABLE_FORMATS, args_table, arrow_table
from explorer.trace.model import TraceData

#: What a name can stand for: rows in memory, or Parquet files read in place.
Source: TypeAlias = (
    pd.DataFrame | pa.Table | str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
)


class QueryError(ExplorerError):
    """SQL that DuckDB cannot run over these tables; the message is one line."""


def model_tables(model: TraceData, names: Iterable[str] | None = None) -> dict[str, pa.Table]:
    """The model's tables as SQL sees them (``args`` decoded only when asked for).
    ``names`` limits them to those (unknown names are ignored)."""
    wanted = set(TABLES) | {"args"} if names is None else set(names)
    try:
        out = {t: arrow_table(t, getattr(model, t)) for t in TABLES if t in wanted}
        if "args" in wanted:
            args = args_table(model.args_store, len(model.slices))
            out["args"] = args.set_column(1, "json", args.column("json").cast(pa.large_string()))
    except MemoryError:
        raise QueryError(_NO_MEMORY) from None
    return out


def entry_tables(
    directory: str | os.PathLike[str], names: Iterable[str] | None = None
) -> dict[str, Source]:
    """The model's tables of the store entry at ``directory`` as SQL sees them (as
    :func:`model_tables` gives them), read in place rather than loaded: Parquet files as
    DuckDB views, Arrow IPC files memory-mapped and scanned with nothing decoded or copied
    (but the ``id`` column of an Arrow entry's ``slices``, which it does not store).
    Every file used is verified against the header first (:class:`StoreDamaged`).
    ``names`` limits them to those (unknown names are ignored)."""
    d = Path(directory)
    header = read_header(d)
    table_format = header.get("table_format")
    stored = header.get("tables")
    if table_format not in TABLE_FORMATS or not isinstance(stored, list):
        raise StoreDamaged(d, f"{HEADER} is incomplete")
    wanted = {*TABLES, *OPTIONAL_TABLES, "args"} if names is None else set(names)
    files = {t: t + TABLE_FORMATS[table_format] for t in stored if t in wanted}
    if "args" in wanted:
        files["args"] = ARGS_FILES[table_format]
    mapped = {t: map_checked(d, header, f) for t, f in files.items()}
    if table_format == "parquet":
        return {t: d / f for t, f in files.items()}
    try:
        out: dict[str, Source] = {
            t: pa.ipc.open_file(pa.py_buffer(m)).read_all() for t, m in mapped.items()
        }
    except MemoryError:  # Arrow's too: the process's limit, not damage
        raise
    except pa.ArrowException as exc:
        raise StoreDamaged(d, f"a table does not decode ({exc})") from exc
    if "slices" in out:
        slices = out["slices"]
        assert isinstance(slices, pa.Table)
        ids = pa.array(np.arange(slices.num_rows, dtype=np.int64))
        out["slices"] = slices.add_column(0, "id", ids)
    return out


#: Views over tables that are not as SQL shows them: the args' JSON is text.
_AS_TEXT = {"args": "SELECT slice_id, decode(json) AS json FROM {}"}


#: What a query that runs out of memory says (Arrow's and numpy's errors are MemoryErrors).
_NO_MEMORY = (
    "SQL: not enough memory for this query's tables in this process (free memory, or raise "
    "the process's memory limit)"
)


def referenced_tables(sql: str) -> set[str]:
    """The table names ``sql`` refers to (so costly tables are built only when used);
    :class:`QueryError` when it is not a query (:func:`check_query`), before anything is
    loaded."""
    check_query(sql)
    try:
        return {n.lower() for n in duckdb.get_table_names(sql)}
    except duckdb.Error as exc:
        raise QueryError(_one_line(exc)) from exc


#: The statements SQL over a trace may be: reads of its tables.
_QUERIES = frozenset({"SELECT", "EXPLAIN"})


def check_query(sql: str) -> None:
    """:class:`QueryError` unless every statement of ``sql`` is a query (``SELECT``,
    ``WITH``, ``DESCRIBE``, ``EXPLAIN``...). DuckDB would also run ``COPY ... TO`` — which
    overwrote the very trace queried when given its path —, ``EXPORT``, ``ATTACH``,
    ``INSTALL``, ``SET`` (a profiling output file): nothing a user captured is written over
    by a query, and a result is saved from its output instead."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(_one_line(exc)) from exc
    for statement in statements:
        kind = statement.type.name
        if kind not in _QUERIES:
            raise QueryError(
                f"SQL: only queries run over a trace (SELECT, WITH, DESCRIBE...), not {kind}: "
                "a query never writes a file; save a result with "
                "'explorer sql --format csv TRACE QUERY > FILE', or from the DataFrame "
                "it returns"
            )


def connect(tables: Mapping[str, Source]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection where each of ``tables`` is a table or view: a
    DataFrame or Arrow table is scanned in place, a path (or list of paths, e.g. one per
    rank) to Parquet files becomes a view over them."""
    con = duckdb.connect(":memory:")
    for name, src in tables.items():
        if isinstance(src, (pd.DataFrame, pa.Table)):
            as_text = name in _AS_TEXT and pa.types.is_large_binary(_json_type(src))
            con.register("_raw_" + name if as_text else name, src)
            if as_text:
                con.execute(
                    f"CREATE VIEW {_ident(name)} AS "
                    + _AS_TEXT[name].format(_ident("_raw_" + name))
                )
            continue
        paths = [src] if isinstance(src, (str, os.PathLike)) else list(src)
        files = ", ".join(_quote(os.fspath(p)) for p in paths)
        scan = f"read_parquet([{files}], union_by_name=true)"
        select = _AS_TEXT[name].format(scan) if name in _AS_TEXT else f"SELECT * FROM {scan}"
        con.execute(f"CREATE VIEW {_ident(name)} AS {select}")
    return con


def _json_type(src: pd.DataFrame | pa.Table) -> pa.DataType:
    """The type of an args table's ``json`` column (text when it has none)."""
    if isinstance(src, pa.Table) and "json" in src.column_names:
        return src.schema.field("json").type
    return pa.large_string()


def run(con: duckdb.DuckDBPyConnection, sql: str) -> pd.DataFrame:
    """The result of ``sql`` as a DataFrame; :class:`QueryError` when it cannot run, or is
    not a query (:func:`check_query`)."""
    check_query(sql)
    try:
        rel = con.sql(sql)
        if rel is None:  # a statement that returns nothing
            return pd.DataFrame()
        wide = [c for c, t in zip(rel.columns, rel.types, strict=True) if str(t) == "HUGEINT"]
        if wide:  # sum() of int64 is 128-bit; nanosecond totals fit int64, keep them exact
            rel = rel.project(
                ", ".join(
                    f"CAST({_ident(c)} AS BIGINT) AS {_ident(c)}" if c in wide else _ident(c)
                    for c in rel.columns
                )
            )
        return rel.df()
    except duckdb.Error as exc:
        raise QueryError(_one_line(exc)) from exc
    except MemoryError:
        raise QueryError(_NO_MEMORY) from None


def _one_line(exc: duckdb.Error) -> str:
    lines = [
        ln.strip() for ln in str(exc).splitlines() if ln.strip() and not ln.strip().startswith("^")
    ]
    return "SQL: " + " ".join(lines)


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _ident(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'

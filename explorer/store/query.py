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
from typing import TypeAlias

import duckdb
import pandas as pd
import pyarrow as pa

from explorer.errors import ExplorerError
from explorer.store.entry import TABLES
from explorer.store.tables import args_table, arrow_table
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


#: What a query that runs out of memory says (Arrow's and numpy's errors are MemoryErrors).
_NO_MEMORY = (
    "SQL: not enough memory for this query's tables in this process (free memory, or raise "
    "the process's memory limit)"
)


def referenced_tables(sql: str) -> set[str]:
    """The table names ``sql`` refers to (so costly tables are built only when used)."""
    try:
        return {n.lower() for n in duckdb.get_table_names(sql)}
    except duckdb.Error as exc:
        raise QueryError(_one_line(exc)) from exc


def connect(tables: Mapping[str, Source]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection where each of ``tables`` is a table or view: a
    DataFrame or Arrow table is scanned in place, a path (or list of paths, e.g. one per
    rank) to Parquet files becomes a view over them."""
    con = duckdb.connect(":memory:")
    for name, src in tables.items():
        if isinstance(src, (pd.DataFrame, pa.Table)):
            con.register(name, src)
            continue
        paths = [src] if isinstance(src, (str, os.PathLike)) else list(src)
        files = ", ".join(_quote(os.fspath(p)) for p in paths)
        con.execute(
            f"CREATE VIEW {_ident(name)} AS SELECT * FROM read_parquet([{files}], union_by_name=true)"
        )
    return con


def run(con: duckdb.DuckDBPyConnection, sql: str) -> pd.DataFrame:
    """The result of ``sql`` as a DataFrame; :class:`QueryError` when it cannot run."""
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

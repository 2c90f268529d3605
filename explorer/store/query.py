"""SQL over a trace's tables with DuckDB: in memory (a loaded model) or in place (Parquet
files of store entries, never loaded into pandas first).

:func:`connect` makes a DuckDB connection where each name is a table or view; the model's
tables are exposed as they are stored (``slices`` with its ``id`` column, ``args`` with
``slice_id`` and ``json``). Categorical columns read as text. :func:`run` turns a DuckDB
error (bad SQL, unknown table or column) into one :class:`QueryError` line.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from explorer.errors import ExplorerError
from explorer.store.entry import OPTIONAL_TABLES, TABLES, open_header
from explorer.store.header import HEADER, StoreDamaged, map_checked
from explorer.store.tables import ARGS_FILES, TABLE_FORMATS, args_table, arrow_table
from explorer.trace.model import TraceData

if TYPE_CHECKING:  # imported where used: pyarrow.dataset starts thread pools on import
    import pyarrow.dataset as pads

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
    d, header, table_format = open_header(directory)
    stored = header.get("tables")
    if not isinstance(stored, list):
        raise StoreDamaged(d, f"{HEADER} lists no tables")
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
    :class:`QueryError` when it is not one query (:func:`check_query`), before anything is
    loaded."""
    check_query(sql)
    try:
        # On a locked connection of its own: ``duckdb.get_table_names`` on the default one
        # expands a file glob it names — ``read_parquet('/**/*.parquet')`` walked the whole
        # file system for seconds (and read file headers) before the query was refused.
        return {n.lower() for n in _locked(duckdb.connect(":memory:")).get_table_names(sql)}
    except duckdb.PermissionException as exc:
        raise QueryError(_refused(exc)) from None
    except duckdb.Error as exc:
        raise QueryError(_one_line(exc)) from exc


def _locked(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """``con`` with DuckDB's access to files turned off and its configuration locked."""
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def _refused(exc: duckdb.PermissionException) -> str:
    """What a query that tried to read or write a file or change a setting is told."""
    return (
        "SQL: a query reads only the trace's tables: no file is read or written, no "
        f"setting changed ({_one_line(exc).removeprefix('SQL: ')})"
    )


#: The statements SQL over a trace may be: reads of its tables.
_QUERIES = frozenset({"SELECT", "EXPLAIN"})

#: How long a query may run and how many rows it may return unless told otherwise (the
#: CLI's ``--timeout`` and ``--max-rows``; 0 or None is no limit).
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_ROWS = 1_000_000


def check_query(sql: str) -> None:
    """:class:`QueryError` unless ``sql`` is exactly one query (``SELECT``, ``WITH``,
    ``DESCRIBE``, ``EXPLAIN``...), as DuckDB's own parser reads it. This is for the message:
    what makes a query unable to write or read a file, or change the connection, is
    :func:`connect` (DuckDB's external access off and its configuration locked before any
    user text runs): ``EXPLAIN ANALYZE COPY ... TO`` is an ``EXPLAIN`` here, and is refused
    there."""
    bad = next((i for i, c in enumerate(sql) if 0xD800 <= ord(c) <= 0xDFFF), None)
    if bad is not None:  # a lone surrogate (undecodable bytes in argv): DuckDB's TypeError
        raise QueryError(
            f"SQL: the query is not valid text: character {bad} is not Unicode "
            "(bytes that are not UTF-8?)"
        )
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(_one_line(exc)) from exc
    if not statements:
        raise QueryError("SQL: the query is empty")
    if len(statements) > 1:
        raise QueryError(
            f"SQL: one statement at a time, this is {len(statements)} (separated by ';')"
        )
    kind = statements[0].type.name
    if kind not in _QUERIES:
        raise QueryError(
            f"SQL: only queries run over a trace (SELECT, WITH, DESCRIBE...), not {kind}: "
            "a query never writes a file; save a result with "
            "'explorer sql --format csv TRACE QUERY > FILE', or from the DataFrame "
            "it returns"
        )


def connect(
    tables: Mapping[str, Source], *, threads: int | None = None
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection where each of ``tables`` is a table or view: a
    DataFrame or Arrow table is scanned in place, a path (or list of paths, e.g. one per
    rank) to Parquet files becomes an Arrow dataset over them (scanned in place too, only
    the columns a query uses). Then, before anything else runs on it, DuckDB's access to
    files is turned off (``enable_external_access``) and its configuration locked: nothing
    run on the connection reads or writes a file, loads an extension or changes a setting
    (``threads``, when given, is set before the lock)."""
    con = duckdb.connect(":memory:", config={"threads": threads} if threads else {})
    for name, src in tables.items():
        if not isinstance(src, (pd.DataFrame, pa.Table)):
            paths = [src] if isinstance(src, (str, os.PathLike)) else list(src)
            src = _parquet_dataset(paths)
        as_text = name in _AS_TEXT and pa.types.is_large_binary(_json_type(src))
        con.register("_raw_" + name if as_text else name, src)
        if as_text:
            con.execute(
                f"CREATE VIEW {_ident(name)} AS " + _AS_TEXT[name].format(_ident("_raw_" + name))
            )
    return _locked(con)


def _parquet_dataset(paths: Sequence[str | os.PathLike[str]]) -> pads.Dataset:
    """The Parquet files ``paths`` as one Arrow dataset, their columns by name (a column
    missing from a file is null there)."""
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    files = [os.fspath(p) for p in paths]
    try:
        schema = pa.unify_schemas([pq.read_schema(f) for f in files], promote_options="permissive")
        return pads.dataset(files, schema=schema, format="parquet")
    except MemoryError:
        raise QueryError(_NO_MEMORY) from None
    except (OSError, pa.ArrowException) as exc:
        raise QueryError(f"SQL: a table's Parquet file does not read ({exc})") from exc


def _json_type(src: pd.DataFrame | pa.Table | pads.Dataset) -> pa.DataType:
    """The type of an args table's ``json`` column (text when it has none)."""
    if not isinstance(src, pd.DataFrame) and "json" in src.schema.names:
        return src.schema.field("json").type
    return pa.large_string()


def run(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    *,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    max_rows: int | None = DEFAULT_MAX_ROWS,
    stuck: Callable[[str], object] | None = None,
) -> pd.DataFrame:
    """The result of ``sql`` as a DataFrame; :class:`QueryError` when it cannot run, is
    not one query (:func:`check_query`), runs past ``timeout`` seconds (it is interrupted)
    or returns more than ``max_rows`` rows (no more than ``max_rows + 1`` are fetched).
    A ``timeout`` or ``max_rows`` of None or 0 is no limit.

    DuckDB sees an interrupt between chunks of rows only: one expression over a chunk (a
    ``repeat`` of gigabytes per row) can run on for minutes. When it has not stopped
    :data:`STUCK_GRACE_S` after the interrupt, ``stuck`` is called (from another thread)
    with the time limit's message: the CLI ends the process there."""
    check_query(sql)
    done = threading.Event()
    watch = None
    if timeout:
        watch = threading.Thread(
            target=_watch, args=(con, timeout, done, stuck), name="sql-timeout", daemon=True
        )
        watch.start()
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
        if max_rows:
            rel = rel.limit(max_rows + 1)
        df = rel.df()
    except duckdb.InterruptException:
        raise QueryError(_timed_out(timeout or 0)) from None
    except duckdb.PermissionException as exc:
        raise QueryError(_refused(exc)) from None
    except duckdb.Error as exc:
        raise QueryError(_one_line(exc)) from exc
    except MemoryError:
        raise QueryError(_NO_MEMORY) from None
    finally:
        done.set()
        if watch is not None:  # and gone: a thread left at exit aborts the process
            watch.join()
    if max_rows and len(df) > max_rows:
        raise QueryError(
            f"SQL: the result has more than {max_rows} rows (add a LIMIT, or raise the limit "
            "with --max-rows N, or max_rows=; 0 is none)"
        )
    return df


#: How long a query may go on after its interrupt before it is taken to be stuck.
STUCK_GRACE_S = 5.0


def _watch(
    con: duckdb.DuckDBPyConnection,
    timeout: float,
    done: threading.Event,
    stuck: Callable[[str], object] | None,
) -> None:
    if done.wait(timeout):
        return
    con.interrupt()
    if not done.wait(STUCK_GRACE_S) and stuck is not None:
        stuck(_timed_out(timeout))


def _timed_out(timeout: float) -> str:
    return (
        f"SQL: the query ran past its time limit of {timeout:g} s and was stopped "
        "(raise it with --timeout SECONDS, or timeout=; 0 is none)"
    )


def _one_line(exc: duckdb.Error) -> str:
    lines = [
        ln.strip() for ln in str(exc).splitlines() if ln.strip() and not ln.strip().startswith("^")
    ]
    return "SQL: " + " ".join(lines)


def _ident(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'

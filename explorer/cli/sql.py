"""``explorer sql TRACE_OR_STORE "SELECT ..."``: SQL over a trace's tables with DuckDB.

Tables: ``slices`` (with ``id``), ``tracks``, ``flows``, ``counters``, ``instants``,
``memory``, ``args`` (``slice_id``, ``json``), ``steps``, ``findings`` and ``breakdown``
(``step, device, category, ns``); the last three are computed only when the query names
them, or read back from the trace's stored results (:mod:`explorer.store.results`).
``TRACE_OR_STORE`` is a trace (read through the cache) or a store entry directory written
by :func:`explorer.store.write_trace`. When the trace's store entry is up to date, a query
that names none of those three reads the entry's files in place (only the columns it
uses), never loading the trace.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from explorer.analysis.breakdown import breakdown
from explorer.analysis.findings import findings
from explorer.analysis.steps import steps
from explorer.cli import options
from explorer.cli.load_warnings import print_load_warnings, print_warnings
from explorer.cli.progress import terminal_progress
from explorer.readers import read
from explorer.store import open_trace, results
from explorer.store.cache import cached_entry
from explorer.store.entry import entry_warnings, is_entry
from explorer.store.header import read_header
from explorer.store.query import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    connect,
    entry_tables,
    model_tables,
    referenced_tables,
)
from explorer.store.query import run as run_sql
from explorer.trace.model import TraceData

FORMATS = ("table", "csv", "json")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = options.verb_parser(
        sub,
        "sql",
        "query a trace's tables with SQL (DuckDB): slices, tracks, flows, steps, findings...",
        """Run one SQL query (DuckDB dialect) over the trace's tables: slices (id, ts, dur,
        name, kind, track, parent...), tracks, flows, counters, instants, memory, args
        (slice_id, json), steps, findings, breakdown. Times are int64 nanoseconds.""",
    )
    options.add_trace_input(p, "trace file or directory, or a store entry directory")
    p.add_argument("query", help='the SQL, e.g. "SELECT name, sum(dur) FROM slices GROUP BY 1"')
    p.add_argument("--format", "-f", choices=FORMATS, default="table", help="output format")
    p.add_argument(
        "--store", metavar="DIR", default=None, help="keep the trace's cache entry in DIR"
    )
    _add_limit(p, "--timeout", float, "SECONDS", DEFAULT_TIMEOUT_S, "stop a query that runs longer")
    _add_limit(p, "--max-rows", int, "N", DEFAULT_MAX_ROWS, "refuse a result of more rows")
    return p


def _add_limit(
    p: argparse.ArgumentParser,
    flag: str,
    kind: type[int] | type[float],
    metavar: str,
    default: float,
    what: str,
) -> None:
    """A limit option of the query: a number of 0 or more, where 0 is no limit."""
    shown = f"{default:g}" if kind is float else str(default)
    p.add_argument(
        flag,
        type=options.non_negative(kind),
        metavar=metavar,
        default=default,
        help=f"{what} (default {shown}; 0: no limit)",
    )


def analysis_tables(model: TraceData, names: set[str]) -> dict[str, pa.Table | pd.DataFrame]:
    """``steps``, ``findings`` and ``breakdown`` as tables, each computed only when named
    (or read from the store's results, :mod:`explorer.store.results`, when stored)."""
    out: dict[str, pa.Table | pd.DataFrame] = {}
    if "steps" in names:
        out["steps"] = steps(model)
    if "findings" in names:
        out["findings"] = findings_table(findings(model))
    if "breakdown" in names:
        out["breakdown"] = breakdown(model).astype({"category": str})
    return out


def findings_table(found: list[Any]) -> pa.Table:
    """One row per finding, in rank order; the top source line as columns."""
    dicts = [f.to_dict() for f in found]
    top = [d["source_lines"][0] if d["source_lines"] else {} for d in dicts]
    ints = pa.list_(pa.int64())
    return pa.table(
        {
            "id": pa.array(np.arange(len(dicts)), pa.int64()),
            "kind": pa.array([d["kind"] for d in dicts], pa.string()),
            "title": pa.array([d["title"] for d in dicts], pa.string()),
            "time_lost_ns": pa.array([d["time_lost_ns"] for d in dicts], pa.int64()),
            "share": pa.array([d["share"] for d in dicts], pa.float64()),
            "device": pa.array([d["device"] for d in dicts], pa.string()),
            "file": pa.array([t.get("file", "") for t in top], pa.string()),
            "line": pa.array([t.get("line", -1) for t in top], pa.int64()),
            "function": pa.array([t.get("function", "") for t in top], pa.string()),
            "steps": pa.array([d["steps"] for d in dicts], ints),
            "evidence": pa.array([d["evidence"] for d in dicts], ints),
            "explanation": pa.array([d["explanation"] for d in dicts], pa.string()),
            "recommendation": pa.array([d["recommendation"] for d in dicts], pa.string()),
        }
    )


def query_trace(
    model: TraceData,
    sql: str,
    *,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    max_rows: int | None = DEFAULT_MAX_ROWS,
    stuck: Callable[[str], object] | None = None,
) -> pd.DataFrame:
    """The result of ``sql`` over ``model``'s tables (see the module docstring): one query,
    stopped after ``timeout`` seconds, refused past ``max_rows`` rows (None or 0: no limit),
    and unable to read or write any file (:func:`explorer.store.query.connect`)."""
    names = referenced_tables(sql)
    tables: dict[str, Any] = {**model_tables(model, names), **analysis_tables(model, names)}
    return run_sql(connect(tables), sql, timeout=timeout, max_rows=max_rows, stuck=stuck)


def render(df: pd.DataFrame, fmt: str) -> str:
    """A result as an aligned table, CSV or JSON (a list of row objects)."""
    if fmt == "csv":
        return df.to_csv(index=False)
    if fmt == "json":
        rows = json.loads(df.to_json(orient="records", date_format="iso", default_handler=str))
        return json.dumps(rows, indent=1) + "\n"
    if df.empty:
        return " | ".join(map(str, df.columns)) + "\n(0 rows)\n"
    return df.to_string(index=False) + f"\n({len(df)} rows)\n"


def run(args: argparse.Namespace) -> int:
    path = Path(args.trace)
    entry = stored_entry(path, use_cache=not args.no_cache, store=args.store)
    names = referenced_tables(args.query)
    if entry is not None and not names & ANALYSIS_TABLES:
        # The entry's files queried in place: nothing loaded into pandas, only the columns
        # the query reads are touched (what lets a 10M-slice trace be queried in 2 GB).
        print_warnings(entry_warnings(entry))
        result = run_sql(
            connect(entry_tables(entry, names)),
            args.query,
            timeout=args.timeout,
            max_rows=args.max_rows,
            stuck=end_process,
        )
    else:
        if entry is not None:
            model = open_trace(entry)
            results.attach(model, entry, read_header(entry))  # steps, findings: stored
        else:
            model = read(
                path,
                use_cache=not args.no_cache,
                store=args.store,
                progress=terminal_progress(source=path),
            )
        print_load_warnings(model)
        result = query_trace(
            model, args.query, timeout=args.timeout, max_rows=args.max_rows, stuck=end_process
        )
    sys.stdout.write(render(result, args.format))
    return 0


def end_process(message: str) -> None:
    """A query that did not stop when interrupted: the process ends with ``message``, as
    any error ends it (one line, exit status 2)."""
    sys.stderr.write(f"explorer: error: {message}\n")
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(2)


#: Tables computed from the loaded model rather than read from the store.
ANALYSIS_TABLES = frozenset({"steps", "findings", "breakdown"})


def stored_entry(path: Path, *, use_cache: bool, store: str | None) -> Path | None:
    """The store entry to query for ``path``: ``path`` itself when it is one, else the
    cache's entry of the trace file ``path`` when it is up to date; None otherwise."""
    if is_entry(path):
        return path
    if use_cache and path.is_file():
        return cached_entry(path, root=Path(store) if store else None)
    return None

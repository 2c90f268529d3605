"""``explorer sql`` cannot escape the trace, by construction: the connection's file access
is off and its configuration locked before any user text runs (not a list of words), one
statement at a time, under a time limit and a row limit. Each hostile query is refused in
one line with a non-zero exit, on the CLI and through the Python API, and nothing on disk
changes: the trace, its cache entry and the directory around it keep their bytes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from explorer import store
from explorer.cli.sql import query_trace
from explorer.readers import read as load_trace
from explorer.store.query import QueryError, connect, referenced_tables, run
from tests.conftest import ROOT, SAMPLE_TRACES

TRACE = SAMPLE_TRACES / "cpu_slow_dataloader.pt.trace.json.gz"

#: Queries that read or write a file outside the trace's tables, or change the connection.
ESCAPES = [
    "EXPLAIN ANALYZE COPY (SELECT 'x') TO '{trace}' (FORMAT csv)",
    "EXPLAIN ANALYZE COPY (SELECT 1 AS a) TO '{dir}/out.parquet' (FORMAT parquet)",
    "COPY (SELECT 'x') TO '{trace}' (FORMAT csv)",
    "EXPORT DATABASE '{dir}/db'",
    "ATTACH '{dir}/x.duckdb'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "RESET lock_configuration",
    "PRAGMA profiling_output = '{dir}/p.json'",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_blob('/etc/passwd')",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_json_auto('{trace}')",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM read_parquet('/**/*.parquet')",
    "SELECT * FROM '/etc/passwd'",
    "WITH x AS (SELECT * FROM read_text('/etc/hostname')) SELECT * FROM x",
    "SELECT count(*) FROM slices; COPY (SELECT 1) TO '{dir}/two.csv'",
]


def _tree(d: Path) -> dict[str, str]:
    """Every file under ``d`` and its hash: what a query must leave alone."""
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
        if p.is_file()
    }


def _cli(*args: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "explorer", "sql", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), "EXPLORER_CACHE_DIR": str(cache)},
        timeout=120,
    )


def _one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, (out.returncode, out.stdout[-500:], out.stderr[-2000:])
    assert out.stdout == "" and len(out.stderr.splitlines()) == 1, out.stderr
    assert out.stderr.startswith("explorer: error: SQL: "), out.stderr
    return out.stderr


@pytest.fixture(scope="module")
def model():
    return load_trace(TRACE)


@pytest.mark.parametrize("template", ESCAPES)
def test_no_query_reads_or_writes_a_file_through_the_api(model, tmp_path: Path, template) -> None:
    trace = tmp_path / "T.json"
    trace.write_bytes(b"{}")
    before = _tree(tmp_path)
    with pytest.raises(QueryError) as err:
        query_trace(model, template.format(trace=trace, dir=tmp_path))
    assert "\n" not in str(err.value) and str(err.value).startswith("SQL: ")
    assert "root:" not in str(err.value)  # nothing of /etc/passwd in the message
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("template", [t for t in ESCAPES if "read_" in t or "glob(" in t])
def test_naming_a_querys_tables_reads_no_file(tmp_path: Path, template: str) -> None:
    """Which tables a query uses is found before any is built — and that pass is locked
    too. On DuckDB's default connection it expanded the file globs a query names
    (``read_parquet('/**/*.parquet')`` walked the whole file system for seconds, reading
    the headers of what it found) and said the query used no table."""
    (tmp_path / "x.parquet").write_bytes(b"PAR1")
    sql = template.format(trace=tmp_path / "T.json", dir=tmp_path)
    with pytest.raises(QueryError) as err:
        referenced_tables(sql)
    assert str(err.value).startswith("SQL: a query reads only the trace's tables"), err.value


def test_no_query_escapes_on_the_cli(tmp_path: Path) -> None:
    """As the issue ran it: relative paths, from the trace's directory, on a trace whose
    cache entry is up to date (the tables read in place) and with ``--no-cache``."""
    trace = tmp_path / "T.json.gz"
    trace.write_bytes(TRACE.read_bytes())
    cache = tmp_path / "cache"
    assert _cli(str(trace), "SELECT 1", cwd=tmp_path, cache=cache).returncode == 0
    before = _tree(tmp_path)
    for template in ESCAPES[:3] + ESCAPES[10:16]:
        sql = template.format(trace="T.json.gz", dir=".")
        for extra in ((), ("--no-cache",)):
            err = _one_line_error(_cli(str(trace), sql, *extra, cwd=tmp_path, cache=cache))
            assert "Traceback" not in err
    assert _tree(tmp_path) == before


def test_a_store_entry_read_in_place_is_locked_too(model, tmp_path: Path) -> None:
    """Parquet files are scanned as Arrow datasets, not DuckDB file reads: the query reads
    the entry's tables, and no file (the entry's own included) can be read or written by
    name."""
    entry = store.write_trace(model, tmp_path / "entry")
    paths = store.table_paths(entry)
    con = connect({"slices": paths["slices"]})
    assert int(run(con, "SELECT count(*) AS n FROM slices")["n"].iat[0]) == len(model)
    before = _tree(tmp_path)
    for sql in (
        f"SELECT count(*) FROM read_parquet('{paths['slices']}')",
        f"EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{paths['slices']}' (FORMAT parquet)",
    ):
        with pytest.raises(QueryError, match="reads only the trace's tables"):
            run(con, sql)
    assert _tree(tmp_path) == before
    assert int(run(con, "SELECT count(*) AS n FROM slices")["n"].iat[0]) == len(model)


def test_one_statement_and_valid_text(model) -> None:
    for sql, says in (
        ("SELECT 1; SELECT 2", "one statement at a time"),
        ("", "empty"),
        ("  -- nothing\n", "empty"),
        ("SELECT '\udc80'", "not valid text"),  # a lone surrogate: undecodable argv bytes
        ("SELECT 1 AS \ud800x FROM slices", "not valid text"),
    ):
        with pytest.raises(QueryError, match=says) as err:
            query_trace(model, sql)
        assert "\n" not in str(err.value)


def test_the_row_limit_stops_a_huge_result(model) -> None:
    with pytest.raises(QueryError, match=r"more than 1000 rows.*--max-rows") as err:
        query_trace(model, "SELECT * FROM range(200000000)", max_rows=1000)
    assert "\n" not in str(err.value)
    # At the limit exactly it is the result; None lifts it.
    assert len(query_trace(model, "SELECT * FROM range(1000)", max_rows=1000)) == 1000
    n = len(model)
    assert len(query_trace(model, "SELECT id FROM slices", max_rows=n)) == n
    with pytest.raises(QueryError, match="more than"):
        query_trace(model, "SELECT id FROM slices", max_rows=n - 1)
    assert len(query_trace(model, "SELECT * FROM range(1500)", max_rows=None)) == 1500


@pytest.mark.parametrize(
    "sql",
    [
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
        "SELECT count(*) FROM range(100000000000)",
        "SELECT sum(a.range * b.range) FROM range(1000000) a, range(1000000) b",
    ],
)
def test_the_time_limit_stops_a_query_that_never_ends(model, sql) -> None:
    with pytest.raises(QueryError, match=r"time limit of 1 s.*--timeout") as err:
        query_trace(model, sql, timeout=1)
    assert "\n" not in str(err.value)


def test_limits_on_the_cli(tmp_path: Path) -> None:
    trace = str(TRACE)
    cache = tmp_path / "cache"
    err = _one_line_error(_cli(trace, "SELECT * FROM range(200000000)", cwd=tmp_path, cache=cache))
    assert "more than 1000000 rows" in err and "--max-rows" in err
    recursive = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM r) SELECT max(n) FROM r"
    err = _one_line_error(_cli(trace, recursive, "--timeout", "1", cwd=tmp_path, cache=cache))
    assert "time limit of 1 s" in err and "--timeout" in err
    # A huge string: stopped by the time limit, not run until killed.
    err = _one_line_error(
        _cli(
            trace,
            "SELECT length(repeat('x', 100000000 + range)) FROM range(1000)",
            "--timeout",
            "1",
            cwd=tmp_path,
            cache=cache,
        )
    )
    assert "time limit" in err
    out = _cli(
        trace, "SELECT * FROM range(5)", "--max-rows", "5", "-f", "csv", cwd=tmp_path, cache=cache
    )
    assert out.returncode == 0 and out.stdout.split() == ["range", "0", "1", "2", "3", "4"]
    for bad in (("--timeout", "-1"), ("--max-rows", "x"), ("--timeout", "nan")):
        out = _cli(trace, "SELECT 1", *bad, cwd=tmp_path, cache=cache)
        assert out.returncode == 2 and "Traceback" not in out.stderr and bad[0] in out.stderr


def test_every_result_type_renders_in_every_format(model) -> None:
    """A UUID went to pandas' JSON writer as an object it read raw memory of (invalid
    UTF-8, a traceback); every DuckDB type a query can return renders."""
    import json

    from explorer.cli.sql import render

    df = query_trace(
        model,
        "SELECT uuid() AS u, [uuid()] AS l, INTERVAL 3 DAY AS i, DATE '2020-01-02' AS d, "
        "{'a': 1} AS s, 'x'::BLOB AS b, 1.5::DECIMAL(38, 10) AS dec, 'nan'::DOUBLE AS n, "
        "18446744073709551615::UBIGINT AS big",
    )
    (row,) = json.loads(render(df, "json"))
    assert len(row["u"]) == 36 and row["u"].count("-") == 4
    for fmt in ("table", "csv"):
        assert str(row["u"]) in render(df, fmt)

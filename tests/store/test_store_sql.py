"""``explorer sql``: DuckDB over a trace's tables, checked against pandas computations on
the same tables, on the CLI as a user runs it, and over store files in place."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from explorer import store
from explorer.cli.sql import query_trace
from explorer.readers import read as load_trace
from explorer.store.query import QueryError, connect, run
from tests.conftest import ROOT, SAMPLE_TRACES

TRACES = [
    SAMPLE_TRACES / f"{n}.pt.trace.json.gz" for n in ("cpu_slow_dataloader", "cpu_transformer")
]


@pytest.fixture(scope="module", params=TRACES, ids=lambda p: p.name)
def model(request: pytest.FixtureRequest):
    return load_trace(request.param)


def test_group_by_kind(model) -> None:
    got = query_trace(
        model,
        "SELECT kind, count(*) AS n, sum(dur) AS total FROM slices GROUP BY kind ORDER BY kind",
    )
    s = model.slices.assign(kind=model.slices["kind"].astype(str))
    want = s.groupby("kind").agg(n=("dur", "size"), total=("dur", "sum")).reset_index()
    assert got["kind"].tolist() == want["kind"].tolist()
    assert got["n"].tolist() == want["n"].tolist()
    assert got["total"].tolist() == want["total"].tolist() and got["total"].dtype == np.int64


def test_join_tracks_parents_and_flows(model) -> None:
    s, t, f = model.slices, model.tracks, model.flows
    got = query_trace(
        model,
        "SELECT t.label, sum(s.dur) AS busy FROM slices s JOIN tracks t ON s.track = t.id "
        "WHERE s.depth = 0 GROUP BY t.label ORDER BY t.label",
    )
    top = s[s["depth"] == 0]
    want = top.groupby(t["label"].to_numpy()[top["track"].to_numpy()])["dur"].sum().sort_index()
    assert got["label"].tolist() == want.index.tolist() and got["busy"].tolist() == want.tolist()

    got = query_trace(
        model,
        "SELECT p.name AS parent, count(*) AS n FROM slices c JOIN slices p ON c.parent = p.id "
        "GROUP BY p.name ORDER BY n DESC, parent LIMIT 5",
    )
    child = s[s["parent"] >= 0]
    names = s["name"].astype(str).to_numpy()[child["parent"].to_numpy()]
    want = pd.Series(names).value_counts()
    want = want.reset_index().sort_values(["count", "index"], ascending=[False, True]).head(5)
    assert (
        got["parent"].tolist() == want["index"].tolist()
        and got["n"].tolist() == want["count"].tolist()
    )

    got = query_trace(
        model,
        "SELECT a.name AS src, b.name AS dst FROM flows f JOIN slices a ON a.id = f.src "
        "JOIN slices b ON b.id = f.dst ORDER BY f.src, f.dst",
    )
    order = f.sort_values(["src", "dst"])
    assert got["src"].tolist() == names_of(s, order["src"]) and got["dst"].tolist() == names_of(
        s, order["dst"]
    )


def names_of(slices: pd.DataFrame, ids: pd.Series) -> list[str]:
    return slices["name"].astype(str).to_numpy()[ids.to_numpy()].tolist()


def test_steps_match_the_profiler_step_annotations(model) -> None:
    got = query_trace(model, "SELECT step, dur_ns FROM steps ORDER BY step")
    s = model.slices
    names = s["name"].astype(str)
    mask = names.str.fullmatch(r"ProfilerStep#\d+") & (s["kind"] == "annotation")
    want = s[mask].assign(step=names[mask].str.removeprefix("ProfilerStep#").astype(int))
    want = want.sort_values("step")
    assert (
        got["step"].tolist() == want["step"].tolist()
        and got["dur_ns"].tolist() == want["dur"].tolist()
    )


def test_findings_and_their_evidence(model) -> None:
    from explorer.analysis.findings import findings

    found = findings(model)
    got = query_trace(
        model, "SELECT kind, time_lost_ns, len(evidence) AS n FROM findings ORDER BY id"
    )
    assert got["kind"].tolist() == [f.kind for f in found]
    assert got["time_lost_ns"].tolist() == [f.time_lost_ns for f in found]
    assert got["n"].tolist() == [len(f.evidence) for f in found]
    # Evidence ids join to slices: each one is a real slice.
    (joined,) = query_trace(
        model,
        "SELECT count(*) FROM (SELECT unnest(evidence) AS e FROM findings) JOIN slices ON id = e",
    ).iloc[0]
    assert joined == sum(len(f.evidence) for f in found)


def test_args_json_matches_the_decoded_args(model) -> None:
    got = query_trace(
        model, """SELECT slice_id, json->>'$."External id"' AS ext FROM args ORDER BY slice_id"""
    )
    want = [model.args(i).get("External id") for i in range(len(model))]
    assert got["slice_id"].tolist() == list(range(len(model)))
    assert [None if pd.isna(v) else int(v) for v in got["ext"]] == want
    assert sum(v is not None for v in want) > 100


def test_parquet_files_of_two_entries_as_one_view(tmp_path: Path) -> None:
    a, b = (load_trace(p) for p in TRACES)
    paths = [
        store.table_paths(store.write_trace(m, tmp_path / f"rank-{i}"))["slices"]
        for i, m in enumerate((a, b))
    ]
    got = run(connect({"slices": paths}), "SELECT count(*) AS n, sum(dur) AS d FROM slices")
    assert got["n"].iat[0] == len(a) + len(b)
    assert got["d"].iat[0] == int(a.slices["dur"].sum() + b.slices["dur"].sum())


def test_bad_sql_is_a_query_error(model) -> None:
    for sql in ("SELEC 1", "SELECT nope FROM slices", "SELECT * FROM no_such_table"):
        with pytest.raises(QueryError) as err:
            query_trace(model, sql)
        assert "\n" not in str(err.value)


def _cli(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "explorer", "sql", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "EXPLORER_CACHE_DIR": str(cache)},
    )


def test_cli_formats_store_option_and_errors(tmp_path: Path) -> None:
    trace = str(TRACES[0])
    m = load_trace(TRACES[0])
    sql = "SELECT name, count(*) AS n, sum(dur) AS total FROM slices GROUP BY name ORDER BY total DESC, name"
    want = (
        m.slices.assign(name=m.slices["name"].astype(str))
        .groupby("name")
        .agg(n=("dur", "size"), total=("dur", "sum"))
        .reset_index()
        .sort_values(["total", "name"], ascending=[False, True])
        .reset_index(drop=True)
    )
    store_dir = tmp_path / "mystore"
    out = _cli(trace, sql, "--format", "csv", "--store", str(store_dir), cache=tmp_path / "cache")
    assert out.returncode == 0, out.stderr
    pd.testing.assert_frame_equal(pd.read_csv(io.StringIO(out.stdout)), want, check_dtype=False)
    (entry,) = store_dir.iterdir()  # --store put the entry there, not in the cache dir
    assert not (tmp_path / "cache").exists()

    out = _cli(str(entry), sql, "-f", "json", cache=tmp_path / "cache")  # a store entry directly
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == want.to_dict("records")

    out = _cli(str(entry), "SELECT count(*) AS n FROM slices", cache=tmp_path / "cache")
    assert re.search(rf"^\s*n\s*\n\s*{len(m)}\s*\n\(1 rows\)", out.stdout), out.stdout

    for bad in ("SELEC * FROM slices", "SELECT x FROM slices", "SELECT * FROM nowhere"):
        out = _cli(trace, bad, cache=tmp_path / "cache")
        assert out.returncode == 2 and out.stdout == ""
        assert out.stderr.startswith("explorer: error: SQL: ") and len(out.stderr.splitlines()) == 1
    out = _cli(str(tmp_path / "missing.json"), "SELECT 1", cache=tmp_path / "cache")
    assert (
        out.returncode == 2 and len(out.stderr.splitlines()) == 1 and "missing.json" in out.stderr
    )


def test_a_query_never_writes_a_file(model, tmp_path: Path) -> None:
    """Only queries run (DuckDB would run ``COPY ... TO`` too: given the trace's own path it
    overwrote the trace): every statement that writes a file or changes the connection is
    refused in one line, and nothing is written; every kind of query still runs."""
    target = tmp_path / "out.csv"
    for sql in (
        f"COPY (SELECT * FROM slices) TO '{target}' (FORMAT csv)",
        f"EXPORT DATABASE '{tmp_path / 'db'}'",
        f"ATTACH '{tmp_path / 'x.duckdb'}'",
        "CREATE TABLE t AS SELECT * FROM slices",
        "SET threads = 1",
        f"PRAGMA profiling_output = '{tmp_path / 'profile.json'}'",
        "INSTALL httpfs",
    ):
        with pytest.raises(QueryError) as err:
            query_trace(model, sql)
        assert "only queries run" in str(err.value) and "\n" not in str(err.value), sql
    assert list(tmp_path.iterdir()) == []
    n = len(model.slices)
    for sql in (
        "SELECT count(*) AS n FROM slices",
        "WITH s AS (SELECT * FROM slices) SELECT count(*) AS n FROM s",
        "SUMMARIZE SELECT dur FROM slices",
        "DESCRIBE slices",
        "EXPLAIN SELECT * FROM slices",
    ):
        assert len(query_trace(model, sql)) > 0, sql
    assert int(query_trace(model, "SELECT count(*) AS n FROM slices")["n"][0]) == n


def test_copy_to_the_trace_itself_leaves_it_whole_on_the_cli(tmp_path: Path) -> None:
    trace = tmp_path / TRACES[0].name
    trace.write_bytes(TRACES[0].read_bytes())
    out = _cli(
        str(trace),
        f"COPY (SELECT 1 AS x) TO '{trace}' (FORMAT csv)",
        cache=tmp_path / "cache",
    )
    assert out.returncode == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1
    assert out.stderr.startswith("explorer: error: SQL: only queries run over a trace")
    assert trace.read_bytes() == TRACES[0].read_bytes()

"""The store gives back exactly what was written: every table with its dtypes and
categories, the metadata, every slice's raw args — on every real trace we have."""

from __future__ import annotations

import os
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from explorer import store
from explorer.errors import ExplorerError
from explorer.readers import read as load_trace
from explorer.trace.model import TraceData
from tests.conftest import SAMPLE_TRACES, shared_trace_files

REAL_TRACES = sorted(SAMPLE_TRACES.glob("*.json.gz")) + shared_trace_files()


def assert_same_model(a: TraceData, b: TraceData) -> None:
    """Tables equal value for value with identical dtypes (categories and their order
    included), same metadata, same raw args bytes for every slice."""
    for name in store.TABLES:
        x, y = getattr(a, name), getattr(b, name)
        pd.testing.assert_frame_equal(x.reset_index(drop=True), y, check_exact=True)
        for col in x.columns:
            assert x[col].dtype == y[col].dtype, (name, col)
            if isinstance(x[col].dtype, pd.CategoricalDtype):
                assert list(x[col].cat.categories) == list(y[col].cat.categories), (name, col)
                assert x[col].cat.categories.dtype == y[col].cat.categories.dtype, (name, col)
    assert a.metadata == b.metadata
    assert [a.args_store.raw(i) for i in range(len(a))] == [
        b.args_store.raw(i) for i in range(len(b))
    ]


@pytest.mark.slow
@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: p.name)
def test_every_real_trace_round_trips_exactly(path: Path, tmp_path: Path) -> None:
    model = load_trace(path, use_cache=False)
    for table_format in ("parquet", "arrow"):
        entry = store.write_trace(model, tmp_path / table_format, table_format=table_format)
        assert_same_model(model, store.open_trace(entry))


def test_categories_keep_order_unused_values_and_ordered_flag(tmp_path: Path) -> None:
    model = load_trace(SAMPLE_TRACES / "cpu_slow_dataloader.pt.trace.json.gz", use_cache=False)
    names = model.slices["name"].cat
    reordered = names.reorder_categories(list(names.categories[::-1]))
    model.slices["name"] = reordered.cat.add_categories(["never used"]).cat.as_ordered()
    model.slices["cat"] = model.slices["cat"].cat.add_categories(["unused, and first"])
    model.slices["cat"] = model.slices["cat"].cat.reorder_categories(
        ["unused, and first", *model.slices["cat"].cat.categories[:-1]]
    )
    back = store.open_trace(store.write_trace(model, tmp_path / "e"))
    assert_same_model(model, back)
    assert (
        back.slices["name"].cat.ordered and back.slices["name"].cat.categories[-1] == "never used"
    )


def test_duckdb_reads_the_table_files_in_place(tmp_path: Path) -> None:
    model = load_trace(SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz", use_cache=False)
    paths = store.table_paths(store.write_trace(model, tmp_path / "e"))
    assert set(paths) == {*store.TABLES, "args"}
    got = duckdb.sql(
        f"SELECT kind, count(*) AS n, sum(dur)::BIGINT AS dur FROM read_parquet('{paths['slices']}')"
        " GROUP BY kind ORDER BY kind"
    ).df()
    want = (
        model.slices.assign(kind=model.slices["kind"].astype(str))
        .groupby("kind")
        .agg(n=("dur", "size"), dur=("dur", "sum"))
        .reset_index()
    )
    assert got["kind"].tolist() == want["kind"].tolist()
    assert got["n"].tolist() == want["n"].tolist() and got["dur"].tolist() == want["dur"].tolist()
    ids = duckdb.sql(f"SELECT id FROM read_parquet('{paths['slices']}')").df()["id"].to_numpy()
    assert np.array_equal(ids, np.arange(len(model.slices)))
    i = int(np.flatnonzero(model.slices["kind"] == "cpu_op")[0])
    (raw,) = duckdb.sql(
        f"SELECT json FROM read_parquet('{paths['args']}') WHERE slice_id = {i}"
    ).fetchall()[0]
    assert raw == model.args_store.raw(i)


def test_write_refuses_to_replace_what_is_not_an_entry(tmp_path: Path) -> None:
    model = load_trace(SAMPLE_TRACES / "cpu_compile_graph_break.pt.trace.json.gz", use_cache=False)
    mine = tmp_path / "my_runs"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    with pytest.raises(ExplorerError, match="not an Explorer store entry"):
        store.write_trace(model, mine)
    assert (mine / "notes.txt").read_text() == "precious"
    entry = store.write_trace(model, tmp_path / "entry")
    store.write_trace(model, entry)  # an entry is replaced whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry", "my_runs"]  # no temp left


def test_a_killed_writers_leftovers_are_removed_later(tmp_path: Path) -> None:
    model = load_trace(SAMPLE_TRACES / "cpu_compile_graph_break.pt.trace.json.gz", use_cache=False)
    old, recent = tmp_path / ".e.abc.writing", tmp_path / ".e.def.writing"
    for d in (old, recent):
        d.mkdir()
        (d / "slices.parquet").write_bytes(b"half")
    stale = time.time() - store.entry.STALE_TEMPORARY_S - 10
    os.utime(old, (stale, stale))
    store.write_trace(model, tmp_path / "e")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".e.def.writing",
        "e",
    ]  # another writer's may still be running


def test_extra_tables_live_in_the_entry_and_join_across_entries(tmp_path: Path) -> None:
    """What a job store does: each rank's model plus its analysis tables in one entry,
    then one SQL view over every rank's file."""
    from explorer.analysis.steps import steps
    from explorer.store.query import connect, run

    dirs = []
    for rank, name in enumerate(("cpu_slow_dataloader", "cpu_cnn")):
        model = load_trace(SAMPLE_TRACES / f"{name}.pt.trace.json.gz", use_cache=False)
        st = steps(model).assign(rank=rank, name=lambda d: pd.Categorical(d["name"]))
        dirs.append(store.write_trace(model, tmp_path / f"rank-{rank}", extra_tables={"steps": st}))
        back = store.read_table(dirs[-1], "steps")
        pd.testing.assert_frame_equal(back, st.reset_index(drop=True), check_exact=True)
        assert_same_model(model, store.open_trace(dirs[-1]))
    con = connect({"steps": [store.table_paths(d)["steps"] for d in dirs]})
    got = run(
        con,
        "SELECT rank, count(*) AS n, sum(dur_ns) AS total FROM steps GROUP BY rank ORDER BY rank",
    )
    want = [
        steps(load_trace(SAMPLE_TRACES / f"{n}.pt.trace.json.gz"))
        for n in ("cpu_slow_dataloader", "cpu_cnn")
    ]
    assert got["n"].tolist() == [len(w) for w in want]
    assert got["total"].tolist() == [int(w["dur_ns"].sum()) for w in want]
    with pytest.raises(ValueError, match="model's own"):
        store.write_trace(
            store.open_trace(dirs[0]),
            tmp_path / "x",
            extra_tables={"slices": st},
        )


def test_metadata_that_json_would_change_is_refused(tmp_path: Path) -> None:
    model = load_trace(SAMPLE_TRACES / "cpu_compile_graph_break.pt.trace.json.gz", use_cache=False)
    for bad in ((1, 2), {3: "int key"}):
        model.metadata["odd"] = bad
        with pytest.raises(ExplorerError, match="does not survive JSON"):
            store.write_trace(model, tmp_path / "e")
    assert not (tmp_path / "e").exists()

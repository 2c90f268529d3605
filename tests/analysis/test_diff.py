"""The trace diff on a real before/after pair, across devices (CUDA vs MTIA), on synthetic
scenario pairs with known injected changes, and through the ``explorer diff`` command."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import explorer
from explorer import scenarios
from explorer.analysis.diff import diff
from explorer.cli.main import main
from explorer.report.diff_render import render_diff

BASE = "trace_compare__base__base.json.gz"
TEST = "trace_compare__test__test.json.gz"


def test_real_pair_names_the_added_ops_and_the_dropped_kernel(shared_traces: Path) -> None:
    a, b = explorer.load(shared_traces / BASE), explorer.load(shared_traces / TEST)
    d = explorer.diff(a, b)
    added = d.ops[d.ops["status"] == "added"]
    assert set(added["name"]) == {"All2All_Pooled_Req", "AddmmBackward0", "CatBackward0"}
    assert (d.ops[d.ops["status"] == "removed"]).empty
    # Each added op's time per step is its total over the 2 steps of b, halved.
    s = b.slices
    total = int(s.loc[s["name"] == "AddmmBackward0", "dur"].sum())
    row = added[added["name"] == "AddmmBackward0"].iloc[0]
    assert row["b_ns_per_step"] == round(total / 2) and row["delta_ns"] == row["b_ns_per_step"]
    k = d.kernels[d.kernels["status"] == "changed"]
    assert len(k) == 1 and (k["a_count"].iat[0], k["b_count"].iat[0]) == (3, 2)
    # Biggest change first; deltas are b - a.
    assert np.all(np.diff(np.abs(d.ops["delta_ns"].to_numpy())) <= 0)
    assert (d.ops["delta_ns"] == d.ops["b_ns_per_step"] - d.ops["a_ns_per_step"]).all()
    # Breakdown medians per category partition the median step the same way on both sides.
    assert list(d.breakdown["category"]) == [
        "compute",
        "data_movement",
        "communication",
        "host_bound",
        "sync_stall",
        "compile",
        "other_idle",
    ]
    assert (d.breakdown["delta_ns"] == d.breakdown["b_ns"] - d.breakdown["a_ns"]).all()
    # b's last step launches a kernel that b does not hold (a runs it 52 ms later): the
    # profiler stopped before the device ran it, so that step is partial and the step
    # time is over b's whole step alone
    assert d.steps["steps"].tolist() == [2, 1] and not d.cross_device
    assert d.steps["partial_steps"].tolist() == [0, 1]
    assert any(n.startswith("b: step 1010 is partial") for n in d.notes)


def test_a_trace_against_itself_changes_nothing(shared_traces: Path) -> None:
    a = explorer.load(shared_traces / BASE)
    d = diff(a, a)
    assert d.step_delta_ns == 0
    for table in (d.ops, d.kernels, d.lines):
        assert (table["status"] == "same").all() and (table["delta_ns"] == 0).all()
    assert (d.breakdown["delta_ns"] == 0).all()
    assert d.notes[0] == "Median step time unchanged."


def test_cuda_against_mtia_compares_operators(shared_traces: Path) -> None:
    a = explorer.load(
        shared_traces / "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"
    )
    b = explorer.load(shared_traces / "mtia_inference_trace__mtia_inference_rank_0.json.gz")
    d = diff(a, b)
    assert d.cross_device
    assert any(x.startswith("cuda") for x in d.devices[0]) and any(
        x.startswith("mtia") for x in d.devices[1]
    )
    assert "different devices" in " ".join(d.notes)
    # Kernel names share nothing across backends; operators do.
    assert not (d.kernels["status"] == "changed").any()
    shared_ops = d.ops[d.ops["status"].isin(["changed", "same"])]
    assert len(shared_ops) > 0 and shared_ops["name"].str.startswith("aten::").all()
    text = render_diff(d, "text")
    assert "different devices" in text


def test_injected_sync_storm_shows_up_as_an_appeared_finding(tmp_path: Path) -> None:
    # synthetic: the scenario generator's clean run against the same run with .item() syncs
    a = explorer.load(scenarios.write("clean", tmp_path / "clean.json", steps=4))
    b = explorer.load(scenarios.write("sync_storm", tmp_path / "storm.json", steps=4))
    d = diff(a, b)
    assert d.synthetic and any("SYNTHETIC" in n for n in d.notes)
    f = d.findings.set_index("kind")
    assert f.loc["sync_stall", "status"] == "appeared"
    assert f.loc["sync_stall", "a_time_lost_ns"] == 0 and f.loc["sync_stall", "b_time_lost_ns"] > 0
    sync_row = d.breakdown.set_index("category").loc["sync_stall"]
    assert sync_row["b_ns"] > sync_row["a_ns"]
    assert d.step_delta_ns > 0
    lines = d.lines
    assert ((lines["function"] == "check_finite") & (lines["status"] == "added")).any()


@pytest.mark.parametrize("fmt", ["text", "markdown", "json", "html"])
def test_cli_writes_every_format(shared_traces: Path, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"diff.{fmt}"
    rc = main(
        [
            "diff",
            str(shared_traces / BASE),
            str(shared_traces / TEST),
            "--format",
            fmt,
            "-o",
            str(out),
        ]
    )
    assert rc == 0
    body = out.read_text(encoding="utf-8")
    assert "All2All_Pooled_Req" in body
    if fmt == "json":
        doc = json.loads(body)
        assert {r["name"] for r in doc["ops"] if r["status"] == "added"} == {
            "All2All_Pooled_Req",
            "AddmmBackward0",
            "CatBackward0",
        }
    if fmt == "html":
        assert body.startswith("<!DOCTYPE html>") and "<script" not in body


def test_cli_reports_a_missing_trace_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["diff", str(tmp_path / "nope.json"), str(tmp_path / "nope2.json")])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("explorer: error:") and err.count("\n") == 1


def _collect_run(out: Path, workers: int) -> Path:
    """A real CPU training loop recorded by the collector, loading batches with
    ``num_workers`` worker processes."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(96, 32), torch.randn(96, 1))
    loader = DataLoader(data, batch_size=16, num_workers=workers)
    model = torch.nn.Linear(32, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with explorer.collect(out) as run:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            run.step()
    return Path(run.trace_path)


@pytest.mark.slow
def test_real_collector_pair_num_workers_0_vs_2(tmp_path: Path) -> None:
    a = explorer.load(_collect_run(tmp_path / "w0", 0))
    b = explorer.load(_collect_run(tmp_path / "w2", 2))
    d = diff(a, b)
    assert d.steps["steps"].tolist() == [len(a.steps()), len(b.steps())] and len(a.steps()) >= 3
    ops = d.ops.set_index("name")
    single = [n for n in ops.index if "_SingleProcessDataLoaderIter" in n]
    multi = [n for n in ops.index if "_MultiProcessingDataLoaderIter" in n]
    assert single and (ops.loc[single, "status"] == "removed").all()
    assert multi and (ops.loc[multi, "status"] == "added").all()
    # The model's own ops run in both and are compared, not added or removed.
    assert ops.loc["aten::linear", "status"] in ("changed", "same")
    assert ops.loc["aten::linear", "a_count"] == ops.loc["aten::linear", "b_count"]


def _python_run(
    frames: list[tuple[int, str, int, int]], steps: int, pure_python: tuple[int, ...] = ()
) -> explorer.Trace:
    """``steps`` steps of 100 µs, each running the user frames ``(line, function, start,
    dur)`` of /u/train.py, each with one op inside unless its line is in ``pure_python``.
    Synthetic."""
    from explorer.trace.build import trace_from_events

    host = {"pid": 1, "tid": 1}
    ev = []
    for n in range(steps):
        t0 = n * 100
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "ts": t0,
                   "dur": 100, **host})  # fmt: skip
        for line, fn, start, dur in frames:
            ev.append({"ph": "X", "cat": "python_function", "name": f"/u/train.py({line}): {fn}",
                       "ts": t0 + start, "dur": dur, **host})  # fmt: skip
            if line in pure_python:
                continue
            ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": t0 + start + 1,
                       "dur": dur - 2, **host})  # fmt: skip
    return explorer.Trace(trace_from_events(ev))


def test_source_lines_are_labelled_by_where_they_ran_and_counted_with_their_time() -> None:
    """Line 10 runs in both (the same per step, though b has twice the steps), 20 only in a,
    30 only in b, 40 in both but longer in b, 50 (Python only, no op) in a only: the labels
    follow from the input."""
    a = _python_run(
        [(10, "load", 0, 30), (20, "old", 30, 20), (40, "step", 50, 20), (50, "log", 80, 10)],
        steps=2,
        pure_python=(50,),
    )
    b = _python_run([(10, "load", 0, 30), (30, "new", 30, 10), (40, "step", 50, 40)], steps=4)
    lines = diff(a, b).lines.set_index("line")
    assert lines.loc[10, "status"] == "same"
    assert lines.loc[20, "status"] == "removed"
    assert lines.loc[30, "status"] == "added"
    assert lines.loc[40, "status"] == "changed"
    assert lines.loc[50, "status"] == "removed"
    assert lines.loc[50, ["a_count", "a_ns_per_step"]].tolist() == [2, 10_000]
    # each frame is entered once per step; time per step is the frame's own duration
    assert lines.loc[10, ["a_count", "b_count"]].tolist() == [2, 4]
    assert lines.loc[20, ["a_count", "b_count"]].tolist() == [2, 0]
    assert lines.loc[30, ["a_count", "b_count"]].tolist() == [0, 4]
    assert lines.loc[40, ["a_ns_per_step", "b_ns_per_step"]].tolist() == [20_000, 40_000]
    # a count without time, or time without a count, never shows
    for side in ("a", "b"):
        has_count = lines[f"{side}_count"] > 0
        has_time = lines[f"{side}_ns_per_step"] > 0
        assert (has_count == has_time).all(), side


def test_every_format_renders_the_diff_from_one_document(sample_traces: Path) -> None:
    """The diff is a report document like the others: every format lays out the same
    tables; the finding that went away is marked good, and the JSON is the diff's data."""
    from explorer.report import FORMATS

    a = explorer.load(sample_traces / "cpu_slow_dataloader.pt.trace.json.gz")
    b = explorer.load(sample_traces / "cpu_cnn.pt.trace.json.gz")
    d = diff(a.data, b.data)
    out = {fmt: render_diff(d, fmt) for fmt in FORMATS}
    assert json.loads(out["json"]) == json.loads(json.dumps(d.to_dict()))
    assert "<tr class='good'><td>disappeared</td><td>input_stall</td>" in out["html"]
    assert "| disappeared | input_stall |" in out["markdown"]
    assert re.search(r"^  disappeared +input_stall ", out["text"], flags=re.M)
    for fmt in ("text", "markdown", "html"):
        assert "Findings" in out[fmt] and "Operators (time per step)" in out[fmt]

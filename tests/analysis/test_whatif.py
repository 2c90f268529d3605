"""What-if replay (issue 30): nothing changed gives the recorded timeline back exactly on
every real trace; a change moves only what its dependencies let move; every finding of a
report carries the saving its fix predicts; the CLI says what a bad selector is in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import explorer
from explorer.analysis.classify import classes
from explorer.analysis.steps import attributed_steps
from explorer.analysis.whatif import replay_graph, replay_graph_of, what_if
from explorer.errors import UsageError
from tests.conftest import ROOT, SAMPLE_TRACES, shared_trace_files

SAMPLES = sorted(SAMPLE_TRACES.glob("*.pt.trace.json.gz"))
SLOW_LOADER = SAMPLE_TRACES / "cpu_slow_dataloader.pt.trace.json.gz"


def _check_identity(path: Path) -> None:
    trace = explorer.load(path).data
    graph = replay_graph_of(trace)
    ts, end = replay_graph(graph, np.ones(len(trace.slices)))
    assert graph.arrays is not None
    assert np.array_equal(ts, graph.arrays.ts) and np.array_equal(end, graph.arrays.end)
    # the steps as every verb counts them, through the public API
    name = str(trace.slices["name"].iloc[graph.nodes[0]]) if len(graph.nodes) else None
    if name is None:
        return
    result = what_if(trace, scale={name: 1.0}, path=False)
    att = attributed_steps(trace)
    assert (result.steps["before_ns"].to_numpy() == att["dur_ns"].to_numpy()).all()
    assert (result.steps["after_ns"].to_numpy() == att["dur_ns"].to_numpy()).all()


def _check_halved(path: Path) -> None:
    """Everything twice as fast: nothing later than recorded, no negative duration, each
    leaf on a host thread that waits for nothing exactly half as long, and no step shorter
    than half (the recorded idle lead time stays)."""
    trace = explorer.load(path).data
    graph = replay_graph_of(trace)
    a = graph.arrays
    assert a is not None
    ts, end = replay_graph(graph, np.full(len(trace.slices), 0.5))
    nodes = graph.nodes
    assert (ts[nodes] <= a.ts[nodes]).all() and (end[nodes] <= a.end[nodes]).all()
    assert (end - ts >= 0).all()
    e = graph.edges
    into_end = np.bincount(e["dst"].to_numpy()[e["dst_point"].to_numpy() == 1], minlength=a.n)
    whole = np.zeros(a.n, bool)  # its time is one duration edge, start -> end
    d = e[e["type"].to_numpy() == "duration"]
    whole[d["src"].to_numpy()[d["src"].to_numpy() == d["dst"].to_numpy()]] = True
    leaf = a.node & a.host & whole & (into_end == 1) & ~a.kind_in(("sync",))
    half = np.rint((a.end - a.ts) * 0.5)
    assert leaf.any()
    assert np.array_equal((end - ts)[leaf], half[leaf])


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name.split(".")[0])
def test_nothing_changed_is_the_recorded_timeline_on_every_sample_trace(path: Path) -> None:
    _check_identity(path)
    _check_halved(path)


def test_nothing_changed_is_the_recorded_timeline_on_every_shared_trace(
    shared_traces: Path,
) -> None:
    paths = shared_trace_files()
    assert paths
    for path in paths:
        _check_identity(path)


def test_removing_the_input_pipeline_of_a_cpu_run_saves_its_time_in_each_step() -> None:
    """One host thread, nothing overlaps: each step is shorter by exactly the time its
    thread spent in the data loader (the outermost input slices of the step)."""
    trace = explorer.load(SLOW_LOADER).data
    result = what_if(trace, remove=["input_stall"])
    inputs = classes(trace).input_root
    outer = inputs & ~_under(trace, inputs)
    ts = trace.slices["ts"].to_numpy()
    dur = trace.slices["dur"].to_numpy()
    att = attributed_steps(trace)
    for row, got in zip(att.itertuples(), result.steps.itertuples(), strict=True):
        inside = outer & (ts >= row.host_start_ns) & (ts < row.host_end_ns)
        assert inside.any()
        assert got.saving_ns == int(dur[inside].sum())
    assert result.saving_ns > 0.3 * int(att["dur_ns"].sum())
    assert result.path is not None and result.path.length_ns < int(att["dur_ns"].sum())


def _under(trace, mask: np.ndarray) -> np.ndarray:  # noqa: ANN001
    """Per slice: is some ancestor in ``mask``."""
    parent = trace.slices["parent"].to_numpy()
    up = np.zeros(len(mask), bool)
    has = parent >= 0
    up[has] = mask[parent[has]]
    return np.asarray(trace.inherit_down(up, keep=up | ~has))


def test_a_finding_of_the_report_carries_its_predicted_saving_and_they_rank_it() -> None:
    from explorer.report import document

    trace = explorer.load(SLOW_LOADER).data
    doc = document(trace)
    found = doc["findings"]
    assert found
    assert all("predicted_saving_ns" in f for f in found)
    saved = [f["predicted_saving_ns"] for f in found]
    assert saved == sorted(saved, reverse=True)
    stall = next(f for f in found if f["kind"] == "input_stall")
    # on a CPU trace the loader's time is the step's: its fix saves it all
    assert stall["predicted_saving_ns"] == what_if(trace, remove=["input_stall"]).saving_ns
    assert abs(stall["predicted_saving_ns"] - stall["time_lost_ns"]) <= 0.05 * stall["time_lost_ns"]


def test_selectors_that_name_nothing_are_usage_errors() -> None:
    trace = explorer.load(SLOW_LOADER).data
    with pytest.raises(UsageError, match="no slice has that name"):
        what_if(trace, remove=["aten::not_an_op"])
    with pytest.raises(UsageError, match="no device work on that stream"):
        what_if(trace, scale={"stream 7": 0.5})
    with pytest.raises(UsageError, match="speed-ups only"):
        what_if(trace, scale={"aten::mm": 2.0})
    with pytest.raises(UsageError, match="no memcpy stall"):
        what_if(trace, remove=["memcpy_stall"])


def test_scaling_a_stream_speeds_up_device_work_on_a_gpu_trace(shared_traces: Path) -> None:
    trace = explorer.load(
        shared_traces / "critical_path__cuda_event_sync__event_sync_trace.json.gz"
    ).data
    streams = trace.slices["stream"].to_numpy()[trace.on_device()]
    stream = int(np.bincount(streams[streams >= 0]).argmax())
    result = what_if(trace, scale={f"stream {stream}": 0.5})
    assert (result.steps["after_ns"] <= result.steps["before_ns"]).all()
    assert result.saving_ns > 0
    on = trace.on_device() & (trace.slices["stream"].to_numpy() == stream)
    before = trace.slices["dur"].to_numpy()[on]
    assert np.array_equal((result.end - result.ts)[on], np.rint(before * 0.5).astype(int))


def _explorer(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "explorer", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), "EXPLORER_CACHE_DIR": str(cwd / "cache")},
        timeout=300,
    )


def test_cli_prints_before_and_after_per_step_and_the_new_path(tmp_path: Path) -> None:
    done = _explorer(
        "whatif", str(SLOW_LOADER), "--remove", "input_stall", "--scale", "aten::mm=0.5",
        "--json", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [c["selector"] for c in doc["changes"]] == ["input_stall", "aten::mm"]
    steps = doc["steps"]
    assert len(steps) == len(explorer.load(SLOW_LOADER).steps())
    assert all(s["after_ns"] < s["before_ns"] for s in steps)
    assert doc["critical_path"]["length_ns"] == sum(doc["critical_path"]["summary"].values())
    text = _explorer("whatif", str(SLOW_LOADER), "--remove", "input_stall", cwd=tmp_path)
    assert text.returncode == 0 and "New critical path" in text.stdout
    assert "mean step" in text.stdout


@pytest.mark.parametrize(
    "args, says",
    [
        (["--remove", "aten::nope"], "no slice has that name"),
        (["--scale", "aten::mm"], "expected SELECTOR=FACTOR"),
        (["--scale", "aten::mm=fast"], "expected SELECTOR=FACTOR"),
        (["--scale", "aten::mm=1.5"], "speed-ups only"),
        (["--scale", "stream 3=0.5"], "no device work on that stream"),
        ([], "name what to change"),
    ],
)
def test_cli_bad_selector_is_one_line_and_status_2(
    tmp_path: Path, args: list[str], says: str
) -> None:
    done = _explorer("whatif", str(SLOW_LOADER), *args, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout)
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert says in done.stderr

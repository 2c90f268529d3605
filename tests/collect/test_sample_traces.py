"""The committed ``sample_traces/`` are what their README says: real collector runs that load
in Explorer and show the thing each one was captured for."""

from __future__ import annotations

from pathlib import Path

import pytest

import explorer
from tests.collect.trace_reading import explorer_events, read_trace

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
WORKLOADS = ("cnn", "transformer", "slow_dataloader", "item_every_step", "compile_graph_break")


@pytest.mark.parametrize("workload", WORKLOADS)
def test_sample_trace_loads_with_steps_environment_and_counters(workload: str) -> None:
    path = SAMPLES / f"cpu_{workload}.pt.trace.json.gz"
    assert path.name in (SAMPLES / "README.md").read_text()
    trace = explorer.load(path, use_cache=False)
    assert len(trace.steps()) >= 3
    env = trace.metadata["explorer"]["environment"]
    assert env["torch_version"] and env["accelerator"] == "cpu"
    assert len(trace.counters) > 0
    assert not trace.synthetic  # real runs, not the scenario generator


def test_each_sample_shows_what_it_was_captured_for() -> None:
    item = read_trace(SAMPLES / "cpu_item_every_step.pt.trace.json.gz")
    script = (SAMPLES.parent / "scripts" / "make_sample_traces.py").read_text().splitlines()
    lines = [script[e["args"]["source_line"] - 1] for e in explorer_events(item, "explorer_sync")]
    assert sum("loss.item()" in text for text in lines) == 5  # one per step, at its line
    compiled = explorer_events(
        read_trace(SAMPLES / "cpu_compile_graph_break.pt.trace.json.gz"), "explorer_compile"
    )
    breaks = [e for e in compiled if e["args"]["event"] == "graph_break"]
    assert breaks and all(
        e["args"]["source_file"].endswith("make_sample_traces.py") for e in breaks
    )
    assert "item()" in breaks[0]["args"]["reason"]
    slow = explorer.load(SAMPLES / "cpu_slow_dataloader.pt.trace.json.gz", use_cache=False)
    steps = slow.steps()
    assert (steps["dur_ns"] >= 8 * 4_000_000).all()  # 8 items × 4 ms sleep in every step

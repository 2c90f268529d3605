"""``explorer diff`` of two real DDP jobs: rank 2 slowed by ~30 ms of input per step
(sample_traces/ddp_4rank_slow_input) against rank 2 slowed by ~120 ms
(sample_traces/ddp_4rank_broadcast_chain). Checked against each rank's own trace."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from job_runs import ROOT, run_cli

import explorer

A = ROOT / "sample_traces" / "ddp_4rank_slow_input"
B = ROOT / "sample_traces" / "ddp_4rank_broadcast_chain"


@pytest.fixture(scope="module")
def diff_doc(tmp_path_factory: pytest.TempPathFactory) -> dict:
    r = run_cli("diff", str(A), str(B), "--format", "json", "--workers", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def _mean_step(run: Path, rank: int) -> float:
    return float(explorer.load(run / f"rank{rank}.pt.trace.json.gz").steps()["dur_ns"].mean())


def _input_stall_per_step(run: Path, rank: int) -> float:
    t = explorer.load(run / f"rank{rank}.pt.trace.json.gz")
    return sum(f.time_lost_ns for f in t.findings() if f.kind == "input_stall") / len(t.steps())


def test_category_changes_add_up_to_each_ranks_step_change(diff_doc: dict) -> None:
    for r in diff_doc["ranks"]:
        k = r["rank"]
        moved = sum(c["delta_ns_per_step"] for c in r["categories"])
        # the breakdown partitions each step: its changes add up to the mean step's change
        # (one ns of rounding per category at most)
        expected = _mean_step(B, k) - _mean_step(A, k)
        assert moved == pytest.approx(expected, abs=len(r["categories"]) + 1), k


def test_the_straggler_and_its_cause_before_and_after(diff_doc: dict) -> None:
    sa, sb = diff_doc["straggler_a"], diff_doc["straggler_b"]
    assert sa["rank"] == sb["rank"] == 2 and diff_doc["straggler_changed"] is False
    for s, run in ((sa, A), (sb, B)):
        cause = next(c for c in s["causes"] if c["what"] == "input_stall")
        assert Path(cause["file"]).name == "make_job_traces.py" and cause["line"] > 0
        assert cause["excess_ns_per_step"] == pytest.approx(_input_stall_per_step(run, 2), rel=0.1)
    # B's script slowed rank 2's input more per step than A's did: the stall grew
    delay = [json.loads((run / "job.info").read_text())["delay_ms_per_step"] for run in (A, B)]
    assert delay[1] > delay[0]
    assert sb["causes"][0]["excess_ns_per_step"] > sa["causes"][0]["excess_ns_per_step"]


def test_collective_waits_by_op_and_the_text(diff_doc: dict) -> None:
    ops = {o["op"]: o for o in diff_doc["collective_wait_by_op"]}
    assert set(ops) == {"allreduce", "broadcast"}
    assert all(isinstance(o["wait_ns_per_step_a"], int) for o in ops.values())
    r = run_cli("diff", str(A), str(B), "--workers", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "input stall" in r.stdout and "make_job_traces.py:" in r.stdout
    assert "allreduce:" in r.stdout and "Mean step" in r.stdout
    # the job report's own by-op figures are integers, as its schema says
    doc = json.loads(run_cli("report", str(A), "--format", "json").stdout)
    assert all(
        isinstance(v, int) for o in doc["collectives"]["by_op"] for k, v in o.items() if k != "op"
    )
    assert np.isclose(
        sum(o["wait_ns"] for o in doc["collectives"]["by_op"]) / len(doc["steps"]),
        sum(o["wait_ns_per_step_a"] for o in ops.values()),
        atol=2,
    )

"""The straggler is the rank with the most time of its own, not the rank that enters
collectives last: on a real DDP capture where the slow rank holds up the root of the
buffer broadcast (sample_traces/ddp_4rank_broadcast_chain), rank 0 enters most all_reduces
last, and the straggler is still rank 2 — as its own trace's input stall says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from job_runs import ROOT

import explorer
from explorer.job import job_document

CHAIN = ROOT / "sample_traces" / "ddp_4rank_broadcast_chain"


@pytest.fixture(scope="module")
def chain_doc(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return job_document(str(CHAIN), store=tmp_path_factory.mktemp("store"), workers=2)


def _input_stall_per_step(rank: int) -> float:
    """The rank's input stall per step, from its own trace's single-trace analysis."""
    t = explorer.load(CHAIN / f"rank{rank}.pt.trace.json.gz")
    lost = sum(f.time_lost_ns for f in t.findings() if f.kind == "input_stall")
    return lost / len(t.steps())


def test_the_capture_has_the_chain(chain_doc: dict) -> None:
    rows = chain_doc["collectives"]["rows"]
    # rank 0, the broadcast root, enters most all_reduces last (and far behind) ...
    late_in = [c["last_rank"] for c in rows if c["op"] == "allreduce" and c["skew_ns"] > 50e6]
    assert late_in.count(0) > late_in.count(2), late_in
    # ... because it waits in the broadcast for rank 2, which enters the slow ones last
    late_in = [c["last_rank"] for c in rows if c["op"] == "broadcast" and c["skew_ns"] > 50e6]
    assert late_in.count(2) > len(late_in) / 2, late_in


def test_the_straggler_is_the_rank_that_holds_everyone_up(chain_doc: dict) -> None:
    info = json.loads((CHAIN / "job.info").read_text())
    s = chain_doc["straggler"]
    assert s is not None and s["rank"] == info["slow_rank"] == 2
    assert s["causes"][0]["what"] == "input_stall"
    assert set(s["waits_in"]) == {"allreduce", "broadcast"}
    assert s["steps"] == chain_doc["steps"]  # late in every step, not only where it was last


def test_lateness_matches_the_input_stall_in_its_own_trace(chain_doc: dict) -> None:
    stall = _input_stall_per_step(2)
    assert stall > 100e6  # the script sleeps 120 ms a step on rank 2
    late = {r["rank"]: r["late_ns_per_step"] for r in chain_doc["ranks"]}
    assert late[2] == pytest.approx(stall, rel=0.1)
    step = chain_doc["summary"]["mean_step_ns"]
    assert all(abs(late[r]) < 0.1 * step for r in (0, 1, 3)), late
    # what the others lose per step is at most what they measurably wait
    others_wait = sum(r["wait_ns"] for r in chain_doc["ranks"] if r["rank"] != 2) / sum(
        r["steps"] for r in chain_doc["ranks"] if r["rank"] != 2
    )
    assert chain_doc["straggler"]["others_wait_ns_per_step"] <= others_wait + 1
    assert chain_doc["summary"]["straggler_share"] == pytest.approx(
        chain_doc["straggler"]["others_wait_ns_per_step"] / step, rel=0.02
    )


def test_the_report_names_rank_2(tmp_path: Path) -> None:
    from job_runs import run_cli

    r = run_cli("report", str(CHAIN), "--store", str(tmp_path / "s"), "--fail-on", "straggler>10%")
    assert r.returncode == 1
    assert "(rank 2)" in r.stderr
    assert "rank 2: input stall" in r.stdout

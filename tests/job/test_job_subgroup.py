"""Collectives of a subgroup match among its members only, by process group: a real
4-rank gloo job in which two ranks all_reduce extra tensors in their own 2-rank group each
step (``make_job_traces.py --cause comm``). Gloo's ranges carry no group; the run-loop
thread that ran each one says which group it was. The two ranks are late alike from those
collectives: the pair is named (the later one, the other beside it) with the collectives
as its communication cause; nobody outside the pair is."""

from __future__ import annotations

import json
import random

import pytest
from job_runs import run_cli, run_ddp_job


@pytest.fixture(scope="module")
def subgroup_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    out = tmp_path_factory.mktemp("subgroup")
    rank = random.Random().randrange(4)
    info = run_ddp_job(
        out, "--world", "4", "--slow-rank", str(rank), "--cause", "comm", "--delay-ms", "80",
        "--steps", "4",
    )  # fmt: skip
    r = run_cli("report", str(out), "--store", str(out / "store"), "--format", "json")
    assert r.returncode == 0, r.stderr
    return info, json.loads(r.stdout)


def test_subgroup_collectives_match_among_their_members(subgroup_job: tuple[dict, dict]) -> None:
    info, doc = subgroup_job
    pair = sorted({info["slow_rank"], (info["slow_rank"] + 1) % 4})
    rows = doc["collectives"]["rows"]
    groups = {r["pg"] for r in rows}
    assert len(groups) == 2, groups
    sub = [r for r in rows if r["ranks"] == 2]
    world = [r for r in rows if r["ranks"] == 4]
    # 8 extra all_reduces a step (80 ms at ~10 ms each), in their own group of two
    assert len(sub) == 8 * 4 and {(r["op"], r["group_size"]) for r in sub} == {("allreduce", 2)}
    assert {r["group_size"] for r in world} == {4} and len({r["pg"] for r in sub}) == 1
    assert doc["collectives"]["unmatched"] == 0
    assert not any("disagree" in w for w in doc["warnings"]), doc["warnings"]
    # the pair is late alike: it is named together, nobody outside it
    s = doc["straggler"]
    assert s is not None, doc["imbalance"]
    assert sorted([s["rank"], *s["with_ranks"]]) == pair, s
    (c,) = s["causes"]
    assert c["what"] == "communication" and "2-rank group with rank" in c["title"], c
    # the pair's own time in them (moving data, not waiting for each other) per step
    assert 0 < c["excess_ns_per_step"] <= c["rank_ns_per_step"], c

"""The job report on real DDP jobs run here: a randomly slowed rank is named with its
cause, and a balanced job names nobody."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from job_runs import run_cli, run_ddp_job

#: The finding kind (or breakdown category) each way of slowing a rank must be reported as.
#: The script's third cause, "sync" (a loop of .item() calls), is left out: on a CPU a sync
#: waits for nothing, so its cost is per-call overhead, which on this busy shared machine
#: ranged from 3 to 40 ms per step between runs — sometimes less than another rank's
#: scheduling noise (see the report on issue #13).
EXPECTED_CAUSE = {"input": "input_stall", "compute": "compute"}


@pytest.fixture(scope="module")
def slowed_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    rng = random.Random()  # a different rank and cause each run; the assertion says which
    rank, cause = rng.randrange(4), rng.choice(sorted(EXPECTED_CAUSE))
    out = tmp_path_factory.mktemp("ddp-slow")
    # 120 ms a step over 6 steps: well above what CPU contention alone does to one of 4
    # processes on 2 cores (at 40 ms a busy machine once hid the slowed rank in the noise)
    info = run_ddp_job(
        out, "--slow-rank", str(rank), "--cause", cause, "--delay-ms", "120", "--steps", "6"
    )
    return out, info


def test_slowed_rank_is_named_with_its_cause(slowed_job: tuple[Path, dict]) -> None:
    out, info = slowed_job
    r = run_cli("report", str(out), "--format", "json", "--fail-on", "straggler>10%")
    assert r.returncode == 1, r.stderr  # the straggler rule fires ...
    assert f"(rank {info['slow_rank']})" in r.stderr  # ... and names the rank
    assert "4/4 ranks analysed" in r.stderr  # progress on stderr
    doc = json.loads(r.stdout)
    s = doc["straggler"]
    case = f"slowed rank {info['slow_rank']} by {info['cause']}"
    assert s is not None, case
    assert s["rank"] == info["slow_rank"], case
    whys = [c["what"] for c in s["causes"]]
    assert EXPECTED_CAUSE[info["cause"]] in whys, f"{case}: causes {whys}"
    # the others wait in DDP's gradient all_reduce, or in the next forward's buffer
    # broadcast (when the straggler is its root, rank 0, they wait there first)
    assert s["waits_in"] and set(s["waits_in"]) <= {"allreduce", "broadcast"}, case
    cause = next(c for c in s["causes"] if c["what"] == EXPECTED_CAUSE[info["cause"]])
    assert Path(cause["file"]).name == "make_job_traces.py" and cause["line"] > 0, case
    # the slowed rank waits least in collectives; each other rank waits for it
    waits = {r["rank"]: r["wait_ns"] for r in doc["ranks"]}
    assert min(waits, key=waits.get) == info["slow_rank"], (case, waits)


def test_balanced_job_names_no_straggler(tmp_path: Path) -> None:
    # Every rank loads its data for 120 ms a step, alike: a slow input pipeline everywhere
    # is not a straggler. (On a busy 2-core machine each of the 4 processes is also late
    # now and then from CPU contention alone, by a few to tens of ms whatever the step;
    # a sleeping input pipeline adds no contention, so a long equal input time keeps that
    # noise a small share of the step, as it is on a machine with a core per rank. At
    # 40 ms a step a loaded machine once made one rank look late.)
    info = run_ddp_job(tmp_path, "--steps", "6", "--input-ms", "120")
    assert info["slow_rank"] is None
    r = run_cli("report", str(tmp_path), "--format", "json", "--fail-on", "straggler>10%")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["straggler"] is None
    assert doc["summary"]["straggler_share"] == 0.0
    assert doc["ranks_present"] == 4 and doc["world_size"] == 4

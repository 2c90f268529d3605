"""The job what-if (issue 30, across ranks) checked against reality: a real 2-rank gloo job
whose rank 0 loads its data slowly, replayed with rank 0's input stall removed, predicts
the job step time that the same job measures balanced.

The job really runs (``scripts/make_job_traces.py --alternate``): every rank loads its data
for 20 ms a step (``--input-ms``), and rank 0 for 40 ms more in even steps only, so the odd
steps are the same job balanced, under the same machine load (two runs minutes apart on a
shared 2-core machine differ by 20% and more from scheduling alone:
``benchmarks/job_whatif_validation.py --separate`` shows it). Removing rank 0's whole
input stall does not make the job as fast as rank 0 alone would be, since rank 1 still
loads its own: the collectives make rank 0 wait for it, which a single-trace what-if
cannot see.

A loaded machine can still upset one run (a rank descheduled for a step), so the run is
tried up to 3 times: the prediction must come within 10% of the measured balanced steps
in one of them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from job_runs import SAMPLE_JOB, run_cli, run_ddp_job

from explorer.errors import UsageError
from explorer.job.rank_map import analyse_rank
from explorer.job.run_dir import job_files
from explorer.job.whatif import (
    JobWhatIf,
    job_what_if,
    propagate,
    rank_times,
    slowed_vs_balanced,
    stored_rank_times,
)

TRIES = 3
TOLERANCE = 0.10
JOB = ("--world", "2", "--steps", "9", "--delay-ms", "40", "--input-ms", "20", "--alternate")


def test_nothing_removed_keeps_every_rank_step_exactly() -> None:
    import explorer

    files = job_files(str(SAMPLE_JOB))
    table = propagate([rank_times(explorer.load(str(f)).data, r) for r, f in files])
    assert len(table) == 4 * 5  # every rank's every step
    assert (table["before_ns"] == table["after_ns"]).all()
    assert (table["before_ns"] > 0).all()


def test_a_ranks_stored_tables_give_its_times_as_its_trace_does(tmp_path: Path) -> None:
    # the job report replays every rank but the straggler from what the map step stored
    # (loading every trace again in the driver made the report's end serial)
    import explorer

    for r, f in job_files(str(SAMPLE_JOB)):
        summary = analyse_rank(str(f), r, str(tmp_path))
        assert not summary.error
        stored = stored_rank_times(summary.store_dir, r, summary.start_ns, summary.host)
        loaded = rank_times(explorer.load(str(f)).data, r)
        assert stored.base == loaded.base and stored.host == loaded.host
        assert len(stored.coll) > 0 and len(stored.steps) == 5
        pd.testing.assert_frame_equal(stored.coll, loaded.coll, check_like=True)
        pd.testing.assert_frame_equal(stored.steps, loaded.steps, check_like=True)


@pytest.fixture(scope="module")
def validated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, JobWhatIf, int, int]:
    """(the job's run dir, its what-if, the predicted and the measured balanced step)."""
    tried = []
    for attempt in range(1, TRIES + 1):
        run = tmp_path_factory.mktemp(f"whatif{attempt}") / "job"
        run_ddp_job(run, *JOB, "--slow-rank", "0", "--cause", "input")
        w = job_what_if(job_files(str(run)), 0, ["input_stall"])
        predicted, measured = slowed_vs_balanced(w)
        tried.append((predicted, measured))
        if abs(predicted - measured) <= TOLERANCE * measured:
            return run, w, predicted, measured
    pytest.fail(f"predicted vs measured balanced step (ns), each try: {tried}")


def test_prediction_within_10_percent_of_the_balanced_steps(
    validated: tuple[Path, JobWhatIf, int, int],
) -> None:
    _, w, predicted, measured = validated
    assert abs(predicted - measured) <= TOLERANCE * measured
    steady = w.steps[w.steps["step"].isin(w.steady_steps)]
    slowed = steady[steady["step"] % 2 == 0]
    # the fix buys the slowed steps a lot: rank 0's extra 40 ms are most of a step
    assert predicted < 0.75 * slowed["before_ns"].median()
    # every rank's step is predicted, the unchanged rank's too: it no longer waits
    per_rank = slowed.groupby("rank")[["before_ns", "after_ns"]].median()
    assert list(per_rank.index) == [0, 1]
    assert (per_rank["after_ns"] < 0.75 * per_rank["before_ns"]).all()
    # rank 0's own what-if removes all its loading (its share of the 20 ms too), but rank
    # 1 still loads: the job replay makes rank 0 wait for it, the single trace cannot
    import explorer
    from explorer.analysis.whatif import what_if

    run = validated[0]
    alone = what_if(explorer.load(str(run / "rank0.pt.trace.json.gz")).data, ["input_stall"])
    mine = alone.steps[alone.steps["step"].isin(slowed["step"])]["after_ns"].median()
    assert predicted > 1.3 * mine


def test_job_report_and_whatif_verb_give_the_prediction() -> None:
    # the sample job: rank 2 of 4 loads its data slowly, the report names it the straggler
    run = SAMPLE_JOB
    w = job_what_if(job_files(str(run)), 2, ["input_stall"])
    r = run_cli("report", str(run), "--format", "json")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["straggler"]["rank"] == 2
    entry = doc["straggler"]["whatif"]
    assert entry == w.to_dict()
    assert entry["kind"] == "input_stall"
    # the report's own steady step time is the one the prediction starts from
    assert entry["job_step_ns_before"] == doc["summary"]["steady_step_ns"]
    assert entry["job_step_ns_after"] < 0.8 * entry["job_step_ns_before"]
    text = run_cli("report", str(run))
    assert text.returncode == 0, text.stderr[-2000:]
    assert w.line() in text.stdout
    assert w.line().startswith("if rank 2's input stall were fixed: job step ")

    verb = run_cli("whatif", str(run), "--rank", "2", "--remove", "input_stall", "--json")
    assert verb.returncode == 0, verb.stderr[-2000:]
    got = json.loads(verb.stdout)
    assert got["job_step_ns_after"] == w.job_step_ns_after
    assert got["job_step_ns_before"] == w.job_step_ns_before
    assert {s["rank"] for s in got["steps"]} == {0, 1, 2, 3}
    line = run_cli("whatif", str(run), "--rank", "2", "--remove", "input_stall")
    assert line.returncode == 0
    assert line.stdout.startswith(w.line())

    bad = run_cli("whatif", str(run), "--rank", "5", "--remove", "input_stall")
    assert bad.returncode != 0
    assert "no such rank" in bad.stderr and "Traceback" not in bad.stderr
    which = run_cli("whatif", str(run), "--remove", "input_stall")
    assert which.returncode == 2
    assert "--rank K (ranks: 0, 1, 2, 3" in which.stderr and "Traceback" not in which.stderr


def test_a_rank_the_job_does_not_have_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no such rank"):
        job_what_if(job_files(str(SAMPLE_JOB)), 7, ["input_stall"])
    with pytest.raises(UsageError, match="--remove"):
        job_what_if(job_files(str(SAMPLE_JOB)), 2, [])

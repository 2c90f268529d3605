"""The job what-if (issue 30, across ranks) checked against reality: a real 2-rank gloo job
whose rank 0 loads its data slowly, replayed with rank 0's input stall removed, predicts
the job step time that the same job measures when it is run balanced.

Both jobs really run (``scripts/make_job_traces.py``). Every rank loads its data for 20 ms
a step (``--input-ms``) and rank 0 for 40 ms more: removing rank 0's whole input stall
does not make the job as fast as rank 0 alone would be, since rank 1 still loads its own
— the collectives make rank 0 wait for it, which a single-trace what-if cannot see.

On a loaded 2-core machine one run's step times can differ from the next's by more than
10% from scheduling alone, so the pair of runs is tried up to 3 times: the prediction
must come within 10% of the balanced job's measured step time in one of them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from job_runs import SAMPLE_JOB, run_cli, run_ddp_job

from explorer.errors import UsageError
from explorer.job.run_dir import job_files
from explorer.job.whatif import JobWhatIf, job_step_ns, job_what_if, propagate, rank_times

TRIES = 3
TOLERANCE = 0.10
JOB = ("--world", "2", "--steps", "6", "--delay-ms", "40", "--input-ms", "20")


def test_nothing_removed_keeps_every_rank_step_exactly() -> None:
    import explorer

    files = job_files(str(SAMPLE_JOB))
    table = propagate([rank_times(explorer.load(str(f)).data, r) for r, f in files])
    assert len(table) == 4 * 5  # every rank's every step
    assert (table["before_ns"] == table["after_ns"]).all()
    assert (table["before_ns"] > 0).all()


@pytest.fixture(scope="module")
def validated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, JobWhatIf, int, int]:
    """(the slow job's run dir, its what-if, the balanced job's step time, tries used)."""
    tried = []
    for attempt in range(1, TRIES + 1):
        root = tmp_path_factory.mktemp(f"whatif{attempt}")
        run_ddp_job(root / "slow", *JOB, "--slow-rank", "0", "--cause", "input")
        run_ddp_job(root / "balanced", *JOB)
        predicted = job_what_if(job_files(str(root / "slow")), 0, ["input_stall"])
        measured = job_step_ns(job_files(str(root / "balanced")))
        tried.append((predicted.job_step_ns_after, measured))
        if abs(predicted.job_step_ns_after - measured) <= TOLERANCE * measured:
            return root / "slow", predicted, measured, attempt
    pytest.fail(f"prediction vs balanced job step (ns), each try: {tried}")


def test_prediction_within_10_percent_of_the_balanced_job(
    validated: tuple[Path, JobWhatIf, int, int],
) -> None:
    _, w, measured, _ = validated
    assert abs(w.job_step_ns_after - measured) <= TOLERANCE * measured
    # the fix buys the job a lot: the slow rank's extra 40 ms a step are most of a step
    assert w.job_step_ns_after < 0.75 * w.job_step_ns_before
    # every rank's step is predicted, the unchanged rank's too: it no longer waits
    steady = w.steps[w.steps["step"].isin(w.steady_steps)]
    per_rank = steady.groupby("rank")[["before_ns", "after_ns"]].median()
    assert list(per_rank.index) == [0, 1]
    assert (per_rank["after_ns"] < 0.75 * per_rank["before_ns"]).all()
    # rank 0's own what-if removes all its loading (its share of the 20 ms too), but rank
    # 1 still loads: the job replay makes rank 0 wait for it, the single trace cannot
    import explorer
    from explorer.analysis.whatif import what_if

    run = validated[0]
    alone = what_if(explorer.load(str(run / "rank0.pt.trace.json.gz")).data, ["input_stall"])
    own = alone.steps[alone.steps["step"].isin(w.steady_steps)]["after_ns"].median()
    assert w.job_step_ns_after > 1.3 * own


def test_job_report_and_whatif_verb_give_the_prediction(
    validated: tuple[Path, JobWhatIf, int, int],
) -> None:
    run, w, _, _ = validated
    r = run_cli("report", str(run), "--format", "json")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["straggler"]["rank"] == 0
    entry = doc["straggler"]["whatif"]
    assert entry["rank"] == 0 and entry["kind"] == "input_stall"
    # the report's own steady step time is the one the prediction starts from
    assert entry["job_step_ns_before"] == doc["summary"]["steady_step_ns"]
    assert entry["job_step_ns_after"] < entry["job_step_ns_before"]
    text = run_cli("report", str(run))
    assert text.returncode == 0, text.stderr[-2000:]
    assert "if rank 0's input stall were fixed: job step " in text.stdout

    verb = run_cli("whatif", str(run), "--rank", "0", "--remove", "input_stall", "--json")
    assert verb.returncode == 0, verb.stderr[-2000:]
    got = json.loads(verb.stdout)
    assert got["job_step_ns_after"] == w.job_step_ns_after
    assert got["job_step_ns_before"] == w.job_step_ns_before
    assert {s["rank"] for s in got["steps"]} == {0, 1}
    line = run_cli("whatif", str(run), "--rank", "0", "--remove", "input_stall")
    assert line.returncode == 0
    assert line.stdout.startswith("if rank 0's input stall were fixed: job step ")

    bad = run_cli("whatif", str(run), "--rank", "5", "--remove", "input_stall")
    assert bad.returncode != 0
    assert "no such rank" in bad.stderr and "Traceback" not in bad.stderr
    which = run_cli("whatif", str(run), "--remove", "input_stall")
    assert which.returncode == 2
    assert "--rank K (ranks: 0, 1" in which.stderr and "Traceback" not in which.stderr


def test_a_rank_the_job_does_not_have_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no such rank"):
        job_what_if(job_files(str(SAMPLE_JOB)), 7, ["input_stall"])
    with pytest.raises(UsageError, match="--remove"):
        job_what_if(job_files(str(SAMPLE_JOB)), 2, [])

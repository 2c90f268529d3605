"""A directory of traces that are not one job is refused with one line: never analysed as
a job with a "straggler" (and numpy's ``All-NaN slice`` warnings from ranks that share no
collective). Real traces: the sample runs in ``sample_traces/`` copied together."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from job_runs import SAMPLE_JOB, run_cli

SAMPLES = SAMPLE_JOB.parent
OTHER_JOB = SAMPLES / "ddp_4rank_broadcast_chain"  # the same script, two hours later


def _refused(run: Path, tmp_path: Path) -> str:
    r = run_cli("report", str(run), "--store", str(tmp_path / "store"), "--workers", "1")
    err = [ln for ln in r.stderr.splitlines() if "ranks analysed" not in ln]
    assert r.returncode != 0 and r.stdout == "", (r.returncode, r.stdout[:500])
    assert len(err) == 1 and err[0].startswith("explorer: error: "), r.stderr
    return err[0]


def _dir(tmp_path: Path, files: dict[str, Path]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for name, src in files.items():
        shutil.copy(src, run / name)
    return run


def test_single_process_runs_are_not_a_job(tmp_path: Path) -> None:
    run = _dir(
        tmp_path,
        {f.name: SAMPLES / f.name for f in [
            Path("cpu_cnn.pt.trace.json.gz"), Path("cpu_transformer.pt.trace.json.gz")]},
    )  # fmt: skip
    line = _refused(run, tmp_path)
    assert "2 traces are separate single-process runs" in line, line


def test_ranks_of_two_runs_are_not_a_job(tmp_path: Path) -> None:
    """Rank 0 of one 4-rank run and rank 1 of another: same world size, rank numbers that
    fit, captures two hours apart."""
    run = _dir(
        tmp_path,
        {"rank0.pt.trace.json.gz": SAMPLE_JOB / "rank0.pt.trace.json.gz",
         "rank1.pt.trace.json.gz": OTHER_JOB / "rank1.pt.trace.json.gz"},
    )  # fmt: skip
    line = _refused(run, tmp_path)
    assert "not one job" in line and "the ranks of one run record at the same time" in line
    assert "rank0.pt.trace.json.gz was captured until" in line, line


def test_one_rank_copied_twice_is_not_a_job(tmp_path: Path) -> None:
    run = _dir(
        tmp_path,
        {"rank0.pt.trace.json.gz": SAMPLE_JOB / "rank0.pt.trace.json.gz",
         "rank1.pt.trace.json.gz": SAMPLE_JOB / "rank0.pt.trace.json.gz"},
    )  # fmt: skip
    line = _refused(run, tmp_path)
    assert "both record that they are rank 0" in line, line


def test_different_world_sizes_are_not_a_job(shared_traces: Path, tmp_path: Path) -> None:
    """A rank of the 4-rank sample run beside a rank of a real 128-rank NVIDIA job."""
    run = _dir(
        tmp_path,
        {"rank0.pt.trace.json.gz": SAMPLE_JOB / "rank0.pt.trace.json.gz",
         "rank1.json.gz": shared_traces / "trace_filter__sampled_rank-1.json.gz"},
    )  # fmt: skip
    line = _refused(run, tmp_path)
    assert "records world size 4" in line and "world size 128" in line, line


@pytest.mark.parametrize("ranks", [(0, 1), (1, 3)])
def test_ranks_of_one_run_still_make_a_job(tmp_path: Path, ranks: tuple[int, int]) -> None:
    """The rules refuse nothing real: two ranks of the one sample run are a job."""
    run = _dir(tmp_path, {f"rank{r}.pt.trace.json.gz": SAMPLE_JOB / f"rank{r}.pt.trace.json.gz"
                          for r in ranks})  # fmt: skip
    r = run_cli("report", str(run), "--store", str(tmp_path / "store"), "--workers", "1")
    assert r.returncode == 0, r.stderr
    assert "All-NaN" not in r.stderr and "not one job" not in r.stderr

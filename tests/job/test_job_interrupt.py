"""Ctrl-C during ``explorer report RUN_DIR`` on a real job, while the Dask workers run.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group: the driver and its
worker processes. The CLI must stop with status 130 (``explorer/cli/main.py``), say so in
one line, print no traceback (neither its own nor a worker's), leave no worker process
behind, and leave the store such that a rerun gives the same report as a fresh one. The
viewer's Cancel goes through ``check_cancel``, tested here without Qt.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from job_runs import ROOT, run_cli

from explorer import store
from tests.conftest import ctrl_c_reaches


def _start_report(job: Path, store_dir: Path) -> subprocess.Popen[str]:
    """``explorer report JOB`` in its own session (so its process group is its own, as a
    shell's job is), on two worker processes: when the first of the four ranks is
    reported, both workers still have ranks to analyse."""
    return subprocess.Popen(
        [sys.executable, "-m", "explorer", "report", str(job), "--format", "json",
         "--no-cache", "--workers", "2", "--store", str(store_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        start_new_session=True, preexec_fn=ctrl_c_reaches,
    )  # fmt: skip


@pytest.mark.parametrize("to", ["process group", "driver"])
def test_ctrl_c_while_workers_run(sample_job: Path, tmp_path: Path, to: str) -> None:
    store_dir = tmp_path / "store"
    proc = _start_report(sample_job, store_dir)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the first rank is done; the worker runs the next
        assert first.startswith("explorer: 1/4 ranks analysed"), first
        workers = psutil.Process(proc.pid).children(recursive=True)
        assert workers, "the local cluster's worker processes are running"
        if to == "process group":  # what a terminal's Ctrl-C does
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert out == ""
    lines = [line for line in err.splitlines() if "ranks analysed" not in line]
    assert lines == ["explorer: interrupted"], err
    _, alive = psutil.wait_procs(workers, timeout=15)
    assert alive == [], f"worker processes left behind: {[p.pid for p in alive]}"

    # No half-written entry: no writer's temporaries, and every rank entry there verifies.
    assert not [p.name for p in store_dir.iterdir() if p.name.startswith(".")]
    for entry in store_dir.glob("rank-*"):
        assert len(store.open_trace(entry).slices) > 0
    # A rerun into the same store gives what a fresh store gives.
    again = run_cli("report", str(sample_job), "--format", "json", "--store", str(store_dir))
    fresh = run_cli(
        "report", str(sample_job), "--format", "json", "--store", str(tmp_path / "fresh")
    )
    assert again.returncode == 0 and fresh.returncode == 0, again.stderr + fresh.stderr
    a, f = json.loads(again.stdout), json.loads(fresh.stdout)
    assert a["step_matrix"] == f["step_matrix"]
    assert a["straggler"] == f["straggler"]
    assert a["ranks_present"] == 4


def test_sigterm_while_workers_run_closes_the_cluster_first(
    sample_job: Path, tmp_path: Path
) -> None:
    """SIGTERM to the driver (``timeout``, ``kill``, a batch scheduler) ends the job as it
    asks — killed by the signal — after the local cluster is closed: no worker left, and
    nothing on stderr but the progress (before, the driver died where the signal landed
    and multiprocessing's tracker complained of leaked semaphores)."""
    store_dir = tmp_path / "store"
    proc = _start_report(sample_job, store_dir)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert first.startswith("explorer: 1/4 ranks analysed"), first
        workers = psutil.Process(proc.pid).children(recursive=True)
        assert workers, "the local cluster's worker processes are running"
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGTERM, err
    assert out == ""
    assert [line for line in err.splitlines() if "ranks analysed" not in line] == [], err
    _, alive = psutil.wait_procs(workers, timeout=15)
    assert alive == [], f"worker processes left behind: {[p.pid for p in alive]}"
    assert not [p.name for p in store_dir.iterdir() if p.name.startswith(".")]


def test_check_cancel_stops_the_map_and_its_workers(sample_job: Path, tmp_path: Path) -> None:
    """What the viewer's Cancel uses: ``check_cancel`` is asked while ranks run, and what it
    raises leaves ``job_document`` with the local cluster's workers stopped."""
    from explorer.job import job_document

    class Stop(Exception):
        pass

    workers: list[psutil.Process] = []
    progress: list[int] = []

    def check() -> None:
        workers.extend(
            p
            for p in psutil.Process().children(recursive=True)
            if "resource_tracker" not in " ".join(p.cmdline())
        )
        raise Stop  # at the first look: the ranks are still running

    with pytest.raises(Stop):
        job_document(
            str(sample_job), store=tmp_path / "store", workers=2, use_cache=False,
            progress=lambda d, t, e: progress.append(d), check_cancel=check,
        )  # fmt: skip
    assert progress == []  # stopped before any rank was done
    assert workers, "the workers were running when it stopped"
    _, alive = psutil.wait_procs(workers, timeout=15)
    assert alive == []

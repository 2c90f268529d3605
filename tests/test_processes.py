"""Signals and worker processes (explorer.processes): forked workers leave both signals to
their parent and are killed at once; a signal landing while they are forked is delivered
once they are up, never dropped; held signals are delivered when the block ends."""

from __future__ import annotations

import gc
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from explorer.processes import ForkedWorkers, Terminated, interrupts_deferred, sigterm_unwinds

#: Set by a test: the parent sends itself SIGTERM from inside the next fork (where
#: Python runs ``os.register_at_fork`` callbacks such as logging's, and drops what a
#: signal handler raises there). A callback cannot be unregistered, hence the flag.
_SIGTERM_IN_FORK: list[bool] = [False]


def _sigterm_in_fork() -> None:
    if _SIGTERM_IN_FORK[0]:
        _SIGTERM_IN_FORK[0] = False
        os.kill(os.getpid(), signal.SIGTERM)


os.register_at_fork(after_in_parent=_sigterm_in_fork)


@pytest.fixture
def sigterm_recorded() -> Iterator[list[int]]:
    """SIGTERM appended to a list instead of ending the test process."""
    got: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        yield got
    finally:
        _SIGTERM_IN_FORK[0] = False
        signal.signal(signal.SIGTERM, before)


def _new_children(before: set[int]) -> list[psutil.Process]:
    return [c for c in psutil.Process().children() if c.pid not in before]


def test_forked_workers_leave_signals_to_the_parent_and_are_killed_at_once() -> None:
    before = {c.pid for c in psutil.Process().children()}
    pool = ForkedWorkers(2, 60)
    assert pool.start()
    workers = _new_children(before)
    assert len(workers) == 2
    for w in workers:
        w.send_signal(signal.SIGINT)  # a terminal's Ctrl-C reaches the whole group
        w.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert all(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)
    assert pool.submit(abs, -3).result(timeout=60) == 3  # and they still work
    pool.kill()
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive


def test_a_forked_worker_leaves_the_parent_s_objects_out_of_its_collections() -> None:
    """A collection in a worker would write to the header of every object it inherited,
    copying (copy-on-write) each page they are on: the worker's collector skips them all
    (``gc.freeze``), and this process's is left as it was."""
    held = [[i] for i in range(100_000)]  # containers: tracked by the collector
    pool = ForkedWorkers(1, 60)
    assert pool.start()
    try:
        frozen = pool.submit(gc.get_freeze_count).result(timeout=60)
    finally:
        pool.kill()
    assert frozen >= len(held)
    assert gc.get_freeze_count() == 0


def test_a_sigterm_while_the_workers_are_forked_is_delivered_once_they_are_up(
    sigterm_recorded: list[int],
) -> None:
    """The race the interrupted-load test retried: the signal's handler ran inside a fork
    callback, its exception was dropped and the load went on (exit 0). Now the SIGTERM
    unwinds the start, the workers are stopped and the handler in place gets it."""
    before = {c.pid for c in psutil.Process().children()}
    pool = ForkedWorkers(2, 60)
    with pytest.raises(Terminated), sigterm_unwinds():
        _SIGTERM_IN_FORK[0] = True
        pool.start()
    assert sigterm_recorded == [signal.SIGTERM]
    _, alive = psutil.wait_procs(_new_children(before), timeout=10)
    assert not alive


def test_held_signals_are_noticed_once_and_delivered_as_the_block_ends(
    sigterm_recorded: list[int],
) -> None:
    noticed: list[Any] = []
    with interrupts_deferred(notice=noticed.append):
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert sigterm_recorded == []  # held while the block runs
    assert noticed == [signal.SIGTERM]
    assert sigterm_recorded == [signal.SIGTERM]


def test_a_block_of_two_calls_unwinds_on_sigterm_then_holds_both_while_it_closes(
    sigterm_recorded: list[int],
) -> None:
    """The collector's policy: SIGTERM raises inside the user's block; while the trace is
    written both signals wait (the first Ctrl-C noticed); the handlers in place come back."""
    from explorer.processes import BlockSignals

    sigint_before = signal.getsignal(signal.SIGINT)
    block = BlockSignals()
    block.open()
    with pytest.raises(Terminated):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    noticed: list[int] = []
    block.closing(noticed.append)
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.05)
    assert block.close() == [signal.SIGINT, signal.SIGTERM]
    assert noticed == [signal.SIGINT, signal.SIGTERM]
    assert signal.getsignal(signal.SIGINT) is sigint_before
    assert sigterm_recorded == []  # not delivered: the caller decides when
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.05)
    assert sigterm_recorded == [signal.SIGTERM]  # the handler in place is back


def _python(code: str, tmp_path: Any) -> Any:
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )


def test_exit_now_runs_the_exit_handlers_and_flushes_the_output_then_ends_with_the_status(
    tmp_path: Any,
) -> None:
    """What a normal exit does that a user sees — atexit handlers (Dask's, logging's), the
    finalizers of temporary directories, the last buffered MB of stdout — still happens."""
    code = """
import atexit, sys, tempfile
from explorer.processes import exit_now
kept = tempfile.TemporaryDirectory(dir='.')
open('where', 'w').write(kept.name)
atexit.register(lambda: sys.stdout.write('handler ran'))
sys.stdout.write('x' * 1_000_000)
exit_now(3)
"""
    run = _python(code, tmp_path)
    assert run.returncode == 3, run.stderr
    assert run.stdout == "x" * 1_000_000 + "handler ran"
    assert not (tmp_path / (tmp_path / "where").read_text()).exists()


def test_exit_now_with_another_thread_running_waits_for_it_as_an_ordinary_exit(
    tmp_path: Any,
) -> None:
    """A thread still working (a pool's worker, a store write) is not cut off: the
    process ends the ordinary way, after it."""
    code = """
import threading, time
from explorer.processes import exit_now
def work():
    time.sleep(0.5)
    open('done', 'w').write('yes')
threading.Thread(target=work).start()
exit_now(0)
"""
    run = _python(code, tmp_path)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "done").read_text() == "yes"


def test_the_command_s_report_is_whole_on_a_pipe_and_its_status_kept(tmp_path: Any) -> None:
    """``python -m explorer`` (what the console script runs) ends through exit_now: the
    report on its pipe is the whole document, and a bad input still exits 2."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    sample = Path(__file__).resolve().parents[1] / "sample_traces" / "cpu_cnn.pt.trace.json.gz"
    cmd = [sys.executable, "-m", "explorer", "report", str(sample), "--format", "json"]
    env = {**os.environ, "EXPLORER_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["summary"]["steps"] == 4
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    run = subprocess.run([*cmd[:4], str(bad)], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 2
    assert run.stderr.startswith("explorer: error:") and "Traceback" not in run.stderr

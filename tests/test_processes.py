"""Signals and worker processes (explorer.processes): forked workers leave both signals to
their parent and are killed at once; a signal landing while they are forked is delivered
once they are up, never dropped; held signals are delivered when the block ends."""

from __future__ import annotations

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

"""Analyses computed ahead in a forked process, on another core, while this process does
the work that must come first: a report finds the breakdown and the findings in a child
while it builds the dependency graph here, then prices the findings' fixes (the what-if
replays, :func:`~explorer.analysis.whatif.predict_savings`) in a child that inherits that
graph while it finds the critical path here; an export finds its findings in a child
while it finds the path. On 1M events and 2 cores: a first report 5.19 -> 4.71 s, median
of 5 alternating runs (two processes on one machine's shared caches each run ~40% slower
than alone, so the gain is half the work moved).

Why a process: numpy over millions of rows and scipy's Dijkstra hold the GIL for most of
their time, and a second thread was measured no faster. A forked child sees the trace's
tables (and the graph) as they are (copy-on-write: nothing is pickled on the way in) and
hands back only its results, pickled: a few MB (the memo results under the names asked
for, :meth:`~explorer.trace.memo.Memo.kept`, which this process keeps and stores as if it
had computed them, :meth:`~explorer.trace.memo.Memo.adopt`) — and, for what this process
needs before the child is done (the graph's inputs: the steps, slice classes and host
reasons), the results of its first calls as soon as it has them, through a pipe
(:meth:`Ahead.take_early`). The results are the same:
the same code on the same tables; the child stores only what its work asks to store
itself, where the store writes straight to disk (:func:`stored_here`). (The export's
:func:`~explorer.export.results.results_in_child` forks for another reason: to give back
what the analyses took before the export's own peak.)

When not: one usable core, a trace too small for it to pay (:data:`MIN_SLICES`; either
overridden by ``EXPLORER_ANALYSIS_WORKERS=0`` or ``1``), a hard memory limit or less
memory free than this process holds (the child's own allocations come on top), another
Python thread running or a caller off the main thread (forking a process whose threads
may hold locks is not safe, and a Qt thread is not one ``threading`` counts). In
each case, and whenever the child fails (an analysis error, the child killed), this
process computes the results itself when they are asked for, as it did before: a failure
is then raised where it happens, in this process.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from explorer.errors import UsageError
from explorer.processes import ForkedWorkers
from explorer.trace.memo import ResultStoreLike
from explorer.trace.memory_limits import (
    hard_limit,
    held_bytes,
    memory_budget,
    release_freed_memory,
)
from explorer.trace.model import TraceData

#: Seconds the child may take to start before this process does the work itself.
START_S = 30.0

#: What the forked child runs, set just before it forks (inherited, never pickled).
_WORK: Callable[[], Any] | None = None


#: Slices below which the analyses take too little for a fork (~20 ms) to pay.
MIN_SLICES = 50_000


@dataclass(eq=False)  # compared by identity: a trace's tables have no truth value
class _Rider:
    """Work for the next child forked for ``trace`` once its own is done (:func:`riding_along`):
    memoised ``calls`` and the memo ``names`` they keep."""

    trace: TraceData
    calls: tuple[Callable[[TraceData], Any], ...]
    names: tuple[str, ...]


_RIDERS: list[_Rider] = []


def _drop(rider: _Rider) -> None:
    _RIDERS[:] = [r for r in _RIDERS if r is not rider]


@contextmanager
def riding_along(
    trace: TraceData, calls: Sequence[Callable[[TraceData], Any]], names: Iterable[str]
) -> Iterator[None]:
    """Within the block, the next child forked for ``trace`` (:func:`run_forked`) also
    makes ``calls`` (memoised analyses) once its own work is done, and hands back their
    memo results under ``names``, kept here when its result is taken: work this process
    does next anyway, on the core the child would otherwise leave idle. A report's
    ``by_source`` rides with the what-if replays, which end before the critical path's
    search here (0.54 s against 0.94 on a 1M-slice H100 trace) and take it (0.48 s) off
    the answer's time. Nothing rides when no child is forked within the block, and a
    failure of the calls in the child is dropped: they are then made here, where needed."""
    rider = _Rider(trace, tuple(calls), tuple(names))
    _RIDERS.append(rider)
    try:
        yield
    finally:
        _drop(rider)


@dataclass
class _Carried:
    """A child's result with memo results beside it (of its work, :func:`handed_back`, and
    of the calls that rode along with it), kept at :meth:`Ahead.result`."""

    value: Any
    kept: dict[tuple[str, Hashable], Any]


def handed_back(value: Any, kept: dict[tuple[str, Hashable], Any]) -> Any:
    """What a child's work (:func:`run_forked`) returns to hand back ``value`` with memo
    results beside it (:meth:`~explorer.trace.memo.Memo.kept`): :meth:`Ahead.result` keeps
    them, as :meth:`Ahead.join` keeps a work's dict, and returns ``value``."""
    return _Carried(value, dict(kept))


def stored_here(
    trace: TraceData, values: dict[tuple[str, Hashable], Any]
) -> dict[tuple[str, Hashable], Any]:
    """In a child forked by :func:`run_forked`: store those of ``values`` (memo results, as
    :meth:`~explorer.trace.memo.Memo.kept` gives them) whose store writes at once where the
    parent reads (a cache entry's directory), as the parent would on keeping them; the
    rest, to hand back. A result the parent does not read itself then costs no pickling:
    the export's critical path is ~40 MB pickled on 1M events, and ~0.12 s between the
    child's end and the parent's next step, for a parent that writes only its runs."""
    rest: dict[tuple[str, Hashable], Any] = {}
    for (name, options), value in values.items():
        store = trace.memo.store_of(name)
        if not (isinstance(store, _NoSaves) and store.save_through(name, options, value)):
            rest[(name, options)] = value
    return rest


def workers_wanted(trace: TraceData) -> int:
    """1 (one forked child) or 0: ``EXPLORER_ANALYSIS_WORKERS`` when set (``0`` or
    ``1``), else 1 where another core is free to use and the trace has at least
    :data:`MIN_SLICES` slices."""
    env = os.environ.get("EXPLORER_ANALYSIS_WORKERS", "").strip()
    if env in ("0", "1"):
        return int(env)
    if env:
        raise UsageError(f"EXPLORER_ANALYSIS_WORKERS is {env!r}: 0 (none) or 1 (a forked child)")
    return int(len(os.sched_getaffinity(0)) >= 2 and len(trace.slices) >= MIN_SLICES)


class _Early:
    """A one-message pipe from a forked child to this process: the results of its first
    calls (:func:`compute_ahead`'s ``early``), sent as soon as they are made, while the
    child goes on with the rest. Made before the fork; the child sends once and closes its
    end (also when its calls fail), so :meth:`take` gets the results or an end of file,
    never a wait for a child that will not send."""

    def __init__(self) -> None:
        self._reader, self._writer = multiprocessing.get_context("fork").Pipe(duplex=False)
        self._open = True

    def send_and_close(self, values: dict[tuple[str, Hashable], Any]) -> None:
        """In the child: send ``values`` and close its end, in a thread: the pipe holds
        64 KB, and the parent reads only once its cache entry is written (the child waited
        ~0.2 s for it on the synthetic 1M-event trace, which then kept the parent waiting
        for the child at the end)."""

        def send() -> None:
            # an OSError: the parent closed its end, it no longer wants them
            with contextlib.suppress(OSError), self._writer:
                self._writer.send(values)

        threading.Thread(target=send, name="explorer-early-results", daemon=True).start()

    def close_writer(self) -> None:
        """Close this process's end for writing: once the child has closed its own, a
        reader that finds nothing gets an end of file."""
        self._writer.close()

    def take(self) -> dict[tuple[str, Hashable], Any]:
        """What the child sent (waiting for it), or nothing when it sent nothing (its early
        calls failed, it was never started, or it was stopped); once."""
        if not self._open:
            return {}
        self._open = False
        try:
            values = self._reader.recv()
        except (EOFError, OSError):
            values = {}
        finally:
            self._reader.close()
        return values if isinstance(values, dict) else {}

    def discard(self) -> None:
        """Close both ends here without reading (no child, or its results unwanted)."""
        if self._open:
            self._open = False
            self._reader.close()
        self._writer.close()


class Ahead:
    """Work being done in a forked child: :meth:`result` is what it returned (None when
    it failed or never started), :meth:`join` keeps the memo results it handed back
    (:func:`compute_ahead`). A context manager: leaving it stops the child."""

    def __init__(
        self,
        trace: TraceData,
        pool: ForkedWorkers | None,
        future: Future[Any] | None,
        early: _Early | None = None,
    ) -> None:
        self._trace = trace
        self._pool = pool
        self._future = future
        self._early = early
        self._generation = trace.memo.generation
        #: Whether the child's results were kept (False: this process computes them).
        self.adopted = False

    @property
    def running(self) -> bool:
        """Whether a child was started and its result not yet taken."""
        return self._future is not None

    def take_early(self) -> None:
        """Keep the results of the child's early calls (:func:`compute_ahead`), waiting
        for them if the child has not sent them yet; nothing when it has none (then they
        are computed here when asked for). Once; :meth:`result` takes them first."""
        early, self._early = self._early, None
        if early is not None:
            values = early.take()
            if values:
                self._trace.memo.adopt(values, self._generation)

    def result(self) -> Any:
        """What the child returned, once it has; None when it failed in any way (the work
        is then done here, where a failure is raised) or was never started."""
        self.take_early()  # a child sending its early results waits until they are read
        future, self._future = self._future, None
        if future is None:
            return None
        try:
            value = future.result()
        except Exception:  # noqa: BLE001 - any failure: done here instead, and raised here
            self.close()
            return None
        except BaseException:
            self.close()
            raise
        # Ended in order, its pool's threads joined: the next fork finds this process's
        # only thread again (a pool killed leaves them running a moment).
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown()
        if isinstance(value, _Carried):
            if value.kept:
                self._trace.memo.adopt(value.kept, self._generation)
            value = value.value
        return value

    def join(self) -> None:
        """Wait for the child and keep the memo results it handed back; on any failure of
        the child, nothing (the analyses then run here when asked for)."""
        values = self.result()
        if isinstance(values, dict) and values:
            self._trace.memo.adopt(values, self._generation)
            self.adopted = True

    def close(self) -> None:
        """Stop the child (at once: its results are no longer wanted)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.kill()
        early, self._early = self._early, None
        if early is not None:
            early.discard()

    def __enter__(self) -> Ahead:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._future = None
        self.close()


def compute_ahead(
    trace: TraceData,
    calls: Sequence[Callable[[TraceData], Any]],
    names: Iterable[str],
    early: Sequence[Callable[[TraceData], Any]] = (),
    early_names: Iterable[str] = (),
) -> Ahead:
    """Start ``calls`` (memoised analyses, each called with the trace) in a forked child;
    the results kept under ``names`` come back at :meth:`Ahead.join`. Where a child cannot
    or should not be forked (see the module doc), an :class:`Ahead` that keeps nothing.

    ``early`` calls are made first, and their results under ``early_names`` sent back at
    once (:meth:`Ahead.take_early`), while the child goes on with ``calls``: what this
    process needs before the child is done. A first report's graph build reads the steps,
    the slice classes and the host reasons, which the child has ~0.2 s after the fork and
    this process asks for ~0.3 s after it (once the cache entry is written): computed here
    too, they were 0.19 s of the graph's 0.77 s on the synthetic 1M-event trace, 0.4 s on
    the H100-structured one."""
    wanted = tuple(names)

    def work() -> dict[tuple[str, Hashable], Any]:
        for call in calls:
            call(trace)
        return trace.memo.kept(wanted)

    return run_forked(trace, work, early, early_names)


def run_forked(
    trace: TraceData,
    work: Callable[[], Any],
    early: Sequence[Callable[[TraceData], Any]] = (),
    early_names: Iterable[str] = (),
) -> Ahead:
    """Start ``work()`` (it reads ``trace``, or anything else this process holds) in a
    forked child; :meth:`Ahead.result` is what it returns, pickled back. The ``early``
    calls are made before it, their results under ``early_names`` sent back at once
    (:meth:`Ahead.take_early`; see :func:`compute_ahead`). Where a child cannot or should
    not be forked (see the module doc), an :class:`Ahead` whose result is None."""
    global _WORK
    first = tuple(early_names)
    channel = _Early() if early else None

    def idle() -> Ahead:
        if channel is not None:
            channel.discard()  # no child to send: nothing to wait for
        return Ahead(trace, None, None)

    # Only from the main thread with no other Python thread: a thread Python's threading
    # does not list (a viewer's QThread) runs beside a caller off the main thread.
    alone = threading.active_count() == 1 and threading.current_thread() is threading.main_thread()
    if workers_wanted(trace) == 0 or not alone or hard_limit() is not None:
        return idle()
    if memory_budget()[0] < held_bytes():
        return idle()
    # Freed heap pages given back first: written again by either process after the fork,
    # each would be copied (copy-on-write) instead of being a fresh page.
    release_freed_memory()
    pool = ForkedWorkers(1, START_S)

    riders = [r for r in _RIDERS if r.trace is trace]

    def in_child() -> Any:
        for memo in trace.memo.chain():  # the child reads the stored results, never writes
            if memo.store is not None:
                memo.store = _NoSaves(memo.store)
        if channel is not None:
            try:
                for call in early:
                    call(trace)
            except BaseException:
                channel.close_writer()  # nothing to send: the parent's read ends at once
                raise
            channel.send_and_close(trace.memo.kept(first))
        value = work()
        if not riders:
            return value
        kept: dict[tuple[str, Hashable], Any] = {}
        if isinstance(value, _Carried):  # the work's own (handed_back) and the riders'
            kept, value = value.kept, value.value
        for rider in riders:
            try:
                for call in rider.calls:
                    call(trace)
            except Exception:  # noqa: BLE001,S112 - made, and raised, here when needed
                continue
            kept.update(trace.memo.kept(rider.names))
        return _Carried(value, kept)

    _WORK = in_child
    try:
        started = pool.start()
    finally:
        _WORK = None  # the child has its own copy; this process keeps no extra reference
    if not started:
        return idle()
    for rider in riders:  # taken by this child: none rides with another
        _drop(rider)
    if channel is not None:
        channel.close_writer()  # only the child's end left: its exit is an end of file
    return Ahead(trace, pool, pool.submit(_compute), channel)


class _NoSaves:
    """The child's view of the trace's stored results: it reads them, and writes only what
    its work asks to store itself (:func:`stored_here`); the parent stores what it hands
    back."""

    SAVES_AT_ONCE = False

    def __init__(self, store: ResultStoreLike) -> None:
        self._store = store

    def save_through(self, name: str, options: Hashable, value: Any) -> bool:
        """Store ``value`` in the real store, if that writes at once where the parent reads
        (:attr:`~explorer.trace.memo.ResultStoreLike.SAVES_AT_ONCE`); whether it did."""
        if not self._store.SAVES_AT_ONCE:
            return False
        self._store.save(name, options, value)
        return True

    def load(self, name: str, options: Hashable) -> Any:
        return self._store.load(name, options)

    def has(self, name: str, options: Hashable) -> bool:
        return self._store.has(name, options)

    def save(self, name: str, options: Hashable, value: Any) -> None:
        return None

    def for_trace(self, trace: Any) -> ResultStoreLike:
        return _NoSaves(self._store.for_trace(trace))


def _compute() -> Any:
    """In the child: the work it was forked for."""
    assert _WORK is not None, "run only in a child forked by run_forked"
    return _WORK()

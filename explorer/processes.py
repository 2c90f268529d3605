"""Signals and worker processes: the one home of what Explorer does with SIGINT (Ctrl-C)
and SIGTERM (``timeout``, ``kill``, a batch scheduler, systemd), and of how it starts the
worker processes that must leave those signals to it.

The policies, each a context manager (Python runs signal handlers in the main thread
only, so off it every one of them simply runs its block):

* :func:`sigterm_unwinds` — a SIGTERM unwinds the block as Ctrl-C does (its ``finally``
  blocks run: workers stopped, temporaries removed), then goes on to the handler that was
  in place (by default the process ends, as SIGTERM asks). The CLI runs every verb in it,
  the chunked reader its read, the collector the user's block.
* :func:`interrupts_deferred` — both signals wait until the block ends, then go on: a
  write and the cleanup of its temporaries are never cut midway (the store, the
  collector's trace, a Dask cluster starting).
* :func:`signals_close` — the first of either signal calls a function (the viewer closes
  its windows), and once the block ends, Ctrl-C is :class:`KeyboardInterrupt` and SIGTERM
  goes on to the handler that was in place.
* :func:`sigint_ignored` — Ctrl-C ignored while worker processes start, which keep it
  ignored from their first instruction (a Dask cluster's, through fork and exec).
* :func:`sigint_masked` — Ctrl-C masked in this thread (a forked pool starting or
  shutting down, where a signal landing midway would be lost or break the pool).

Worker processes: :class:`ForkedWorkers` is the pool the trace reader decodes in: forked
(nothing of the caller's script runs again in a worker), each worker ignoring both
signals and dying with its parent (:func:`_start_worker`), started under
:func:`sigint_masked`, and stoppable at once (:meth:`ForkedWorkers.kill`) without reaching
into the standard library's private state. :func:`while_waiting` gives the time this
process spends waiting on them to work it would do later anyway.

The end of the process: :func:`exit_now`, which the ``explorer`` command ends with.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any, NoReturn, ParamSpec, TypeVar, cast

P = ParamSpec("P")
R = TypeVar("R")


class Terminated(BaseException):
    """A SIGTERM, raised where it landed inside :func:`sigterm_unwinds` (or the collector's
    block) so that the code it cut short unwinds."""


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Let a SIGTERM that arrives while the block runs unwind it as Ctrl-C does, then
    deliver it again to the handler that was in place. Python's own default ends the
    process where the signal lands, with nothing cleaned up. Off the main thread, or where
    SIGTERM is ignored, the block simply runs."""
    if not _on_main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGTERM)
    if before is signal.SIG_IGN or before is None:
        yield
        return

    def unwind(signum: int, frame: object) -> None:
        raise Terminated

    signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    except Terminated:
        signal.signal(signal.SIGTERM, before)
        signal.raise_signal(signal.SIGTERM)
        raise  # the handler in place took it and returned: the block is still cut short
    finally:
        signal.signal(signal.SIGTERM, before)


@contextmanager
def interrupts_deferred(notice: Callable[[int], None] | None = None) -> Iterator[None]:
    """Hold back Ctrl-C (SIGINT) and SIGTERM while the block runs (``notice(signum)`` is
    called for the first of each, to say why nothing happens yet); a signal that arrived
    meanwhile is raised again, to the handler that was in place, as the block ends.

    The Python handlers are swapped rather than the signals masked: a mask is per thread,
    and any other thread (Arrow's, BLAS's) would take the signal for the main one."""
    if not _on_main_thread():
        yield
        return
    caught: list[int] = []

    def hold(signum: int, frame: object) -> None:
        if signum not in caught:
            caught.append(signum)
            if notice is not None:
                notice(signum)

    before = {
        s: signal.signal(s, hold)
        for s in (signal.SIGINT, signal.SIGTERM)
        if signal.getsignal(s) is not None  # None: a handler set from C, left alone
    }
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        for signum in caught:
            signal.raise_signal(signum)


@contextmanager
def signals_close(close: Callable[[], None]) -> Iterator[None]:
    """The first Ctrl-C or SIGTERM while the block runs calls ``close`` (and the block is
    expected to end because of it: the viewer's event loop returns once its windows are
    closed); after the block, that Ctrl-C is raised as :class:`KeyboardInterrupt` and that
    SIGTERM goes on to the handler that was in place. Off the main thread the block
    simply runs."""
    if not _on_main_thread():
        yield
        return
    caught: list[int] = []

    def first(signum: int, frame: object) -> None:
        if not caught:
            caught.append(signum)
            close()

    before = {s: signal.signal(s, first) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    if caught == [signal.SIGINT]:
        raise KeyboardInterrupt
    if caught == [signal.SIGTERM]:
        signal.raise_signal(signal.SIGTERM)  # to the handler that was in place


class BlockSignals:
    """The policy of a block whose start and end are two calls rather than one ``with``
    (the collector's ``__enter__`` and ``__exit__``, the user's code between): while it is
    :meth:`open`, a SIGTERM raises :class:`Terminated` where it lands, so the block unwinds;
    from :meth:`closing` on (the block's own last work: the collector writes its trace),
    Ctrl-C and SIGTERM are held, ``notice(signum)`` told of the first of each;
    :meth:`close` puts back the handlers that were in place and returns the signals held,
    for the caller to deliver once its work is safe. Off the main thread, and for a signal
    ignored or handled from C, nothing is changed."""

    def __init__(self) -> None:
        self._before: dict[int, Any] = {}
        self._closing = False
        self.held: list[int] = []

    def _swap(self, signum: int, handler: Callable[[int, object], None]) -> None:
        if not _on_main_thread():
            return
        before = signal.getsignal(signum)
        if before is signal.SIG_IGN or before is None:
            return
        self._before.setdefault(signum, before)
        signal.signal(signum, handler)

    def open(self) -> None:
        """From now on a SIGTERM raises :class:`Terminated` (until :meth:`closing`)."""

        def on_sigterm(signum: int, frame: object) -> None:
            if self._closing:
                self._hold(signum)
                return
            raise Terminated("SIGTERM received inside the block")

        self._swap(signal.SIGTERM, on_sigterm)

    def closing(self, notice: Callable[[int], None] | None = None) -> None:
        """The block's last work begins: hold Ctrl-C and SIGTERM until :meth:`close`."""
        self._closing = True
        self._notice = notice
        self._swap(signal.SIGINT, lambda signum, frame: self._hold(signum))

    def _hold(self, signum: int) -> None:
        if signum not in self.held:
            self.held.append(signum)
            if self._notice is not None:
                self._notice(signum)

    _notice: Callable[[int], None] | None = None

    def close(self) -> list[int]:
        """Put back the handlers that were in place; the signals held meanwhile."""
        for signum, handler in self._before.items():
            signal.signal(signum, handler)
        self._before.clear()
        return self.held


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """Ignore SIGINT while the block starts worker processes: an ignored signal stays
    ignored in a child, through fork and exec, from its first instruction (Python and
    asyncio then leave it so), so a terminal's Ctrl-C reaches this process alone. A signal
    *mask* would not do where the children are started from another thread
    (multiprocessing unblocks SIGINT in the thread that first starts its resource tracker:
    a Dask cluster's event loop). The cost: a Ctrl-C in the second or two the workers take
    to start is dropped; this process takes the next one."""
    if not _on_main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@contextmanager
def sigint_masked() -> Iterator[None]:
    """Mask SIGINT in this thread while the block runs; one that arrives meanwhile is
    delivered as the block ends. For forking (a signal landing mid-fork would reach the
    child and be lost to this process) and for a pool's shutdown (cut half-way, its
    manager thread outlives the caller)."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


class _Recording:
    """A multiprocessing context that keeps the processes it makes, so their pool can be
    killed without reading the pool's private table of them. Every other member is the
    wrapped context's."""

    def __init__(self, context: BaseContext) -> None:
        self._context = context
        self.processes: list[BaseProcess] = []

    def Process(self, *args: Any, **kwargs: Any) -> BaseProcess:  # noqa: N802 (the API's name)
        process: BaseProcess = self._context.Process(*args, **kwargs)  # type: ignore[attr-defined]
        self.processes.append(process)
        return process

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


class ForkedWorkers:
    """``workers`` forked worker processes that leave SIGINT and SIGTERM to this process
    and die with it; :meth:`start` is False when they cannot start (short of memory or
    threads), and the caller does the work itself."""

    def __init__(self, workers: int, start_s: float) -> None:
        self.workers = workers
        self.start_s = start_s
        self._context = _Recording(multiprocessing.get_context("fork"))
        self._pool: ProcessPoolExecutor | None = None

    def start(self) -> bool:
        """Fork the workers (the first task forks them all, in this thread) and wait until
        one answers.

        Both signals are held back until the workers are up (:func:`interrupts_deferred`):
        a handler that raises (:func:`sigterm_unwinds`'s, Ctrl-C's) can run inside the
        callbacks Python runs around ``fork()`` (``logging``'s lock release), and an
        exception there is printed and dropped — the SIGTERM was lost and the load went on
        to exit 0 (the race ``tests/store/test_interrupted_first_load.py`` retried). Ctrl-C
        is also masked, so that a child forked meanwhile keeps it pending until it ignores
        it. A held signal is delivered once the workers are up, and stops them."""
        try:
            with interrupts_deferred(), sigint_masked():  # a worker unmasks it, ignored
                try:
                    self._pool = ProcessPoolExecutor(
                        self.workers,
                        mp_context=cast(BaseContext, self._context),  # its Process recorded
                        initializer=_start_worker,
                        initargs=(os.getpid(),),
                    )
                    self._pool.submit(int).result(timeout=self.start_s)
                except (OSError, RuntimeError, BrokenProcessPool, FutureTimeout):
                    self.kill()
                    return False
        except BaseException:  # a signal held meanwhile: the workers go with the caller
            self.kill()
            raise
        return True

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        if self._pool is None:
            raise RuntimeError("the workers are not running")
        return self._pool.submit(fn, *args, **kwargs)

    def kill(self) -> None:
        """Stop every worker at once (what Python 3.14's ``kill_workers`` does)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        for process in self._context.processes:
            if process.is_alive():
                process.kill()
        pool.shutdown(wait=False, cancel_futures=True)

    def shutdown(self) -> None:
        """Let the workers finish the tasks they hold, then end them. Ctrl-C waits until
        they have (the chunks being decoded take milliseconds): interrupted half-way, the
        pool's manager thread outlives the caller and races Python's exit hook for the
        pool, which then printed a traceback ("Bad file descriptor")."""
        pool, self._pool = self._pool, None
        if pool is not None:
            with sigint_masked():
                pool.shutdown(wait=True, cancel_futures=True)


#: Work this process does the first time it waits on its workers (:func:`while_waiting`).
_IDLE_WORK: list[Callable[[], None]] = []


@contextmanager
def while_waiting(work: Callable[[], None]) -> Iterator[None]:
    """Within the block, ``work()`` runs the first time this process would otherwise block
    on its workers (:func:`spend_wait`), and not at all if it never waits. For work it
    would do later anyway, in the same thread: a report imports its analyses (scipy among
    them, 0.27 s) while the load's decode workers parse, off the time to its answer.
    What the work does must be optional: it may not run, and a failure in it is dropped
    (what it would have prepared is then done, and fails, where it is needed). Only the
    main thread's waits run it (:func:`spend_wait`), so only the main thread leaves any:
    elsewhere the block runs as it is."""
    if not _on_main_thread():
        yield
        return
    _IDLE_WORK.append(work)
    try:
        yield
    finally:
        if work in _IDLE_WORK:
            _IDLE_WORK.remove(work)


def spend_wait(pending: Future[Any]) -> None:
    """About to wait on ``pending``: while it is not done, the work :func:`while_waiting`
    left for this moment (main thread only: the work is that thread's own)."""
    if not _IDLE_WORK or pending.done() or not _on_main_thread():
        return
    work = list(_IDLE_WORK)
    _IDLE_WORK.clear()
    for w in work:
        try:
            w()
        except Exception:  # noqa: BLE001,S112 - optional work: redone, and raised, where needed
            continue


def _start_worker(parent: int) -> None:
    """Workers leave Ctrl-C and SIGTERM to the process that forked them (``parent``),
    which stops them, and die with it: killed outright (SIGKILL, the OOM killer) it cannot
    stop them, and they would wait for tasks forever, each holding its memory. Linux's
    ``PR_SET_PDEATHSIG`` has the kernel kill a worker when the thread that forked it ends
    (the trace reader forks only from a process's only thread); elsewhere they are left
    to the pool's own checks.

    Every object inherited from the parent is moved out of the cyclic collector's reach
    (``gc.freeze``): a collection in a worker walks every object it tracks, writing to
    each one's header, so each page of the parent's objects it reached was copied
    (copy-on-write) and faulted in. An export's path child spent ~45 ms of its 0.3 s of
    drawing the path's runs in one such collection. The parent's objects are the parent's
    to collect; the worker collects its own."""
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the kernel was asked
        os._exit(1)


#: ``prctl`` option: the signal a process gets when its parent thread ends (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def exit_now(status: int) -> NoReturn:
    """End the process with ``status`` as the interpreter would — its exit handlers run
    (``atexit``: Dask, logging, temporary directories), stdout and stderr flushed — but
    without freeing its objects one by one: after a report on 1M events that teardown
    alone is 0.3-0.5 s of the user's wait for the prompt, and frees memory the kernel
    takes back at once anyway.

    Only where nothing else may still be running: with another thread alive (a pool's
    worker, a viewer's job) or Qt imported (its objects' destructors save settings), the
    process ends the ordinary way. A stdout that cannot take the last of the output (a
    full disk) is one line on stderr and status 2, not the interpreter's traceback."""
    if threading.active_count() > 1 or "PyQt6.QtCore" in sys.modules:
        sys.exit(status)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped reading (``| head``): nothing more to say
        pass
    except OSError as exc:
        from explorer.safe_write import os_error_line

        print(f"explorer: error: standard output: {os_error_line(exc)}", file=sys.stderr)
        status = status or 2
    try:
        sys.stderr.flush()
    except OSError:
        pass
    os._exit(status)

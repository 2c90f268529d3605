"""Run the map step on Dask: one task per rank.

By default a :class:`distributed.LocalCluster` of worker *processes* on this machine (one
per core, at most one per rank, one thread each: the analyses are numpy/pandas work that
holds the GIL often enough that processes beat threads). ``scheduler=ADDRESS`` (or the
``EXPLORER_DASK_SCHEDULER`` environment variable) sends the same tasks to an existing
cluster instead; its workers must see the run directory and the store at the same paths.

The driver only ever receives :class:`~explorer.job.rank_map.RankSummary` objects. Leaving
the ``with`` blocks (normally, on an error, or on Ctrl-C) closes the client and a local
cluster, which stops its worker processes.

Ctrl-C in a terminal sends SIGINT to every process of the foreground group, the local
workers included. Only the driver acts on it: the workers are started with SIGINT ignored
(see :func:`_workers_deaf_to_sigint`), so none dies mid-task printing its own traceback,
and the driver closes the cluster, which stops them.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from distributed import Client, LocalCluster, as_completed

from explorer.errors import ExplorerError, UsageError
from explorer.job.rank_map import RankSummary, analyse_rank
from explorer.processes import interrupts_deferred, sigint_ignored
from explorer.trace.step_options import StepOptions

SCHEDULER_ENV = "EXPLORER_DASK_SCHEDULER"

#: How often :func:`map_ranks` looks for finished ranks (and asks ``check_cancel``).
POLL_S = 0.1

#: ``progress(done, total, eta_seconds)`` after each rank (eta is None until one is done).
RankProgress = Callable[[int, int, "float | None"], None]


@contextmanager
def dask_client(scheduler: str | None, workers: int | None, n_tasks: int) -> Iterator[Client]:
    """A client on ``scheduler`` (or ``$EXPLORER_DASK_SCHEDULER``), else on a local cluster."""
    address = scheduler or os.environ.get(SCHEDULER_ENV) or None
    if address:
        try:
            client = Client(address, timeout="5s", set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise UsageError(
                f"cannot reach the Dask scheduler at {address} ({exc}); start it "
                f"('dask scheduler') or drop --scheduler / {SCHEDULER_ENV} to run locally"
            ) from None
        with client:
            yield client
        return
    n = workers or min(max(n_tasks, 1), os.cpu_count() or 1)
    if n < 1:
        raise UsageError("--workers must be at least 1")
    with ExitStack() as running:
        # No Ctrl-C lands in a half-built LocalCluster (it fails its own close at exit, with
        # a traceback): SIGINT is ignored meanwhile, and a SIGTERM is held until it is up.
        with interrupts_deferred(), sigint_ignored():
            cluster = running.enter_context(
                LocalCluster(
                    n_workers=n,
                    threads_per_worker=1,
                    processes=True,
                    # any free port: the scheduler's HTTP server starts even without a
                    # dashboard, and on the default 8787 a second job on the machine warns
                    # that it is taken
                    dashboard_address=":0",
                    silence_logs=logging.CRITICAL,
                )
            )
            client = running.enter_context(Client(cluster, set_as_default=False))
        yield client


def map_ranks(
    files: list[tuple[int, Path]],
    store: Path,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    use_cache: bool = True,
    steps: StepOptions | None = None,
    progress: RankProgress | None = None,
    check_cancel: Callable[[], None] | None = None,
) -> list[RankSummary]:
    """Analyse every ``(rank, file)`` in a Dask task; summaries in rank order.

    ``check_cancel`` is called every :data:`POLL_S` while ranks run; whatever it raises
    stops the map there (the viewer's Cancel), closing the cluster as it leaves."""
    token = uuid.uuid4().hex[:8]
    t0 = time.perf_counter()
    out: list[RankSummary] = []
    with dask_client(scheduler, workers, len(files)) as client:
        futures = [
            client.submit(
                analyse_rank,
                str(f),
                r,
                str(store),
                use_cache,
                steps,
                key=f"explorer-rank-{r}-{token}",
                pure=False,
            )  # fmt: skip
            for r, f in files
        ]
        finished = as_completed(futures, loop=client.loop)
        while not finished.is_empty():
            if not finished.has_ready():
                if check_cancel is not None:
                    check_cancel()
                time.sleep(POLL_S)
                continue
            summary: RankSummary = next(finished).result()
            if summary.error and not summary.unreadable:
                for other in futures:
                    other.cancel()
                raise ExplorerError(summary.error)  # already names the file
            out.append(summary)
            if progress is not None:
                done = len(out)
                eta = (time.perf_counter() - t0) / done * (len(files) - done)
                progress(done, len(files), eta)
    return sorted(out, key=lambda s: s.rank)

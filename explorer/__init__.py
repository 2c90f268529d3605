"""Explorer: why is this training step slow, and which line of my code is responsible?

``explorer.load(path)`` reads a trace; ``explorer.collect(...)`` records one (needs torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from explorer.allocator import arrow_allocator_for_limits

arrow_allocator_for_limits()  # first of all: before pandas starts Arrow

from explorer.errors import ExplorerError, TraceError  # noqa: E402

__version__ = "0.1.0"

if TYPE_CHECKING:
    from os import PathLike

    # For type checkers: calling the package is calling this function (same signature).
    from explorer.collect.session import collect as collect
    from explorer.job_api import Job
    from explorer.trace_api import Diff, Trace


def load(
    path: str | PathLike[str],
    *,
    use_cache: bool = True,
    progress: Any = None,
    execution_trace: str | PathLike[str] | None = None,
    store: str | PathLike[str] | None = None,
) -> Trace:
    """Read a trace file or directory into a :class:`Trace`.

    ``path`` may be a Kineto/Chrome JSON trace (``.json``, ``.json.gz`` or ``.json.zst``), a bare JSON array
    of events, a TensorBoard profile directory, or a directory holding one trace. A directory
    with one trace per rank loads the lowest rank; use :func:`load_ranks` for all of them.
    A columnar cache (see :mod:`explorer.store.cache`) makes the second open fast
    (``use_cache=False`` skips it); ``store`` keeps its entries in that directory instead of
    the cache directory. ``progress(fraction, message)`` is called as loading goes.
    ``execution_trace`` attaches a PyTorch Execution Trace captured with this trace.
    """
    from explorer.readers import read
    from explorer.trace_api import Trace

    return Trace(
        read(
            path,
            use_cache=use_cache,
            progress=progress,
            execution_trace=execution_trace,
            store=store,
        )
    )


def load_ranks(
    path: str | PathLike[str], *, use_cache: bool = True, store: str | PathLike[str] | None = None
) -> dict[int, Trace]:
    """Every rank's trace in a directory of per-rank files, keyed by rank."""
    from explorer.readers import read_ranks
    from explorer.trace_api import Trace

    return {r: Trace(t) for r, t in read_ranks(path, use_cache=use_cache, store=store).items()}


def diff(a: Trace, b: Trace) -> Diff:
    """What changed between two runs (see :func:`explorer.analysis.diff.diff`)."""
    from explorer.analysis.diff import diff as _diff
    from explorer.trace_api import Diff

    return Diff(_diff(a.data, b.data))


def load_job(
    run: str | PathLike[str],
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    store: str | PathLike[str] | None = None,
    use_cache: bool = True,
    step_pattern: str | None = None,
) -> Job:
    """A whole job — a directory of per-rank traces, a TensorBoard dir with several workers
    or a glob — analysed as ``explorer report RUN_DIR`` does (the ranks on Dask, the joins
    in DuckDB): its report document, the rank × step matrix, ``job.plot.heatmap()``."""
    from pathlib import Path

    from explorer.job import job_document
    from explorer.job_api import Job
    from explorer.trace.step_options import StepOptions

    return Job(
        job_document(
            str(run),
            scheduler=scheduler,
            workers=workers,
            store=None if store is None else Path(store),
            use_cache=use_cache,
            steps=None if step_pattern is None else StepOptions(step_pattern),
        )
    )


def __getattr__(name: str) -> Any:
    """``explorer.collect`` — the collector package, callable as
    ``explorer.collect(out_dir, **options)`` — is loaded on first use: it imports torch,
    which reading and analysing traces never needs (see :mod:`explorer.collect`).
    ``explorer.Trace`` too: it imports pandas, which a command answered from the store
    (a repeat ``explorer report``) never needs."""
    if name == "collect":
        import explorer.collect as package

        return package
    if name == "Trace":
        from explorer.trace_api import Trace

        return Trace
    raise AttributeError(f"module 'explorer' has no attribute {name!r}")


def annotate(name: str) -> Any:
    """A named range on the host and device timelines (``with explorer.annotate("fwd"):``)."""
    from explorer.collect import annotate as _annotate

    return _annotate(name)


__all__ = [
    "ExplorerError",
    "Trace",
    "TraceError",
    "annotate",
    "collect",
    "diff",
    "load",
    "load_job",
    "load_ranks",
]

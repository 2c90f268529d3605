"""Whole jobs: many ranks, the straggler and why.

Map (:mod:`~explorer.job.engine`, :mod:`~explorer.job.rank_map`): one Dask task per rank
reads and analyses it and writes its tables to the store. Reduce
(:mod:`~explorer.job.reduce`, :mod:`~explorer.job.straggler`): DuckDB joins over the stored
tables. :func:`job_document` runs both and returns the report document that
:mod:`explorer.job.render` formats. The driver never holds a rank's events.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer.job.run_dir import is_glob
from explorer.readers.execution_trace import is_execution_trace
from explorer.readers.rank_dir import trace_files

if TYPE_CHECKING:
    from explorer.job.document import JOB_SCHEMA_VERSION, job_document


def __getattr__(name: str) -> Any:
    # The document imports Dask's distributed scheduler (~1.2 s): every verb asks is_job
    # first, and a single trace's report must not pay for it.
    if name in ("JOB_SCHEMA_VERSION", "job_document"):
        from explorer.job import document

        return getattr(document, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_job(path: str) -> bool:
    """True when ``path`` stands for several ranks: a glob, or a directory (run dir or
    TensorBoard log dir) holding two or more timeline traces."""
    if is_glob(path) and not Path(path).exists():
        return True
    p = Path(path)
    if not p.is_dir():
        return False
    return sum(1 for f in trace_files(p) if not is_execution_trace(f)) >= 2


__all__ = ["JOB_SCHEMA_VERSION", "is_job", "job_document"]

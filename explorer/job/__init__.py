"""Whole jobs: many ranks, the straggler and why.

Map (:mod:`~explorer.job.engine`, :mod:`~explorer.job.rank_map`): one Dask task per rank
reads and analyses it and writes its tables to the store. Reduce
(:mod:`~explorer.job.reduce`, :mod:`~explorer.job.straggler`): DuckDB joins over the stored
tables. :func:`job_document` runs both and returns the report document that
:mod:`explorer.job.render` formats. The driver never holds a rank's events.
"""

from __future__ import annotations

from pathlib import Path

from explorer.job.document import JOB_SCHEMA_VERSION, job_document
from explorer.job.run_dir import is_glob
from explorer.readers.execution_trace import is_execution_trace
from explorer.readers.rank_dir import trace_files


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

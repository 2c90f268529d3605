"""Directories of traces: one trace, or one per rank (``rank0.json``, ``..._rank-3...``;
the trace's own ``distributedInfo`` rank wins over its name), perhaps with the Execution
Trace captured beside them. :func:`read` gives the lowest rank and says which others the
directory holds; :func:`read_all` gives every rank (the job route, :mod:`explorer.job`,
finds a run's ranks with :func:`trace_files` and :func:`rank_of` too)."""

from __future__ import annotations

import re
from pathlib import Path

from explorer.errors import TraceError
from explorer.readers.execution_trace import is_execution_trace
from explorer.readers.json_trace import Options, is_explorer_output
from explorer.readers.json_trace import read as read_file
from explorer.readers.tensorboard import newest_run
from explorer.trace.model import TraceData

_TRACE_SUFFIXES = (".json", ".json.gz", ".json.zst")
_RANK = re.compile(r"rank[-_]?(\d+)", re.I)


def _is_trace_file(p: Path) -> bool:
    return (
        not p.name.startswith(".")
        and p.name.endswith(_TRACE_SUFFIXES)
        and p.is_file()
        and not is_explorer_output(p)
    )


def trace_files(directory: Path) -> list[Path]:
    """Trace files a directory stands for (see :mod:`explorer.readers`)."""
    directory = newest_run(directory)
    files = sorted(p for p in directory.iterdir() if _is_trace_file(p))
    if not files:
        files = sorted(
            p
            for p in directory.rglob("*")
            if not any(part.startswith(".") for part in p.relative_to(directory).parts[:-1])
            and _is_trace_file(p)
        )
    return files


def rank_of(path: Path, trace: TraceData | None = None) -> int:
    """The rank of a trace: its own (``distributedInfo``) when known, else its file name's."""
    if trace is not None and trace.rank >= 0:
        return trace.rank
    m = _RANK.search(path.name)
    return int(m.group(1)) if m else -1


def read(path: Path, options: Options) -> TraceData:
    """The directory's trace, the lowest rank's when it holds several."""
    files = trace_files(path)
    ets = [f for f in files if is_execution_trace(f)]
    kineto = [f for f in files if f not in ets]
    if not kineto:
        raise TraceError(
            path,
            "this directory holds no trace files (*.json, *.json.gz, *.json.zst)",
            "point at a trace file, a TensorBoard log dir or a directory of rank traces",
        )
    if len(kineto) > 1:
        ranked = sorted(kineto, key=lambda f: (rank_of(f), f.name))
        trace = read_file(ranked[0], options)
        trace.metadata["warnings"] = list(trace.metadata.get("warnings", [])) + [
            f"{path} holds {len(kineto)} traces; showing {ranked[0].name} "
            f"(use explorer.load_ranks for all)"
        ]
    else:
        trace = read_file(kineto[0], options)
    return trace


def execution_trace_beside(path: Path) -> Path | None:
    """The Execution Trace in the directory, when it holds exactly one."""
    ets = [f for f in trace_files(path) if is_execution_trace(f)]
    return ets[0] if len(ets) == 1 else None


def read_all(path: Path, options: Options) -> dict[int, TraceData]:
    """Every rank's trace in the directory, keyed by rank (file order when unknown)."""
    out: dict[int, TraceData] = {}
    quiet = Options(use_cache=options.use_cache, store=options.store)
    for k, f in enumerate(f for f in trace_files(path) if not is_execution_trace(f)):
        t = read_file(f, quiet)
        r = rank_of(f, t)
        out[r if r >= 0 and r not in out else k] = t
    return dict(sorted(out.items()))

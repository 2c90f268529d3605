"""Write a trace for other tools: Perfetto protobuf (``.pftrace``) for ui.perfetto.dev and
Chrome trace JSON (``.json`` / ``.json.gz``) for tools that only read JSON.

Both carry the same content: the trace's slices, flows, counters and instants on a layout
of processes, threads and devices, plus Explorer's own results (findings, critical path)
as rows of their own.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer.errors import UsageError
from explorer.trace.model import TraceData

if TYPE_CHECKING:
    from explorer.export.chrome import ChromeExport
    from explorer.export.perfetto import PerfettoExport

#: Output formats and the file name endings that select them.
FORMATS: dict[str, tuple[str, ...]] = {
    "perfetto": (".pftrace", ".perfetto-trace"),
    "chrome": (".json", ".json.gz"),
}


def format_for_path(path: str | Path) -> str:
    """The export format a file name asks for; a clear error when it asks for none."""
    name = Path(path).name.lower()
    for fmt, endings in FORMATS.items():
        if name.endswith(endings):
            return fmt
    known = ", ".join(e for endings in FORMATS.values() for e in endings)
    raise UsageError(
        f"{path}: cannot tell the export format from the file name — "
        f"end it with one of {known}, or pass --format perfetto|chrome"
    )


def to_perfetto(trace: TraceData, path: str | Path, **options: Any) -> PerfettoExport:
    """Write ``trace`` as a Perfetto protobuf trace; returns a summary of what was written."""
    from explorer.export.perfetto import to_perfetto as write

    return write(trace, path, **options)


def to_chrome(trace: TraceData, path: str | Path, **options: Any) -> ChromeExport:
    """Write ``trace`` as Chrome trace JSON (gzip when ``path`` ends in ``.gz``)."""
    from explorer.export.chrome import to_chrome as write

    return write(trace, path, **options)


def export(
    trace: TraceData, path: str | Path, format: str | None = None, **options: Any
) -> PerfettoExport | ChromeExport:
    """Write ``trace`` in ``format`` (default: from the file name)."""
    fmt = format or format_for_path(path)
    if fmt == "perfetto":
        return to_perfetto(trace, path, **options)
    if fmt == "chrome":
        return to_chrome(trace, path, **options)
    raise UsageError(f"unknown export format {fmt!r}: use perfetto or chrome")


__all__ = ["FORMATS", "export", "format_for_path", "to_chrome", "to_perfetto"]

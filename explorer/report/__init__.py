"""The headless report: one document of analysis results, rendered in every format.

:func:`document` runs the analyses and gathers their results into plain data (the JSON
schema in :mod:`explorer.report.formats.json_report`; the work is in
:mod:`explorer.report.trace_document`), the critical path included;
:func:`explorer.report.sections.trace_report` turns that data into the typed
:class:`~explorer.report.document.Document` that the job report and the diff build too,
and :mod:`explorer.report.formats` renders it, one module per format. Renderers only
format: every number they show is already in the document, so the formats always agree
with each other and with ``trace.findings()``/``trace.breakdown()``.

This package imports no analysis until :func:`document` is called: rendering a document
read back from the store (a repeat ``explorer report``, :func:`stored_document`) needs
neither pandas nor the analyses.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer.report import formats
from explorer.report.sections import trace_report

if TYPE_CHECKING:
    from explorer.trace.model import TraceData

SCHEMA_VERSION = 2
FORMATS: tuple[str, ...] = formats.FORMATS
#: The stored name of a report's document (:data:`explorer.store.results.STORED_RESULTS`).
STORED_DOCUMENT = "report_document"


def document(trace: TraceData, step: int | None = None, top: int = 10) -> dict[str, Any]:
    """Everything a report shows, as JSON-able data (see
    :func:`explorer.report.trace_document.document`)."""
    from explorer.report.trace_document import document as gather

    return gather(trace, step, top)


def import_analyses() -> None:
    """Import what :func:`document` computes with (the analyses, their detectors, scipy's
    graph search): for the time a first report's load waits on its decode workers
    (:func:`explorer.processes.while_waiting`), where it costs the answer nothing. Not
    under a hard memory limit: scipy is then loaded only once the room for it is checked
    (:func:`~explorer.trace.memory_limits.ensure_room`)."""
    import explorer.report.trace_document  # noqa: F401 - the analyses it runs
    from explorer.trace.memory_limits import hard_limit

    if hard_limit() is None:
        import scipy.sparse.csgraph  # noqa: F401 - the critical path's and replays' search


def stored_document(
    trace_file: Path,
    step: int | None,
    top: int,
    step_pattern: str | None,
    step_nesting: str,
    root: Path | None = None,
) -> dict[str, Any] | None:
    """The document a report of ``trace_file`` (with these options) stored in the trace
    cache, when the cache holds the file's tables as it is now and that document beside
    them, computed by this Explorer's analysis code; else None (and nothing is computed).

    Read with the standard library only, so that a repeat report answers without loading
    the trace: the document :func:`document` would read back. Its trace part (path,
    warnings) was taken from this entry's metadata when it was stored, as a reopened trace
    gives it; only this Explorer's version is filled in."""
    from explorer import __version__
    from explorer.store.cache import cached_entry
    from explorer.store.header import StoreDamaged, read_header
    from explorer.store.result_files import (
        RESULTS_DIR,
        read_plain,
        result_digest,
        tables_digest,
    )

    entry = cached_entry(trace_file, root=root)
    if entry is None:
        return None
    try:
        header = read_header(entry)
    except (StoreDamaged, OSError):
        return None
    digest = result_digest(
        tables_digest(header), STORED_DOCUMENT, (step, top), step_pattern, step_nesting
    )
    doc = read_plain(entry / RESULTS_DIR / digest, STORED_DOCUMENT)
    if not isinstance(doc, dict) or not isinstance(doc.get("trace"), dict):
        return None
    doc["explorer_version"] = __version__
    return doc


def render(
    trace: TraceData,
    format: str = "text",
    step: int | None = None,
    top: int = 10,
    color: bool = False,
) -> str:
    """The report of ``trace`` as a string in ``format`` (one of :data:`FORMATS`)."""
    formats.check_format(format)
    return render_document(document(trace, step=step, top=top), format, color)


def render_document(doc: dict[str, Any], format: str = "text", color: bool = False) -> str:
    """A report document (:func:`document`) as a string in ``format``: layout only."""
    return formats.render(trace_report(doc), format, color)


__all__ = [
    "FORMATS",
    "SCHEMA_VERSION",
    "document",
    "render",
    "render_document",
    "stored_document",
]

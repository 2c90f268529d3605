"""The job report in every report format: :mod:`explorer.job.render.sections` builds the
report :class:`~explorer.report.document.Document` from the job document and
:mod:`explorer.report.formats` renders it (JSON is the job document itself)."""

from __future__ import annotations

from typing import Any

from explorer.job.render.sections import job_report
from explorer.report import formats

FORMATS: tuple[str, ...] = formats.FORMATS


def render(doc: dict[str, Any], format: str = "text") -> str:
    return formats.render(job_report(doc), format)

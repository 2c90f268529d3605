"""Rich displays for Jupyter: the HTML a :class:`~explorer.Trace`, its findings, a report,
a diff and a job show as ``_repr_html_``.

A renderer of documents that exist already — the report document
(:func:`explorer.report.document`), :meth:`Finding.to_dict
<explorer.analysis.finding.Finding.to_dict>`, a
:class:`~explorer.analysis.diff.TraceDiff`, the job report document — into one
self-contained HTML fragment each (inline CSS and SVG charts from :mod:`explorer.plot`,
no script, nothing fetched). Without matplotlib the fragments are the same less their
charts, and say how to get them. See :mod:`explorer.notebook.html`.
"""

from __future__ import annotations

from explorer.notebook.html import diff_html, findings_html, job_html, report_html

__all__ = ["diff_html", "findings_html", "job_html", "report_html"]

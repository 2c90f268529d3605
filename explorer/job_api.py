"""The user-facing :class:`Job` (what :func:`explorer.load_job` returns): a job report
document with its tables as DataFrames, its figures and its notebook display.

Thin, like :class:`~explorer.trace_api.Trace`: the analysis is
:func:`explorer.job.job_document` (map on Dask, reduce in DuckDB), the text
:mod:`explorer.job.render`, the chart :mod:`explorer.plot.heatmap`, the display
:mod:`explorer.notebook`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from explorer.plot import JobPlots


class Job:
    """One analysed job. ``document`` is the job report's data (``docs/job_report_schema.md``)."""

    __slots__ = ("document",)

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document

    @property
    def step_matrix(self) -> pd.DataFrame:
        """Step time in ns per rank (rows) and step (columns); NaN where a rank lacks it."""
        d = self.document
        ranks = sorted(int(r) for r in d["step_matrix"])
        return pd.DataFrame(
            [[float("nan") if v is None else v for v in d["step_matrix"][str(r)]] for r in ranks],
            index=pd.Index(ranks, name="rank"),
            columns=pd.Index([int(s) for s in d["steps"]], name="step"),
        )

    @property
    def ranks(self) -> pd.DataFrame:
        """One row per rank present: its time, waits, clock offset (the job report's table)."""
        rows = [
            {k: v for k, v in r.items() if not isinstance(v, (list, dict))}
            for r in self.document["ranks"]
        ]
        return pd.DataFrame(rows)

    @property
    def plot(self) -> JobPlots:
        """The job's figures: ``job.plot.heatmap()`` (rank × step)."""
        from explorer.plot import JobPlots

        return JobPlots(self.document)

    def render(self, format: str = "text") -> str:
        """The job report in ``format`` (text, markdown, json or html)."""
        from explorer.job.render import render

        return render(self.document, format)

    def __str__(self) -> str:
        return self.render("text")

    def __repr__(self) -> str:
        d = self.document
        return f"Job({d['run']!r}, {d['ranks_present']} ranks, {len(d['steps'])} steps)"

    def _repr_html_(self) -> str:
        from explorer.notebook import job_html

        return job_html(self.document)

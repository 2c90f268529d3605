"""Analyses: pure functions of a trace that return DataFrames or small dataclasses.

- :func:`~explorer.analysis.steps.steps` — the training steps (host ranges);
  :func:`~explorer.analysis.steps.attributed_steps` — each widened to the device work it
  launched, the windows breakdown and findings measure in.
- :func:`~explorer.analysis.slice_steps.slice_steps` — the step of every slice (device work:
  its launch's), the one answer to "which step is this" (times: ``step_at``).
- :func:`~explorer.analysis.breakdown.breakdown` — step time per device in categories that
  add up exactly.
- :func:`~explorer.analysis.findings.findings` — ranked problems with evidence and lines.
- :func:`~explorer.analysis.attribution.slice_sources` — the user line of every slice
  (:func:`~explorer.analysis.attribution.user_line` for one: the only answer there is).
- :func:`~explorer.analysis.by_source.by_source` — cost per user line.
- :mod:`~explorer.analysis.graph_layout`, :mod:`~explorer.analysis.memory_view` — what the
  dependency graph and memory panels draw, computed here so the panels only draw.

None of them prints, imports Qt or torch, or reads anything but the trace; results are
kept in ``trace.memo`` (:mod:`explorer.trace.memo`).
"""

"""The JSON format: a report's data itself, serialised. The trace report's versioned schema
is below (the job report's is ``docs/job_report_schema.md``; a diff's is ``TraceDiff.to_dict``).

Schema version 2 (``schema_version: 2``; a field is only ever added within a version;
version 2 renamed ``trace.events`` of version 1 to ``trace.slices``, which it always counted)::

    {
      "schema_version": 2,
      "explorer_version": "0.1.0",
      "trace": {"path": str, "format": str, "rank": int, "world_size": int,
                "slices": int, "span_ns": int, "warnings": [str]},
      "synthetic": bool,              # true: made by explorer.scenarios, not measured
      "test_backend": str,            # "" or what the test backend was (neuron on the CPU)
      "devices": {"devices": [str],   # the accelerator(s) as the trace names them ("neuron:0");
                  "backend": str,     #   [] on a CPU-only run; the PrivateUse1 backend's name;
                  "device_time_recorded": bool,  # false: no device timeline, host times only
                  "sentence": str},   # what the report's head says about it
      "selected_step": int | null,    # --step N, else null
      "categories": ["compute", "data_movement", "communication", "host_bound",
                     "sync_stall", "compile", "other_idle"],
      "summary": {"steps": int, "total_ns": int, "mean_step_ns": int,   # whole steps only
                  "median_step_ns": int,
                  "partial_steps": [{"step": int, "reason": str,   # not whole; left_out:
                                     "left_out": bool}],  # of the summary (unless all are)
                  "step_origin": {"annotation": str,   # "ProfilerStep#N", the --steps REGEX,
                                                       # or "" (the whole trace is one step)
                                  "nesting": "outermost" | "innermost",
                                  "nested_left_out": int},  # matches at the other level
                  "before_capture": {"ops": int,    # device ops launched before the capture:
                                     "end_ns": int | null},  # no step's; the last's end
                  "breakdown": {device: {category: ns}},    # over the whole listed steps
                  "time_lost_by_kind": {kind: ns}},         # all findings, before --top
      "steps": [{"step": int, "name": str, "start_ns": int, "dur_ns": int,
                 "partial": bool, "partial_reason": str,   # not whole: cut, profiler stop
                 "breakdown": {device: {category: ns}}}],  # categories sum to dur_ns
      "findings": [  # ranked by predicted_saving_ns (then time_lost_ns), at most --top
        {"kind": str, "title": str, "time_lost_ns": int, "share": float (0-1),
         "predicted_saving_ns": int,  # what its fix saves over its steps (what-if replay)
         "predicted_note": str,       # why that is well under time_lost_ns ("" if not)
         "steps": [int], "ranges": [[start_ns, end_ns]], "evidence": [slice id],
         "source_lines": [{"file": str, "line": int, "function": str}],
         "explanation": str, "recommendation": str, "device": str, "details": {...}}],
      "findings_total": int,          # before the --top cut
      "no_finding": str,              # what "no finding" means here: the detectors' thresholds
      "by_source": [{"file", "line", "function", "host_ns", "device_ns", "stall_ns",
                     "copy_bytes", "fallback_count", "sync_count", "count"}],
      "memory": {"peaks": [{"device": str, "peak_bytes": int, "ts": int}],
                 "timeline": {device: {"ts": [int], "allocated": [int], "reserved": [int]}}},
      "critical_path": {...},         # the critical-path analysis' to_dict(), plus "segments"
                                      # (the first 200), "segments_total", "slices_total" and
                                      # "longest_segments" (the 10 longest, in path order)
      "window": null | {              # a report of some steps only (--step-range, or what
                                      # fits in memory): which, of how many, and why
          "first_step": int, "last_step": int, "steps": int, "whole_steps": int,
          "slices": int, "whole_slices": int, "start_ns": int, "end_ns": int, "reason": str}
    }

In a window's report, ``evidence`` and ``critical_path.slices`` are the whole trace's slice
ids, as the viewer shows them.

All times are int64 nanoseconds; ``start_ns``/``ts``/``ranges`` are relative to the trace's
start (``metadata["start_ns"]``), like ``slices.ts``. See also ``docs/report_schema.md``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from explorer.report.document import Document

NAME = "json"
ORDER = 2


def render(document: Document, color: bool = False) -> str:
    """The document's data as indented JSON (numpy scalars, if any slipped in, become
    numbers); ``color`` is ignored."""
    return json.dumps(document.data, indent=2, ensure_ascii=False, default=_default) + "\n"


def _default(v: Any) -> Any:
    if isinstance(v, (np.generic, np.ndarray)):
        return v.tolist()  # a numpy scalar's tolist() is its Python number
    raise TypeError(f"not JSON serialisable: {type(v).__name__}")

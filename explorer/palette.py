"""The one colour palette of Explorer: slice kinds, step-breakdown categories and
critical-path categories, as ``#rrggbb`` strings.

Qt-free so that the viewer (``explorer.ui``) and the HTML report (``explorer.report``)
read the same colours: compute is the same blue in a report's breakdown bar, on the
timeline's step bars and on a kernel slice. Related things share a hue on purpose —
a kernel, the ``compute`` category and the critical path's ``device_compute`` are one
colour; copies, ``data_movement`` and the path's ``data_movement`` another.
"""

from __future__ import annotations

_BLUE = "#3d85c6"  # device compute
_PURPLE = "#8e5cc4"  # communication
_ORANGE = "#e69138"  # data movement
_RED = "#d9453d"  # synchronisation
_GREEN = "#57a773"  # the host (runtime calls, host-bound time)
_PINK = "#f28fb6"  # compilation: a hue of its own, far from communication's purple
_GREY = "#c8ccd0"  # idle, other

#: Base colour of each slice kind (``explorer.trace.model.KINDS``).
KIND_COLORS: dict[str, str] = {
    "kernel": _BLUE,
    "collective": _PURPLE,
    "memcpy": _ORANGE,
    "memset": "#f1c232",
    "copy": "#e06c1f",
    "sync": _RED,
    "runtime": _GREEN,
    "cpu_op": "#45a5a3",
    "python": "#9aa5ad",
    "annotation": "#c9b458",
    "device_annotation": "#b7a96b",
    "fallback": "#c2185b",
    "compile": _PINK,
    "other": "#b0b7bf",
}

#: What a legend says for each kind.
KIND_LABELS: dict[str, str] = {
    "kernel": "compute (kernel)",
    "collective": "collective",
    "memcpy": "memcpy",
    "memset": "memset",
    "copy": "copy",
    "sync": "sync",
    "runtime": "runtime",
    "cpu_op": "cpu op",
    "python": "python",
    "annotation": "annotation",
    "device_annotation": "device annotation",
    "fallback": "CPU fallback",
    "compile": "compile",
    "other": "other",
}

#: Colours of the step breakdown categories (``explorer.analysis.breakdown.CATEGORIES``).
CATEGORY_COLORS: dict[str, str] = {
    "compute": _BLUE,
    "data_movement": _ORANGE,
    "communication": _PURPLE,
    "host_bound": _GREEN,
    "sync_stall": _RED,
    "compile": _PINK,
    "other_idle": _GREY,
}

#: Colours of the critical path's categories (``explorer.analysis.critical_path``).
CRITICAL_PATH_COLORS: dict[str, str] = {
    "host_compute": "#45a5a3",
    "compile": _PINK,
    "input": "#a0785a",
    "host_runtime": _GREEN,
    "launch_overhead": "#f1c232",
    "device_compute": _BLUE,
    "data_movement": _ORANGE,
    "communication": _PURPLE,
    "sync_wait": _RED,
    "idle_gap": _GREY,
}

#: What people read for each breakdown category (the labels beside those colours in a
#: legend; the reports' tables say the same words).
CATEGORY_LABELS: dict[str, str] = {
    "compute": "compute",
    "data_movement": "data movement",
    "communication": "communication",
    "host_bound": "host-bound idle",
    "sync_stall": "sync stall",
    "compile": "compile",
    "other_idle": "other idle",
}

#: What people read for each critical-path category.
CRITICAL_PATH_LABELS: dict[str, str] = {
    "host_compute": "host compute",
    "compile": "compile",
    "input": "input (loader)",
    "host_runtime": "host runtime",
    "launch_overhead": "launch overhead",
    "device_compute": "device compute",
    "data_movement": "data movement",
    "communication": "communication",
    "sync_wait": "sync wait",
    "idle_gap": "idle gaps",
}

#: Colour of anything not in the tables above.
UNKNOWN = "#999999"

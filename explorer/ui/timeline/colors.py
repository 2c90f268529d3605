"""Colours by slice kind (and by breakdown category), shared by the timeline and legends.

Each kind has a base colour; every slice name gets one of :data:`SHADES` shades of it (by
its name code), so adjacent different kernels stay distinguishable while the kind stays
readable at a glance. A colour id is ``kind_index * SHADES + shade``; the timeline batches
its rectangles by colour id, one ``drawRects`` call per id.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from PyQt6.QtGui import QColor

from explorer.trace.model import KINDS

#: Base colour of each kind, chosen so compute, copies, syncs and the host read apart.
KIND_COLORS: dict[str, str] = {
    "kernel": "#3d85c6",
    "collective": "#8e5cc4",
    "memcpy": "#e69138",
    "memset": "#f1c232",
    "copy": "#e06c1f",
    "sync": "#d9453d",
    "runtime": "#57a773",
    "cpu_op": "#45a5a3",
    "python": "#9aa5ad",
    "annotation": "#c9b458",
    "device_annotation": "#b7a96b",
    "fallback": "#c2185b",
    "compile": "#a87fcf",
    "other": "#b0b7bf",
}

#: What the legend says for each kind.
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
    "compute": "#3d85c6",
    "data_movement": "#e69138",
    "communication": "#8e5cc4",
    "host_bound": "#57a773",
    "sync_stall": "#d9453d",
    "compile": "#a87fcf",
    "other_idle": "#c8ccd0",
}

SHADES = 3
_SHADE_FACTORS = (100, 115, 88)  # QColor.lighter() percentages


def kind_index(kinds: pd.Series) -> np.ndarray:
    """Index into :data:`KINDS` of every slice's kind (``other`` for unknown)."""
    cat = pd.Categorical(kinds.astype(str), categories=list(KINDS))
    codes = np.asarray(cat.codes, dtype=np.int16)
    codes[codes < 0] = KINDS.index("other")
    return codes


def color_ids(kinds: pd.Series, names: pd.Series) -> np.ndarray:
    """Colour id of every slice: its kind's base colour, shaded by its name."""
    name_codes = np.asarray(pd.Categorical(names).codes, dtype=np.int64)
    shade = (np.abs(name_codes * 2654435761) % SHADES).astype(np.int16)
    return (kind_index(kinds) * SHADES + shade).astype(np.int16)


def palette() -> list[QColor]:
    """The QColor of every colour id, in id order."""
    out: list[QColor] = []
    for kind in KINDS:
        base = QColor(KIND_COLORS.get(kind, KIND_COLORS["other"]))
        for factor in _SHADE_FACTORS:
            out.append(base.lighter(factor) if factor >= 100 else base.darker(200 - factor))
    return out


def kind_color(kind: str) -> QColor:
    """The base colour of one kind."""
    return QColor(KIND_COLORS.get(kind, KIND_COLORS["other"]))

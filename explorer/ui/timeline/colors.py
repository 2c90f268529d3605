"""Slice colours for the timeline: the kinds' base colours of :mod:`explorer.palette`, shaded.

Each kind has a base colour; every slice name gets one of :data:`SHADES` shades of it (by
its name code), so adjacent different kernels stay distinguishable while the kind stays
readable at a glance. A colour id is ``kind_index * SHADES + shade``; the timeline batches
its rectangles by colour id, one ``drawRects`` call per id.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from PyQt6.QtGui import QColor

from explorer.palette import KIND_COLORS
from explorer.trace.model import KINDS

SHADES = 3
_SHADE_FACTORS = (100, 115, 88)  # QColor.lighter() percentages


def category_codes(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, categories as str)`` of a column: a categorical's own codes (no per-row
    conversion: 10M slices cost one pass over int codes), else those of its values."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes, categories = column.array.codes, column.cat.categories  # a view, no copy
    else:
        cat = pd.Categorical(column.astype(str))
        codes, categories = cat.codes, cat.categories
    return np.asarray(codes), np.asarray(categories.astype(str), dtype=object)


def kind_index(kinds: pd.Series) -> np.ndarray:
    """Index into :data:`KINDS` of every slice's kind (``other`` for unknown): looked up
    once per category, then gathered by code."""
    codes, categories = category_codes(kinds)
    other = KINDS.index("other")
    per_category = np.array([KINDS.index(k) if k in KINDS else other for k in categories] + [other])
    return per_category[codes].astype(np.int16)  # code -1 (missing) takes the last: other


def color_ids(kinds: pd.Series, names: pd.Series) -> np.ndarray:
    """Colour id of every slice: its kind's base colour, shaded by its name."""
    name_codes = category_codes(names)[0].astype(np.int64)
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

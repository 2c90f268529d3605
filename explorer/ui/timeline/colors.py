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

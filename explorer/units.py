"""Human units at the edges: time is int64 ns inside Explorer, bytes are ints.

The one home for how a duration or a byte count reads, in the reports, the detectors'
sentences and the viewer alike: about three significant digits in the largest unit that
shows at least 1 of it (``"1.23 ms"``, ``"36.0 µs"``, ``"1.50 KiB"``). A missing value (None,
NaN) reads as "".
"""

from __future__ import annotations

import math
from typing import Any

_TIME_UNITS = ((1e9, "s"), (1e6, "ms"), (1e3, "µs"))
_BYTE_UNITS = ((2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"))


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _scaled(value: float, units: tuple[tuple[float, str], ...], base: str) -> str:
    """``value`` in the largest unit that shows at least 1 of it once rounded, with two
    decimals under 10, one under 100, none above (so digits line up in a column)."""
    for scale, unit in units:
        shown = abs(value) / scale
        digits = 2 if shown < 10 else 1 if shown < 100 else 0
        if round(shown, digits) >= 1:
            return f"{value / scale:.{digits}f} {unit}"
    return f"{value:.0f} {base}"


def fmt_ns(ns: Any) -> str:
    """``1234567`` → ``"1.23 ms"``; ``999_999_999`` → ``"1.00 s"``; None/NaN → ``""``."""
    if _missing(ns):
        return ""
    return _scaled(float(ns), _TIME_UNITS, "ns")


def fmt_bytes(n: Any) -> str:
    """``1536`` → ``"1.50 KiB"``; ``512`` → ``"512 B"``; None/NaN → ``""``."""
    if _missing(n):
        return ""
    return _scaled(float(n), _BYTE_UNITS, "B")

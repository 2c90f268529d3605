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


_RATE_UNITS = ((1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s"))


def fmt_rate(bytes_per_s: Any) -> str:
    """A bandwidth in the largest decimal unit that shows at least 1 of it (network and bus
    rates are quoted in powers of ten): ``2.25e9`` → ``"2.25 GB/s"``, ``11_100`` →
    ``"11.1 kB/s"`` (not ``"1.11e-05 GB/s"``); None/NaN → ``""``."""
    if _missing(bytes_per_s):
        return ""
    return _scaled(float(bytes_per_s), _RATE_UNITS, "B/s")


def plural(n: int, word: str, many: str | None = None) -> str:
    """``"1 segment"``, ``"3 segments"`` (``many``: an irregular plural)."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"


_OPENERS = {"(": ")", "[": "]", "<": ">", "{": "}"}
_BREAKS = " /,;:"


def shorten(text: Any, width: int) -> str:
    """``text`` in at most ``width`` characters: cut after a whole word (at a space, ``/``,
    ``,``, ``;`` or ``:`` in the second half of the room) rather than mid-word, marked ``…``,
    and with every bracket it opened closed again, so a cut name never reads
    ``thread 16717 (explo`` or leaves a ``(`` open."""
    text = str(text)
    if len(text) <= width:
        return text
    room = max(width - 1, 1)
    while True:
        head = text[:room]
        cut = max(head.rfind(c) for c in _BREAKS)
        if cut >= room // 2:
            head = head[: cut + (text[cut] != " ")]  # keep a "/" or ","; drop a space
        head = head.rstrip(" /,;:")
        closers = _unclosed(head)
        if len(head) + 1 + len(closers) <= width or room == 1:
            return head + "…" + closers
        room -= 1


def _unclosed(text: str) -> str:
    """The closing brackets ``text`` leaves open, innermost first."""
    stack: list[str] = []
    for ch in text:
        if ch in _OPENERS:
            stack.append(_OPENERS[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
    return "".join(reversed(stack))

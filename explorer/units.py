"""Human units at the edges: time is int64 ns inside Explorer, bytes are ints."""

from __future__ import annotations


def fmt_ns(ns: float) -> str:
    """``1234567`` → ``"1.23 ms"``; picks the unit so 1–999 of it shows."""
    v = float(ns)
    a = abs(v)
    if a >= 1e9:
        return f"{v / 1e9:.3g} s"
    if a >= 1e6:
        return f"{v / 1e6:.3g} ms"
    if a >= 1e3:
        return f"{v / 1e3:.3g} µs"
    return f"{v:.0f} ns"


def fmt_bytes(n: float) -> str:
    """``1536`` → ``"1.5 KiB"``."""
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.3g} {unit}"
        v /= 1024
    return f"{v} B"

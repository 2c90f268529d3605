"""A loading progress bar on stderr, only when a person is watching (a TTY)."""

from __future__ import annotations

import sys
from collections.abc import Callable


def terminal_progress(stream=None) -> Callable[[float, str], None] | None:
    """A ``progress(fraction, message)`` callback drawing one line, or None off a terminal."""
    out = stream or sys.stderr
    if not getattr(out, "isatty", lambda: False)():
        return None

    def show(fraction: float, message: str) -> None:
        width = 24
        done = int(width * max(0.0, min(1.0, fraction)))
        out.write(f"\r[{'#' * done}{'.' * (width - done)}] {message:<32}")
        if fraction >= 1.0:
            out.write("\r" + " " * (width + 36) + "\r")
        out.flush()

    return show


def rank_progress(stream=None) -> Callable[[int, int, float | None], None]:
    """``progress(done, total, eta_s)`` for a job: a redrawn line on a TTY, else one line
    per tenth of the ranks (so a CI log shows it moving without a line per rank)."""
    out = stream or sys.stderr
    tty = bool(getattr(out, "isatty", lambda: False)())

    def show(done: int, total: int, eta_s: float | None) -> None:
        eta = f", about {eta_s:.0f} s left" if eta_s is not None and done < total else ""
        msg = f"explorer: {done}/{total} ranks analysed{eta}"
        if tty:
            out.write(f"\r{msg:<60}" + ("\n" if done == total else ""))
        elif done == total or done % max(total // 10, 1) == 0:
            out.write(msg + "\n")
        out.flush()

    return show

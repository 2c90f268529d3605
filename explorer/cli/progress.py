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

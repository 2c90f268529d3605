"""A loading progress bar on stderr, only when a person is watching (a TTY)."""

from __future__ import annotations

import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

#: A load quicker than this draws nothing: a bar that flashes by is noise.
SHOW_AFTER_S = 1.0


def _file_size(source: str | Path | None) -> int:
    """Bytes on disk of the trace being loaded; 0 when unknown (standard input, a
    directory), and then the line shows no rate."""
    if source is None or str(source) == "-":
        return 0
    try:
        st = os.stat(source)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def progress_line(fraction: float, message: str, elapsed_s: float, size: int) -> str:
    """``[####....]  45%  12.3 MB/s  about 3 s left  decoding events``: the rate is the
    file's bytes times the fraction done over the time taken, the estimate the time taken
    scaled by what is left."""
    width = 24
    f = max(0.0, min(1.0, fraction))
    done = int(width * f)
    parts = [f"[{'#' * done}{'.' * (width - done)}] {f:4.0%}"]
    if size and elapsed_s > 0 and f > 0:
        parts.append(f"{size * f / elapsed_s / 1e6:,.1f} MB/s")
    if 0 < f < 1:
        parts.append(f"about {elapsed_s * (1 - f) / f:,.0f} s left")
    parts.append(message)
    return "  ".join(parts)


def terminal_progress(
    stream: TextIO | None = None,
    *,
    source: str | Path | None = None,
    after_s: float = SHOW_AFTER_S,
) -> Callable[[float, str], None] | None:
    """A ``progress(fraction, message)`` callback redrawing one line on ``stream`` (stderr)
    once a load has taken ``after_s`` seconds, with the bytes/s of ``source`` (the file
    being loaded) and an estimate of the time left; None when the stream is not a TTY."""
    out = stream or sys.stderr
    if not out.isatty():
        return None
    size = _file_size(source)
    started = time.perf_counter()
    drawn = 0  # width of the line on screen, to blank it at the end

    def show(fraction: float, message: str) -> None:
        nonlocal drawn
        elapsed = time.perf_counter() - started
        if fraction >= 1.0:
            if drawn:
                out.write("\r" + " " * drawn + "\r")
                out.flush()
            return
        if elapsed < after_s:
            return
        line = "explorer: " + progress_line(fraction, message, elapsed, size)
        out.write("\r" + line.ljust(drawn))
        out.flush()
        drawn = max(drawn, len(line))

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

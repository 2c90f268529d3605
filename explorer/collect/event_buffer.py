"""Explorer's own events, recorded while the profiler runs and merged into its trace later.

Hooks (syncs, copies, fallbacks, compile work, system samples) append plain Chrome-trace
event dicts here with *absolute* wall-clock nanoseconds (``time.time_ns()``). Kineto writes
``ts`` in µs relative to the top-level ``baseTimeNanoseconds`` on the same (realtime) clock,
so the writer converts with one subtraction when it merges; nothing here needs to know the
profiler's base.

The user's source line of an event is the innermost frame of the Python stack that is not
torch, not this package and not the standard library or site-packages — the line a person
would change.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import time
from types import CodeType, FrameType
from typing import Any

from explorer.trace.source import is_explorer_file, is_library_path

COLLECT_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _library_prefixes() -> tuple[str, ...]:
    """Directories whose frames are never 'the user's line' (torch, stdlib, site-packages)."""
    prefixes = {COLLECT_DIR}
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        if paths.get(key):
            prefixes.add(os.path.abspath(paths[key]) + os.sep)
    try:
        import torch

        prefixes.add(os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)
    except ImportError:  # pragma: no cover - the collector always has torch
        pass
    return tuple(sorted(prefixes))


_LIBRARY_PREFIXES = _library_prefixes()


def is_library_file(filename: str) -> bool:
    """Torch, the standard library, site-packages (this Python's, or any directory of that
    name on ``sys.path``) or this package: not the user's code."""
    return (
        filename.startswith(_LIBRARY_PREFIXES)
        or filename.startswith("<")
        or is_library_path(filename)
    )


def library_modules() -> list[str]:
    """The top-level modules this process loaded from library directories, for the trace's
    metadata: torch names a frame relative to its ``sys.path`` entry
    (``neuron_sim/__init__.py(25): ...``), so the reader needs them to know such a frame is
    a library's even where that library is not installed."""
    out = set()
    for name, module in list(sys.modules.items()):
        if "." in name or name in ("__main__", "explorer"):
            continue
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and is_library_file(os.path.abspath(file)):
            out.add(name)
    return sorted(out)


#: code object → 0 (user code), 1 (library: skip), 2 (this package or synthetic: skip, and
#: never the fallback). Classifying once per code object keeps a stack walk to one dict
#: lookup per frame.
_CODE_CLASS: dict[CodeType, int] = {}


def _classify(filename: str) -> int:
    if filename.startswith(COLLECT_DIR) or filename.startswith("<") or is_explorer_file(filename):
        return 2
    return 1 if is_library_file(filename) else 0


def user_frame(frame: FrameType | None = None) -> tuple[str, int, str]:
    """(file, line, function) of the innermost user frame above ``frame`` (the caller's).

    Falls back to the innermost frame outside this package when the whole stack is library
    code (e.g. a library calling ``.item()`` from a thread), and to ``("", -1, "")``.
    """
    f: FrameType | None = frame if frame is not None else sys._getframe(1)
    fallback: FrameType | None = None
    classes = _CODE_CLASS
    while f is not None:
        code = f.f_code
        kind = classes.get(code)
        if kind is None:
            kind = classes[code] = _classify(code.co_filename)
        if kind == 0:
            return code.co_filename, f.f_lineno, code.co_name
        if kind == 1 and fallback is None:
            fallback = f
        f = f.f_back
    if fallback is not None:
        return fallback.f_code.co_filename, fallback.f_lineno, fallback.f_code.co_name
    return ("", -1, "")


def source_args(frame: tuple[str, int, str]) -> dict[str, Any]:
    """The ``source_*`` args every Explorer event carries (see ``explorer.trace.kinds``)."""
    return {"source_file": frame[0], "source_line": frame[1], "source_function": frame[2]}


class EventBuffer:
    """Thread-safe list of Chrome-trace event dicts with absolute-ns timestamps.

    Events are stored with ``ts_ns``/``dur_ns`` (int) instead of ``ts``/``dur``; the writer
    turns them into the profiler's µs timebase. ``list.append`` is atomic under the GIL, so
    hooks on any thread append without a lock.
    """

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.pid = os.getpid()

    def slice(self, cat: str, name: str, start_ns: int, end_ns: int, args: dict[str, Any]) -> None:
        """A duration event on the calling thread's host track."""
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": self.pid,
                "tid": threading.get_native_id(),
                "ts_ns": int(start_ns),
                "dur_ns": max(int(end_ns) - int(start_ns), 0),
                "args": args,
            }
        )

    def counter(self, name: str, ts_ns: int, values: dict[str, float]) -> None:
        """A counter sample (``ph: "C"``, category ``explorer_system``) on the process."""
        self.events.append(
            {
                "ph": "C",
                "cat": "explorer_system",
                "name": name,
                "pid": self.pid,
                "tid": 0,
                "ts_ns": int(ts_ns),
                "args": values,
            }
        )

    def __len__(self) -> int:
        return len(self.events)


def now_ns() -> int:
    """The clock Kineto's timestamps are on (realtime, ns since the epoch)."""
    return time.time_ns()

"""Explorer's own launcher frames, kept out of the user's trace.

``explorer demo`` runs the user's training script through the CLI (``runpy`` →
``explorer/__main__.py``, or the ``explorer`` console script → ``explorer/cli/...``), and the profiler's Python tracer records
every frame on the stack when recording starts. Those frames would open the trace's
timeline with Explorer's own code around the user's program. :func:`launcher_frames` names
them (the outermost frames of the stack that belong to ``runpy`` or Explorer's CLI), and
:func:`drop_launcher_frames` removes exactly those ``python_function`` events.
"""

from __future__ import annotations

from pathlib import Path
from types import FrameType
from typing import Any

from explorer.trace.source import is_explorer_file

_PACKAGE = Path(__file__).resolve().parents[1]  # explorer/
_LAUNCHER_DIRS = (_PACKAGE / "cli",)
_LAUNCHER_FILES = (_PACKAGE / "__main__.py",)


def _is_launcher(frame: FrameType) -> bool:
    file = frame.f_code.co_filename
    if file == "<frozen runpy>" or Path(file).name == "runpy.py":
        return True
    if is_explorer_file(file) and not file.endswith(".py"):
        return True  # the ``explorer`` console script that pip wrote into the venv's bin/
    path = Path(file).resolve()
    return path in _LAUNCHER_FILES or any(path.is_relative_to(d) for d in _LAUNCHER_DIRS)


def launcher_frames(frame: FrameType | None) -> set[str]:
    """The tracer's names (``"main.py(55): main"``, without the directory) of the launcher
    frames at the bottom of ``frame``'s stack; empty when the user's script is outermost."""
    stack = []
    while frame is not None:
        stack.append(frame)
        frame = frame.f_back
    names: set[str] = set()
    for f in reversed(stack):  # outermost first; stop at the first frame of user code
        if not _is_launcher(f):
            break
        names.add(f"{Path(f.f_code.co_filename).name}({f.f_lineno}): {f.f_code.co_name}")
    return names


def drop_launcher_frames(events: list[dict[str, Any]], names: set[str]) -> list[dict[str, Any]]:
    """``events`` without the ``python_function`` events of those launcher frames."""
    if not names:
        return events

    def launcher(e: dict[str, Any]) -> bool:
        if e.get("cat") != "python_function":
            return False
        name = str(e.get("name", ""))
        return any(name == n or name.endswith("/" + n) for n in names)

    return [e for e in events if not launcher(e)]

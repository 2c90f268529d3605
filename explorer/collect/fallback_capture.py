"""CPU fallbacks reported by backends as warnings or log lines, recorded with the user's line.

Backends announce that an operator ran on the CPU instead of the accelerator in words
("... will fall back to run on the CPU", "executed via CPU fallback"). We listen where those
words go — ``warnings._showwarnmsg`` and a handler on the root logger — record an
``explorer_fallback`` event, and always pass the message on unchanged: the user sees exactly
what they would have seen without Explorer.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from typing import Any

from explorer.collect.event_buffer import (
    EventBuffer,
    is_library_file,
    now_ns,
    source_args,
    user_frame,
)

#: Messages that say an operator left the accelerator for the CPU.
FALLBACK_MESSAGE = re.compile(
    r"cpu[ _-]?fallback"
    r"|fall(?:s|ing)?[ _-]?back (?:to )?(?:run )?(?:on |to )?(?:the )?cpu"
    r"|executed (?:via|on) (?:the )?cpu|(?:will|to) run on the cpu",
    re.IGNORECASE,
)
_OP = re.compile(r"(aten::[\w.]+)|operator '([^']+)'|op(?:erator)? ([\w:.]+) ")
_DEVICE = re.compile(r"on the (\w+) backend|(\w+) backend", re.IGNORECASE)


def fallback_args(message: str) -> dict[str, Any]:
    """Operator and device named in a fallback message ("" when it names none)."""
    op = _OP.search(message)
    dev = _DEVICE.search(message)
    return {
        "op": next((g for g in op.groups() if g), "") if op else "",
        "device": next((g for g in dev.groups() if g), "").lower() if dev else "",
        "message": message[:2000],
    }


def _function_at(where: tuple[str, int], frame: Any) -> str:
    """Name of the function on the current stack executing ``where`` ("" if not on it)."""
    while frame is not None:
        if frame.f_code.co_filename == where[0] and frame.f_lineno == where[1]:
            return frame.f_code.co_name
        frame = frame.f_back
    return ""


class FallbackCapture:
    """Listens to warnings and logging for fallback messages while installed."""

    def __init__(self, buffer: EventBuffer) -> None:
        self.buffer = buffer
        self._prev_showwarning: Any = None
        self._handler: _FallbackLogHandler | None = None
        self._handled_loggers: list[logging.Logger] = []

    def record(self, message: str, via: str, where: tuple[str, int] | None = None) -> None:
        """One fallback event; ``where`` is the (file, line) the warning was attributed to,
        preferred when it is user code (C++ warnings point at the Python line that called in)."""
        t = now_ns()
        frame = user_frame(sys._getframe(2))
        # C++ warnings raised where no Python frame runs (autograd's engine threads) are
        # attributed to "sys:1": not a line of anyone's code.
        real = bool(where and where[0] and os.path.isfile(where[0]))
        if where and real and not is_library_file(where[0]) and where != frame[:2]:
            frame = (where[0], int(where[1]), _function_at(where, sys._getframe(1)))
        args = {**fallback_args(message), "via": via, **source_args(frame)}
        name = f"CPU fallback {args['op']}".rstrip()
        self.buffer.slice("explorer_fallback", name, t, t, args)

    def install(self) -> None:
        # ``warnings._showwarnmsg`` is where every warning that passes the filters goes —
        # Python's ``warnings.warn`` and C++ ``TORCH_WARN`` alike — and, unlike
        # ``showwarning``, ``catch_warnings()`` does not replace it, so warnings recorded by
        # the user's own code (or pytest) are seen too.
        prev = getattr(warnings, "_showwarnmsg", None)
        self._prev_showwarning = prev
        if prev is not None:

            def showwarnmsg(msg: Any) -> None:
                text = str(msg.message)
                if FALLBACK_MESSAGE.search(text):
                    self.record(text, "warning", (msg.filename, msg.lineno))
                prev(msg)

            showwarnmsg._explorer = True  # type: ignore[attr-defined]
            warnings._showwarnmsg = showwarnmsg  # type: ignore[attr-defined]
        self._handler = _FallbackLogHandler(self)
        root = logging.getLogger()
        root.addHandler(self._handler)
        self._handled_loggers = [root]
        torch_logger = logging.getLogger("torch")
        if not torch_logger.propagate:  # torch's logging setup stops records at "torch"
            torch_logger.addHandler(self._handler)
            self._handled_loggers.append(torch_logger)

    def uninstall(self) -> None:
        current = getattr(warnings, "_showwarnmsg", None)
        if self._prev_showwarning is not None and getattr(current, "_explorer", False):
            warnings._showwarnmsg = self._prev_showwarning  # type: ignore[attr-defined]
        self._prev_showwarning = None
        for lg in self._handled_loggers:
            if self._handler is not None:
                lg.removeHandler(self._handler)
        self._handled_loggers = []
        self._handler = None


class _FallbackLogHandler(logging.Handler):
    """Records fallback log lines; never swallows anything.

    A handler on the root logger would silence Python's "last resort" printing of warnings
    when the program configured no logging at all; when ours is the only handler a record
    would reach, we hand the record to ``logging.lastResort`` so it still prints.
    """

    def __init__(self, capture: FallbackCapture) -> None:
        super().__init__(level=logging.NOTSET)
        self.capture = capture

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a broken log call is the caller's business, not ours
            return
        if FALLBACK_MESSAGE.search(text):
            self.capture.record(text, f"log:{record.name}")
        if record.levelno >= logging.WARNING and not _other_handlers(record.name, self):
            last = logging.lastResort
            if last is not None and record.levelno >= last.level:
                last.handle(record)


def _other_handlers(name: str, ours: logging.Handler) -> bool:
    """Whether a record from logger ``name`` reaches any handler besides ``ours``."""
    lg: logging.Logger | None = logging.getLogger(name)
    while lg is not None:
        if any(h is not ours for h in lg.handlers):
            return True
        if not lg.propagate:
            return False
        lg = lg.parent
    return False

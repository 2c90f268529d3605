"""torch.compile work as trace events: compile time per frame, graph breaks, recompiles.

What works on torch 2.x, CPU included:

* ``torch._dynamo.utils._compilation_metrics`` — one ``CompilationMetrics`` per frame
  compile with ``start_time_us``/``duration_us`` on the realtime clock, the frame
  (``co_name``, ``co_filename``, ``co_firstlineno``) and ``recompile_reason`` (the guard that
  failed). We read the entries added while collecting.
* the ``graph_breaks`` logging artifact — dynamo logs every break with "in user code at
  FILE:LINE" and the reason. It is off by default; we raise that logger to DEBUG with our
  handler alone on it (whatever handlers were there would not have printed at the old level),
  so the user's console does not change.
* ``torch._dynamo.callback`` start/end callbacks — pause the runtime hooks while dynamo
  compiles, so the compiler's own ``.item()`` calls are not mistaken for the user's.
"""

from __future__ import annotations

import functools
import logging
import re
import sys
from typing import Any

from explorer.collect.event_buffer import COLLECT_DIR, EventBuffer, now_ns, source_args
from explorer.collect.runtime_hooks import HookState, wrapper_codes

_BREAK_AT = re.compile(r"in user code at (.+?):(\d+)")
_REASON = re.compile(r"Graph Break Reason:\s*(.*?)(?:\n\s*User code traceback:|\Z)", re.S)
_BOILERPLATE = re.compile(
    r"Encountered graph break when attempting|Hint:|Developer debug context|For more details|User code traceback"
)
_TB_FRAME = re.compile(r'File "(.+?)", line (\d+), in (\S+)')


def parse_graph_break(message: str) -> dict[str, Any]:
    """File, line, function and reason of one dynamo graph-break log message."""
    at = _BREAK_AT.search(message)
    file, line = (at.group(1), int(at.group(2))) if at else ("", -1)
    function = ""
    frames = [f for f in _TB_FRAME.findall(message) if not f[0].startswith(COLLECT_DIR)]
    if frames and (
        file.startswith(COLLECT_DIR) or (frames[-1][0] == file and int(frames[-1][1]) == line)
    ):
        file, line, function = frames[-1][0], int(frames[-1][1]), frames[-1][2]
    m = _REASON.search(message)
    details = "\n".join(
        ln.rstrip() for ln in (m.group(1) if m else message).splitlines() if ln.strip()
    )
    short = [ln.strip() for ln in details.splitlines() if not _BOILERPLATE.match(ln.strip())]
    reason = "\n".join(short[:2]) or details.split("\n", 1)[0]
    return {
        "file": file,
        "line": line,
        "function": function,
        "reason": reason[:500],
        "details": details[:4000],
    }


class CompileEvents:
    """Installed when ``torch._dynamo`` is loaded; harvests metrics when collection ends."""

    def __init__(self, buffer: EventBuffer) -> None:
        self.buffer = buffer
        self.installed = False
        self._seen: set[int] = set()
        self._handler: _GraphBreakHandler | None = None
        self._loggers: list[
            tuple[logging.Logger, tuple[int, list[logging.Handler], bool], bool]
        ] = []
        self._callbacks: tuple[Any, Any] | None = None
        self._orig_compile: Any = None

    def try_install(self, at_entry: bool = False) -> bool:
        """Install when dynamo is already imported (importing it costs ~1 s; a program that
        never compiles should not pay it). Called at entry and again at every step.

        Compiles already in dynamo's metrics at entry belong to before the block; when dynamo
        was first imported inside the block, every compile it recorded is ours. When dynamo
        is not loaded at entry, :meth:`watch_torch_compile` installs the moment the block
        calls ``torch.compile`` — before anything compiles, so no graph break is missed."""
        if self.installed or "torch._dynamo" not in sys.modules:
            return self.installed
        import torch._dynamo.callback as dyn_callback
        import torch._dynamo.utils as dyn_utils
        from torch._logging._internal import log_registry

        if at_entry:
            self._seen = {id(m) for m in getattr(dyn_utils, "_compilation_metrics", ())}

        def on_start(_args: Any) -> None:
            HookState.paused += 1

        def on_end(_args: Any) -> None:
            HookState.paused = max(HookState.paused - 1, 0)

        dyn_callback.callback_handler.register_start_callback(on_start)
        dyn_callback.callback_handler.register_end_callback(on_end)
        self._callbacks = (on_start, on_end)

        self._handler = _GraphBreakHandler(self.buffer)
        for qname in sorted(log_registry.artifact_log_qnames):
            if not qname.endswith(".__graph_breaks"):
                continue
            lg = logging.getLogger(qname)
            enabled_by_user = lg.isEnabledFor(logging.DEBUG)
            saved = (lg.level, list(lg.handlers), lg.propagate)
            self._loggers.append((lg, saved, enabled_by_user))
            if not enabled_by_user:  # nothing would have printed: keep it that way
                for h in saved[1]:
                    lg.removeHandler(h)
                lg.setLevel(logging.DEBUG)
                lg.propagate = False
            lg.addHandler(self._handler)
        _skip_wrapper_frames()
        self.installed = True
        return True

    def harvest(self) -> None:
        """Turn the compilation metrics recorded since install into ``explorer_compile`` slices."""
        if not self.installed:
            return
        import torch._dynamo.utils as dyn_utils

        for m in list(getattr(dyn_utils, "_compilation_metrics", ())):
            if id(m) in self._seen:
                continue
            self._seen.add(id(m))
            start_us = getattr(m, "start_time_us", None)
            dur_us = getattr(m, "duration_us", None)
            if start_us is None:
                continue
            recompile = getattr(m, "recompile_reason", None)
            frame = m.co_name or ""
            args: dict[str, Any] = {
                "event": "recompile" if recompile else "compile",
                "frame": frame,
                "compile_id": m.compile_id,
                "reason": recompile or "",
                "compile_time_ns": int((dur_us or 0) * 1000),
                "graph_breaks": m.num_graph_breaks or 0,
                "restart_reasons": sorted(m.restart_reasons or ()),
                "fail_reason": m.fail_reason or "",
                "guard_count": m.guard_count,
                "graph_op_count": m.graph_op_count,
                **source_args((m.co_filename or "", m.co_firstlineno or -1, frame)),
            }
            label = "Recompile" if recompile else "Compile"
            start = int(start_us) * 1000
            self.buffer.slice(
                "explorer_compile",
                f"{label} {frame}",
                start,
                start + int((dur_us or 0) * 1000),
                args,
            )

    def watch_torch_compile(self) -> None:
        """Wrap ``torch.compile`` (until :meth:`uninstall`) to install on its first call.

        ``torch.compile`` imports dynamo and returns a wrapper; nothing compiles until that
        is called, so installing right after ``torch.compile`` returns sees every compile."""
        import torch

        if self.installed or self._orig_compile is not None:
            return
        orig = torch.compile
        events = self

        @functools.wraps(orig)
        def compile_and_watch(*args: Any, **kwargs: Any) -> Any:
            out = orig(*args, **kwargs)
            events.try_install()
            return out

        self._orig_compile = orig
        torch.compile = compile_and_watch

    def uninstall(self) -> None:
        if self._orig_compile is not None:
            import torch

            torch.compile = self._orig_compile
            self._orig_compile = None
        if not self.installed:
            return
        self.harvest()
        import torch._dynamo.callback as dyn_callback

        if self._callbacks:
            start, end = self._callbacks
            for remove, cb in (
                (dyn_callback.callback_handler.remove_start_callback, start),
                (dyn_callback.callback_handler.remove_end_callback, end),
            ):
                try:
                    remove(cb)
                except ValueError:
                    pass
        for lg, (level, handlers, propagate), enabled_by_user in self._loggers:
            lg.removeHandler(self._handler)  # type: ignore[arg-type]
            if not enabled_by_user:
                lg.setLevel(level)
                lg.propagate = propagate
                for h in handlers:
                    lg.addHandler(h)
        self._loggers = []
        HookState.paused = 0
        self.installed = False


def _skip_wrapper_frames() -> None:
    """Tell dynamo never to compile our wrappers as frames of their own.

    When user code graph-breaks at ``x.item()``, the rest runs eagerly and dynamo would try
    to compile each Python function it then enters — our wrapper included, adding a compile
    the user never asked for. Dynamo still *inlines* the wrappers inside compiled code (where
    they call the original at once), so graphs are unchanged.
    """
    from torch._dynamo.eval_frame import FrameAction, FrameExecStrategy, set_code_exec_strategy

    for code in wrapper_codes():  # SKIP for the frame and for everything it calls
        set_code_exec_strategy(code, FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP))


class _GraphBreakHandler(logging.Handler):
    """Turns dynamo's graph-break log records into ``explorer_compile`` events."""

    def __init__(self, buffer: EventBuffer) -> None:
        super().__init__(level=logging.DEBUG)
        self.buffer = buffer
        self._functions: dict[tuple[str, int], str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            gb = parse_graph_break(record.getMessage())
        except Exception:  # never let our parsing break the user's compile
            return
        t = now_ns()
        key = (gb["file"], gb["line"])
        if gb["function"]:
            self._functions[key] = gb["function"]
        else:  # dynamo prints the stack only for a break's first occurrence
            gb["function"] = self._functions.get(key, "")
        args = {
            "event": "graph_break",
            "reason": gb["reason"],
            "details": gb["details"],
            "frame": gb["function"],
            **source_args((gb["file"], gb["line"], gb["function"])),
        }
        self.buffer.slice("explorer_compile", "Graph break", t, t, args)

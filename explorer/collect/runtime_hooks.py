"""Host syncs and cross-device copies, caught by wrapping the few torch calls that make them.

Why wrapping and not a ``TorchDispatchMode``: a dispatch mode costs a Python call on *every*
aten op and makes ``torch.compile`` fall back to eager while it is active; wrapping the dozen
Python-visible entry points (``Tensor.item``, ``.tolist``, ``.cpu``, ``.to``, ``.cuda``,
``.copy_``, ``nonzero``, ``repr`` and the ``synchronize()`` functions) costs nothing on the
ops that do not sync or copy, and keeps compiled code exactly as it was: every wrapper first
asks ``torch.compiler.is_compiling()`` and, while dynamo traces, calls the original so the
graph (and its breaks) do not change.

A thread-local flag keeps nested calls (``print(t)`` calls ``.tolist()`` inside) from being
recorded twice; ``paused`` (set by the compile hooks while dynamo compiles) keeps the
compiler's own ``.item()`` calls out of the user's trace.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch

from explorer.collect.event_buffer import EventBuffer, now_ns, source_args, user_frame


class _ThreadFlags(threading.local):
    """Per-thread ``busy`` flag; the class default avoids a failed lookup on every call."""

    busy = False


_local = _ThreadFlags()


class HookState:
    """Switches shared by the runtime hooks: ``paused`` > 0 while dynamo compiles."""

    paused = 0


def _busy() -> bool:
    return _local.busy


def _device_str(t: Any) -> str:
    return str(t.device) if isinstance(t, torch.Tensor) else ""


def _copy_kind(src: torch.device, dst: torch.device) -> str:
    if src.type == "cpu":
        return "HtoD" if dst.type != "cpu" else "HtoH"
    return "DtoH" if dst.type == "cpu" else "DtoD"


def _is_pinned(t: torch.Tensor) -> bool:
    try:
        return bool(t.device.type == "cpu" and t.is_pinned())
    except RuntimeError:  # CPU-only builds may refuse to ask
        return False


def _non_blocking(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """``Tensor.to``'s first positional bool is ``non_blocking`` in every overload."""
    if "non_blocking" in kwargs:
        return bool(kwargs["non_blocking"])
    return next((a for a in args if isinstance(a, bool)), False)


class RuntimeHooks:
    """Installs and removes the sync/copy wrappers; records into an :class:`EventBuffer`."""

    def __init__(self, buffer: EventBuffer, cpu_syncs: bool = True) -> None:
        self.buffer = buffer
        #: Record ``.item()`` & co. on CPU tensors too. On a CPU-only run they stand for the
        #: syncs the same code makes on an accelerator; with an accelerator present they are
        #: not syncs (a DataLoader's ``randperm().tolist()``) and are left out.
        self.cpu_syncs = cpu_syncs
        #: Every device a sync or copy touched (``"neuron:0"``), for the trace's metadata.
        self.devices: set[str] = set()
        self._saved: list[tuple[Any, str, Any]] = []

    # -- recording -----------------------------------------------------------------------
    def _sync(self, reason: str, device: str, t0: int, t1: int) -> None:
        self.devices.add(device)
        args = {"reason": reason, "device": device, **source_args(user_frame(sys._getframe(2)))}
        self.buffer.slice("explorer_sync", f"Sync {reason}", t0, t1, args)

    def _copy(
        self, src: torch.Tensor, dst: torch.Tensor, blocking: bool, call: str, t0: int, t1: int
    ) -> None:
        kind = _copy_kind(src.device, dst.device)
        self.devices.update((str(src.device), str(dst.device)))
        pinned = _is_pinned(src) if kind == "HtoD" else _is_pinned(dst) if kind == "DtoH" else False
        frame = user_frame(sys._getframe(2))
        args = {
            "bytes": int(src.nbytes),
            "src_device": str(src.device),
            "dst_device": str(dst.device),
            "blocking": bool(blocking),
            "pinned": pinned,
            "copy_kind": kind,
            "call": call,
            **source_args(frame),
        }
        self.buffer.slice("explorer_copy", f"Copy {kind} ({call})", t0, t1, args)
        if kind == "DtoH" and blocking:  # the host waits for the device to drain first
            sync = {"reason": call, "device": str(src.device), **source_args(frame)}
            self.buffer.slice("explorer_sync", f"Sync {call}", t0, t1, sync)

    # -- wrappers --------------------------------------------------------------------------
    def _wrap_sync(self, orig: Callable[..., Any], reason: str) -> Callable[..., Any]:
        hooks = self

        @functools.wraps(orig)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if torch.compiler.is_compiling() or HookState.paused or _busy():
                return orig(*args, **kwargs)
            _local.busy = True
            t0 = now_ns()
            try:
                out = orig(*args, **kwargs)
            finally:
                _local.busy = False
            t1 = now_ns()
            device = _device_str(args[0]) if args else ""
            if hooks.cpu_syncs or device != "cpu":
                hooks._sync(reason, device, t0, t1)
            return out

        return wrapper

    def _wrap_copy(self, orig: Callable[..., Any], call: str) -> Callable[..., Any]:
        """``.to``/``.cpu``/``.cuda``: a copy when the result lives on another device."""
        hooks = self

        @functools.wraps(orig)
        def wrapper(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if torch.compiler.is_compiling() or HookState.paused or _busy():
                return orig(self, *args, **kwargs)
            _local.busy = True
            t0 = now_ns()
            try:
                out = orig(self, *args, **kwargs)
            finally:
                _local.busy = False
            t1 = now_ns()
            if isinstance(out, torch.Tensor) and out is not self and out.device != self.device:
                hooks._copy(self, out, not _non_blocking(args, kwargs), call, t0, t1)
            return out

        return wrapper

    def _wrap_copy_(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        hooks = self

        @functools.wraps(orig)
        def wrapper(self: torch.Tensor, src: Any, *args: Any, **kwargs: Any) -> Any:
            if torch.compiler.is_compiling() or HookState.paused or _busy():
                return orig(self, src, *args, **kwargs)
            _local.busy = True
            t0 = now_ns()
            try:
                out = orig(self, src, *args, **kwargs)
            finally:
                _local.busy = False
            t1 = now_ns()
            if isinstance(src, torch.Tensor) and src.device != self.device:
                hooks._copy(src, self, not _non_blocking(args, kwargs), "copy_", t0, t1)
            return out

        return wrapper

    # -- install / remove ------------------------------------------------------------------
    def _patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        current = getattr(owner, name, None)
        if current is None:
            return
        self._saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
        setattr(owner, name, make(current))

    def install(self) -> None:
        T = torch.Tensor
        for name, reason in (("item", ".item()"), ("tolist", ".tolist()"), ("nonzero", "nonzero")):
            self._patch(T, name, functools.partial(self._wrap_sync, reason=reason))
        self._patch(T, "__repr__", lambda o: self._wrap_sync(o, "print(tensor)"))
        self._patch(torch, "nonzero", lambda o: self._wrap_sync(o, "nonzero"))
        for call in ("to", "cpu", "cuda"):
            self._patch(T, call, functools.partial(self._wrap_copy, call=f".{call}()"))
        self._patch(T, "copy_", self._wrap_copy_)
        for mod_name in ("cuda", "accelerator", "xpu", "mtia"):
            mod = getattr(torch, mod_name, None)
            if mod is not None and hasattr(mod, "synchronize"):
                self._patch(mod, "synchronize", lambda o: self._wrap_sync(o, "synchronize()"))

    def uninstall(self) -> None:
        for owner, name, before in reversed(self._saved):
            if before is _MISSING:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, before)
        self._saved.clear()


_MISSING = object()


def wrapper_codes() -> list[Any]:
    """Code objects of the wrappers above (so dynamo can be told not to compile them)."""
    codes: list[Any] = []
    for factory in (RuntimeHooks._wrap_sync, RuntimeHooks._wrap_copy, RuntimeHooks._wrap_copy_):
        codes.extend(c for c in factory.__code__.co_consts if hasattr(c, "co_code"))
    return codes

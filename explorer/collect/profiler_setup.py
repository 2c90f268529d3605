"""Which profiler activities and schedule to use, from what the machine has and what was asked.

CPU is always recorded. The accelerator activity comes from ``torch.accelerator`` (CUDA and
ROCm both profile as ``CUDA``; XPU, MTIA; any renamed PrivateUse1 backend such as ``neuron``
as ``PrivateUse1``). Asking for an activity the machine lacks warns and continues with the
rest — an hour-long job should not die because a laptop has no GPU.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.profiler import ProfilerActivity

from explorer.collect.environment import accelerator_type
from explorer.errors import ExplorerError

_BY_NAME = {
    "cpu": "CPU",
    "cuda": "CUDA",
    "rocm": "CUDA",
    "hip": "CUDA",
    "xpu": "XPU",
    "mtia": "MTIA",
    "hpu": "HPU",
    "privateuse1": "PrivateUse1",
}


def _activity(name: str) -> ProfilerActivity | None:
    """The ProfilerActivity for a device-type name; renamed PrivateUse1 backends included."""
    key = name.lower()
    member = _BY_NAME.get(key)
    if member is None and key == getattr(torch._C, "_get_privateuse1_backend_name", lambda: "")():
        member = "PrivateUse1"
    if member is None:
        return None
    return getattr(ProfilerActivity, member, None)


def default_activities() -> list[ProfilerActivity]:
    """CPU plus the accelerator torch would use, when the profiler supports it."""
    acts = [ProfilerActivity.CPU]
    acc = accelerator_type()
    if acc:
        act = _activity(acc)
        if act is not None and act in torch.profiler.supported_activities():
            acts.append(act)
    return acts


def choose_activities(requested: Iterable[Any] | None) -> list[ProfilerActivity]:
    """Requested activities that exist here (names or ProfilerActivity), warning about the rest."""
    if requested is None:
        return default_activities()
    supported = set(torch.profiler.supported_activities())
    available = set(default_activities())
    chosen: list[ProfilerActivity] = []
    for item in requested:
        act = item if isinstance(item, ProfilerActivity) else _activity(str(item))
        if act is None:
            warnings.warn(
                f"explorer.collect: unknown profiler activity {item!r}; ignoring it", stacklevel=3
            )
            continue
        if act not in supported or (act != ProfilerActivity.CPU and act not in available):
            warnings.warn(
                f"explorer.collect: this machine cannot profile {act.name} "
                f"(no such device or profiler support); recording {', '.join(a.name for a in available)}",
                stacklevel=3,
            )
            continue
        if act not in chosen:
            chosen.append(act)
    if ProfilerActivity.CPU not in chosen:
        chosen.insert(0, ProfilerActivity.CPU)
    return chosen


def make_schedule(schedule: Any) -> Callable[[int], Any] | None:
    """``None`` (every step), a dict of wait/warmup/active/repeat/skip_first, a step range
    (``range(5, 10)`` or ``(5, 10)``: record steps 5..9), or a ready torch schedule."""
    if schedule is None:
        return None
    if callable(schedule):
        return schedule
    if isinstance(schedule, dict):
        allowed = {"wait", "warmup", "active", "repeat", "skip_first"}
        unknown = set(schedule) - allowed
        if unknown:
            raise ExplorerError(
                f"explorer.collect: unknown schedule keys {sorted(unknown)}; use {sorted(allowed)}"
            )
        opts = {"wait": 0, "warmup": 0, "active": 1, "repeat": 1, **schedule}
        return torch.profiler.schedule(**{k: int(v) for k, v in opts.items()})
    if isinstance(schedule, range | tuple | list) and len(schedule) >= 1:
        steps = (
            list(schedule)
            if isinstance(schedule, range)
            else list(range(int(schedule[0]), int(schedule[1])))
        )
        if not steps or steps != list(range(steps[0], steps[-1] + 1)) or steps[0] < 0:
            raise ExplorerError(
                f"explorer.collect: schedule {schedule!r} is not a range of step numbers"
            )
        start, count = steps[0], len(steps)
        warmup = 1 if start >= 1 else 0
        return torch.profiler.schedule(wait=start - warmup, warmup=warmup, active=count, repeat=1)
    raise ExplorerError(
        f"explorer.collect: schedule {schedule!r} not understood; give a dict of wait/warmup/active/repeat or a step range"
    )

"""What produced a trace: versions, devices, host, rank, command line, git commit, settings.

Written once at the start of collection under the top-level ``"explorer"`` key, so a reader
can tell exactly which software and hardware a trace came from.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import time
from typing import Any

import psutil
import torch


def rank_and_world_size() -> tuple[int, int]:
    """From an initialised process group, else the launcher's environment, else (0, 1)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:
        pass
    rank = os.environ.get(
        "RANK", os.environ.get("SLURM_PROCID", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    )
    world = os.environ.get(
        "WORLD_SIZE", os.environ.get("SLURM_NTASKS", os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    )
    try:
        return int(rank), int(world)
    except ValueError:
        return 0, 1


def git_commit(cwd: str | None = None) -> dict[str, Any]:
    """Commit and dirtiness of the working directory's git checkout ({} when not in one)."""
    cwd = cwd or os.getcwd()
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5
        )
        if commit.returncode != 0:
            return {}
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {}


def accelerator_type() -> str | None:
    """The accelerator torch would use ("cuda", "xpu", "mtia", a PrivateUse1 name) or None."""
    acc = getattr(torch, "accelerator", None)
    if acc is not None:
        try:
            if acc.is_available():
                return str(acc.current_accelerator().type)
        except Exception:
            pass
    for name in ("cuda", "xpu", "mtia"):
        mod = getattr(torch, name, None)
        try:
            if mod is not None and mod.is_available():
                return name
        except Exception:
            continue
    return None


def devices() -> list[dict[str, Any]]:
    """Name and main properties of every accelerator device torch sees."""
    kind = accelerator_type()
    if kind is None:
        return []
    mod = getattr(torch, kind, None)
    out: list[dict[str, Any]] = []
    if mod is None:
        return out
    try:
        count = int(mod.device_count())
    except Exception:
        count = 0
    for i in range(count):
        info: dict[str, Any] = {"index": i, "type": kind}
        try:
            props = mod.get_device_properties(i)
            for key in (
                "name",
                "total_memory",
                "major",
                "minor",
                "multi_processor_count",
                "gcnArchName",
            ):
                if hasattr(props, key):
                    info[key] = getattr(props, key)
        except Exception:
            pass
        out.append(info)
    return out


def device_names(used: set[str]) -> dict[str, Any]:
    """How the trace's metadata names the devices: the PrivateUse1 backend's name (as
    ``torch.utils.rename_privateuse1_backend`` set it; ``"privateuseone"`` when no backend
    renamed it) and the non-CPU devices the run's tensors were seen on (``"neuron:0"``), so
    a reader can name the device even when the backend wrote no device timeline."""
    return {
        "privateuse1_backend": str(torch._C._get_privateuse1_backend_name()),
        "devices_used": sorted(d for d in used if d and d != "cpu"),
    }


def device_problem(device: str) -> str:
    """Why a tensor cannot be made on ``device`` here ("" when it can; "auto" always can)."""
    if device == "auto":
        return ""
    try:
        torch.empty(1, device=torch.device(device))
    except (RuntimeError, AssertionError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ""


def driver_version() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:
        return ""


def environment(settings: dict[str, Any]) -> dict[str, Any]:
    """The ``"environment"`` block of the ``"explorer"`` metadata."""
    from explorer import __version__

    rank, world = rank_and_world_size()
    vm = psutil.virtual_memory()
    return {
        "explorer_version": __version__,
        "torch_version": str(torch.__version__),
        "python_version": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "cuda_version": torch.version.cuda or "",
        "hip_version": getattr(torch.version, "hip", None) or "",
        "driver_version": driver_version(),
        "accelerator": accelerator_type() or "cpu",
        "devices": devices(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "host_memory_bytes": int(vm.total),
        "pid": os.getpid(),
        "rank": rank,
        "world_size": world,
        "argv": list(sys.argv),
        "cwd": os.getcwd(),
        "git": git_commit(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "torch_num_threads": torch.get_num_threads(),
        "settings": settings,
    }

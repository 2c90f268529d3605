"""A background thread that samples process and system load into counter events.

Host: process CPU % (can exceed 100 with several busy threads), system CPU %, process RSS
and host memory in use, via psutil. Devices: utilisation, memory in use and power through
NVML, only when ``pynvml`` (nvidia-ml-py) imports and initialises — never required.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from typing import Any

import psutil

from explorer.collect.event_buffer import EventBuffer, now_ns


def nvml_module() -> Any:
    """The ``pynvml`` module when it is installed, else None — resolved on the caller's
    thread. Importing on the sampler thread deadlocked: a DataLoader forking its workers
    meanwhile takes the logging lock before the import lock (Python's at-fork handlers), while
    the sampler, inside an import, waited for the logging lock."""
    if importlib.util.find_spec("pynvml") is None:
        return None
    return importlib.import_module("pynvml")


class _Nvml:
    """NVML handles for every visible GPU, or nothing when NVML is absent."""

    def __init__(self, module: Any) -> None:
        self.nvml: Any = None
        self.handles: list[Any] = []
        if module is None:
            return
        try:
            module.nvmlInit()
            self.nvml = module
            self.handles = [
                module.nvmlDeviceGetHandleByIndex(i) for i in range(module.nvmlDeviceGetCount())
            ]
        except module.NVMLError:  # no driver, no permission: sample the host only
            self.nvml = None
            self.handles = []

    def sample(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for i, h in enumerate(self.handles):
            try:
                util = self.nvml.nvmlDeviceGetUtilizationRates(h)
                mem = self.nvml.nvmlDeviceGetMemoryInfo(h)
                values = {"gpu_util_percent": float(util.gpu), "memory_used_bytes": float(mem.used)}
                try:
                    values["power_w"] = self.nvml.nvmlDeviceGetPowerUsage(h) / 1000.0
                except Exception:
                    pass
                out[f"GPU {i}"] = values
            except Exception:
                continue
        return out

    def close(self) -> None:
        if self.nvml is not None:
            try:
                self.nvml.nvmlShutdown()
            except Exception:
                pass


class SystemSampler:
    """Samples every ``interval_s`` seconds on a daemon thread until :meth:`stop`."""

    def __init__(self, buffer: EventBuffer, interval_s: float = 0.1) -> None:
        self.buffer = buffer
        self.interval_s = max(float(interval_s), 0.001)
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._process = psutil.Process()
        self._nvml: _Nvml | None = None
        self._nvml_module = nvml_module()  # here, not on the thread (see nvml_module)

    def start(self) -> None:
        """Start the thread. Every psutil/NVML call happens on it — none on the caller's
        thread, whose Python calls the profiler's stack tracer would record."""
        self._thread = threading.Thread(target=self._run, name="explorer-sampler", daemon=True)
        self._thread.start()

    def sample_once(self, cpu: bool = True) -> None:
        """One sample of every counter (``cpu=False``: memory only — CPU % needs an interval)."""
        t = now_ns()
        vm = psutil.virtual_memory()
        if cpu:
            self.buffer.counter(
                "CPU %",
                t,
                {"process": self._process.cpu_percent(None), "system": psutil.cpu_percent(None)},
            )
        self.buffer.counter(
            "Host memory",
            t,
            {
                "process_rss_bytes": float(self._process.memory_info().rss),
                "system_used_bytes": float(vm.total - vm.available),
            },
        )
        if self._nvml is not None:
            for dev, values in self._nvml.sample().items():
                self.buffer.counter(dev, t, values)
        self.samples += 1

    def _run(self) -> None:
        sys.setprofile(None)  # never traced by the profiler's Python tracer
        threading.setprofile(None)
        try:
            self._process.cpu_percent(None)  # the first call only sets the baseline
            psutil.cpu_percent(None)
            self._nvml = _Nvml(self._nvml_module)
            self.sample_once(cpu=False)  # a first sample at once, so short runs have a start
            while not self._stop.wait(self.interval_s):
                self.sample_once()
            self.sample_once()  # and one at the very end
        except psutil.Error:
            pass
        finally:
            if self._nvml is not None:
                self._nvml.close()
                self._nvml = None

    def stop(self) -> None:
        """Take the last sample and end the thread (call while the profiler still records)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

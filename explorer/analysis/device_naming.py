"""Which accelerator a trace ran on, named as the trace names it — with or without a device
timeline.

A backend with a profiler plugin (CUDA, MTIA, Explorer's ``neuron`` test backend) leaves
device tracks, and their labels name the device. A PrivateUse1 backend without one (an
eager Python backend, an early port) leaves only host events: its device is named by what
Explorer's collector recorded — the PrivateUse1 backend's name
(``torch._C._get_privateuse1_backend_name()``) and the devices the run's tensors were on —
or by the environment's accelerator. Then every time in the trace is the host's, and the
report says so rather than presenting host time as the device's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from explorer.analysis.breakdown import track_device_labels
from explorer.trace.model import TraceData


@dataclass(frozen=True)
class DeviceNaming:
    """The devices of a trace (``("neuron:0",)``; empty for a CPU-only run), the
    PrivateUse1 backend's name ("" when none was renamed) and whether the trace holds
    device-side time (device tracks)."""

    devices: tuple[str, ...]
    backend: str
    device_time_recorded: bool

    @property
    def label(self) -> str:
        """A short name for a title bar: ``"neuron:0"``, ``"neuron:0 +1"``, ``"neuron:0 (host
        time only)"`` when the device kept no timeline, ``"host only"`` on a CPU run."""
        if not self.devices:
            return "host only"
        more = f" +{len(self.devices) - 1}" if len(self.devices) > 1 else ""
        return self.devices[0] + more + ("" if self.device_time_recorded else " (host time only)")

    @property
    def sentence(self) -> str:
        """One line for the top of a report or window ("" for a CPU-only run)."""
        if not self.devices:
            return ""
        names = ", ".join(self.devices)
        via = f" (PrivateUse1 backend '{self.backend}')" if self.backend else ""
        if self.device_time_recorded:
            return f"Device: {names}{via}."
        return (
            f"Device: {names}{via}. Device-side time was not recorded: the backend wrote no "
            "device timeline, so every time here is host time."
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "devices": list(self.devices),
            "backend": self.backend,
            "device_time_recorded": self.device_time_recorded,
            "sentence": self.sentence,
        }


def _collector_block(trace: TraceData) -> dict[str, Any]:
    block = trace.metadata.get("explorer")
    return block if isinstance(block, dict) else {}


def _recorded_devices(trace: TraceData) -> list[str]:
    """Devices the collector saw tensors on, else the environment's accelerator devices."""
    block = _collector_block(trace)
    used = block.get("devices_used")
    if isinstance(used, list) and used:
        return [str(d) for d in used]
    env = block.get("environment")
    env = env if isinstance(env, dict) else {}
    accelerator = str(env.get("accelerator") or "")
    if accelerator in ("", "cpu"):
        return []
    listed = env.get("devices")
    indexes = [
        int(d.get("index", 0)) for d in (listed if isinstance(listed, list) else [])
        if isinstance(d, dict)
    ]  # fmt: skip
    return [f"{accelerator}:{i}" for i in (indexes or [0])]


def device_naming(trace: TraceData) -> DeviceNaming:
    """How to name the trace's device(s) (see the module docstring)."""
    labels = sorted(set(track_device_labels(trace).values()))
    backend = trace.privateuse1_backend
    if labels:
        return DeviceNaming(tuple(labels), backend, True)
    return DeviceNaming(tuple(_recorded_devices(trace)), backend, False)

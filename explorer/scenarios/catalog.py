"""The scenarios: one healthy baseline and one per pathology, each with its ground truth.

Each scenario is the same simulated training loop (:mod:`explorer.scenarios.workload`)
with one :class:`~explorer.scenarios.workload.Pathologies` switch on; its ``truth``
function (:mod:`explorer.scenarios.ground_truth`) measures, on the simulator's records,
exactly how much time the pathology cost — see each function's docstring for what it sums.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from explorer.scenarios import ground_truth
from explorer.scenarios.simulator import Simulator
from explorer.scenarios.workload import Pathologies


@dataclass(frozen=True)
class Scenario:
    """A named simulated run: what it shows, how to configure it, how to measure it."""

    name: str
    summary: str
    pathologies: Callable[[int, int], Pathologies]  # (steps, scale) → switches
    #: One measurement per injected pathology (empty: nothing injected).
    truths: tuple[Callable[[Simulator], dict[str, Any]], ...] = ()

    @property
    def definition(self) -> str:
        """What ``time_lost_ns`` of each injected finding sums, in words."""
        if not self.truths:
            return "nothing injected"
        return " ".join(" ".join((t.__doc__ or "").split()) for t in self.truths)


_LIST = [
    Scenario(
        "clean",
        "Healthy baseline: the device is always busy, the input copy overlaps compute "
        "on its own stream, no host synchronisation; no finding should fire.",
        lambda steps, scale: Pathologies(),
    ),
    Scenario(
        "input_stall",
        "The DataLoader is slow: every step the host waits ~2.5 ms in "
        "__next__ while the device runs out of queued work and idles.",
        lambda steps, scale: Pathologies(input_wait_ns=2.5e6 * scale),
        (ground_truth.input_stall,),
    ),
    Scenario(
        "pageable_copies",
        "The batch is copied from pageable memory: the copy blocks the host "
        "and runs alone on the device, overlapping nothing.",
        lambda steps, scale: Pathologies(pageable_copies=True),
        (ground_truth.memcpy_stall,),
    ),
    Scenario(
        "sync_storm",
        "A finiteness check calls .item() after every layer: each one is a "
        "cudaStreamSynchronize that drains the device queue, then the device waits for the host.",
        lambda steps, scale: Pathologies(syncs_per_step=8 * scale),
        (ground_truth.sync_stall,),
    ),
    Scenario(
        "cpu_fallback",
        "One op per step (aten::linalg_eig) runs on the CPU: its input is copied "
        "to the host and the result back, and the device waits meanwhile.",
        lambda steps, scale: Pathologies(fallback=True),
        (ground_truth.cpu_fallback,),
    ),
    Scenario(
        "launch_bound",
        "Metrics are computed with many tiny elementwise ops: each kernel is "
        "shorter than its launch, so the device idles between them.",
        lambda steps, scale: Pathologies(tiny_ops_per_step=150 * scale),
        (ground_truth.launch_bound,),
    ),
    Scenario(
        "compile_pause",
        "torch.compile compiles a block (with a graph break) during step 1: "
        "the host compiles for ~40 ms and the device idles.",
        lambda steps, scale: Pathologies(compile_step=1 if steps > 1 else 0),
        (ground_truth.compile_pause,),
    ),
    Scenario(
        "memory_growth",
        "Every step keeps a 16 MiB clone alive in a Python list: allocated "
        "memory grows by the same amount each step and is never freed.",
        lambda steps, scale: Pathologies(leak_bytes_per_step=(16 << 20) * scale),
        (ground_truth.memory_growth,),
    ),
    # Several pathologies at once: each must be found, with its own time, and the ranking
    # between them must follow the time each costs (the breakdown's priorities decide who
    # owns an instant both touch).
    Scenario(
        "input_and_sync",
        "A slow DataLoader (~2.5 ms per step) and a finiteness check that calls .item() "
        "after every layer: two stalls in every step.",
        lambda steps, scale: Pathologies(input_wait_ns=2.5e6 * scale, syncs_per_step=8 * scale),
        (ground_truth.input_stall, ground_truth.sync_stall),
    ),
    Scenario(
        "input_sync_pageable",
        "The two stalls above, and the batch copied from pageable memory (blocking the "
        "host): three pathologies in every step.",
        lambda steps, scale: Pathologies(
            input_wait_ns=2.5e6 * scale, syncs_per_step=8 * scale, pageable_copies=True
        ),
        (ground_truth.input_stall, ground_truth.sync_stall, ground_truth.memcpy_stall),
    ),
]

#: name → :class:`Scenario`, in a stable order.
CATALOG: dict[str, Scenario] = {s.name: s for s in _LIST}

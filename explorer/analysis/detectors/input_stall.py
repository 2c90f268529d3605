"""``input_stall``: the device idles while the host waits for the next batch.

Measured as the breakdown's ``host_input`` reason: instants where no device work runs
and the host is inside the DataLoader (``enumerate(DataLoader)#...__next__``) or an
annotation that names data loading. On CPU-only traces it is the host time spent there,
reported from :data:`HOST_MIN_SHARE` of the step time.
"""

from __future__ import annotations

import numpy as np

from explorer.analysis.classify import classes
from explorer.analysis.detectors.context import Context
from explorer.analysis.finding import Finding
from explorer.units import fmt_ns

#: What this detector reports and the breakdown reasons it reads (checked by the registry).
KIND = "input_stall"
REASONS: tuple[str, ...] = ("host_input",)

#: On CPU-only traces loading data is part of the host's work, not idle time: reported from
#: this share of the step time (a normal DataLoader takes a few percent).
HOST_MIN_SHARE = 0.10


def detect(ctx: Context) -> list[Finding]:
    m = ctx.measure("host_input")
    if not ctx.significant(m):
        return []
    if not ctx.device_mode and m is not None and m.total < HOST_MIN_SHARE * ctx.total_ns:
        return []
    assert m is not None
    loader = ctx.outermost(classes(ctx.trace).input_root)
    n_steps = int((m.per_step > 0).sum())
    where = "the device" if ctx.device_mode else "the host"
    title = f"Input stall: {where} waits {fmt_ns(m.total / max(n_steps, 1))} per step for data"
    explanation = (
        f"{m.device} is idle for {fmt_ns(m.total)} in {n_steps} step(s) while the host is inside the "
        "data loader fetching the next batch, so the accelerator has nothing to run."
        if ctx.device_mode
        else f"The host spends {fmt_ns(m.total)} in {n_steps} step(s) inside the data loader instead "
        "of computing."
    )
    recommendation = (
        "Load data in the background: DataLoader(num_workers>0, pin_memory=True, "
        "persistent_workers=True, prefetch_factor=2+), move heavy decoding/augmentation out of "
        "the main process, and copy batches with .to(device, non_blocking=True)."
    )
    return [
        ctx.finding(
            KIND, m, loader, title, explanation, recommendation,
            details={"loader_calls": int(np.count_nonzero(loader))},
        )
    ]  # fmt: skip

"""What every detector needs, computed once: steps, the reason timelines, slice masks.

A detector measures a pathology as the time some *reason* of the breakdown's timeline
(:mod:`explorer.analysis.breakdown`) covers inside the steps, on the device where it is
largest; its evidence is the slices that overlap that time, weighted by the overlap; its
source lines are those slices' user lines (:mod:`explorer.analysis.attribution`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from explorer.analysis.breakdown import DEVICE_REASONS, HOST_REASONS, ReasonTimeline, timelines
from explorer.analysis.cause_lines import cause_lines
from explorer.analysis.finding import Finding
from explorer.analysis.steps import attributed_steps
from explorer.trace.columns import category_values
from explorer.trace.model import TraceData

#: A finding is reported when it costs at least this share of the total step time.
MIN_SHARE = 0.02
#: At most this many evidence slices and ranges per finding (the heaviest).
MAX_EVIDENCE = 50
MAX_RANGES = 200

#: Slices :meth:`Context.overlap` measures at a time.
OVERLAP_CHUNK = 1 << 16

#: Every reason the breakdown's timelines can hold: what a detector may measure.
REASON_NAMES: frozenset[str] = frozenset(r for r, _ in (*DEVICE_REASONS, *HOST_REASONS))


#: Device label prefix → the torch module that drives it (ROCm's PyTorch keeps ``torch.cuda``).
TORCH_MODULES = {
    "cuda": "torch.cuda",
    "rocm": "torch.cuda",
    "mtia": "torch.mtia",
    "xpu": "torch.xpu",
    "hpu": "torch.hpu",
    "npu": "torch.npu",
}


def torch_module(device: str) -> str | None:
    """``"mtia:17"`` → ``"torch.mtia"``: the API advice should name (None: host, unknown)."""
    return TORCH_MODULES.get(device.partition(":")[0].lower())


@dataclass
class Measured:
    """Reasons' time on one device: total, per step, and the windows they cover."""

    device: str
    reason: str
    per_step: np.ndarray
    ranges: np.ndarray  # n x 2, clipped to steps
    reasons: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return int(self.per_step.sum())


@dataclass
class Context:
    """Shared inputs of the detectors for one trace."""

    trace: TraceData
    steps: pd.DataFrame = field(init=False)
    timelines: dict[str, ReasonTimeline] = field(init=False)
    declared: frozenset[str] = field(default=REASON_NAMES, init=False, repr=False)
    """The reasons the running detector declared; measuring any other is an error."""
    _measured: dict[tuple[str, ...], Measured | None] = field(
        default_factory=dict, init=False, repr=False
    )
    _once: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.steps = attributed_steps(self.trace)
        self.timelines = timelines(self.trace)

    @contextmanager
    def reading(self, reasons: frozenset[str]) -> Iterator[Context]:
        """While a detector that declared ``reasons`` runs: refuse every other reason."""
        outer, self.declared = self.declared, reasons
        try:
            yield self
        finally:
            self.declared = outer

    def _check(self, reasons: tuple[str, ...]) -> None:
        undeclared = sorted(set(reasons) - self.declared)
        if undeclared:
            raise ValueError(
                f"reason(s) {undeclared} are not among the declared {sorted(self.declared)}"
            )

    # -- the trace, as arrays -------------------------------------------------------------
    @property
    def total_ns(self) -> int:
        return int(self.steps["dur_ns"].sum())

    @property
    def device_mode(self) -> bool:
        return "host" not in self.timelines

    @cached_property
    def kind(self) -> np.ndarray:
        return category_values(self.trace.slices["kind"])

    @cached_property
    def on_device(self) -> np.ndarray:
        return self.trace.on_device()

    @cached_property
    def ts(self) -> np.ndarray:
        return self.trace.slices["ts"].to_numpy(np.int64)

    @cached_property
    def end(self) -> np.ndarray:
        return self.ts + self.trace.slices["dur"].to_numpy(np.int64)

    @cached_property
    def parent(self) -> np.ndarray:
        return self.trace.slices["parent"].to_numpy(np.int64)

    def outermost(self, mask: np.ndarray) -> np.ndarray:
        """``mask`` without the slices whose parent is also in ``mask``."""
        parent = self.parent
        inner = np.zeros(len(mask), bool)
        has = parent >= 0
        inner[has] = mask[parent[has]]
        return mask & ~inner

    @cached_property
    def windows(self) -> tuple[np.ndarray, np.ndarray]:
        """The steps' ``(start_ns, end_ns)`` as int64 arrays."""
        return (
            self.steps["start_ns"].to_numpy(np.int64),
            self.steps["end_ns"].to_numpy(np.int64),
        )

    @cached_property
    def _tiled(self) -> bool:
        """Do the steps follow one another without overlapping (as attributed steps do)?
        Then each slice overlaps a contiguous run of them, found by binary search."""
        starts, ends = self.windows
        return bool(np.all(ends >= starts) and np.all(starts[1:] >= ends[:-1]))

    @cached_property
    def starts_in_steps(self) -> np.ndarray:
        """Per slice: does it start inside a step (``start <= ts < end`` of any)?"""
        starts, ends = self.windows
        if self._tiled:
            j = np.searchsorted(starts, self.ts, side="right") - 1
            ok = j >= 0
            out = np.zeros(len(self.ts), bool)
            out[ok] = self.ts[ok] < ends[j[ok]]
            return out
        out = np.zeros(len(self.ts), bool)
        for s, e in zip(starts, ends, strict=True):
            out |= (self.ts >= s) & (self.ts < e)
        return out

    def once(self, key: str, make: Callable[[], Any]) -> Any:
        """``make()``, computed once per context under ``key`` (detectors share results:
        the launch-bound detector leaves out what the runtime-stall one measured)."""
        if key not in self._once:
            self._once[key] = make()
        return self._once[key]

    def clipped(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every (slice, step) pair where slice ``ids[i]`` overlaps the step: ``(i, step
        index, start, end)`` of the overlap, clipped to the step and never empty."""
        starts, ends = self.windows
        a0, b0 = self.ts[ids], self.end[ids]
        if self._tiled:
            lo = np.searchsorted(ends, a0, side="right")
            hi = np.searchsorted(starts, b0, side="left")
            n = np.maximum(hi - lo, 0)
            row = np.repeat(np.arange(len(ids)), n)
            first = np.cumsum(n) - n
            step = lo[row] + (np.arange(len(row)) - first[row])
        else:
            pairs = [
                (np.flatnonzero((b0 > s) & (a0 < e)), j)
                for j, (s, e) in enumerate(zip(starts, ends, strict=True))
            ]
            row = np.concatenate([p for p, _ in pairs] + [np.zeros(0, np.int64)])
            step = np.concatenate(
                [np.full(len(p), j, np.int64) for p, j in pairs] + [np.zeros(0, np.int64)]
            )
        a = np.maximum(a0[row], starts[step])
        b = np.minimum(b0[row], ends[step])
        ok = b > a
        return row[ok], step[ok], a[ok], b[ok]

    # -- measuring ------------------------------------------------------------------------
    def measure(self, *reasons: str) -> Measured | None:
        """The reasons' summed time per step on the device where that total is largest
        (None when no timeline has these reasons)."""
        self._check(reasons)
        if reasons not in self._measured:
            self._measured[reasons] = self._measure(reasons)
        m = self._measured[reasons]
        if m is None:
            return None
        return Measured(m.device, m.reason, m.per_step.copy(), m.ranges.copy(), m.reasons)

    def _measure(self, reasons: tuple[str, ...]) -> Measured | None:
        starts, ends = self.windows
        best: Measured | None = None
        for label, tl in self.timelines.items():
            have = [r for r in reasons if r in [name for name, _ in tl.reasons]]
            if not have:
                continue
            per = np.asarray(
                np.sum([tl.reason_ns(r, starts, ends) for r in have], axis=0), np.int64
            )
            if best is None or per.sum() > best.per_step.sum():
                best = Measured(label, have[0], per, np.zeros((0, 2), np.int64), tuple(have))
        if best is None or best.total == 0:
            return best
        tl = self.timelines[best.device]
        runs = [tl.ranges_in(r, starts, ends) for r in best.reasons]
        rng = np.concatenate(runs) if runs else np.zeros((0, 2), np.int64)
        best.ranges = rng[np.argsort(rng[:, 0], kind="stable")]
        return best

    def in_windows(self, device: str, reason: str, ids: np.ndarray) -> np.ndarray:
        """Per step, ns of ``reason`` inside the slices ``ids`` (their union, clipped to the
        step). ``ids`` should not nest (pass outermost slices)."""
        self._check((reason,))
        tl = self.timelines[device]
        per = np.zeros(len(self.steps), np.int64)
        _, step, a, b = self.clipped(np.asarray(ids, np.int64))
        if len(step):
            np.add.at(per, step, tl.reason_ns(reason, a, b))
        return per

    def overlap(self, m: Measured, ids: np.ndarray) -> np.ndarray:
        """ns each slice in ``ids`` overlaps the measured reasons (inside steps)."""
        self._check(m.reasons or (m.reason,))
        tl = self.timelines[m.device]
        ids = np.asarray(ids, np.int64)
        inside = np.zeros(len(ids), np.int64)
        # OVERLAP_CHUNK slices at a time: a finding's candidates can be every host slice,
        # and their clipped pieces and timeline lookups were ~20 arrays of that length at
        # once (the findings' peak, ~60 MB on the synthetic 1M-event trace)
        for lo in range(0, len(ids), OVERLAP_CHUNK):
            row, _, a, b = self.clipped(ids[lo : lo + OVERLAP_CHUNK])
            if len(row):
                row += lo
                for r in m.reasons or (m.reason,):
                    np.add.at(inside, row, tl.reason_ns(r, a, b))
        return inside

    def share(self, ns: int) -> float:
        return float(ns) / self.total_ns if self.total_ns > 0 else 0.0

    def significant(self, m: Measured | None) -> bool:
        return m is not None and self.total_ns > 0 and m.total >= MIN_SHARE * self.total_ns

    # -- building -------------------------------------------------------------------------
    def finding(
        self,
        kind: str,
        m: Measured,
        candidates: np.ndarray,
        title: str,
        explanation: str,
        recommendation: str,
        time_lost_ns: int | None = None,
        details: dict[str, Any] | None = None,
        source_lines: list[tuple[str, int, str]] | None = None,
    ) -> Finding:
        """A finding for measured reason ``m``, with evidence among ``candidates`` (ids);
        its source lines are those of the evidence's overlap unless ``source_lines``."""
        ids = (
            np.flatnonzero(candidates)
            if candidates.dtype == bool
            else np.asarray(candidates, np.int64)
        )
        ov = self.overlap(m, ids) if len(ids) else np.zeros(0, np.int64)
        hit = ov > 0
        ids, ov = ids[hit], ov[hit]
        order = np.argsort(-ov, kind="stable")
        evidence = [int(i) for i in ids[order][:MAX_EVIDENCE]]
        lost = m.total if time_lost_ns is None else int(time_lost_ns)
        ranges = m.ranges
        if len(ranges) > MAX_RANGES:
            keep = np.sort(np.argsort(-(ranges[:, 1] - ranges[:, 0]), kind="stable")[:MAX_RANGES])
            ranges = ranges[keep]
        return Finding(
            kind=kind,
            title=title,
            time_lost_ns=lost,
            share=self.share(lost),
            steps=[int(s) for s, v in zip(self.steps["step"], m.per_step, strict=True) if v > 0],
            ranges=[(int(a), int(b)) for a, b in ranges],
            evidence=evidence,
            source_lines=cause_lines(self.trace, ids, ov) if source_lines is None else source_lines,
            explanation=explanation,
            recommendation=recommendation,
            device=m.device,
            details={
                **(details or {}),
                "per_step_ns": {
                    int(s): int(v)
                    for s, v in zip(self.steps["step"], m.per_step, strict=True)
                    if v > 0
                },
            },
        )

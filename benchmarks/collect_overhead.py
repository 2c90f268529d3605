#!/usr/bin/env python
"""What ``explorer.collect()`` costs on a CPU training loop, against its baselines.

    python benchmarks/collect_overhead.py [--steps 20] [--rounds 5]

Per-step time (median over rounds × steps, measured inside the block) for the configurations
below — process CPU time (all threads, the sampler's included; stable on a shared machine)
and wall time (what a user waits; noisy when other jobs share the CPUs):

* ``none``            — no profiling at all
* ``bare_profiler``   — ``torch.profiler.profile`` with the same settings collect() uses
                        (CPU, record_shapes, profile_memory, with_stack, ProfilerStep markers)
* ``collect``         — ``explorer.collect()`` with hooks and sampler (the default)
* ``collect_hooks``   — hooks on, sampler off   → the hooks' own cost vs bare_profiler
* ``collect_sampler`` — hooks off, sampler on   → the sampler's own cost vs bare_profiler

Configurations run interleaved, round by round, so a noisy neighbour hits them alike. Also
reported: the time to write the trace at the end (profiler export vs collect's
export+merge+gzip), and the per-call cost of a wrapped ``.item()``/``.to()`` without a profiler.
Target: collect ≤ 1.10× bare_profiler in CPU time per step. torch runs 1 intra-op thread by
default here (``--threads``) so that scheduling noise does not swamp a few-percent effect.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerAction, ProfilerActivity

import explorer
from explorer.collect.event_buffer import EventBuffer
from explorer.collect.runtime_hooks import RuntimeHooks


def make_loop() -> Callable[[], float]:
    """One training step of a small CNN (synthetic data) that also logs its loss with .item()."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
        nn.Flatten(), nn.Linear(32 * 16, 10),
    )  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    images = torch.randn(16, 3, 32, 32)
    labels = torch.randint(0, 10, (16,))
    loss_fn = nn.CrossEntropyLoss()

    def step() -> float:
        x = images.to(torch.float32)
        loss = loss_fn(model(x), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return step


def timed_steps(
    step: Callable[[], float], n: int, marker: Callable[[], None]
) -> list[tuple[int, int]]:
    """(wall ns, process CPU ns) per step. CPU time counts every thread of the process — the
    sampler's included — and is far less disturbed by other jobs on a shared machine."""
    out = []
    for _ in range(n):
        t0, c0 = time.perf_counter_ns(), time.process_time_ns()
        step()
        marker()
        out.append((time.perf_counter_ns() - t0, time.process_time_ns() - c0))
    return out


def run_none(step: Callable[[], float], n: int, out: Path) -> tuple[list[tuple[int, int]], int]:
    return timed_steps(step, n, lambda: None), 0


def run_bare(step: Callable[[], float], n: int, out: Path) -> tuple[list[tuple[int, int]], int]:
    prof = torch.profiler.profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        profile_memory=True,
        with_stack=True,
        schedule=lambda s: ProfilerAction.RECORD,  # the same ProfilerStep markers collect() writes
    )
    prof.start()
    times = timed_steps(step, n, prof.step)
    t0 = time.perf_counter_ns()
    prof.stop()
    prof.export_chrome_trace(str(out / f"bare-{time.perf_counter_ns()}.json"))
    return times, time.perf_counter_ns() - t0


def run_collect(
    **options: object,
) -> Callable[[Callable[[], float], int, Path], tuple[list[tuple[int, int]], int]]:
    def run(step: Callable[[], float], n: int, out: Path) -> tuple[list[tuple[int, int]], int]:
        c = explorer.collect(out, **options)
        with c:
            times = timed_steps(step, n, c.step)
            t0 = time.perf_counter_ns()
        return times, time.perf_counter_ns() - t0

    return run


CONFIGS = {
    "none": run_none,
    "bare_profiler": run_bare,
    "collect": run_collect(),
    "collect_hooks": run_collect(sampler_interval_s=None),
    "collect_sampler": run_collect(hooks=False),
}


def per_call_ns(fn: Callable[[], object], n: int = 20000) -> float:
    for _ in range(1000):
        fn()
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n


def wrapper_costs() -> dict[str, tuple[float, float]]:
    """ns per call of .item() and .to(dtype), bare vs wrapped (no profiler running)."""
    x = torch.randn(4)
    calls = {".item()": lambda: x.sum().item(), ".to(float32)": lambda: x.to(torch.float32)}
    bare = {k: per_call_ns(f) for k, f in calls.items()}
    hooks = RuntimeHooks(EventBuffer())
    hooks.install()
    try:
        wrapped = {k: per_call_ns(f) for k, f in calls.items()}
    finally:
        hooks.uninstall()
    return {k: (bare[k], wrapped[k]) for k in calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads (1: least noise)"
    )
    parser.add_argument(
        "--sampler-interval", type=float, default=0.1, help="seconds (collect's default)"
    )
    args = parser.parse_args()
    CONFIGS["collect"] = run_collect(sampler_interval_s=args.sampler_interval)
    CONFIGS["collect_sampler"] = run_collect(hooks=False, sampler_interval_s=args.sampler_interval)
    torch.set_num_threads(args.threads)
    step = make_loop()
    for _ in range(5):  # warm caches and allocator
        step()
    times: dict[str, list[tuple[int, int]]] = {k: [] for k in CONFIGS}
    finish: dict[str, list[int]] = {k: [] for k in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for name, run in CONFIGS.items():
                t, f = run(step, args.steps, Path(tmp))
                times[name].extend(t[1:])  # the first step of a block pays the profiler's start
                finish[name].append(f)
    wall = {k: statistics.median(w for w, _ in v) / 1e6 for k, v in times.items()}
    cpu = {k: statistics.median(c for _, c in v) / 1e6 for k, v in times.items()}
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds × {args.steps} steps"
    )
    print(
        f"{'config':<17}{'wall/step':>11}{'vs bare':>9}{'CPU/step':>11}{'vs none':>9}{'vs bare':>9}{'write trace':>13}"
    )
    for k in CONFIGS:
        w = statistics.median(finish[k]) / 1e6
        print(
            f"{k:<17}{wall[k]:>8.2f} ms{wall[k] / wall['bare_profiler']:>8.2f}×"
            f"{cpu[k]:>8.2f} ms{cpu[k] / cpu['none']:>8.2f}×{cpu[k] / cpu['bare_profiler']:>8.2f}×{w:>10.1f} ms"
        )
    base = cpu["bare_profiler"]
    for label, k in (("hooks'", "collect_hooks"), ("sampler's", "collect_sampler")):
        d = cpu[k] - base
        print(
            f"{label + ' own cost per step:':<28}{d * 1000:+7.0f} µs CPU ({d / base:+.1%} of bare)"
        )
    ratio = cpu["collect"] / base
    print(
        f"collect / bare profiler = {ratio:.3f}× CPU per step (target ≤ 1.10×): {'OK' if ratio <= 1.10 else 'OVER'}"
    )
    for call, (bare, wrapped) in wrapper_costs().items():
        print(
            f"wrapped {call:<13} {bare:7.0f} ns → {wrapped:7.0f} ns per call (+{wrapped - bare:.0f} ns)"
        )


if __name__ == "__main__":
    main()

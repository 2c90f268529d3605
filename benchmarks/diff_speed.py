"""Diff of two >=1M-event traces, against loading one of them.

Target (issue #5): ``explorer.diff(a, b)`` of two such traces in at most 3x one load. The
two traces are the same repeated real trace generated at two sizes (so ops and kernels
match and the per-step comparison has real work to do); both are loaded uncached, then
diffed with their analysis caches cleared, so the diff pays for every analysis it uses
(steps, breakdown, by_source, findings) on both sides. Prints medians and the ratio.

    python benchmarks/diff_speed.py [--events 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from big_trace import make_big_trace  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    import explorer
    from explorer.analysis.diff import diff

    tmp = Path(tempfile.gettempdir())
    pa = make_big_trace(tmp / f"explorer-bench-{args.events}.json", args.events)
    pb = make_big_trace(
        tmp / f"explorer-bench-{args.events * 11 // 10}.json", args.events * 11 // 10
    )
    loads, diffs = [], []
    for _ in range(args.repeat):
        t = time.perf_counter()
        a = explorer.load(pa, use_cache=False)
        loads.append(time.perf_counter() - t)
        b = explorer.load(pb, use_cache=False)
        t = time.perf_counter()
        d = diff(a, b)
        diffs.append(time.perf_counter() - t)
    load, dt = statistics.median(loads), statistics.median(diffs)
    print(f"a: {pa} ({len(a.slices):,} slices)  b: {pb} ({len(b.slices):,} slices)")
    print(f"ops compared {len(d.ops):,}, kernels {len(d.kernels):,}, lines {len(d.lines):,}")
    print(f"load of a (uncached)    median {load:7.2f} s   runs {[round(x, 2) for x in loads]}")
    print(f"diff(a, b)              median {dt:7.2f} s   runs {[round(x, 2) for x in diffs]}")
    ratio = dt / load
    print(f"diff / one load = {ratio:.2f}x  (target <= 3x: {'met' if ratio <= 3 else 'NOT met'})")


if __name__ == "__main__":
    main()

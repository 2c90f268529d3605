"""Dependency graph + critical path of a >=1M-event trace, against loading that trace.

Target (issue #5): graph plus critical path in at most 2x the trace's load time. Both are
measured in the same run on the same file: the load is a first (uncached) parse, the graph
and path are built from scratch on the loaded trace (its analysis cache cleared). Prints
per-phase medians and the ratio.

    python benchmarks/graph_speed.py [--events 1000000] [--repeat 3]
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
    ap.add_argument("--path", default=None, help="trace to use (default: a generated one)")
    args = ap.parse_args()

    import explorer
    from explorer.analysis.critical_path import critical_path
    from explorer.analysis.dependency_graph import dependency_graph

    path = (
        Path(args.path)
        if args.path
        else make_big_trace(
            Path(tempfile.gettempdir()) / f"explorer-bench-{args.events}.json", args.events
        )
    )
    loads, graphs, paths = [], [], []
    trace = None
    for _ in range(args.repeat):
        t = time.perf_counter()
        trace = explorer.load(path, use_cache=False)
        loads.append(time.perf_counter() - t)
        t = time.perf_counter()
        g = dependency_graph(trace)
        graphs.append(time.perf_counter() - t)
        t = time.perf_counter()
        cp = critical_path(trace)
        paths.append(time.perf_counter() - t)
    assert trace is not None
    load, graph, path_s = (statistics.median(x) for x in (loads, graphs, paths))
    print(
        f"trace: {path} ({len(trace.slices):,} slices, {len(g.edges):,} edges, "
        f"path of {len(cp.slices):,} slices, {cp.length_ns / 1e6:.1f} ms)"
    )
    print(f"load (uncached)         median {load:7.2f} s   runs {[round(x, 2) for x in loads]}")
    print(f"dependency graph        median {graph:7.2f} s   runs {[round(x, 2) for x in graphs]}")
    print(f"critical path           median {path_s:7.2f} s   runs {[round(x, 2) for x in paths]}")
    ratio = (graph + path_s) / load
    print(
        f"graph + critical path / load = {ratio:.2f}x  (target <= 2x: {'met' if ratio <= 2 else 'NOT met'})"
    )


if __name__ == "__main__":
    main()

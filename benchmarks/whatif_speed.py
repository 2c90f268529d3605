"""What-if replay of a >=1M-event trace, against loading that trace (issue 30).

Target: a full replay (every step, the graph already built) in at most 1x the trace's
load time; the graph's build and the new critical path are printed beside it. Load and
replay are measured in the same run on the same file: the load a first (uncached) parse;
the replay halves every ``aten::`` op's time (a change that moves most points).

    python benchmarks/whatif_speed.py [--events 1000000] [--repeat 3] [--path TRACE]
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

    import numpy as np

    import explorer
    from explorer.analysis.whatif import (
        _path,
        _step_table,
        replay_graph,
        replay_graph_of,
    )

    path = (
        Path(args.path)
        if args.path
        else make_big_trace(
            Path(tempfile.gettempdir()) / f"explorer-bench-{args.events}.json", args.events
        )
    )
    loads, graphs, replays, paths = [], [], [], []
    for _ in range(args.repeat):
        t = time.perf_counter()
        trace = explorer.load(path, use_cache=False).data
        loads.append(time.perf_counter() - t)
        t = time.perf_counter()
        graph = replay_graph_of(trace)
        graphs.append(time.perf_counter() - t)
        names = trace.slices["name"]
        aten = np.asarray(names.cat.categories.astype(str).str.startswith("aten::"))
        factor = np.where(aten[names.cat.codes.to_numpy()], 0.5, 1.0)
        t = time.perf_counter()
        ts, end = replay_graph(graph, factor)
        table = _step_table(trace, graph, ts, end)
        replays.append(time.perf_counter() - t)
        t = time.perf_counter()
        _path(trace, graph, ts, end)
        paths.append(time.perf_counter() - t)
    load, build = statistics.median(loads), statistics.median(graphs)
    rep, pth = statistics.median(replays), statistics.median(paths)
    print(f"trace: {path} ({len(trace.slices):,} slices, {len(graph.edges):,} edges)")
    print(f"load {load:.2f} s; graph {build:.2f} s; replay {rep:.2f} s; new path {pth:.2f} s")
    print(f"replay / load = {rep / load:.2f}x (target <= 1x); with the graph's build: "
          f"{(rep + build) / load:.2f}x; steps {len(table)}, saved "
          f"{int(table['saving_ns'].sum()) / 1e6:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""How the job report scales with ranks: wall time on 1 and 2 Dask workers, ranks per
minute, and the driver's peak memory, for jobs of 16, 64 and 256 ranks.

    python benchmarks/job_scale.py [--sizes 16 64 256] [--workers 1 2]

The jobs are SYNTHETIC (labelled ``"synthetic": true`` in every file): copies of the real
ranks of ``sample_traces/ddp_4rank_slow_input`` — every rank a copy of real rank 0, one
planted straggler a copy of real rank 2 (the one whose input pipeline is slow) —
each with its own clock offset (a few hundred µs, as between hosts) and host name (8 ranks
a host), so clock alignment and straggler naming have real work to do. Each measurement is
a fresh process running :func:`explorer.job.job_document` with the trace cache off (every
rank parsed and analysed); the driver's peak memory is that process's own peak RSS — the
Dask workers are other processes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "ddp_4rank_slow_input"
STRAGGLER_TEMPLATE = 2


def make_job(out: Path, ranks: int, seed: int = 0) -> int:
    """Write ``ranks`` synthetic rank traces into ``out``; returns the planted straggler."""
    rng = random.Random(seed)
    templates = {
        r: json.loads(gzip.open(SAMPLE / f"rank{r}.pt.trace.json.gz", "rt").read())
        for r in (0, STRAGGLER_TEMPLATE)
    }
    straggler = rng.randrange(ranks)
    out.mkdir(parents=True, exist_ok=True)
    for k in range(ranks):
        src = STRAGGLER_TEMPLATE if k == straggler else 0
        doc = dict(templates[src])
        shift_us = rng.uniform(-300.0, 300.0)  # this "host"'s clock offset
        doc["traceEvents"] = [
            {**e, "ts": e["ts"] + shift_us} if "ts" in e else e for e in doc["traceEvents"]
        ]
        info = doc.get("distributedInfo", {})
        # the process groups span this job's ranks, not the 4 of the sample run: a copy
        # that kept [0, 1, 2, 3] put every other rank's collectives in a group of their own
        groups = [
            {**g, "pg_size": ranks, "ranks": list(range(ranks))} for g in info.get("pg_config", [])
        ]
        doc["distributedInfo"] = {**info, "rank": k, "world_size": ranks, "pg_config": groups}
        env = {**doc["explorer"]["environment"], "host": f"node{k // 8}"}
        doc["explorer"] = {**doc["explorer"], "environment": env}
        doc["synthetic"] = True
        doc["explorer_scenario"] = f"job_scale: copy of real rank {src}, clock {shift_us:+.0f} µs"
        with gzip.open(out / f"rank{k}.pt.trace.json.gz", "wt", compresslevel=1) as fh:
            json.dump(doc, fh)
    return straggler


_MEASURE = """
import json, resource, sys, time
from explorer.job import job_document
t0 = time.perf_counter()
doc = job_document(sys.argv[1], workers=int(sys.argv[2]), store=sys.argv[3], use_cache=False)
wall = time.perf_counter() - t0
print(json.dumps({"wall_s": wall, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6,
                  "straggler": (doc["straggler"] or {}).get("rank"), "ranks": doc["ranks_present"],
                  "synthetic": doc["synthetic"]}))
"""


def measure(job: Path, workers: int, store: Path) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(job), str(workers), str(store)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[16, 64, 256])
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--dir", default=None, help="keep the synthetic jobs here (default: a temp dir)")
    args = p.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="explorer-job-scale-"))
    rows = []
    for n in args.sizes:
        job = base / f"job{n}"
        planted = make_job(job, n)
        for w in args.workers:
            res = measure(job, w, base / f"store{n}-{w}")
            assert res["synthetic"] and res["ranks"] == n
            rows.append((n, w, res, planted))
            print(
                f"{n:4d} ranks, {w} worker(s): {res['wall_s']:6.1f} s = "
                f"{60 * n / res['wall_s']:5.0f} ranks/min; driver peak RSS "
                f"{res['peak_rss_mb']:.0f} MB; straggler found {res['straggler']} "
                f"(planted {planted})",
                flush=True,
            )
    by = {(n, w): res for n, w, res, _ in rows}
    for n in args.sizes:
        if (n, 1) in by and (n, 2) in by:
            print(
                f"{n:4d} ranks: 2 workers {by[(n, 1)]['wall_s'] / by[(n, 2)]['wall_s']:.2f}x faster than 1"
            )
    mem = [by[(n, w)]["peak_rss_mb"] for n in args.sizes for w in args.workers if (n, w) in by]
    print(f"driver peak RSS from {min(mem):.0f} to {max(mem):.0f} MB ({max(mem) / min(mem):.2f}x)")
    print(f"started {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; jobs in {base}")


if __name__ == "__main__":
    main()

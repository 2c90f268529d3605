"""First-load time and peak memory at 1M, 5M and 10M events: does the loader grow linearly?

Each input is the real NVIDIA rank of ``../shared/traces`` repeated in time
(:mod:`big_trace`). Each load runs in a fresh process (trace cache off: the parse alone)
and is watched from outside: every 50 ms this script sums the proportional set size (PSS)
of the loading process and all its children — the decoding workers — so pages a forked
worker shares with its parent count once, and a worker's own memory counts in full. The
figure is that peak minus the loading process's own PSS with its imports done and nothing
loaded. The process's own ``ru_maxrss`` is printed beside it (what the load_speed figures
used to quote: it cannot see the workers).

    python benchmarks/load_scale.py [--events 1000000 5000000 10000000] [--repeat 3]
        [--workers N]   # EXPLORER_LOAD_WORKERS for the loads (default: the loader's choice)

Prints one line per size and the time per event of each size against the smallest.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from big_trace import make_big_trace  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

_LOAD = r"""
import json, resource, sys, time
import psutil
import explorer
base = psutil.Process().memory_full_info().pss
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print("ready", flush=True)
t, c = time.perf_counter(), time.process_time()
tr = explorer.load(sys.argv[1], use_cache=sys.argv[2:] == ["cache"])
dt, cpu = time.perf_counter() - t, time.process_time() - c
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"s": dt, "cpu_s": cpu, "base_pss": base, "rss_over_mb": (peak - rss0) / 1024,
                  "slices": len(tr.slices)}), flush=True)
"""


def _tree_pss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def measure(trace: Path, env: dict[str, str], cache: bool = False) -> dict:
    """One load in a fresh process: its own timing, and the peak PSS of it and its workers.
    With ``cache``, a first load as a user's is: the store entry written too (into the
    ``EXPLORER_CACHE_DIR`` of ``env``, which should be empty)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOAD, str(trace), *(["cache"] if cache else [])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(proc.communicate()[1].strip().splitlines()[-1])
    watched = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            peak = max(peak, _tree_pss(watched))
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(err.strip().splitlines()[-1] if err.strip() else "failed")
    result = json.loads(out.strip().splitlines()[-1])
    result["pss_over_mb"] = (peak - result["base_pss"]) / 2**20
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, nargs="+", default=[1_000_000, 5_000_000, 10_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", default="", help="EXPLORER_LOAD_WORKERS for the loads")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "explorer-bench-scale"))
    a = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if a.workers:
        env["EXPLORER_LOAD_WORKERS"] = a.workers
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    cores = len(os.sched_getaffinity(0))
    print(f"{cores} cores; workers: {a.workers or 'the loader default'}")
    per_event = {}
    for n in a.events:
        trace = make_big_trace(work / f"scale-{n}.json", n)
        size_mb = trace.stat().st_size / 1e6
        runs = [measure(trace, env) for _ in range(a.repeat)]
        s = statistics.median(r["s"] for r in runs)
        cpu = statistics.median(r["cpu_s"] for r in runs)
        pss = statistics.median(r["pss_over_mb"] for r in runs)
        rss = statistics.median(r["rss_over_mb"] for r in runs)
        per_event[n] = s / n
        print(
            f"{n:>11,} events ({size_mb:,.0f} MB JSON, {runs[0]['slices']:,} slices): "
            f"first load median {s:.2f} s over {len(runs)} (parent CPU {cpu:.2f} s), "
            f"{n / s / 1e6:.2f} M events/s; peak PSS of loader + workers +{pss:,.0f} MB = "
            f"{pss / size_mb:.2f}x the JSON (loader's own ru_maxrss +{rss:,.0f} MB); "
            f"load average {os.getloadavg()[0]:.1f}"
        )
    smallest = min(per_event)
    for n, t in per_event.items():
        print(f"time per event at {n:,}: {t / per_event[smallest]:.2f}x that at {smallest:,}")


if __name__ == "__main__":
    main()

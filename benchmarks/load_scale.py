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

Prints one line per size; the time, user CPU and system CPU per event of each size against
the smallest (loader and workers: the workers' from ``RUSAGE_CHILDREN`` once the load has
joined them); and how fast this machine gives a process fresh memory, against memory it
has just freed (:func:`memory_touch_rates`): where the host of a virtual machine takes back
what its guest frees, the first touch of memory is many times slower, and a load that
touches more fresh memory per event (the loading process joining columns of 80 MB instead of
8 MB) pays it in system time.
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
def usage():
    me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return me.ru_utime, me.ru_stime, kids.ru_utime, kids.ru_stime
base = psutil.Process().memory_full_info().pss
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print("ready", flush=True)
t, c, u0 = time.perf_counter(), time.process_time(), usage()
tr = explorer.load(sys.argv[1], use_cache=sys.argv[2:] == ["cache"])
dt, cpu, u1 = time.perf_counter() - t, time.process_time() - c, usage()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
user, system, w_user, w_system = (b - a for a, b in zip(u0, u1))
print(json.dumps({"s": dt, "cpu_s": cpu, "base_pss": base, "rss_over_mb": (peak - rss0) * 1024 / 1e6,
                  "slices": len(tr.slices), "user_s": user + w_user, "sys_s": system + w_system,
                  "loader_sys_s": system}), flush=True)
"""

#: Touches fresh memory twice in a new process: how fast this machine gives a process
#: memory it has not used yet, and memory it has just freed (on a virtual machine whose
#: host takes freed memory back, the first can be 10-25x slower than the second).
_TOUCH = r"""
import json, sys, time
import numpy as np
n = int(sys.argv[1]) << 20
rates = []
for _ in range(2):
    t = time.perf_counter()
    a = np.ones(n // 8)
    rates.append(n / 2**30 / (time.perf_counter() - t))
    del a
print(json.dumps(rates))
"""


def memory_touch_rates(mb: int = 1024) -> tuple[float, float]:
    """GB/s at which a fresh process gets ``mb`` MB of memory it has not used, and the same
    amount again just after freeing it (see :data:`_TOUCH`)."""
    out = subprocess.run(
        [sys.executable, "-c", _TOUCH, str(mb)], capture_output=True, text=True, check=True
    ).stdout
    first, again = json.loads(out)
    return first, again


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
    result["pss_over_mb"] = (peak - result["base_pss"]) / 1e6  # MB, the JSON size's unit
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
        user = statistics.median(r["user_s"] for r in runs)
        system = statistics.median(r["sys_s"] for r in runs)
        per_event[n] = (s / n, user / n, system / n)
        print(
            f"{n:>11,} events ({size_mb:,.0f} MB JSON, {runs[0]['slices']:,} slices): "
            f"first load median {s:.2f} s over {len(runs)} (parent CPU {cpu:.2f} s; "
            f"loader + workers: user {user:.2f} s, system {system:.2f} s, of which the "
            f"loader's {statistics.median(r['loader_sys_s'] for r in runs):.2f} s), "
            f"{n / s / 1e6:.2f} M events/s; peak PSS of loader + workers +{pss:,.0f} MB = "
            f"{pss / size_mb:.2f}x the JSON (loader's own ru_maxrss +{rss:,.0f} MB); "
            f"load average {os.getloadavg()[0]:.1f}"
        )
    smallest = min(per_event)
    base = per_event[smallest]
    for n, (t, user, system) in per_event.items():
        print(
            f"per event at {n:,}, against {smallest:,}: time {t / base[0]:.2f}x, "
            f"user CPU {user / base[1]:.2f}x, system CPU {system / base[2]:.2f}x"
        )
    first, again = memory_touch_rates()
    print(
        f"this machine gives a new process fresh memory at {first:.1f} GB/s, and memory it "
        f"has just freed at {again:.1f} GB/s (1 GB, numpy.ones): system CPU per event grows "
        "with the fresh memory a load touches when the first is much the slower"
    )


if __name__ == "__main__":
    main()

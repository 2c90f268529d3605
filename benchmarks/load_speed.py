"""Load speed and memory: Explorer's first load and cached reopen of a ≥1M-event trace,
against Holistic Trace Analysis' ``TraceAnalysis`` parse of the same file in the same run.

"First load" is what a user's first ``explorer.load`` does: parse the JSON *and write the
store*, into an empty store each run; the parse alone (cache off) is timed beside it, run
for run, so the cost of the write is visible.

The cached reopen reads the trace's entry in the columnar store (Parquet files + header,
every file checksummed; args decoded on first use). Its wall time and its CPU time are both
printed: on a shared machine the wall time includes waiting for a core, the CPU time does not.

Each measurement runs in a fresh subprocess so peak RSS is the load's own (minus the
interpreter's baseline, measured the same way with the imports done and nothing loaded).

    python benchmarks/load_speed.py [--events 1000000] [--repeat 3] [--hta-python PATH] [--gzip]

HTA is optional: give ``--hta-python`` (a Python with ``HolisticTraceAnalysis`` installed,
kept in its own venv because it pins its own dependencies) or set ``HTA_PYTHON``; by default
``/tmp/hta-venv/bin/python`` is used when it exists (``python -m venv /tmp/hta-venv &&
/tmp/hta-venv/bin/pip install HolisticTraceAnalysis``).

The loader decodes large traces in worker processes, which ``ru_maxrss`` of the loading
process cannot see: the parse-only runs are also watched from outside, summing the PSS of
the loading process and its workers (see ``load_scale.py``), and that figure is printed too.

``--baseline-pythonpath CHECKOUT`` also runs the explorer of an older checkout, alternating
run by run with this one: its cached reopen and its first load (time and watched PSS), each
against its own fresh store. Its runs set ``PYTHONSAFEPATH`` (Python 3.11+): ``python -c``
otherwise puts the working directory first on ``sys.path``, and run from a checkout, that
checkout's explorer, not the baseline's, is what gets imported.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from big_trace import make_big_trace  # noqa: E402
from load_scale import measure  # noqa: E402

_HTA_VENV = Path(tempfile.gettempdir()) / "hta-venv" / "bin" / "python"

_EXPLORER = r"""
import json, os, resource, sys, time
import explorer
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t, c = time.perf_counter(), time.process_time()
tr = explorer.load(sys.argv[1], use_cache=sys.argv[2] == "cache")
dt, cpu = time.perf_counter() - t, time.process_time() - c
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"s": dt, "cpu_s": cpu, "peak_mb": peak * 1024 / 1e6, "base_mb": base * 1024 / 1e6, "slices": len(tr.slices)}))
"""

#: The floor a loader can be compared with: read the file (inflating it when gzipped) and
#: decode every event into a typed struct (the fields Explorer reads), nothing else, in one
#: process.
_RAW = r"""
import json, sys, time, zlib
import msgspec
from explorer.trace.event_types import TypedEvent
class Doc(msgspec.Struct):
    traceEvents: list[TypedEvent] = []
t = time.perf_counter()
with open(sys.argv[1], "rb") as f:
    data = f.read()
if data[:2] == b"\x1f\x8b":
    data = zlib.decompress(data, wbits=31)
doc = msgspec.json.decode(data, type=Doc)
print(json.dumps({"s": time.perf_counter() - t, "events": len(doc.traceEvents)}))
"""

_HTA = r"""
import json, resource, sys, time
from hta.trace_analysis import TraceAnalysis
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
dt = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"s": dt, "peak_mb": peak * 1024 / 1e6, "base_mb": base * 1024 / 1e6}))
"""


def _run(python: str, code: str, *args: str, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run(
        [python, "-c", code, *args], capture_output=True, text=True, env=env, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reopen-repeat", type=int, default=5, help="cached reopens (fast)")
    ap.add_argument(
        "--hta-python",
        default=os.environ.get("HTA_PYTHON", str(_HTA_VENV) if _HTA_VENV.exists() else ""),
    )
    ap.add_argument(
        "--hta-repeat", type=int, default=2, help="HTA runs (each takes tens of seconds)"
    )
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "explorer-bench"))
    ap.add_argument(
        "--gzip",
        action="store_true",
        help="load the trace gzipped (level 6, as `gzip` writes it); the raw decode inflates it too",
    )
    ap.add_argument(
        "--reopen-only", action="store_true", help="skip the first-load runs (reopen figures only)"
    )
    ap.add_argument(
        "--baseline-pythonpath",
        default="",
        help="also time the cached reopen of the explorer found on this PYTHONPATH (e.g. a "
        "checkout of an older cache), alternating run by run with this one",
    )
    a = ap.parse_args()
    if a.baseline_pythonpath and sys.version_info < (3, 11):
        ap.error("--baseline-pythonpath needs Python 3.11+ (PYTHONSAFEPATH; see the docstring)")
    work = Path(a.work)
    (work / "trace").mkdir(parents=True, exist_ok=True)
    trace = make_big_trace(work / "trace" / "rank-0.json", a.events)
    size_mb = trace.stat().st_size / 1e6  # the JSON's: what memory is compared with
    if a.gzip:  # in a directory of its own: HTA reads every trace in the one it is given
        (work / "trace-gz").mkdir(exist_ok=True)
        gz = work / "trace-gz" / "rank-0.json.gz"
        if not gz.exists() or gz.stat().st_mtime < trace.stat().st_mtime:
            with open(trace, "rb") as src, gzip.open(gz.with_suffix(".tmp"), "wb", 6) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            gz.with_suffix(".tmp").replace(gz)
        trace = gz
    n_events = int((work / "trace" / "rank-0.json.events").read_text())
    packed = f", {trace.stat().st_size / 1e6:.1f} MB gzipped" if a.gzip else ""
    print(
        f"trace: {trace} ({size_mb:.0f} MB uncompressed JSON{packed}, >= {n_events:,} events requested)"
    )
    env = dict(os.environ, EXPLORER_CACHE_DIR=str(work / "cache"))
    benv = dict(
        env,
        PYTHONPATH=a.baseline_pythonpath,
        PYTHONSAFEPATH="1",
        EXPLORER_CACHE_DIR=str(work / "cache-baseline"),
    )
    first, parse_only, watched, first_watched = [], [], [], []
    base_first, base_first_watched = [], []
    raw = [_run(sys.executable, _RAW, str(trace)) for _ in range(0 if a.reopen_only else a.repeat)]

    def baseline_first_load(fresh: Path) -> None:
        """The same first load with the baseline's code, into an empty store."""
        fresh_env = dict(benv, EXPLORER_CACHE_DIR=str(fresh))
        base_first.append(_run(sys.executable, _EXPLORER, str(trace), "cache", env=fresh_env))
        shutil.rmtree(fresh, ignore_errors=True)
        base_first_watched.append(measure(trace, fresh_env, cache=True))
        shutil.rmtree(fresh, ignore_errors=True)

    for k in range(0 if a.reopen_only else a.repeat):
        # A user's first load: parse + store write into an empty store. Interleaved with a
        # parse-only run (cache off) so both see the same load on a shared machine; the
        # baseline's first load goes before this one's every other repeat.
        fresh = work / f"cache-first-{k}"
        shutil.rmtree(fresh, ignore_errors=True)
        if a.baseline_pythonpath and k % 2:
            baseline_first_load(fresh)
        first_env = dict(os.environ, EXPLORER_CACHE_DIR=str(fresh))
        first.append(_run(sys.executable, _EXPLORER, str(trace), "cache", env=first_env))
        shutil.rmtree(fresh, ignore_errors=True)
        first_env["PYTHONPATH"] = str(Path(__file__).parents[1])
        first_watched.append(measure(trace, first_env, cache=True))
        shutil.rmtree(fresh, ignore_errors=True)
        parse_only.append(_run(sys.executable, _EXPLORER, str(trace), "nocache", env=env))
        watched.append(measure(trace, dict(env, PYTHONPATH=str(Path(__file__).parents[1]))))
        if a.baseline_pythonpath and not k % 2:
            baseline_first_load(fresh)
    _run(sys.executable, _EXPLORER, str(trace), "cache", env=env)  # writes the cache
    if a.baseline_pythonpath:
        _run(sys.executable, _EXPLORER, str(trace), "cache", env=benv)
    reopen, base = [], []
    for _ in range(max(a.repeat, a.reopen_repeat)):
        reopen.append(_run(sys.executable, _EXPLORER, str(trace), "cache", env=env))
        if a.baseline_pythonpath:
            base.append(_run(sys.executable, _EXPLORER, str(trace), "cache", env=benv))
    r_s = statistics.median(r["s"] for r in reopen)
    r_cpu = statistics.median(r["cpu_s"] for r in reopen)
    load = f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"
    print(
        f"explorer cached reopen: median {r_s:.3f} s over {len(reopen)} runs, fastest"
        f" {min(r['s'] for r in reopen):.3f} s (CPU time: median {r_cpu:.3f} s; {load})"
    )
    if base:
        b_s = statistics.median(r["s"] for r in base)
        b_cpu = statistics.median(r["cpu_s"] for r in base)
        print(
            f"baseline ({a.baseline_pythonpath}) cached reopen: median {b_s:.3f} s, CPU {b_cpu:.3f} s"
            f" -> this one takes {r_s / b_s:.2f}x the wall time and {r_cpu / b_cpu:.2f}x the CPU time"
        )
    if not first:
        return
    f_s = statistics.median(r["s"] for r in first)
    p_s = statistics.median(r["s"] for r in parse_only)
    growth = statistics.median(r["peak_mb"] - r["base_mb"] for r in first)
    print(
        f"explorer first load (parse + store write): median {f_s:.2f} s over {len(first)} runs"
        f" ({first[0]['slices']:,} slices) -> the cached reopen is {f_s / r_s:.0f}x faster"
    )
    print(
        f"explorer parse only (cache off):          median {p_s:.2f} s over {len(parse_only)}"
        f" runs -> the store write adds {f_s / p_s - 1:+.0%}"
    )
    print(
        f"explorer peak memory during load: +{growth:.0f} MB over the interpreter = {growth / size_mb:.2f}x the JSON size"
        f" (process peak {statistics.median(r['peak_mb'] for r in first):.0f} MB)"
    )
    fpss = statistics.median(r["pss_over_mb"] for r in first_watched)
    print(
        f"explorer first load (parse + store write), loader + worker processes (PSS, watched "
        f"from outside): +{fpss:.0f} MB = {fpss / size_mb:.2f}x the JSON"
    )
    raw_s = statistics.median(r["s"] for r in raw)
    print(
        f"raw typed decode of the whole file (read + msgspec into typed event structs, one "
        f"process): median {raw_s:.2f} s -> the first load takes {f_s / raw_s:.1f}x, the parse "
        f"only {p_s / raw_s:.1f}x"
    )
    if base_first:
        bf_s = statistics.median(r["s"] for r in base_first)
        bfpss = statistics.median(r["pss_over_mb"] for r in base_first_watched)
        print(
            f"baseline ({a.baseline_pythonpath}) first load (parse + store write): median "
            f"{bf_s:.2f} s, loader + workers (PSS) +{bfpss:.0f} MB = {bfpss / size_mb:.2f}x the "
            f"JSON -> this one takes {f_s / bf_s:.2f}x the time and {fpss / bfpss:.2f}x the memory"
        )
    pss = statistics.median(r["pss_over_mb"] for r in watched)
    print(
        f"explorer parse only, loader + worker processes (PSS, watched from outside): "
        f"+{pss:.0f} MB = {pss / size_mb:.2f}x the JSON, in {statistics.median(r['s'] for r in watched):.2f} s"
    )
    if a.hta_python and a.hta_repeat > 0:
        try:
            runs = [_run(a.hta_python, _HTA, str(trace.parent)) for _ in range(a.hta_repeat)]
            h_s = statistics.median(r["s"] for r in runs)
            h_mb = statistics.median(r["peak_mb"] - r["base_mb"] for r in runs)
            print(
                f"HTA TraceAnalysis parse: median {h_s:.2f} s over {len(runs)} runs, +{h_mb:.0f} MB"
                f" -> explorer first load is {h_s / f_s:.1f}x faster (parse only:"
                f" {h_s / p_s:.1f}x) and peaks {h_mb / max(growth, 1):.1f}x lower"
            )
        except RuntimeError as exc:
            print(f"HTA: could not run ({exc})")
    else:
        print("HTA: not measured (--hta-repeat 0, or give --hta-python or HTA_PYTHON)")


if __name__ == "__main__":
    main()

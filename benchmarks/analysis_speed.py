"""Analysis speed: what ``explorer report`` adds on top of loading a ≥1M-event trace, and
Holistic Trace Analysis' temporal and idle-time breakdowns on the same file, same run.

Target (issue #4): the analyses add at most 1x the load time (report <= 2x load).
Each Explorer run is a fresh subprocess that loads without the cache (the baseline), then
times every analysis a report or the viewer computes — steps, breakdown, findings,
by_source, dependency graph and critical path (over the span of the steps, the scope
``explorer report`` uses), memory timeline and allocations, operators — then the text and
JSON reports, which reuse them (rendering only), on that freshly loaded trace. The four
that the report's own sections need (steps, breakdown, findings, by_source) are also
reported on their own. HTA (its own venv, it pins its own dependencies) is timed the same
way: parse, ``get_temporal_breakdown``, ``get_idle_time_breakdown``; its negative idle
times, if any, are counted (Explorer's breakdown never has any: checked here too).

    python benchmarks/analysis_speed.py [--events 1000000] [--repeat 3] [--hta-python PATH]

The trace is ``big_trace.make_big_trace``: a real NVIDIA distributed-training trace from
``../shared/traces`` repeated in time (not synthetic data).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from big_trace import make_big_trace  # noqa: E402

_EXPLORER = r"""
import json, sys, time
import explorer
from explorer.analysis import memory, operators
from explorer.analysis.critical_path import critical_path
from explorer.report import render
t0 = time.perf_counter()
tr = explorer.load(sys.argv[1], use_cache=False)
t1 = time.perf_counter()
st = tr.steps(); bd = tr.breakdown()
tb = time.perf_counter()
fs = tr.findings(); bs = tr.by_source()
t4 = time.perf_counter()
critical_path(tr.data, None, all_steps=True)  # the report's scope (its graph included)
memory.memory_timeline(tr); memory.allocations(tr)
operators.operator_stats(tr)
t2 = time.perf_counter()
render(tr, "text"); render(tr, "json")
t3 = time.perf_counter()
sums = bd.groupby(["step", "device"])["ns"].sum()
dur = st.set_index("step")["dur_ns"]
exact = all(int(v) == int(dur[s]) for (s, _d), v in sums.items())
print(json.dumps({"load": t1 - t0, "analysis": t2 - t1, "breakdown": tb - t1, "report_four": t4 - t1,
                  "render": t3 - t2, "slices": len(tr.slices),
                  "steps": len(st), "findings": [f.kind for f in fs], "negative": int((bd["ns"] < 0).sum()),
                  "exact": exact}))
"""

_HTA = r"""
import json, sys, time, warnings, logging
warnings.filterwarnings("ignore"); logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
temporal = ta.get_temporal_breakdown(visualize=False)
t2 = time.perf_counter()
idle = ta.get_idle_time_breakdown(visualize=False)
t3 = time.perf_counter()
idle_df = idle[0] if isinstance(idle, tuple) else idle
neg = int((idle_df.select_dtypes("number") < 0).sum().sum())
print(json.dumps({"parse": t1 - t0, "temporal": t2 - t1, "idle": t3 - t2, "negative_idle": neg}))
"""


def _run(python: str, code: str, *args: str, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run(
        [python, "-c", code, *args], capture_output=True, text=True, env=env, check=False
    )
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit {out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--hta-python", default=os.environ.get("HTA_PYTHON", "/tmp/hta-venv/bin/python")
    )
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "explorer-bench"))
    a = ap.parse_args()
    work = Path(a.work)
    (work / "trace").mkdir(parents=True, exist_ok=True)
    trace = make_big_trace(work / "trace" / "rank-0.json", a.events)
    print(
        f"trace: {trace} ({trace.stat().st_size / 1e6:.0f} MB JSON, >= {a.events:,} events requested)"
    )
    env = dict(os.environ, EXPLORER_CACHE_DIR=str(work / "cache"))
    runs = [_run(sys.executable, _EXPLORER, str(trace), env=env) for _ in range(a.repeat)]
    load = statistics.median(r["load"] for r in runs)
    analysis = statistics.median(r["analysis"] for r in runs)
    rendering = statistics.median(r["render"] for r in runs)
    brk = statistics.median(r["breakdown"] for r in runs)
    four = statistics.median(r["report_four"] for r in runs)
    r0 = runs[0]
    print(
        f"explorer load (no cache):      median {load:.2f} s over {len(runs)} runs ({r0['slices']:,} slices, {r0['steps']} steps)"
    )
    print(
        f"explorer all analyses:         median {analysis:.2f} s = {analysis / load:.2f}x load (target <= 1x)"
    )
    print(
        f"  of which steps, breakdown, findings, by_source: median {four:.2f} s = {four / load:.2f}x load"
    )
    print(f"  of which steps + breakdown:  median {brk:.2f} s (comparable to HTA's two breakdowns)")
    print(f"explorer report text+json:     median {rendering:.2f} s (rendering only)")
    total = load + analysis + rendering
    print(f"explorer load + report:        {total:.2f} s = {total / load:.2f}x load (target <= 2x)")
    print(
        f"explorer findings: {r0['findings']}; breakdown exact: {r0['exact']}, negative cells: {r0['negative']}"
    )
    if not a.hta_python or not Path(a.hta_python).exists():
        print("HTA: not measured (no --hta-python / HTA_PYTHON; /tmp/hta-venv absent)")
        return
    try:
        h = _run(a.hta_python, _HTA, str(trace.parent))
    except RuntimeError as exc:
        print(f"HTA: could not run ({exc})")
        return
    hta_an = h["temporal"] + h["idle"]
    print(f"HTA parse:                     {h['parse']:.2f} s")
    print(f"HTA temporal breakdown:        {h['temporal']:.2f} s")
    print(
        f"HTA idle-time breakdown:       {h['idle']:.2f} s (negative idle cells: {h['negative_idle']})"
    )
    print(f"HTA temporal+idle / explorer steps+breakdown: {hta_an / brk:.2f} (>1: explorer faster)")
    print(
        f"HTA temporal+idle / explorer all analyses (+findings, attribution, by_source): {hta_an / analysis:.2f}"
    )
    print(
        f"HTA parse+both / explorer load+all analyses: {(h['parse'] + hta_an) / (load + analysis):.1f}x"
    )


if __name__ == "__main__":
    main()

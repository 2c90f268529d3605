"""Peak memory of the viewer with every panel filled, against the trace's JSON size.

One fresh process per measurement, offscreen: ``MainWindow`` opens ``big_trace.py``'s
1M-event trace (``--cache cold``: parsed into an empty cache, as a first open; ``warm``:
reopened from the cache, as every later one), waits for the analyses and for every
panel's background job (Operators, Source, Dependency graph, Memory, Findings, Details),
selects the first finding (its evidence and source lines shown), raises each bottom panel
in turn, and reports its own peak RSS (``ru_maxrss``: the process and the decode workers
it waited for). Target (issue #28): ≤ 2.5× the JSON.

    python benchmarks/viewer_memory.py [--events 1000000 | --trace FILE] [--repeat 2] [--work DIR]

``--trace``: any trace file instead (a real capture, or ``big_trace.py --base``'s copies of
another one).
"""

from __future__ import annotations

import argparse
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

ROOT = Path(__file__).resolve().parents[1]

#: Runs in the measured process: the viewer, every panel filled.
CHILD = r"""
import json, resource, sys, time
from PyQt6.QtCore import QSettings
import explorer
from explorer.ui.app import application, wait_idle
from explorer.ui.main_window import MainWindow

app = application()  # as ``explorer view`` makes it
settings = QSettings(sys.argv[2], QSettings.Format.IniFormat)
window = MainWindow(settings=settings, restore=False, remember=False)
window.resize(1600, 1000)
window.show()
t0 = time.perf_counter()
window.set_trace(explorer.load(sys.argv[1]))
window.analysis.wait()
wait_idle(window, 600)
if window.findings.table.rowCount():
    window.findings.select(0)
    wait_idle(window, 600)
for name, dock in window.docks.items():
    dock.raise_()
    wait_idle(window, 600)
ready = time.perf_counter() - t0
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"errors": window.analysis_errors, "ready_s": ready,
                  "peak_mb": max(own, kids) * 1024 / 1e6,  # kB -> MB (10^6), the JSON's unit
                  "findings": window.findings.table.rowCount()}))
window.close()
"""


def measure(big: Path, cache: Path, settings: Path) -> dict[str, object]:
    env = {**os.environ, "EXPLORER_CACHE_DIR": str(cache), "QT_QPA_PLATFORM": "offscreen"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(big), str(settings)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=ROOT,
    )
    if out.returncode != 0:
        raise SystemExit(f"the viewer failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    if result["errors"]:
        raise SystemExit(f"analyses failed in the viewer: {result['errors']}")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--trace", type=Path, help="a trace file instead of big_trace.py's")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "time-to-answer"))
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    big = args.trace or make_big_trace(work / f"big_{args.events}.json", args.events)
    json_mb = big.stat().st_size / 1e6
    figures: dict[str, list[dict[str, object]]] = {"cold": [], "warm": []}
    for i in range(args.repeat):
        cache = Path(tempfile.mkdtemp(prefix="viewer-memory-", dir=work))
        try:
            for mode in ("cold", "warm"):  # the same cache: the second open is from it
                r = measure(big, cache, cache / f"{mode}.ini")
                figures[mode].append(r)
                print(
                    f"  run {i + 1}, {mode}: ready in {r['ready_s']:.1f} s, peak RSS "
                    f"{r['peak_mb']:.0f} MB, {r['findings']} findings"
                )
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    load = os.getloadavg()[0]
    print(f"\n{big.name}: {json_mb:.0f} MB of JSON, {args.repeat} runs, load average {load:.1f}")
    for mode, rows in figures.items():
        peak = statistics.median(float(r["peak_mb"]) for r in rows)  # type: ignore[arg-type]
        ready = statistics.median(float(r["ready_s"]) for r in rows)  # type: ignore[arg-type]
        print(
            f"viewer, every panel filled, {mode} cache: peak RSS {peak:.0f} MB = "
            f"{peak / json_mb:.2f}x the JSON (target <= 2.5x); ready in {ready:.1f} s"
        )


if __name__ == "__main__":
    main()

"""Time to the answer: what a user waits for after the load, as ratios to the first load.

One run, each step a fresh process (the wall time of the whole command: interpreter,
imports, load, analyses, output), each repetition with fresh cache directories:

* **first load**: ``explorer.load(BIG)`` into an empty cache (parse and store write);
* **first report**: ``explorer report BIG --format json`` into another empty cache (the
  parse, the store write, every analysis, and the analyses' results stored);
* **repeat report**: the same command again (tables and results from the store);
* **export, tables cached**: ``explorer export BIG -o x.pftrace`` on the first load's cache
  (tables only: it runs findings and the critical path itself);
* **export after a report**: the same on the report's cache (the results stored);
* **peak RSS** of each (``wait4``'s ``ru_maxrss``: the largest of the process and the
  decode workers or analysis child it waited for), against the JSON's size;
* **peak PSS of all its processes**: the summed proportional set size of the process and
  its children, sampled every 50 ms (:class:`TreePss`) — what the command takes from the
  machine, where a child forked to work on another core adds its own pages.

Every figure is the median over ``--repeat`` repetitions and each is printed as a ratio to
the first load's median in the same run, with the load average. The package's bytecode is
compiled first (as an installed package has it): with ``PYTHONDONTWRITEBYTECODE`` set and no
``__pycache__``, every command would compile Explorer's sources again (~0.3 s of CPU each), a
cost no user pays twice. The machine is shared and
noisy, the ratios are what to read. CPU seconds (the process and the workers it waited
for) are printed beside the wall time: on a saturated machine a process mostly waits for
a core, and the CPU ratio is the one that does not move with the load. The input is ``big_trace.py``'s 1M-event trace,
or ``--trace`` any trace file: a real capture, or ``big_trace.py --base``'s copies of
another one (the shared H100 TraceLens trace ten times over has the deep Python stacks,
crossing annotations, shape args and memory events the NCCL rank lacks).

    python benchmarks/time_to_answer.py [--events 1000000 | --trace FILE] [--repeat 3] [--work DIR]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from big_trace import make_big_trace  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (``/proc/PID/task/*/children``)."""
    out = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                for child in f.read().split():
                    out += _tree(int(child))
    except OSError:
        pass  # it ended meanwhile
    return out


#: MB (10^6 bytes, the unit the JSON's size is given in) per kB (KiB) the kernel reports:
#: ``ru_maxrss`` and ``smaps_rollup``. Before 2026-12-07 the figures were KiB / 1024 (MiB)
#: set against the JSON's MB, which put every memory ratio 4.9% low.
KB = 1024 / 1e6


def _pss_mb(pid: int) -> float:
    """The proportional set size of ``pid`` (shared pages split among their sharers)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * KB
    except OSError:
        pass
    return 0.0


class TreePss(threading.Thread):
    """The peak of the summed PSS of a process and its descendants (the decode workers, an
    analysis child), sampled every 50 ms: what the machine gives the command, counting a
    page two forked processes share once, where ``ru_maxrss`` is one process's alone."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0.0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05):
            self.peak = max(self.peak, sum(_pss_mb(p) for p in _tree(self.pid)))


def timed(
    cmd: list[str], cache: Path, out: Path | None = None
) -> tuple[float, float, float, float]:
    """Wall seconds, CPU seconds (user + system, with the workers it waited for), peak
    RSS (MB) of the largest process and peak summed PSS (MB, :class:`TreePss`) of ``cmd``
    run in a fresh process with ``cache``."""
    env = {**os.environ, "EXPLORER_CACHE_DIR": str(cache)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    sink = open(out, "wb") if out is not None else subprocess.DEVNULL
    try:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.PIPE, cwd=ROOT)
        pss = TreePss(proc.pid)
        pss.start()
        _, status, usage = os.wait4(proc.pid, 0)
        pss.done.set()
        pss.join()
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    finally:
        if out is not None:
            sink.close()  # type: ignore[union-attr]
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.strip()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * KB, pss.peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--trace", type=Path, help="a trace file instead of big_trace.py's")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "time-to-answer"))
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    big = args.trace or make_big_trace(work / f"big_{args.events}.json", args.events)
    compileall.compile_dir(str(ROOT / "explorer"), quiet=1)
    json_mb = big.stat().st_size / 1e6
    py = sys.executable
    load = [py, "-c", "import sys, explorer; explorer.load(sys.argv[1])", str(big)]
    report = [py, "-m", "explorer", "report", str(big), "--format", "json"]
    rows: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    loads: list[float] = []
    for k in range(args.repeat):
        tables, full = work / f"cache-tables-{k}", work / f"cache-report-{k}"
        for d in (tables, full):
            shutil.rmtree(d, ignore_errors=True)
        loads.append(os.getloadavg()[0])
        steps = [
            ("first load", load, tables, None),
            ("first report", report, full, work / "first.json"),
            ("repeat report", report, full, work / "repeat.json"),
            ("export, tables cached", None, tables, None),
            ("export after a report", None, full, None),
        ]
        for name, cmd, cache, out in steps:
            if cmd is None:
                target = work / f"x-{k}.pftrace"
                cmd = [py, "-m", "explorer", "export", str(big), "-o", str(target), "--force"]
            wall, cpu, rss, pss = timed(cmd, cache, out)
            rows.setdefault(name, []).append(wall)
            cpus.setdefault(name, []).append(cpu)
            rows.setdefault(f"peak RSS, {name} (MB)", []).append(rss)
            rows.setdefault(f"peak PSS, all processes, {name} (MB)", []).append(pss)
            print(
                f"  run {k + 1}: {name}: {wall:.2f} s, {cpu:.2f} CPU-s, peak RSS {rss:.0f} MB, "
                f"peak PSS of all its processes {pss:.0f} MB",
                flush=True,
            )
        if (work / "first.json").read_bytes() != (work / "repeat.json").read_bytes():
            raise SystemExit("the repeat report differs from the first one")
        for d in (tables, full):
            shutil.rmtree(d, ignore_errors=True)
    base = statistics.median(rows["first load"])
    base_cpu = statistics.median(cpus["first load"])
    print(
        f"\n{big.name}: {json_mb:.0f} MB of JSON, {args.repeat} runs, "
        f"load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores"
    )
    result = {}
    for name, values in rows.items():
        med = statistics.median(values)
        if name.startswith("peak"):
            print(f"{name:38s} {med:8.0f} MB   {med / json_mb:5.2f}x the JSON")
            result[name] = {"mb": med, "x_json": med / json_mb}
        else:
            cpu = statistics.median(cpus[name])
            print(
                f"{name:38s} {med:8.2f} s    {med / base:5.2f}x the first load; "
                f"CPU {cpu:6.2f} s = {cpu / base_cpu:5.2f}x its CPU"
            )
            result[name] = {
                "s": med,
                "x_first_load": med / base,
                "cpu_s": cpu,
                "x_first_load_cpu": cpu / base_cpu,
            }
    (work / "time_to_answer.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

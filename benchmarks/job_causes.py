#!/usr/bin/env python
"""Does the job report name the planted straggler, its cause kind and its line — and nobody
in a balanced job? Hit rates over real jobs on a loaded machine.

    python benchmarks/job_causes.py [--runs 3] [--balanced 3] [--burners 2] [--steps 5] [--keep DIR]
    python benchmarks/job_causes.py --rescore DIR   # the kept jobs, reported again

Every job is real: ``scripts/make_job_traces.py`` runs 2-4 ``torch.distributed`` processes
(gloo, CPU, DDP) under ``explorer.collect()``. Each planted scenario (:data:`SCENARIOS`)
runs ``--runs`` times, on a random rank of a random world size (2 or 3; ``comm``, on a
pair: 3 or 4), ~100 ms a step;
balanced jobs run ``--balanced`` times for each world size 2, 3 and 4. Meanwhile
``--burners`` processes spin on the CPU (default: one per core), as other work would on a
shared machine. Each job is then reported with ``explorer report --format json`` in a
fresh process; a planted run scores rank (the named straggler), kind (among its causes)
and line (that cause's line is the planted statement); a balanced run scores a false
positive when anyone is named. Prints one row per run and the rates; ``--json`` writes them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "make_job_traces.py"
SOURCE = SCRIPT.read_text().splitlines()

#: cause -> (the kind the report must name, the statement its line must be, delay ms)
SCENARIOS: dict[str, tuple[str, str, int]] = {
    "input": ("input_stall", "time.sleep(self.delay_s + more)", 100),
    "compute": ("compute", "z = torch.tanh(z @ self.work)", 100),
    "sync": ("sync_stall", "total += flat[i].item()", 100),
    "checkpoint": ("host_io", 'torch.save({"model": model.state_dict(), "pad": pad}, ckpt)', 100),
    "batch": ("uneven_work", "h = torch.tanh(torch.tanh(x @ self.proj) @ self.big)", 100),
    "comm": ("communication", "dist.all_reduce(extra_comm, group=group)", 100),
}
#: Scenarios planted on a pair (the rank and the next, in their own 2-rank group): the
#: report names one with the other in ``with_ranks``; they need a rank outside the pair.
PAIRED = {"comm"}


def line_of(text: str) -> int:
    (n,) = [i for i, t in enumerate(SOURCE, 1) if text in t]
    return n


def run_job(out: Path, world: int, steps: int, rank: int | None, cause: str, delay: int) -> None:
    args = [sys.executable, str(SCRIPT), str(out), "--world", str(world), "--steps", str(steps)]
    if rank is not None:  # balanced: nothing planted anywhere
        args += ["--slow-rank", str(rank), "--cause", cause, "--delay-ms", str(delay)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])


def report(out: Path) -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "explorer", "report", str(out), "--store", str(out / "store"),
         "--format", "json"],
        capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout)


def score(doc: dict, rank: int | None, cause: str) -> dict:
    s = doc["straggler"]
    row: dict = {
        "named": None if s is None else s["rank"],
        "share": doc["summary"]["max_late_share"],
        "reason": doc["imbalance"]["reason"],
    }
    if rank is None:
        row["false_positive"] = s is not None
        return row
    kind, statement, _ = SCENARIOS[cause]
    found = {} if s is None else {c["what"]: c for c in s["causes"]}
    row["causes"] = sorted(found)
    if cause in PAIRED:
        world = len(doc["step_matrix"])
        pair = {rank, (rank + 1) % world}
        row["rank_hit"] = s is not None and {s["rank"], *s["with_ranks"]} == pair
    else:
        row["rank_hit"] = s is not None and s["rank"] == rank
    row["kind_hit"] = row["rank_hit"] and kind in found
    row["line_hit"] = row["kind_hit"] and found[kind]["line"] == line_of(statement)
    row["line"] = found[kind]["line"] if kind in found else None
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help="runs of each planted scenario")
    p.add_argument("--balanced", type=int, default=3, help="balanced runs per world size")
    p.add_argument("--burners", type=int, default=os.cpu_count() or 2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--scenarios", nargs="*", default=sorted(SCENARIOS))
    p.add_argument("--json", type=Path, default=None)
    p.add_argument(
        "--keep", type=Path, default=None,
        help="keep each job's traces under this folder (re-report them with --rescore)",
    )  # fmt: skip
    p.add_argument(
        "--rescore", type=Path, default=None,
        help="report the jobs a --keep run left (its plan.jsonl) again: no jobs are run",
    )  # fmt: skip
    args = p.parse_args()
    if args.rescore:
        rescore(args.rescore, args.json)
        return
    rng = random.Random()
    plan: list[tuple[str, int, int | None]] = []
    for cause in args.scenarios:
        for _ in range(args.runs):
            world = rng.choice([3, 4] if cause in PAIRED else [2, 3])
            plan.append((cause, world, rng.randrange(world)))
    for world in (2, 3, 4):
        plan += [("balanced", world, None)] * args.balanced
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.burners)
    ]
    rows = []
    try:
        for i, (cause, world, rank) in enumerate(plan):
            with tempfile.TemporaryDirectory(prefix="explorer-bench-") as tmp:
                out = Path(tmp) if args.keep is None else args.keep / f"{i:02d}-{cause}"
                t0 = time.perf_counter()
                delay = SCENARIOS[cause][2] if cause in SCENARIOS else 0
                run_job(out, world, args.steps, rank, cause, delay)
                row = {
                    "cause": cause,
                    "world": world,
                    "rank": rank,
                    **score(report(out), rank, cause),
                }
                row["seconds"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.keep is not None:
                job = {"dir": out.name, "cause": cause, "world": world, "rank": rank}
                with (args.keep / "plan.jsonl").open("a") as f:
                    f.write(json.dumps(job) + "\n")
    finally:
        for b in burners:
            b.kill()
            b.wait()
    summarize(rows, args.scenarios, args.json)


def rescore(keep: Path, json_out: Path | None) -> None:
    """Report the kept jobs again (after a change to the analysis): the same traces, scored anew."""
    rows = []
    for line in (keep / "plan.jsonl").read_text().splitlines():
        job = json.loads(line)
        out = keep / job["dir"]
        shutil.rmtree(out / "store", ignore_errors=True)  # analysed afresh, not the stored answer
        row = {k: job[k] for k in ("cause", "world", "rank")}
        row.update(score(report(out), job["rank"], job["cause"]))
        rows.append(row)
        print(json.dumps(row), flush=True)
    summarize(rows, [c for c in SCENARIOS if any(r["cause"] == c for r in rows)], json_out)


def summarize(rows: list[dict], scenarios: list[str], json_out: Path | None) -> None:
    print()
    for cause in scenarios:
        mine = [r for r in rows if r["cause"] == cause]
        hits = {k: sum(r[k] for r in mine) for k in ("rank_hit", "kind_hit", "line_hit")}
        print(f"{cause:11s} rank {hits['rank_hit']}/{len(mine)}  kind {hits['kind_hit']}/{len(mine)}"
              f"  line {hits['line_hit']}/{len(mine)}")  # fmt: skip
    bal = [r for r in rows if r["cause"] == "balanced"]
    fp = sum(r["false_positive"] for r in bal)
    print(f"balanced    false positives {fp}/{len(bal)}")
    if json_out:
        json_out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()

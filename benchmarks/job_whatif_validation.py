"""Issue 30, across ranks: does the job what-if predict what a balanced job measures?

Real gloo jobs (``scripts/make_job_traces.py``): every rank loads its data for
``--input-ms`` a step and one rank (``--slow-rank``) for ``--delay-ms`` more. The job
replay (:mod:`explorer.job.whatif`) removes that rank's input stall; the same job run
balanced (no rank slowed) measures what that fix gives. Both figures are the job's step
time: the median over ranks and steady-state steps.

    python benchmarks/job_whatif_validation.py --world 2 --pairs 3

Prints per pair the slow job's step, the prediction, the balanced job's step and the
error; exit status 1 when the median error over the pairs is over 10% (two runs minutes
apart on a shared machine do not see the same load: one pair alone can be off by more).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "make_job_traces.py"
#: The largest error a prediction may have: |predicted - measured| / measured.
TOLERANCE = 0.10


def run_job(out: Path, args: list[str]) -> None:
    r = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), *args], capture_output=True, text=True
    )
    if r.returncode != 0:
        sys.exit(f"job_whatif_validation: the job run failed:\n{r.stderr[-2000:]}")


def main() -> int:
    from explorer.job.run_dir import job_files
    from explorer.job.whatif import job_step_ns, job_what_if

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--slow-rank", type=int, default=0)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--delay-ms", type=float, default=40.0)
    p.add_argument("--input-ms", type=float, default=20.0)
    p.add_argument("--pairs", type=int, default=3)
    a = p.parse_args()
    job = ["--world", str(a.world), "--steps", str(a.steps), "--delay-ms", str(a.delay_ms),
           "--input-ms", str(a.input_ms)]  # fmt: skip
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.pairs):
            slow, balanced = Path(tmp) / f"slow{i}", Path(tmp) / f"balanced{i}"
            run_job(slow, [*job, "--slow-rank", str(a.slow_rank), "--cause", "input"])
            run_job(balanced, job)
            w = job_what_if(job_files(str(slow)), a.slow_rank, ["input_stall"])
            measured = job_step_ns(job_files(str(balanced)))
            err = (w.job_step_ns_after - measured) / measured
            errors.append(abs(err))
            print(
                f"pair {i}: slow job {w.job_step_ns_before / 1e6:.1f} ms, predicted "
                f"{w.job_step_ns_after / 1e6:.1f} ms, balanced {measured / 1e6:.1f} ms "
                f"({100 * err:+.1f}%)",
                flush=True,
            )
    median = statistics.median(errors)
    print(f"median error {100 * median:.1f}% (target within {100 * TOLERANCE:.0f}%)")
    return 0 if median <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""The job report's what-if in the driver: every rank's trace parsed again ("before", what
the report did) vs every rank but the fixed one read from the map step's tables ("after",
what it does), alternating, on a SYNTHETIC job of ``job_scale.py`` (copies of real ranks).

    python benchmarks/job_whatif_speed.py [--ranks 64] [--repeat 2]

Prints wall and CPU seconds (this process and its finished children) of each replay and
checks both give the same prediction.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def main() -> None:
    from job_scale import make_job

    from explorer.job.engine import map_ranks
    from explorer.job.run_dir import job_files
    from explorer.job.whatif import _replay_job

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="explorer-job-whatif-speed-"))
    straggler = make_job(base / "job", args.ranks)
    files = job_files(str(base / "job"))
    summaries = map_ranks(files, base / "store", workers=2, use_cache=False)
    stored = {s.rank: s for s in summaries}
    results = set()
    for label in ["before", "after"] * args.repeat:
        c0, t0 = _cpu(), time.perf_counter()
        w = _replay_job(
            files, straggler, ["input_stall"], None, False, stored if label == "after" else None
        )
        wall, cpu = time.perf_counter() - t0, _cpu() - c0
        results.add((w.job_step_ns_before, w.job_step_ns_after))
        print(f"{args.ranks} ranks, {label:6s}: {wall:6.2f} s wall, {cpu:6.2f} CPU-s", flush=True)
    assert len(results) == 1, results  # the same prediction either way
    print(f"prediction {results.pop()} (job step before, after, ns); jobs in {base}")


if __name__ == "__main__":
    main()

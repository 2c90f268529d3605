"""Run each CLI verb on a trace whose store entry exists, under a memory cap, and say what
each did: exit status, killed for memory or not, peak resident memory, wall time.

    python benchmarks/capped_verbs.py TRACE --limit 2G [--cache-dir DIR] [--uncapped]
        [--verbs info sql export export-core report view]

The store entry must already be in the cache directory (make it once, uncapped:
``EXPLORER_CACHE_DIR=DIR python -m explorer info TRACE``); every verb then reopens it.
The cap is :mod:`memory_cap`'s (a memory cgroup where one can be made, else
``RLIMIT_DATA``). With ``--uncapped`` each verb also runs without a cap under
``/usr/bin/time``, whose maximum resident set size is what the verb needs when nothing
limits it (clean file pages of the mapped store included). One JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_cap import parse_size, run_capped  # noqa: E402

#: ``export-core`` is ``export --no-results``: the trace's own events, without Explorer's
#: findings and critical path rows (whose analyses cost what ``report`` costs).
VERBS = ("info", "sql", "export", "export-core", "report", "view")
SQL = "SELECT kind, count(*) AS n, sum(dur) AS total_ns FROM slices GROUP BY kind ORDER BY n DESC"


def verb_command(verb: str, trace: str, out: Path) -> list[str]:
    """The command line of ``verb`` on ``trace`` (outputs under ``out``)."""
    explorer = [sys.executable, "-m", "explorer"]
    if verb == "sql":
        return [*explorer, "sql", trace, SQL]
    if verb in ("export", "export-core"):
        core = ["--no-results"] if verb == "export-core" else []
        return [*explorer, "export", trace, "-o", str(out / "x.pftrace"), "--force", *core]
    if verb == "view":
        return [*explorer, "view", trace, "--screenshot", str(out / "x.png"), "--force"]
    return [*explorer, verb, trace]


def uncapped(cmd: list[str], env: dict[str, str]) -> dict[str, object]:
    """Exit status, wall seconds and maximum resident set size of ``cmd`` without a cap."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as f:
        timed = ["/usr/bin/time", "-f", "%x %e %M", "-o", f.name, *cmd]
        subprocess.run(timed, env=env, stdout=subprocess.DEVNULL, check=False)
        rc, wall, kb = f.read().split()[-3:]
    return {"rc": int(rc), "wall_s": float(wall), "max_rss_mb": round(int(kb) * 1024 / 1e6, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--limit", default="2G", help="the cap, e.g. 2G, 1536M")
    ap.add_argument("--cache-dir", help="EXPLORER_CACHE_DIR holding the trace's entry")
    ap.add_argument("--verbs", nargs="+", choices=VERBS, default=list(VERBS))
    ap.add_argument("--uncapped", action="store_true", help="also run each verb uncapped")
    a = ap.parse_args()
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    if a.cache_dir:
        env["EXPLORER_CACHE_DIR"] = a.cache_dir
    limit = parse_size(a.limit)
    with tempfile.TemporaryDirectory() as tmp:
        for verb in a.verbs:
            cmd = verb_command(verb, a.trace, Path(tmp))
            with open(Path(tmp) / "stdout", "w") as sink:
                sys.stdout.flush()
                saved = os.dup(1)
                os.dup2(sink.fileno(), 1)  # the verb's own output is not the benchmark's
                try:
                    capped = run_capped(cmd, limit, env)
                finally:
                    os.dup2(saved, 1)
                    os.close(saved)
            print(json.dumps({"verb": verb, "capped": capped}), flush=True)
            if a.uncapped:
                print(json.dumps({"verb": verb, "uncapped": uncapped(cmd, env)}), flush=True)


if __name__ == "__main__":
    main()

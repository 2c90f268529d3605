#!/usr/bin/env python
"""Run the fixed hostile-input corpus (``tests/fuzz/corpus.py``) through ``info --json``,
``report --format json`` and ``export`` and print counts per outcome::

    python scripts/fuzz_corpus.py            # counts, then every run that was not allowed
    python scripts/fuzz_corpus.py -v         # also each case's outcome per verb

Allowed outcomes: ``error`` (exit 2, one line), ``recovered`` (exit 0 with a warning), ``ok``
(exit 0). Anything else is printed as ``BAD`` and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fuzz.corpus import corpus, judge, run_verb  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    counts: collections.Counter[str] = collections.Counter()
    bad: list[str] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        n = 0
        for case in corpus():
            n += 1
            src = tmp / f"{case.name}{case.suffix}"
            src.write_bytes(case.data)
            out = tmp / f"{case.name}.export.json"
            runs = [
                (["info", str(src), "--json", "--no-cache"], None),
                (["report", str(src), "--format", "json", "--no-cache"], None),
                (["export", str(src), "-o", str(out), "--no-cache", "--force"], out),
            ]
            for argv, written in runs:
                o = run_verb(argv)
                verdict = judge(o, written if written and written.exists() else None)
                key = verdict if not verdict.startswith("BAD") else "BAD"
                counts[key] += 1
                if args.verbose or key == "BAD":
                    line = f"{case.name:40s} {argv[0]:7s} {verdict}"
                    (bad.append(line) if key == "BAD" else print(line))
    took = time.perf_counter() - started
    print(f"{n} cases x 3 verbs = {sum(counts.values())} runs in {took:.0f} s")
    for key in ("ok", "recovered", "error", "BAD"):
        print(f"  {key:10s} {counts[key]}")
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""A large trace of real structure: a captured trace's events repeated end to end.

The synthetic ``big_trace.py`` trace has none of what real traces have in bulk: Python
stacks 40-60 frames deep, ``record_function`` annotations crossing the frames around
them, shape args on every op, memory events. Real 1M-event captures are what users load,
but none is shipped here; this repeats a real one (e.g. the shared 100k-slice H100
TraceLens trace, ten times: 1.04M slices, 370 MB) so that the benchmarks meet that
structure at that size. Each copy's times are shifted past the previous copy's end and
its ids (flow ids, correlation and External ids, Python ids, sequence numbers) past the
previous copy's, so links stay within a copy; ``ProfilerStep#N`` is renumbered. It is
still one capture's behaviour ten times over, not a 1M-event capture: say so where its
figures are quoted.

    python benchmarks/tiled_trace.py SRC.json[.gz] --copies 10 -o OUT.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path
from typing import Any

#: Args holding ids that link events within a copy (shifted per copy).
ID_ARGS = (
    "correlation",
    "External id",
    "Ev Idx",
    "Python id",
    "Python parent id",
    "Sequence number",
    "Record function id",
)
#: How far apart the copies' ids are.
ID_STRIDE = 10**9
_STEP = re.compile(r"ProfilerStep#(\d+)$")


def _read(src: Path) -> dict[str, Any]:
    opener = gzip.open if src.suffix == ".gz" else open
    with opener(src, "rt", encoding="utf-8") as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def tile_trace(src: Path, dst: Path, copies: int) -> int:
    """Write ``copies`` copies of ``src``'s events end to end to ``dst``; the number of
    events written."""
    doc = _read(src)
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + e.get("dur", 0) for e in timed)
    span = (t1 - t0) * 1.01
    steps = [int(m.group(1)) for e in events if (m := _STEP.match(str(e.get("name", ""))))]
    n_steps = max(steps) - min(steps) + 1 if steps else 0
    out = []
    for k in range(copies):
        for e in events:
            if e.get("ph") == "M":  # process and thread names: once
                if k == 0:
                    out.append(e)
                continue
            if k == 0:
                out.append(e)
                continue
            e = dict(e)
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = e["ts"] + k * span
            if isinstance(e.get("id"), int):
                e["id"] += k * ID_STRIDE
            args = e.get("args")
            if isinstance(args, dict):
                args = dict(args)
                for key in ID_ARGS:
                    if isinstance(args.get(key), int) and args[key] >= 0:
                        args[key] += k * ID_STRIDE
                e["args"] = args
            m = _STEP.match(str(e.get("name", "")))
            if m:
                e["name"] = f"ProfilerStep#{int(m.group(1)) + k * n_steps}"
            out.append(e)
    doc["traceEvents"] = out
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    return len(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("-o", "--out", type=Path, required=True)
    args = ap.parse_args()
    n = tile_trace(args.src, args.out, args.copies)
    print(f"wrote {args.out}: {n:,} events, {args.copies} copies of {args.src.name}")


if __name__ == "__main__":
    main()

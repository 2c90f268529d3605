"""A training run under ``explorer.collect`` for the fault tests, run as its own process:
``python -m tests.collect.capture_child OUT_DIR STEPS [--pause]``.

It prints ``step N`` after each step and, with ``--pause``, ``paused`` after the last one
and waits for a line on stdin before leaving the block (the test changes the world
meanwhile). On the way out it prints ``wrote PATH``, or ``error: TYPE: MESSAGE`` and exits 3.
"""

from __future__ import annotations

import sys

import torch

import explorer
from explorer.errors import ExplorerError


def main() -> int:
    out_dir, steps = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)])
    try:
        with explorer.collect(out_dir, sampler_interval_s=0.01) as c:
            for i in range(steps):
                model(torch.randn(32, 64)).sum().backward()
                c.step()
                print(f"step {i}", flush=True)
            if "--pause" in sys.argv:
                print("paused", flush=True)
                sys.stdin.readline()
    except ExplorerError as exc:
        print(f"error: {type(exc).__name__}: {exc}", flush=True)
        return 3
    print(f"wrote {c.trace_path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

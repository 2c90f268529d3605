"""Issue 30: are the what-if replay's predictions what really fixing it gives?

Real CPU training runs under ``explorer.collect``, with the demo's model and data
(:mod:`explorer.collect.demo_workload`). In one run the steps alternate between the
planted problem and its fix, so both see the same machine load (on a shared machine two
runs minutes apart do not):

- ``input``: the demo's planted slow loading (a sleep per image, in the training process)
  in even steps, none in odd steps. Predicted: ``explorer whatif TRACE --remove '<built-in
  function sleep>'`` on the even steps (and ``--remove input_stall``, the finding's fix:
  the whole loader gone, as if it ran ahead in the background). Measured: the odd steps.
- ``extra``: the same loop with an extra block of work (``planted_work``: matrix products)
  in even steps, none in odd ones. Predicted: ``--remove planted_work`` on the even steps.

``--separate`` also runs the demo's loop twice, slow then fixed, in two runs (the issue's
"the demo with its planted slow loading removed"), and compares across runs.

    python benchmarks/whatif_validation.py --steps 12 [--separate]

Prints per case the predicted and measured median step time and the error; exit status 1
when an alternating case is over 10% (the two-run cases are printed, not judged: on a
shared machine the load moves between runs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: The largest error a prediction may have: |predicted - measured| / measured.
TOLERANCE = 0.10

WORKLOAD = r"""
import sys, time, torch
from torch import nn
from torch.utils.data import DataLoader
import explorer
from explorer.collect.demo_workload import SmallCNN, SyntheticImages, step_seconds

out, case, steps, alternate = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
planted_first = sys.argv[5] == "1" if len(sys.argv) > 5 else True
torch.manual_seed(0)
torch.set_num_threads(1)
model = SmallCNN()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
batch = 32
step_s = step_seconds(model, opt, torch.device("cpu"), batch)
decode_s = max(0.0005, step_s / batch)
class Images(SyntheticImages):
    # The demo's data; the fixed steps call no sleep at all (on a loaded machine even
    # time.sleep(0) gives the core away for a millisecond).

    def __getitem__(self, i):
        if self.decode_s > 0:
            return super().__getitem__(i)
        img = self.images[i]
        return (img.flip(-1) if i % 2 else img), self.labels[i]


data = Images(batch * (steps + 1), decode_s=0.0)
loader = iter(DataLoader(data, batch_size=batch, shuffle=False))
a = torch.randn(256, 256)

def planted(i):
    return (i % 2 == 0) if alternate else planted_first

with explorer.collect(out, name=f"whatif_{case}") as c:
    for i in range(steps):
        data.decode_s = decode_s if (case == "input" and planted(i)) else 0.0
        images, labels = next(loader)
        if case == "extra" and planted(i):
            with explorer.annotate("planted_work"):
                b = a
                for _ in range(30):
                    b = torch.tanh(b @ a)
        with explorer.annotate("forward"):
            loss = loss_fn(model(images), labels)
        with explorer.annotate("backward"):
            loss.backward()
        with explorer.annotate("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        c.step()
print(c.trace_path)
"""


def record(out: Path, case: str, steps: int, alternate: bool, planted: bool = True) -> Path:
    """Run the workload in a fresh process; the trace's path."""
    done = subprocess.run(
        [sys.executable, "-c", WORKLOAD, str(out), case, str(steps), "1" if alternate else "0",
         "1" if planted else "0"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return Path(done.stdout.strip().splitlines()[-1])


#: What each case's fix removes: exactly what the fixed steps leave out (the sleep; the
#: planted block). For the input case the finding's own fix (``--remove input_stall``: the
#: whole loader, as if it ran in the background) is predicted and printed beside it.
SELECTOR = {"input": "<built-in function sleep>", "extra": "planted_work"}
FINDING = {"input": "input_stall"}


def compare(trace_path: Path, case: str, fixed_path: Path | None = None) -> dict[str, float]:
    """Predicted vs measured median step time (ms). Alternating run: even steps are the
    planted ones, odd steps the fixed ones. ``fixed_path``: measured from that run."""
    import numpy as np

    import explorer

    trace = explorer.load(trace_path, use_cache=False)
    st = _steps(trace.what_if(remove=[SELECTOR[case]]).steps)
    finding = _steps(trace.what_if(remove=[FINDING[case]]).steps) if case in FINDING else None
    if fixed_path is None:
        planted = st[st["step"] % 2 == 0]
        fixed = st[st["step"] % 2 == 1]["before_ns"].to_numpy()
    else:
        planted = st
        other = explorer.load(fixed_path, use_cache=False).what_if(scale={"forward": 1.0}).steps
        fixed = _steps(other)["before_ns"].to_numpy()
    before = float(np.median(planted["before_ns"])) / 1e6
    predicted = float(np.median(planted["after_ns"])) / 1e6
    measured = float(np.median(fixed)) / 1e6
    out = {
        "planted_ms": round(before, 2),
        "predicted_ms": round(predicted, 2),
        "measured_ms": round(measured, 2),
        "error": round(abs(predicted - measured) / measured, 4),
    }
    if finding is not None:
        rows = finding[finding["step"].isin(planted["step"])]
        fix = float(np.median(rows["after_ns"])) / 1e6
        out[f"{FINDING[case]}_fix_predicted_ms"] = round(fix, 2)
        out[f"{FINDING[case]}_fix_error"] = round(abs(fix - measured) / measured, 4)
    return out


def _steps(table):  # noqa: ANN001, ANN202
    """The whole steps but the first (it warms up)."""
    return table[~table["partial"] & (table["step"] > 0)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--separate", action="store_true", help="also compare two runs")
    parser.add_argument("--work", default=None, help="where the traces go (default: a temp dir)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="whatif-"))
    out: dict[str, dict[str, float]] = {}
    for case in ("input", "extra"):
        out[case] = compare(record(work / case, case, args.steps, True), case)
        if args.separate:
            slow = record(work / f"{case}-slow", case, args.steps, False, True)
            fast = record(work / f"{case}-fast", case, args.steps, False, False)
            out[f"{case} (two runs)"] = compare(slow, case, fast)
    out["load_average"] = {"1min": round(os.getloadavg()[0], 1)}  # type: ignore[dict-item]
    print(json.dumps(out, indent=2))
    # Two runs minutes apart see different machine loads: printed, not judged.
    judged = [v for k, v in out.items() if k in ("input", "extra")]
    return 0 if all(v["error"] <= TOLERANCE for v in judged) else 1


if __name__ == "__main__":
    sys.exit(main())

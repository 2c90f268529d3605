"""Each planted cause of a real job is named with its kind at its own line: the statement
where that rank's extra time goes, never the ``with explorer.collect(...)`` line.

Real ``torch.distributed`` jobs (gloo, CPU, 2-3 processes, each rank under
``explorer.collect``) from ``scripts/make_job_traces.py``, one cause planted on a random
rank (``comm``: on it and the next, which all_reduce extra tensors in their own 2-rank
group), 100 ms a step: far above what a busy 2-core machine does to one process.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from job_runs import SCRIPT, run_cli, run_ddp_job

SOURCE = SCRIPT.read_text().splitlines()


def _line_of(text: str) -> int:
    (n,) = [i for i, t in enumerate(SOURCE, 1) if text in t]
    return n


#: cause -> (the kind the report must name, the statement it must point at)
PLANTED = {
    "input": ("input_stall", "time.sleep(self.delay_s + more)"),
    "compute": ("compute", "z = torch.tanh(z @ self.work)"),
    "checkpoint": ("host_io", 'torch.save({"model": model.state_dict(), "pad": pad}, ckpt)'),
    "batch": ("uneven_work", "h = torch.tanh(torch.tanh(x @ self.proj) @ self.big)"),
    "comm": ("communication", "dist.all_reduce(extra_comm, group=group)"),
}


def _job(out: Path, cause: str, world: int) -> tuple[dict, dict]:
    rank = random.Random().randrange(world)  # the assertion messages say which
    # batch: 60 samples a step vs 180, ~1 ms each — 120 ms of extra work a step, far above
    # what a loaded 2-core machine does to a step (at 30 vs 90 samples, ~0.5 ms each, the
    # 3x rank was once late in only 1 of 4 steady steps); 6 steps: a hiccup or two is outvoted
    delay = "120" if cause == "batch" else "100"
    info = run_ddp_job(
        out, "--world", str(world), "--slow-rank", str(rank), "--cause", cause,
        "--delay-ms", delay, "--steps", "6" if cause == "batch" else "5",
    )  # fmt: skip
    r = run_cli("report", str(out), "--store", str(out / "store"), "--format", "json")
    assert r.returncode == 0, r.stderr
    return info, json.loads(r.stdout)


@pytest.mark.parametrize(
    ("cause", "world"),
    [("input", 3), ("compute", 2), ("checkpoint", 2), ("batch", 2), ("comm", 3)],
)
def test_planted_cause_is_named_at_its_line(tmp_path: Path, cause: str, world: int) -> None:
    info, doc = _job(tmp_path, cause, world)
    case = f"{cause} planted on rank {info['slow_rank']} of {world}"
    s = doc["straggler"]
    # the reason first: pytest cuts a long dict short (a CI failure showed "..." there)
    assert s is not None, (case, (doc["imbalance"] or {}).get("reason"), doc["imbalance"])
    if cause == "comm":
        # the planted rank and the next run the extra all_reduces together: both spend the
        # time, each waits for the other in turn, and together they hold the third back.
        # The later of the two is named, with the other beside it
        pair = {info["slow_rank"], (info["slow_rank"] + 1) % world}
        assert {s["rank"], *s["with_ranks"]} == pair, (case, s)
    else:
        assert s["rank"] == info["slow_rank"] and s["with_ranks"] == [], (case, s)
    kind, statement = PLANTED[cause]
    found = {c["what"]: c for c in s["causes"]}
    assert kind in found, (case, s["causes"])
    c = found[kind]
    assert Path(c["file"]).name == SCRIPT.name and c["line"] == _line_of(statement), (case, c)
    # the cause explains most of the lateness it is named for, on the steady-state basis
    assert c["excess_ns_per_step"] >= 0.5 * doc["imbalance"]["late_ns_per_step"], case
    assert doc["summary"]["straggler_share"] == doc["imbalance"]["share"] > 0.15, case
    if cause == "batch":  # the same ops, with 3x the samples: said with the shapes
        assert c["title"].startswith(f"rank {info['slow_rank']}'s batch is 3× the others'"), c
        n = round(float(info["delay_ms_per_step"]) / 2)  # the script's batch, as planted
        assert f"[{3 * n}, …] vs [{n}, …]" in c["title"], c
        # and the report's first lines say it, not just "uneven work"
        text = run_cli("report", str(tmp_path), "--store", str(tmp_path / "store"))
        assert text.returncode == 0, text.stderr
        assert f"rank {s['rank']}: its batch is 3× the others' (input shape" in text.stdout
    collect = _line_of("with explorer.collect(")
    assert all(x["line"] != collect for x in s["causes"]), (case, s["causes"])

#!/usr/bin/env python
"""Capture a real multi-rank job: a small DDP run on CPU (gloo) under ``explorer.collect()``.

    python scripts/make_job_traces.py OUT_DIR --slow-rank 2 --cause input
    python scripts/make_job_traces.py OUT_DIR                      # balanced: no rank slowed
    python scripts/make_job_traces.py --sample                     # re-capture sample_traces/

Four processes (``torch.multiprocessing``) join one ``torch.distributed`` process group over
gloo on this machine and train the same small MLP with ``DistributedDataParallel``; every rank
records its steps with ``explorer.collect()`` into ``OUT_DIR/rank<R>.pt.trace.json.gz``. One
rank can be slowed in the way the caller chooses (see :data:`CAUSES`): the others then wait
for it in DDP's gradient all_reduce, which is what a job report must find and explain.

The data are synthetic (random tensors); the processes, collectives and timings are real.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

import explorer

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = ROOT / "sample_traces" / "ddp_4rank_slow_input"

#: How the slowed rank loses time, and the finding kind a report should name for it.
CAUSES: dict[str, str] = {
    "input": "input_stall",  # its DataLoader's dataset sleeps per item (slow decoding)
    "sync": "sync_stall",  # it reads every gradient element back with .item() (host syncs)
    "compute": "compute",  # it runs an extra matmul chain in its forward pass
    "checkpoint": "host_io",  # it saves a checkpoint with torch.save every step
    "batch": "uneven_work",  # its batches are 3x the others' (every rank's work is per sample)
    "comm": "communication",  # it and the next rank all_reduce extra tensors in a 2-rank group
}


class SyntheticBatches(Dataset):
    """Random samples; ``delay_s`` per item stands for slow decoding on disk."""

    def __init__(
        self, n: int, width: int, delay_s: float, seed: int, extra: tuple[float, int] = (0, 1)
    ) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, width, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.delay_s = delay_s
        self.extra = extra  # (seconds more per item, batch size): in even batches only

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        more = self.extra[0] if (i // self.extra[1]) % 2 == 0 else 0.0
        if self.delay_s or more:
            time.sleep(self.delay_s + more)
        return self.x[i], self.y[i]


class MLP(nn.Module):
    def __init__(self, width: int, extra_compute: int, per_sample: int = 0) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(width, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)
        )
        self.extra_compute = extra_compute
        self.register_buffer("work", torch.randn(256, 256) / 16, persistent=False)
        # per-sample work (the "batch" cause): a wide layer each sample goes through
        self.per_sample = per_sample
        if per_sample:
            self.register_buffer("proj", torch.randn(width, per_sample) / 12, persistent=False)
            self.register_buffer("big", torch.randn(per_sample, per_sample) / 54, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.extra_compute:  # the slowed rank's extra work: 256×256 matmuls, ~3 ms each
            with torch.no_grad():
                z = self.work
                for _ in range(self.extra_compute):
                    z = torch.tanh(z @ self.work)
        if self.per_sample:
            x = self.sample_work(x)
        return self.net(x)

    @torch.no_grad()
    def sample_work(self, x: torch.Tensor) -> torch.Tensor:
        """Work per sample: each one goes through a wide layer, ~1 ms on one core (2048 wide
        was ~0.5 ms: a 3x batch's extra was then half the planned delay, near what a loaded
        2-core machine does to a step)."""
        h = torch.tanh(torch.tanh(x @ self.proj) @ self.big)
        return x + 1e-3 * torch.tanh(h @ self.big).mean(1, keepdim=True)


def _rank_main(
    rank: int,
    world: int,
    port: int,
    out: str,
    slow_rank: int,
    cause: str,
    steps: int,
    delay_ms: float,
    input_ms: float,
    alternate: bool = False,
) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        width, batch = 128, 16
        slow = rank == slow_rank
        per_sample = 2900 if cause == "batch" else 0
        if per_sample:  # ~1 ms a sample on one core: the slowed rank's 3x batch costs more
            batch = max(1, round(delay_ms / 2))
            batch = 3 * batch if slow else batch
        per_item = (input_ms + (delay_ms if slow and cause == "input" else 0.0)) / 1000 / batch
        extra = (per_item - input_ms / 1000 / batch, batch) if alternate else (0.0, 1)
        per_item = input_ms / 1000 / batch if alternate else per_item
        data = SyntheticBatches(batch * steps, width, per_item, seed=rank, extra=extra)
        loader = DataLoader(data, batch_size=batch, num_workers=0)
        extra = max(1, round(delay_ms / 3)) if slow and cause == "compute" else 0
        model = DistributedDataParallel(MLP(width, extra, per_sample))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        loss_fn = nn.CrossEntropyLoss()
        # the checkpoint: the model plus ~0.5 MB per planned ms (a page-cache write)
        pad = torch.zeros(int(delay_ms * 128 * 1024)) if slow and cause == "checkpoint" else None
        ckpt = Path(out) / f"ckpt-rank{rank}.pt"
        # the extra collectives: every rank creates the pair's group (new_group is collective)
        pair = sorted({slow_rank, (slow_rank + 1) % world}) if cause == "comm" else []
        group = dist.new_group(pair) if len(pair) == 2 else None
        extra_comm = torch.ones(1 << 20) if rank in pair else None
        dist.barrier()
        with explorer.collect(out, name=f"rank{rank}", sampler_interval_s=None) as c:
            for x, y in loader:
                with explorer.annotate("forward"):
                    loss = loss_fn(model(x), y)
                with explorer.annotate("backward"):
                    loss.backward()
                if slow and cause == "checkpoint":
                    torch.save({"model": model.state_dict(), "pad": pad}, ckpt)
                if group is not None and extra_comm is not None:
                    for _ in range(max(1, round(delay_ms / 10))):  # ~10 ms per 4 MB here
                        dist.all_reduce(extra_comm, group=group)
                if slow and cause == "sync":
                    _log_gradients(
                        model, int(delay_ms * 25)
                    )  # ~40-80 µs per .item() under the profiler
                opt.step()
                opt.zero_grad(set_to_none=True)
                c.step()
        dist.barrier()
        ckpt.unlink(missing_ok=True)
    finally:
        dist.destroy_process_group()


def _log_gradients(model: nn.Module, n: int) -> None:
    """Reads ``n`` gradient values back one at a time: a host sync per ``.item()``."""
    grad = next(model.parameters()).grad
    assert grad is not None
    flat = grad.flatten()
    total = 0.0
    for i in range(min(n, flat.numel())):
        total += flat[i].item()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_job(
    out: str | os.PathLike[str],
    *,
    slow_rank: int | None = None,
    cause: str = "input",
    world: int = 4,
    steps: int = 6,
    delay_ms: float = 30.0,
    input_ms: float = 0.0,
    alternate: bool = False,
) -> list[Path]:
    """Run the job; returns the per-rank trace files, rank order.

    ``slow_rank`` (None: balanced) is slowed by ``cause`` (one of :data:`CAUSES`) by about
    ``delay_ms`` per step. ``input_ms`` is every rank's data loading time per batch (a job
    whose ranks all wait for data alike). ``alternate``: the input cause slows even steps
    only, so the odd ones are the balanced job under the same load. ``out`` must not already hold traces: nothing is
    overwritten.
    """
    if cause not in CAUSES:
        raise ValueError(f"cause {cause!r}: choose one of {sorted(CAUSES)}")
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if any(out_dir.glob("rank*.pt.trace.json.gz")):
        raise FileExistsError(f"{out_dir} already holds rank traces; choose an empty directory")
    slow = -1 if slow_rank is None else int(slow_rank)
    mp.start_processes(
        _rank_main,
        args=(world, _free_port(), str(out_dir), slow, cause, steps, delay_ms, input_ms, alternate),
        nprocs=world,
        join=True,
        start_method="spawn",
    )
    files = [out_dir / f"rank{r}.pt.trace.json.gz" for r in range(world)]
    (out_dir / "job.info").write_text(
        json.dumps(
            {
                "world_size": world,
                "slow_rank": slow_rank,
                "cause": cause if slow_rank is not None else None,
                "delay_ms_per_step": delay_ms,
                "input_ms_per_step": input_ms,
                "alternate": alternate,
                "steps": steps,
            },  # fmt: skip
            indent=1,
        )
        + "\n"
    )
    return files


def write_sample_readme(out: Path, files: list[Path]) -> None:
    """The sample job's README: what was run, and what the job report should find."""
    info = json.loads((out / "job.info").read_text())
    rows = "\n".join(
        f"| `{f.name}` | {r} | {f.stat().st_size / 1024:.0f} KiB |" for r, f in enumerate(files)
    )
    (out / "README.md").write_text(
        f"# {out.name}: a real 4-rank DDP job with one slow input pipeline\n\n"
        "Written by `python scripts/make_job_traces.py --sample`: "
        f"{info['world_size']} processes (`torch.multiprocessing`, spawn) in one gloo process "
        "group on this machine's CPU train a small MLP with `DistributedDataParallel` for "
        f"{info['steps']} steps under `explorer.collect()`. Rank {info['slow_rank']}'s "
        f"DataLoader sleeps about {info['delay_ms_per_step']:.0f} ms per batch (slow decoding), "
        "so the other ranks wait for it in DDP's gradient all_reduce. `job.info` records the "
        "settings. The data are random tensors; processes, collectives and timings are real.\n\n"
        "| file | rank | size |\n|---|---|---|\n" + rows + "\n\n"
        f"`explorer report {out.relative_to(ROOT)}` names rank {info['slow_rank']} as the "
        "straggler, its input stall and the line of the training loop that waits for data.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", help="directory for rank<R>.pt.trace.json.gz")
    parser.add_argument("--slow-rank", type=int, default=None, help="rank to slow (default none)")
    parser.add_argument("--cause", choices=sorted(CAUSES), default="input")
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--delay-ms", type=float, default=30.0, help="about this much per step")
    parser.add_argument(
        "--input-ms", type=float, default=0.0, help="every rank's data loading per batch (ms)"
    )
    parser.add_argument(
        "--alternate", action="store_true", help="slow even steps only (input cause)"
    )
    parser.add_argument(
        "--sample", action="store_true", help=f"re-capture {SAMPLE_DIR.relative_to(ROOT)}"
    )
    args = parser.parse_args()
    if args.sample:
        for old in SAMPLE_DIR.glob("rank*.pt.trace.json.gz"):  # this script's own capture
            old.unlink()
        out, slow_rank, cause = SAMPLE_DIR, 2, "input"
    elif args.out is None:
        parser.error("give OUT_DIR or --sample")
    else:
        out, slow_rank, cause = Path(args.out), args.slow_rank, args.cause
    t0 = time.perf_counter()
    files = run_job(
        out, slow_rank=slow_rank, cause=cause, world=args.world, steps=args.steps,
        delay_ms=args.delay_ms, input_ms=args.input_ms, alternate=args.alternate,
    )  # fmt: skip
    size = sum(f.stat().st_size for f in files) / 1024
    if args.sample:
        write_sample_readme(out, files)
    print(f"{len(files)} ranks in {out}: {size:.0f} KiB in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()

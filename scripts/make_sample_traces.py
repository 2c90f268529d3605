#!/usr/bin/env python
"""Re-capture ``sample_traces/`` from real runs of Explorer's collector on this machine.

    python scripts/make_sample_traces.py                  # CPU
    python scripts/make_sample_traces.py --device cuda    # on an accelerator: cuda_*.pt.trace.json.gz

Each workload is a small, real training loop with one thing worth seeing. The data are
synthetic (random tensors): the traces show how the steps run, not what a model learns.
Files are named ``<device>_<workload>.pt.trace.json.gz``; a re-run replaces this script's own
files for that device and rewrites ``README.md``'s table from what is on disk.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import explorer

ROOT = Path(__file__).resolve().parents[1]


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )  # fmt: skip
        self.head = nn.Linear(32 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class SmallTransformer(nn.Module):
    def __init__(self, vocab: int = 256, d: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=128, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)))


class SlowImages(Dataset):
    """Synthetic images whose ``__getitem__`` sleeps, like slow decoding from disk."""

    def __init__(self, n: int, delay_s: float) -> None:
        self.n, self.delay_s = n, delay_s
        self.images = torch.randn(n, 3, 32, 32)
        self.labels = torch.randint(0, 10, (n,))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.delay_s)
        return self.images[i], self.labels[i]


def _train_images(c, model, loader, dev, opt, log_every_step: bool = False) -> None:  # noqa: ANN001
    loss_fn = nn.CrossEntropyLoss()
    for images, labels in loader:
        images, labels = images.to(dev), labels.to(dev)
        with explorer.annotate("forward"):
            loss = loss_fn(model(images), labels)
        with explorer.annotate("backward"):
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if log_every_step:
            print(f"loss {loss.item():.3f}")  # a host sync every step
        c.step()


def cnn(dev: torch.device, out: Path, name: str) -> Path:
    model = SmallCNN().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.utils.data.TensorDataset(torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,)))
    with explorer.collect(out, name=name) as c:
        _train_images(c, model, DataLoader(data, batch_size=16), dev, opt)
    return c.trace_path


def transformer(dev: torch.device, out: Path, name: str) -> Path:
    model = SmallTransformer().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    with explorer.collect(out, name=name) as c:
        for _ in range(4):
            tokens = torch.randint(0, 256, (8, 32)).to(dev)
            with explorer.annotate("forward"):
                logits = model(tokens[:, :-1])
                loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
            with explorer.annotate("backward"):
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            c.step()
    return c.trace_path


def slow_dataloader(dev: torch.device, out: Path, name: str) -> Path:
    model = SmallCNN().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(SlowImages(32, delay_s=0.004), batch_size=8, num_workers=0)  # 32 ms/batch
    with explorer.collect(out, name=name) as c:
        _train_images(c, model, loader, dev, opt)
    return c.trace_path


def item_every_step(dev: torch.device, out: Path, name: str) -> Path:
    model = SmallCNN().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.utils.data.TensorDataset(torch.randn(80, 3, 32, 32), torch.randint(0, 10, (80,)))
    with explorer.collect(out, name=name) as c:
        _train_images(c, model, DataLoader(data, batch_size=16), dev, opt, log_every_step=True)
    return c.trace_path


class BreakingMLP(nn.Module):
    """An MLP whose forward has data-dependent control flow on ``.item()``: a graph break."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(64, 128)
        self.b = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        if h.mean().item() > 0.25:  # graph break: dynamo cannot trace a Python branch on data
            h = h * 0.5
        return self.b(h)


def compile_graph_break(dev: torch.device, out: Path, name: str) -> Path:
    import torch._dynamo

    torch._dynamo.reset()
    model = BreakingMLP().to(dev)
    compiled = torch.compile(model, backend="eager" if dev.type == "cpu" else "inductor")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    # with_stack=False: dynamo's compile under the Python tracer is ~700k events
    with explorer.collect(out, name=name, with_stack=False) as c:
        for _ in range(3):
            x = torch.randn(32, 64).to(dev)
            loss = compiled(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            c.step()
    return c.trace_path


#: name → (workload, what it shows)
WORKLOADS: dict[str, tuple[Callable[[torch.device, Path, str], Path], str]] = {
    "cnn": (cnn, "small CNN, 4 steps of 16 synthetic 32×32 images"),
    "transformer": (transformer, "2-layer transformer encoder LM, 4 steps, batch 8 × 32 tokens"),
    "slow_dataloader": (
        slow_dataloader,
        "CNN fed by a single-process DataLoader whose dataset sleeps 4 ms per item",
    ),
    "item_every_step": (
        item_every_step,
        "CNN logging `loss.item()` every step (a host sync per step)",
    ),
    "compile_graph_break": (
        compile_graph_break,
        "torch.compile'd MLP with a data-dependent `.item()` branch: graph break + recompiles",
    ),
}


def summarize(path: Path) -> dict[str, object]:
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"]
    explorer_cats: dict[str, int] = {}
    for e in events:
        cat = str(e.get("cat", ""))
        if cat.startswith("explorer_"):
            explorer_cats[cat] = explorer_cats.get(cat, 0) + 1
    return {
        "events": len(events),
        "steps": sum(1 for e in events if str(e.get("name", "")).startswith("ProfilerStep#")),
        "with_stack": doc["explorer"]["settings"]["with_stack"],
        "explorer": ", ".join(
            f"{k.removeprefix('explorer_')} {v}" for k, v in sorted(explorer_cats.items())
        ),
        "torch": doc["explorer"]["environment"]["torch_version"],
    }


def _jobs_paragraph(out: Path) -> str:
    """Multi-rank jobs (``scripts/make_job_traces.py``) keep their own README in their folder."""
    jobs = sorted(d.name for d in out.iterdir() if (d / "README.md").is_file())
    if not jobs:
        return ""
    listed = ", ".join(f"[`{j}/`]({j}/README.md)" for j in jobs)
    return f"Whole jobs, one trace per rank (`explorer report DIR` gives the job report): {listed}.\n\n"


def write_readme(out: Path) -> None:
    rows = []
    for path in sorted(out.glob("*.pt.trace.json.gz")):
        device, _, workload = path.name.removesuffix(".pt.trace.json.gz").partition("_")
        s = summarize(path)
        what = WORKLOADS.get(workload, (None, ""))[1]
        if device == "neuron":  # --device neuron-test
            device = "neuron (test backend on the CPU)"
        rows.append(
            f"| `{path.name}` | {device} | {what} | {s['steps']} | {s['events']:,} | "
            f"{path.stat().st_size / 1024:.0f} KiB | {'yes' if s['with_stack'] else 'no'} | {s['explorer']} |"
        )
    text = (
        "# Sample traces\n\n"
        "Real runs of `explorer.collect()` on this repository's machine, written by\n"
        "`python scripts/make_sample_traces.py [--device cpu|cuda|...]`. The training data are\n"
        "synthetic (random tensors); the timings, ops, syncs and compile events are real.\n"
        "`neuron_*` traces ran on Explorer's neuron test backend (`--device neuron-test`): a\n"
        "PrivateUse1 device implemented in Python on the CPU, which sends the operators it does\n"
        "not implement to the CPU as a port to Trainium would; their timings are CPU timings.\n\n"
        "| file | device | workload | steps | events | size | Python stacks | Explorer events |\n"
        "|---|---|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n\n"
        + _jobs_paragraph(out)
        + "Open one with `explorer view FILE`, `explorer report FILE`, or in Perfetto UI /\n"
        "TensorBoard / Holistic Trace Analysis: they are standard Kineto traces with Explorer's\n"
        "own events in `explorer_*` categories and the environment under the top-level\n"
        '`"explorer"` key.\n'
    )
    (out / "README.md").write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", default="cpu", help="cpu, cuda, xpu, mtia, neuron-test, ... (default: cpu)"
    )
    parser.add_argument("--out", default=str(ROOT / "sample_traces"))
    parser.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), help="capture only these")
    args = parser.parse_args()
    if args.device == "neuron-test":
        # Explorer's neuron test backend: ``--device neuron-test --only cnn`` writes
        # neuron_cnn.pt.trace.json.gz (its fallbacks, copies and device timeline).
        from explorer.collect import neuron_test_backend

        neuron_test_backend.register()
        args.device = neuron_test_backend.NAME
    dev = torch.device(args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    for workload in args.only or WORKLOADS:
        fn, _ = WORKLOADS[workload]
        name = f"{dev.type}_{workload}"
        for old in out.glob(f"{name}*.pt.trace.json.gz"):  # this script's own earlier capture
            old.unlink()
        t0 = time.perf_counter()
        path = fn(dev, out, name)
        print(
            f"{path.name}: {path.stat().st_size / 1024:.0f} KiB in {time.perf_counter() - t0:.1f} s"
        )
    write_readme(out)


if __name__ == "__main__":
    main()

"""The training script ``explorer demo`` profiles.

``explorer demo`` copies this file into the output directory as ``demo_train.py`` and runs
that copy, so the trace points at a script the user can open, edit and run again
(``python demo_train.py``) — and so its lines count as user code, not as Explorer's.

The data is synthetic (random images and labels): the point is the shape of a real training
step — a DataLoader, host→device copies, forward/backward/optimizer, a loss logged with
``.item()`` every step — not what the model learns. The dataset's "decoding" is deliberately
slow (a sleep per image, read in the training process) so the report has something to find:
the step waits for its input, and the report names the line.

How slow is measured, not fixed: before recording, one training step is timed on this
machine, and decoding a batch is made to take as long as that step (at least 0.5 ms per
image). A fixed cost would be lost on a busy machine, where the model's compute slows down
and the sleep does not (on a loaded 2-core machine a fixed 0.5 ms fell under the report's
threshold); a cost that matches the step stays about half of each step however fast or
loaded the machine is, and stays above the threshold even if the load grows several-fold
after the measurement.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import explorer

#: The least "decoding" time per image, and the most per batch, in seconds (the cap keeps
#: the demo short on a very slow machine; loading still costs a quarter of a 3 s step).
MIN_DECODE_S = 0.0005
MAX_DECODE_BATCH_S = 1.0


class SyntheticImages(Dataset):
    """Random 3×32×32 images with 10 classes (synthetic), with a per-item cost standing in
    for decoding and augmentation."""

    def __init__(self, n: int, seed: int = 0, decode_s: float = MIN_DECODE_S) -> None:
        self.decode_s = decode_s
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randn(n, 3, 32, 32, generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.decode_s)  # "decoding" a JPEG
        img = self.images[i]
        if i % 2:
            img = img.flip(-1)  # "augmentation"
        return img, self.labels[i]


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Linear(32 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def best_device(requested: str = "auto") -> torch.device:
    """The accelerator torch would use, else the CPU (or exactly what was asked)."""
    if requested != "auto":
        return torch.device(requested)
    acc = getattr(torch, "accelerator", None)
    if acc is not None and acc.is_available():
        return torch.device(acc.current_accelerator().type)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def step_seconds(
    model: nn.Module, opt: torch.optim.Optimizer, dev: torch.device, batch_size: int
) -> float:
    """Seconds one training step takes on this machine now (the fastest of three, after a
    warm-up step), measured on a throwaway batch; the gradients are discarded."""
    loss_fn = nn.CrossEntropyLoss()
    images = torch.randn(batch_size, 3, 32, 32, device=dev)
    labels = torch.randint(0, 10, (batch_size,), device=dev)
    times = []
    for _ in range(4):
        t0 = time.perf_counter()
        loss = loss_fn(model(images), labels)
        loss.backward()
        loss.item()  # waits for the device
        times.append(time.perf_counter() - t0)
        opt.zero_grad(set_to_none=True)
    return min(times[1:])


def main(out_dir: str, steps: int = 8, device: str = "auto", batch_size: int = 32) -> Path:
    """Train for ``steps`` steps under ``explorer.collect``; return the trace path."""
    dev = best_device(device)
    torch.manual_seed(0)
    model = SmallCNN().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    # "Decoding" a batch takes as long as a training step here (see the module docstring).
    step_s = min(step_seconds(model, opt, dev, batch_size), MAX_DECODE_BATCH_S)
    decode_s = max(MIN_DECODE_S, step_s / batch_size)
    data = SyntheticImages(batch_size * steps, decode_s=decode_s)
    loader = DataLoader(data, batch_size=batch_size, shuffle=True)
    t0 = time.perf_counter()
    with explorer.collect(out_dir, name=f"demo_{dev.type}") as c:
        for images, labels in loader:
            images, labels = images.to(dev), labels.to(dev)
            with explorer.annotate("forward"):
                loss = loss_fn(model(images), labels)
            with explorer.annotate("backward"):
                loss.backward()
            with explorer.annotate("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
            print(f"step {c.steps}: loss {loss.item():.3f}")  # .item() waits for the device
            c.step()
    print(f"trained {c.steps} steps on {dev} in {time.perf_counter() - t0:.1f} s")
    assert c.trace_path is not None  # the collector wrote it when the with block ended
    return c.trace_path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Explorer's demo training loop (synthetic data)")
    parser.add_argument("--out", default="explorer-demo")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--device", default="auto")
    a = parser.parse_args()
    print(main(a.out, a.steps, a.device))

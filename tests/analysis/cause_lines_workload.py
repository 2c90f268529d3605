"""A small training loop with one cost per statement, profiled by ``test_cause_lines``
(run as a script: ``python cause_lines_workload.py OUT_DIR``). Each marked statement is
where one cause's time goes; the test finds them by their text."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import explorer


class SlowData(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        x = torch.full((32,), float(i))
        time.sleep(0.004)  # the slow read
        return x


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(32, 4)
        self.register_buffer("w", torch.randn(192, 192) / 14, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.w
        for _ in range(40):
            z = torch.tanh(z @ self.w)  # the hot loop
        return self.head(x) + z.mean()


def main(out: Path) -> None:
    torch.set_num_threads(1)
    model = Net()
    loader = DataLoader(SlowData(), batch_size=8)
    ckpt = out / "ckpt.pt"
    pad = torch.zeros(4 << 20)
    with explorer.collect(out, name="causes", sampler_interval_s=None) as c:
        for x in loader:
            loss = model(x).sum()
            loss.backward()
            torch.save({"model": model.state_dict(), "pad": pad}, ckpt)  # the checkpoint
            c.step()
    ckpt.unlink()


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""A small training run on the neuron test backend (or the CPU), under explorer.collect.

Run by the tests in a process of its own: PyTorch allows one PrivateUse1 backend per
process, and registering it changes what torch.accelerator reports for the rest of that
process. ``python neuron_train.py OUT_DIR BACKEND [STEPS] [plain]`` prints the trace path
last (``plain``: recorded by torch.profiler alone, as any user would, not explorer.collect);
BACKEND is ``neuron`` (Explorer's test backend), ``vendor`` (``neuron_sim``, the third-party
style backend in ``tests/backends/vendor_neuron``, which must be importable) or ``cpu``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

import explorer
from explorer.collect import neuron_test_backend

BATCH, CHANNELS, SIZE = 16, 3, 32


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(CHANNELS, 16, 3)
        self.fc = nn.Linear(16 * (SIZE - 2) ** 2, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(x))
        x = torch.sigmoid(x) * x  # UNSUPPORTED-OP: the neuron test backend has no sigmoid
        return self.fc(x.flatten(1))


def main(out: str, backend: str, steps: int, plain: bool = False) -> None:
    device = "cpu" if backend == "cpu" else "neuron"
    if backend == "neuron":
        neuron_test_backend.register()
    elif backend == "vendor":
        import neuron_sim  # noqa: F401  (importing it makes the ``neuron`` device)
    torch.manual_seed(0)
    model = Net().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [(torch.randn(BATCH, CHANNELS, SIZE, SIZE), torch.randint(0, 10, (BATCH,)))
            for _ in range(steps)]  # fmt: skip
    losses = []
    recorder = _plain_profiler(out) if plain else explorer.collect(out, sampler_interval_s=None)
    with recorder as c:
        for images, labels in data:
            images = images.to(device)  # HOST-TO-DEVICE: the batch goes to the device
            labels = labels.to(device)
            loss = nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.detach().to("cpu"))  # DEVICE-TO-HOST: the loss comes back
            c.step()
    print(" ".join(f"{float(v):.6f}" for v in losses))
    print(c.trace_path)


class _plain_profiler(torch.profiler.profile):  # noqa: N801 (used like explorer.collect)
    """torch.profiler with stacks and shapes, exported to ``OUT/plain.pt.trace.json``."""

    def __init__(self, out: str) -> None:
        super().__init__(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=lambda step: torch.profiler.ProfilerAction.RECORD,
            record_shapes=True, with_stack=True,
        )  # fmt: skip
        self.trace_path = Path(out) / "plain.pt.trace.json"

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self.trace_path.parent.mkdir(parents=True, exist_ok=True)
        self.export_chrome_trace(str(self.trace_path))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 3,
         plain="plain" in sys.argv[4:])  # fmt: skip

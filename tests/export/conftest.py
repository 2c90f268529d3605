"""Traces the export tests run on: every real trace in ../shared/traces, a real CPU
torch.profiler capture made here (shapes and Python stacks), and the scenario generator's
synthetic traces (labelled synthetic by the generator itself)."""

from __future__ import annotations

from pathlib import Path

import pytest

import explorer

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "traces"


def shared_files() -> list[Path]:
    if not SHARED.is_dir():
        return []
    return sorted(
        p
        for p in SHARED.iterdir()
        if p.name.endswith((".json", ".json.gz")) and not p.name.endswith("_et.json.gz")
    )


def sample_files() -> list[Path]:
    folder = ROOT / "sample_traces"
    return sorted(folder.glob("*.json*")) if folder.is_dir() else []


@pytest.fixture(scope="session")
def torch_trace(tmp_path_factory: pytest.TempPathFactory) -> explorer.Trace:
    """A real torch.profiler run on CPU: a small MLP training loop with shapes and stacks."""
    import torch

    out = tmp_path_factory.mktemp("torch") / "cpu_mlp.pt.trace.json"
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randn(32, 8)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        record_shapes=True,
        with_stack=True,
        profile_memory=True,
    ) as prof:
        for _ in range(3):
            with torch.profiler.record_function("train_step"):
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            prof.step()
    prof.export_chrome_trace(str(out))
    return explorer.load(out, use_cache=False)

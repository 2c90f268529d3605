"""The ``neuron`` test backend: a real PrivateUse1 device on the CPU, end to end.

What was tested with stand-ins (the ``meta`` device, a tensor subclass claiming ``meta``) runs
here on a real PrivateUse1 device named ``neuron``: tensors report ``neuron:0``, a few ops are
the device's own, every other op takes the CPU fallback with TorchNeuron-style warnings, and
copies cross host and device through the dispatcher. Each run is a process of its own (one
PrivateUse1 backend per process), as a user would run a script. Expected values come from the
script's own source (marker comments) and shapes, never from Explorer's output.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import explorer
from explorer.cli.main import main as cli
from tests.backends import neuron_train

SCRIPT = Path(neuron_train.__file__)
ROOT = Path(__file__).resolve().parents[2]


def _line_of(marker: str) -> int:
    for n, text in enumerate(SCRIPT.read_text().splitlines(), start=1):
        if marker in text:
            return n
    raise AssertionError(f"{marker} not in {SCRIPT}")


def _run(code_or_args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT), "EXPLORER_CACHE_DIR": str(tmp / "cache"),
           "PATH": "/usr/bin:/bin", "HOME": str(tmp)}  # fmt: skip
    return subprocess.run(
        [sys.executable, *code_or_args], capture_output=True, text=True, env=env, timeout=300
    )


class Run:
    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        assert proc.returncode == 0, proc.stderr[-3000:]
        lines = proc.stdout.strip().splitlines()
        self.losses = [float(v) for v in lines[-2].split()]
        self.path = Path(lines[-1])
        self.stderr = proc.stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    tmp = tmp_path_factory.mktemp("neuron")
    return {
        dev: Run(_run([str(SCRIPT), str(tmp / dev), dev, "4"], tmp)) for dev in ("neuron", "cpu")
    }


@pytest.fixture(scope="module")
def neuron(runs: dict[str, Run]) -> explorer.Trace:
    return explorer.load(runs["neuron"].path, use_cache=False)


def test_training_on_the_backend_computes_what_the_cpu_computes(runs: dict[str, Run]) -> None:
    """Native kernels, views (the transposes of Linear's backward), in-place updates and the
    CPU fallback together: four SGD steps give the CPU's losses to the last digit printed."""
    assert runs["neuron"].losses == runs["cpu"].losses
    assert len(set(runs["neuron"].losses)) > 1  # the model did train


def test_unsupported_ops_warn_in_the_backends_words(runs: dict[str, Run]) -> None:
    line = _line_of("UNSUPPORTED-OP")
    assert re.search(
        rf"neuron_train.py:{line}: UserWarning: The operator 'aten::sigmoid' is not supported "
        r"on neuron, falling back to CPU\.",
        runs["neuron"].stderr,
    )
    assert "falling back" not in runs["cpu"].stderr


def test_device_semantics_in_a_fresh_process(tmp_path: Path) -> None:
    """Tensors are ``neuron:0``; views alias device memory; a transposed view of a transposed
    view reads the right elements; copies round-trip; registering twice is harmless."""
    code = """
import torch, warnings
from explorer.collect import neuron_test_backend as nb
nb.register(); nb.register()
a = torch.arange(12.).reshape(3, 4)
d = a.to("neuron")
assert str(d.device) == "neuron:0", d.device
assert torch.equal(d.cpu(), a)
assert torch.equal(d.t().t().cpu(), a) and torch.equal(d.t().cpu(), a.t())
row = d[1]
row.add_(torch.ones(4).to("neuron"))          # in place through a view
assert torch.equal(d.cpu()[1], a[1] + 1), d.cpu()
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    s = torch.sin(d)
assert str(s.device) == "neuron:0"
assert torch.allclose(s.cpu(), torch.sin(d.cpu()))
assert any("aten::sin" in str(x.message) and "falling back to CPU" in str(x.message) for x in w)
print("ok")
"""
    proc = _run(["-c", code], tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_the_trace_names_the_device_neuron_0_everywhere(
    runs: dict[str, Run], neuron: explorer.Trace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dev = neuron.device_tracks()
    assert dev["label"].tolist() == ["Neuron 0 / stream 0"]
    path = str(runs["neuron"].path)
    assert cli(["info", path]) == 0
    assert "device_stream Neuron 0 / stream 0" in capsys.readouterr().out
    assert cli(["report", path, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc["summary"]["breakdown"]) == ["neuron:0"]
    assert {f["device"] for f in doc["findings"]} == {"neuron:0"}
    out = tmp_path / "n.pftrace"
    assert cli(["export", path, "-o", str(out)]) == 0
    from tests.export.pftrace_check import check

    names = {d.name for d in check(out).descriptors.values()}
    assert any(n.startswith("Neuron 0") for n in names), names


def test_kernels_run_on_the_device_and_fallbacks_on_the_host(neuron: explorer.Trace) -> None:
    """Device slices are the backend's native kernels and copies, each launched by a host
    runtime call; the unsupported op has no kernel, and its fallback is on the host."""
    s = neuron.slices
    on_dev = s["track"].isin(neuron.device_tracks()["id"]).to_numpy()
    kernels = set(s.loc[on_dev & (s["kind"] == "kernel").to_numpy(), "name"].astype(str))
    assert {"neuron::convolution", "neuron::addmm", "neuron::relu"} <= kernels
    assert not any("sigmoid" in k for k in kernels)
    fb = s[(s["kind"] == "fallback").to_numpy()]
    assert len(fb) and not fb["track"].isin(neuron.device_tracks()["id"]).any()
    assert "aten::sigmoid" in {neuron.args(int(i)).get("op") for i in fb.index}


def test_the_fallback_finding_names_the_op_its_line_and_its_copies(neuron: explorer.Trace) -> None:
    line = _line_of("UNSUPPORTED-OP")
    [f] = [f for f in neuron.findings() if f.kind == "cpu_fallback"]
    assert f.title.startswith(f"CPU fallback: aten::sigmoid at neuron_train.py:{line}")
    assert f.details["op_lines"]["aten::sigmoid"].endswith(f"neuron_train.py:{line}")
    assert f.device == "neuron:0"
    assert any(src[0].endswith("neuron_train.py") and src[1] == line for src in f.source_lines)
    # The copies out and back of every sigmoid call are on the device, inside the call,
    # each moving the activation: batch x 16 channels x (size-2)^2 floats.
    s = neuron.slices
    act = neuron_train.BATCH * 16 * (neuron_train.SIZE - 2) ** 2 * 4
    calls = s[(s["kind"] == "fallback").to_numpy()]
    calls = calls[[neuron.args(int(i)).get("op") == "aten::sigmoid" and
                   neuron.args(int(i)).get("via", "").startswith("profiler") for i in calls.index]]  # fmt: skip
    assert len(calls) == 4  # one per step
    copies = s[(s["kind"] == "memcpy").to_numpy()]
    for _, c in calls.iterrows():
        inside = copies[
            (copies["ts"] >= c["ts"]) & (copies["ts"] + copies["dur"] <= c["ts"] + c["dur"])
        ]
        kinds = inside["copy_kind"].astype(str).tolist()
        # out (the input, and ``sigmoid.out``'s output buffer, as at::native::cpu_fallback
        # moves every tensor argument), then the result back in
        assert set(kinds) == {"DtoH", "HtoD"} and kinds[-1] == "HtoD", kinds
        assert all(neuron.args(int(i)).get("bytes") == act for i in inside.index)


def test_host_device_copies_carry_bytes_direction_and_line(neuron: explorer.Trace) -> None:
    s = neuron.slices
    batch = neuron_train.BATCH * neuron_train.CHANNELS * neuron_train.SIZE**2 * 4
    copies = s[(s["kind"] == "copy").to_numpy()]  # the collector's, at the user's line
    rows = [(a, a["copy_kind"]) for a in (neuron.args(int(i)) for i in copies.index)]
    htod = [a for a, k in rows if k == "HtoD" and a.get("bytes") == batch]
    assert len(htod) == 4
    assert {a["source_line"] for a in htod} == {_line_of("HOST-TO-DEVICE")}
    assert {(a["src_device"], a["dst_device"]) for a in htod} == {("cpu", "neuron:0")}
    dtoh = [a for a, k in rows if k == "DtoH"]
    assert {a["source_line"] for a in dtoh} == {_line_of("DEVICE-TO-HOST")}
    assert {a["bytes"] for a in dtoh} == {4}  # one float32 loss
    # ... and the device saw the same batch copies, with their bytes
    mem = s[(s["kind"] == "memcpy").to_numpy()]
    dev_bytes = np.array([neuron.args(int(i)).get("bytes", -1) for i in mem.index])
    assert (dev_bytes == batch).sum() == 4


def test_the_trace_says_it_was_recorded_on_a_test_backend(
    runs: dict[str, Run], neuron: explorer.Trace, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "runs on the CPU" in neuron.test_backend
    assert "not Trainium" in neuron.test_backend
    assert explorer.load(runs["cpu"].path, use_cache=False).test_backend == ""
    for fmt in ("text", "markdown", "html"):
        assert cli(["report", str(runs["neuron"].path), "--format", fmt]) == 0
        assert "TEST BACKEND" in capsys.readouterr().out
    assert cli(["report", str(runs["neuron"].path), "--format", "json"]) == 0
    assert "not Trainium" in json.loads(capsys.readouterr().out)["test_backend"]


def test_diff_cpu_against_neuron_reports_the_fallbacks_as_what_changed(
    runs: dict[str, Run],
) -> None:
    d = explorer.diff(
        explorer.load(runs["cpu"].path, use_cache=False),
        explorer.load(runs["neuron"].path, use_cache=False),
    )
    f = d.findings.set_index("kind")
    assert f.loc["cpu_fallback", "status"] == "appeared"
    kernels = d.kernels.set_index("name") if "name" in d.kernels else d.kernels
    assert "neuron::convolution" in set(kernels.index.astype(str))


def test_demo_on_the_test_backend_finds_its_fallback_at_its_line(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = _run(["-m", "explorer", "demo", "--backend", "neuron-test", "--no-view",
                 "--steps", "3", "--out", str(out)], tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    script = (out / "demo_train.py").read_text().splitlines()
    pool_line = next(n for n, t in enumerate(script, 1) if "self.features(x)" in t)
    assert re.search(
        rf"\[cpu_fallback\] CPU fallback: aten::max_pool2d_with_indices at demo_train.py:{pool_line}",
        proc.stdout,
    ), proc.stdout[-3000:]
    assert "TEST BACKEND" in proc.stdout

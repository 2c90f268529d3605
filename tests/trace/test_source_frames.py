"""Source lines from a real torch.profiler run on CPU (with_stack=True)."""

from __future__ import annotations

from pathlib import Path

import pytest

import explorer
from explorer.trace.source import is_user_file, parse_frame, user_frames

torch = pytest.importorskip("torch")


def _train_step(model, x):
    y = model(x).relu().sum()
    y.backward()
    return y


def test_ops_resolve_to_the_user_line(tmp_path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    model = torch.nn.Linear(16, 16)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True, profile_memory=True) as prof:
        for _ in range(2):
            _train_step(model, torch.randn(8, 16))
    out = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(out))
    t = explorer.load(out, use_cache=False)
    frames = user_frames(t)
    names = t.slices["name"].astype(str)
    relu = (names == "aten::relu").to_numpy().nonzero()[0]
    assert len(relu) == 2
    # torch's python tracer names each frame by its function's first line (co_firstlineno),
    # so the user frame of an op is the line where the enclosing user function starts.
    line = next(
        i
        for i, text in enumerate(Path(__file__).read_text().splitlines(), 1)
        if text.startswith("def _train_step")
    )
    for i in relu:
        f = t.user_frame(int(i))
        assert (
            f is not None
            and f[0].endswith("test_source_frames.py")
            and f[1] == line
            and f[2] == "_train_step"
        )
    # The full stack includes torch's frames; the user frame skips them.
    assert frames["file"].iat[int(relu[0])].endswith("test_source_frames.py")
    assert len(t.stack(int(relu[0]))) >= 2
    # Memory events are read, with the op that allocated.
    assert len(t.memory) > 0 and (t.memory["slice"] >= 0).any()


def test_frame_parsing_and_user_code_rules() -> None:
    assert parse_frame("train.py(42): step") == ("train.py", 42, "step")
    assert parse_frame("<built-in method item of Tensor object at 0x7f>") is None
    assert (
        is_user_file("train.py")
        and is_user_file("/home/me/proj/model.py")
        and is_user_file("mypkg/model.py")
    )
    assert is_user_file("trace/test_x.py")  # shares a name with the stdlib trace module
    for lib in (
        "torch/nn/modules/module.py",
        "typing.py",
        "logging/__init__.py",
        "<frozen os>",
        "/usr/lib/python3.11/site-packages/transformers/x.py",
        "numpy/core/x.py",
    ):
        assert not is_user_file(lib), lib


def test_installed_packages_are_library_code() -> None:
    # psutil is a dependency: its frames (e.g. the collector's sampler thread) are not the user's.
    assert not is_user_file("psutil/__init__.py")
    assert not is_user_file("msgspec/__init__.py")


def test_relative_and_absolute_spellings_of_one_file_merge() -> None:
    from explorer.trace.source import _unify_spellings

    assert _unify_spellings(["", "train.py", "/home/me/train.py", "other.py"]) == [
        "",
        "/home/me/train.py",
        "/home/me/train.py",
        "other.py",
    ]
    # Ambiguous tails stay as they are.
    assert _unify_spellings(["x.py", "/a/x.py", "/b/x.py"])[0] == "x.py"


def test_library_code_is_judged_by_where_it_lives_not_by_what_is_installed_here() -> None:
    """``neuron_sim`` is installed nowhere on this machine; its frames are still a library's
    when their path says site-packages, or when the capturing process recorded the module
    among those it loaded from library directories (torch names it relative to sys.path)."""
    from explorer.trace.source import is_explorer_file, is_user_file

    with pytest.raises(ImportError):
        __import__("neuron_sim")
    assert not is_user_file("/opt/venv/lib/python3.12/site-packages/neuron_sim/__init__.py")
    assert not is_user_file("/srv/site-packages/neuron_sim/__init__.py")
    assert not is_user_file("C:\\Py\\Lib\\site-packages\\neuron_sim\\ops.py")
    assert not is_user_file("/usr/lib/python3.11/threading.py")
    assert not is_user_file("/home/me/pytorch/torch/nn/modules/module.py")
    assert is_user_file("neuron_sim/__init__.py")  # nothing says otherwise...
    assert not is_user_file("neuron_sim/__init__.py", frozenset({"neuron_sim"}))  # ...now it does
    assert is_user_file("/home/me/project/train.py", frozenset({"neuron_sim"}))
    assert is_explorer_file("explorer") and is_explorer_file("/work/.venv/bin/explorer")
    assert not is_user_file("explorer") and not is_explorer_file("/home/me/explorer_run.py")

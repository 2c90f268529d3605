"""Every verb that writes refuses to destroy what the user has: the input (by any path),
an existing file without --force, anything that is not a regular file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from explorer.cli.main import main
from tests.conftest import SAMPLE_TRACES

SOURCE = SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz"


def _argv(verb: str, trace: Path, out: Path) -> list[str]:
    return {
        "report": ["report", str(trace), "-o", str(out)],
        "diff": ["diff", str(trace), str(trace), "-o", str(out)],
        "export": ["export", str(trace), "-o", str(out), "--no-results"],
        "view": ["view", str(trace), "--screenshot", str(out)],
    }[verb]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    t = tmp_path / "t.json.gz"
    shutil.copyfile(SOURCE, t)
    return t


def _refused(argv: list[str], capsys, expect: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("explorer: error:") and expect in err[0], err


@pytest.mark.parametrize("verb", ["report", "diff", "export", "view"])
def test_the_input_is_never_the_output(verb: str, trace: Path, tmp_path: Path, capsys) -> None:
    original = trace.read_bytes()
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.json.gz").symlink_to(trace)
    os.link(trace, tmp_path / "hard.json.gz")
    for out in (
        trace,
        tmp_path / "sub" / ".." / trace.name,
        tmp_path / "link.json.gz",
        tmp_path / "hard.json.gz",
    ):
        _refused(_argv(verb, trace, out) + ["--force"], capsys, "this is the input trace")
    assert trace.read_bytes() == original


@pytest.mark.parametrize("verb", ["report", "diff", "export", "view"])
def test_existing_files_need_force_and_special_files_are_never_replaced(
    verb: str, trace: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / (
        "out.png" if verb == "view" else "out.json" if verb == "export" else "out.txt"
    )
    out.write_text("keep me")
    _refused(_argv(verb, trace, out), capsys, "already exists — pass --force")
    assert out.read_text() == "keep me"
    _refused(_argv(verb, trace, Path(os.devnull)) + ["--force"], capsys, "not a regular file")
    _refused(_argv(verb, trace, tmp_path / "no" / "x"), capsys, "does not exist")
    assert main(_argv(verb, trace, out) + ["--force"]) == 0
    written = out.read_bytes()
    assert written != b"keep me" and len(written) > 100
    if verb == "view":
        assert written.startswith(b"\x89PNG")
    assert not list(tmp_path.glob(".explorer-tmp-*"))


def test_demo_keeps_an_edited_training_script(tmp_path: Path, capsys) -> None:
    """'explorer demo --out DIR' again must not overwrite a demo_train.py the user changed
    (the run stops before any training: the check comes first)."""
    script = tmp_path / "demo_train.py"
    script.write_text("# my changes\n")
    _refused(["demo", "--out", str(tmp_path), "--no-view"], capsys, "already exists")
    assert script.read_text() == "# my changes\n"

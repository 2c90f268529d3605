"""``explorer export``: formats from the file name, never clobbering the input or an
existing file, one line saying what was written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import explorer
from explorer.cli.main import main
from explorer.scenarios import write as write_scenario
from tests.export.pftrace_check import check


@pytest.fixture()
def source(tmp_path: Path) -> Path:
    """A synthetic training trace (scenario generator; labelled synthetic in the file)."""
    return write_scenario("pageable_copies", tmp_path / "in.json.gz", steps=3)


def test_perfetto_from_the_extension(source: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out.pftrace"
    assert main(["export", str(source), "-o", str(out)]) == 0
    text = capsys.readouterr()
    assert text.out.startswith(f"wrote {out} (perfetto,")
    assert "SYNTHETIC" in text.err
    parsed = check(out)
    trace = explorer.load(source, use_cache=False)
    assert parsed.begins + parsed.instants >= len(trace.slices)
    assert not list(tmp_path.glob(".explorer-tmp-*"))


def test_chrome_gz_and_explicit_format(source: Path, tmp_path: Path, capsys) -> None:
    gz = tmp_path / "out.json.gz"
    assert main(["export", str(source), "-o", str(gz), "--no-results"]) == 0
    trace = explorer.load(source, use_cache=False)
    assert len(explorer.load(gz, use_cache=False).slices) == len(trace.slices)
    odd = tmp_path / "out.trace"
    assert main(["export", str(source), "-o", str(odd), "--format", "chrome", "--no-results"]) == 0
    assert odd.read_bytes().startswith(b'{"exportedBy":"explorer","traceEvents":[')


def test_unknown_extension_is_a_clear_error(source: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out.txt"
    assert main(["export", str(source), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "cannot tell the export format" in err and "--format" in err
    assert not out.exists()


def test_never_overwrites_without_force(source: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out.pftrace"
    out.write_bytes(b"keep me")
    assert main(["export", str(source), "-o", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert out.read_bytes() == b"keep me"
    assert main(["export", str(source), "-o", str(out), "--force"]) == 0
    check(out)


def test_never_overwrites_the_input(source: Path, tmp_path: Path, capsys) -> None:
    copy = tmp_path / "copy.json.gz"
    shutil.copy(source, copy)
    before = copy.read_bytes()
    assert main(["export", str(copy), "-o", str(copy), "--force"]) == 2
    assert "input trace" in capsys.readouterr().err
    assert copy.read_bytes() == before


def test_missing_input_and_folder(tmp_path: Path, capsys) -> None:
    assert main(["export", str(tmp_path / "nope.json"), "-o", str(tmp_path / "o.pftrace")]) == 2
    assert "nope.json" in capsys.readouterr().err
    src = write_scenario("clean", tmp_path / "c.json", steps=2)
    assert main(["export", str(src), "-o", str(tmp_path / "missing" / "o.pftrace")]) == 2
    assert "does not exist" in capsys.readouterr().err

"""``explorer report`` end to end, in process: formats, -o, --step, --fail-on exit codes,
and one-line errors with status 2 for what a user can get wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from explorer.cli.main import main
from explorer.scenarios import write


@pytest.fixture(scope="module")
def sync_storm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write("sync_storm", tmp_path_factory.mktemp("cli") / "sync_storm.json.gz", steps=4)


def test_text_to_stdout(sync_storm: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(sync_storm), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "SYNTHETIC" in out and "[sync_stall]" in out and "/synthetic/train.py:75" in out
    assert "\x1b[" not in out  # not a terminal: no colour


def test_every_format_to_a_file(
    sync_storm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for fmt, head in (
        ("json", "{"),
        ("markdown", "# Explorer report"),
        ("html", "<!DOCTYPE html>"),
        ("text", "***"),
    ):
        out = tmp_path / f"r.{fmt}"
        assert main(["report", str(sync_storm), "--format", fmt, "-o", str(out)]) == 0
        assert out.read_text().startswith(head)
        assert capsys.readouterr().out == ""
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["findings"][0]["kind"] == "sync_stall"


def test_step_option(sync_storm: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(sync_storm), "--format", "json", "--step", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [s["step"] for s in doc["steps"]] == [1]


def test_fail_on_exit_codes(sync_storm: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            ["report", str(sync_storm), "--fail-on", "sync_stall>5%", "--fail-on", "input_stall>1%"]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "FAIL --fail-on sync_stall>5%" in err and "input_stall" not in err
    assert main(["report", str(sync_storm), "--fail-on", "sync_stall>90%"]) == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--fail-on", "sync_stall"], "cannot parse --fail-on"),
        (["--step", "77"], "step 77 is not in the trace"),
    ],
)
def test_user_errors_exit_2_with_one_line(
    sync_storm: Path, args: list[str], message: str, capsys
) -> None:
    assert main(["report", str(sync_storm), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_missing_file_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nope.json")]) == 2
    assert capsys.readouterr().err.startswith("explorer: error:")


def test_console_script_runs(sync_storm: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "explorer", "report", str(sync_storm), "--format", "json", "--fail-on", "sync_stall>1%"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout)["synthetic"] is True

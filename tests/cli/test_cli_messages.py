"""What the CLI says when it is given the wrong thing: each in one line that names what
happened and what to do, on stderr (stdout is the verb's output alone), exit status 2."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLE_TRACES

TRACE = SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz"


def _explorer(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "explorer", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), "EXPLORER_CACHE_DIR": str(cwd / "cache")},
        timeout=120,
    )


def _error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout)
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr


def test_info_prints_its_recovery_warning_on_stderr(tmp_path: Path) -> None:
    text = gzip.decompress(TRACE.read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: len(text) // 2])
    done = _explorer("info", "--no-cache", str(cut), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "cut short" not in done.stdout and "warning" not in done.stdout
    (line,) = [ln for ln in done.stderr.splitlines() if "cut short" in ln]
    assert line.startswith("explorer: warning: the trace was cut short")
    # sql says so the same way: loading it, and reading its cache entry in place
    for _ in range(2):
        done = _explorer("sql", str(cut), "SELECT count(*) AS n FROM slices", cwd=tmp_path)
        assert done.returncode == 0 and "explorer: warning: the trace was cut short" in done.stderr
    assert (tmp_path / "cache").is_dir()


@pytest.mark.parametrize(
    ("head", "kind"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "a PNG image"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "a JPEG image"),
        (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3", "a PDF document"),
        (b"PK\x03\x04\x14\x00\x00\x00", "a ZIP archive"),
        (b"\x7fELF\x02\x01\x01\x00", "an ELF executable"),
        (b"\x01\x02\x00\x00\x07binary", "binary data"),
    ],
    ids=["png", "jpeg", "pdf", "zip", "elf", "nul"],
)
@pytest.mark.parametrize("how", ["file", "named-json", "gzipped", "stdin"])
def test_a_binary_file_says_what_it_is(tmp_path: Path, head: bytes, kind: str, how: str) -> None:
    data = head + bytes(range(256)) * 8
    path = tmp_path / ("x.json" if how == "named-json" else "x.bin")
    path.write_bytes(gzip.compress(data) if how == "gzipped" else data)
    if how == "stdin":
        with open(path, "rb") as f:
            done = subprocess.run(
                [sys.executable, "-m", "explorer", "info", "-"],
                stdin=f,
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                timeout=120,
            )
    else:
        done = _explorer("info", "--no-cache", str(path), cwd=tmp_path)
    err = _error(done)
    assert f"this is {kind}" in err and "not a trace" in err and "UTF-8" not in err, err


@pytest.mark.parametrize(
    ("argv", "typo", "meant"),
    [
        (["report", "{trace}", "--setp", "3"], "--setp", "--step"),
        (["report", "{trace}", "--formt", "json"], "--formt", "--format"),
        (["export", "{trace}", "-o", "x.json", "--forse"], "--forse", "--force"),
        (["sql", "{trace}", "SELECT 1", "--timout", "3"], "--timout", "--timeout"),
        (["info", "{trace}", "--jsno"], "--jsno", "--json"),
        (["--verison"], "--verison", "--version"),
    ],
)
def test_a_typo_in_a_flag_names_the_closest_flag_with_the_verbs_usage(
    tmp_path: Path, argv: list[str], typo: str, meant: str
) -> None:
    done = _explorer(*(a.format(trace=TRACE) for a in argv), cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    verb = argv[0] if not argv[0].startswith("-") else None
    usage = f"usage: explorer {verb} " if verb else "usage: explorer "
    assert done.stderr.startswith(usage), done.stderr
    assert f"unrecognized arguments: {typo} (did you mean {meant}?)" in done.stderr


def test_an_unknown_argument_with_nothing_close_is_said_as_argparse_says_it(tmp_path: Path) -> None:
    done = _explorer("info", str(TRACE), "--zzzzzz", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == "explorer info: error: unrecognized arguments: --zzzzzz"


def test_a_missing_trace_names_the_compressed_one_beside_it(tmp_path: Path) -> None:
    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(TRACE.read_bytes())
    for verb in (["info"], ["report"], ["sql", "--no-cache"]):
        args = [*verb, str(tmp_path / "trace.json")] + (["SELECT 1"] if verb[0] == "sql" else [])
        err = _error(_explorer(*args, cwd=tmp_path))
        assert f"did you mean {gz}?" in err, err
    # and the other way round
    plain = tmp_path / "other.json"
    plain.write_bytes(gzip.decompress(TRACE.read_bytes()))
    err = _error(_explorer("info", str(tmp_path / "other.json.gz"), cwd=tmp_path))
    assert f"did you mean {plain}?" in err
    err = _error(_explorer("info", str(tmp_path / "nothing.json"), cwd=tmp_path))
    assert "no such file or directory" in err and "did you mean" not in err


def test_a_symlink_loop_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    for verb in ("info", "report"):
        err = _error(_explorer(verb, str(tmp_path / "a.json"), cwd=tmp_path))
        assert "symbolic link" in err

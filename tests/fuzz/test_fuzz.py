"""Hostile input and hostile paths: the only allowed outcomes are one error line with exit
status 2, a recovery with a warning, or a correct result — never a traceback, a hang, or a
negative or wrapped time. Property-based (hypothesis, fixed example counts so the suite
takes well under a minute on two cores) plus a sample of the fixed corpus of
``tests/fuzz/corpus.py`` (``scripts/fuzz_corpus.py`` runs all of it and counts outcomes)."""

from __future__ import annotations

import copy
import errno
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import explorer
from explorer.errors import OutputError, TraceError
from explorer.safe_write import atomic_write
from tests.conftest import ROOT
from tests.fuzz.corpus import (
    EVENT_FIELDS,
    Case,
    base_trace,
    corpus,
    encode,
    gzip_bomb,
    judge,
    run_verb,
)

FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,  # the same examples on every run: a failure is reproducible
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

INT64_MAX = 2**63 - 1


def _check_loaded(trace: Any) -> None:
    """A trace that loaded has only sane times: none negative, none wrapped, ends in range."""
    for table in (trace.slices, trace.instants, trace.counters, trace.memory, trace.flows):
        for col in ("ts", "dur"):
            if col in table:
                values = table[col].to_numpy()
                assert values.dtype == np.int64
                assert (values >= 0).all(), f"negative {col}"
    s = trace.slices
    if len(s):
        assert int((s["ts"] + s["dur"]).max()) <= INT64_MAX
    start = int(trace.metadata["start_ns"])
    assert 0 <= start and start + trace.span_ns <= INT64_MAX


def _load_outcome(path: Path) -> str:
    """``error`` (a one-line TraceError naming the file) or ``loaded`` (checked)."""
    try:
        trace = explorer.load(path, use_cache=False)
    except TraceError as exc:
        msg = str(exc)
        assert "\n" not in msg and msg.startswith(str(path)), msg
        return "error"
    _check_loaded(trace)
    return "loaded"


# -- property-based: values of every type in every field, bytes damaged anywhere ----------

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)  # NaN/Infinity literals: the corpus (json.dumps writes them)
    | st.text(max_size=8)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


@FUZZ
@given(
    row=st.integers(min_value=0, max_value=len(base_trace()["traceEvents"]) - 1),
    field=st.sampled_from(EVENT_FIELDS),
    value=JSON_VALUES,
)
def test_any_value_in_any_event_field(tmp_path: Path, row: int, field: str, value: Any) -> None:
    doc = base_trace()
    doc["traceEvents"][row][field] = value
    path = tmp_path / "t.json"
    path.write_bytes(encode(doc))
    _load_outcome(path)


@FUZZ
@given(
    key=st.sampled_from(
        [
            "baseTimeNanoseconds",
            "deviceProperties",
            "distributedInfo",
            "explorer",
            "synthetic",
            "rank",
            "world_size",
            "format",
            "schemaVersion",
            "traceName",
        ]
    ),  # fmt: skip
    value=JSON_VALUES,
)
def test_any_value_in_any_metadata_key(tmp_path: Path, key: str, value: Any) -> None:
    doc = base_trace()
    doc[key] = value
    path = tmp_path / "t.json"
    path.write_bytes(encode(doc))
    assert _load_outcome(path) == "loaded"  # metadata never makes a trace unreadable


@FUZZ
@given(data=st.data())
def test_truncation_and_bit_flips(tmp_path: Path, data: st.DataObject) -> None:
    raw = bytearray(encode(base_trace()))
    gz = data.draw(st.booleans())
    if gz:
        raw = bytearray(gzip.compress(bytes(raw)))
    for _ in range(data.draw(st.integers(0, 3))):
        k = data.draw(st.integers(0, len(raw) - 1))
        raw[k] ^= 1 << data.draw(st.integers(0, 7))
    cut = data.draw(st.integers(1, len(raw)))
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(bytes(raw[:cut]))
    _load_outcome(path)


@FUZZ
@given(
    field=st.sampled_from(["ts", "dur"]),
    value=st.one_of(
        st.floats(allow_nan=False, allow_infinity=False),
        st.integers(min_value=-(2**66), max_value=2**66),
    ),
    base=st.none() | st.integers(min_value=0, max_value=INT64_MAX),
)
def test_any_time_is_an_error_or_in_range(
    tmp_path: Path, field: str, value: float, base: int | None
) -> None:
    doc = base_trace()
    doc["traceEvents"][5][field] = value
    if base is None:
        del doc["baseTimeNanoseconds"]
    else:
        doc["baseTimeNanoseconds"] = base
    path = tmp_path / "t.json"
    path.write_bytes(encode(doc))
    outcome = _load_outcome(path)
    if field == "dur" and value < 0:
        assert outcome == "error"
    if abs(value) > 2**62 / 1000:
        assert outcome == "error"  # beyond what int64 nanoseconds hold: named, not wrapped


# -- hostile output paths --------------------------------------------------------------------

PATH_SHAPES = [
    "input",
    "input_via_dotdot",
    "symlink_to_input",
    "hardlink_to_input",
    "existing_file",
    "fifo",
    "dev_null",
    "directory",
    "missing_folder",
    "file_as_folder",
    "name_too_long",
    "new_file",
    "symlink_to_other",
]


def _make_target(tmp: Path, shape: str, src: Path) -> Path:
    other = tmp / "other.txt"
    other.write_text("keep me")
    return {
        "input": lambda: src,
        "input_via_dotdot": lambda: tmp / "sub" / ".." / src.name,
        "symlink_to_input": lambda: _symlink(tmp / "link.json", src),
        "hardlink_to_input": lambda: _hardlink(tmp / "hard.json", src),
        "existing_file": lambda: other,
        "fifo": lambda: _fifo(tmp / "fifo"),
        "dev_null": lambda: Path(os.devnull),
        "directory": lambda: tmp / "sub",
        "missing_folder": lambda: tmp / "nope" / "x.txt",
        "file_as_folder": lambda: other / "x.txt",
        "name_too_long": lambda: tmp / ("n" * 300),
        "new_file": lambda: tmp / "new.txt",
        "symlink_to_other": lambda: _symlink(tmp / "olink.txt", other),
    }[shape]()


def _symlink(link: Path, to: Path) -> Path:
    link.symlink_to(to)
    return link


def _hardlink(link: Path, to: Path) -> Path:
    os.link(to, link)
    return link


def _fifo(p: Path) -> Path:
    os.mkfifo(p)
    return p


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(shape=st.sampled_from(PATH_SHAPES), force=st.booleans(), payload=st.binary(max_size=64))
def test_safe_write_never_destroys(
    tmp_path_factory: Any, shape: str, force: bool, payload: bytes
) -> None:
    tmp = tmp_path_factory.mktemp("w")
    (tmp / "sub").mkdir()
    src = tmp / "trace.json"
    original = encode(base_trace())
    src.write_bytes(original)
    target = _make_target(tmp, shape, src)
    before = {p.name: p.read_bytes() for p in tmp.iterdir() if p.is_file() and not p.is_symlink()}
    try:
        written = atomic_write(target, lambda t: t.write_bytes(payload), inputs=[src], force=force)
    except OutputError as exc:
        assert "\n" not in str(exc)
        assert shape not in ("new_file",)
        written = None
    assert src.read_bytes() == original  # the input, whatever the path
    if shape in ("input", "input_via_dotdot", "symlink_to_input", "hardlink_to_input", "fifo",
                 "dev_null", "directory", "missing_folder", "file_as_folder", "name_too_long"):  # fmt: skip
        assert written is None
    if shape in ("existing_file", "symlink_to_other"):
        assert (written is not None) == force
    if written is not None:
        assert written.read_bytes() == payload
    else:  # nothing changed at all
        now = {p.name: p.read_bytes() for p in tmp.iterdir() if p.is_file() and not p.is_symlink()}
        assert now == before
    assert not list(tmp.glob(".explorer-tmp-*"))  # no temporary file outlives the call


def test_os_errors_name_their_cause(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match=os.strerror(errno.ENAMETOOLONG)):
        atomic_write(tmp_path / ("x" * 300), lambda t: t.write_text("a"))
    with pytest.raises(OutputError, match="does not exist"):
        atomic_write(tmp_path / "missing" / "x", lambda t: t.write_text("a"))

    def fails(t: Path) -> None:
        t.write_text("half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OutputError, match="No space left"):
        atomic_write(tmp_path / "full.txt", fails)
    assert list(tmp_path.iterdir()) == []  # neither the target nor the temporary file


# -- the fixed corpus, sampled, through the CLI ------------------------------------------------

ALL_CASES = list(corpus())
#: Every 4th case through 'info'; the number, metadata and non-finite cases through all verbs.
SAMPLE = ALL_CASES[::4]
TIME_CASES = [c for c in ALL_CASES if c.name.startswith(("number_", "meta_", "nonfinite_"))][::2]


def _run_case(tmp_path: Path, case: Case, verb: str) -> str:
    src = tmp_path / f"{case.name}{case.suffix}"
    src.write_bytes(case.data)
    out = tmp_path / "out.json"
    argv = {
        "info": ["info", str(src), "--json", "--no-cache"],
        "report": ["report", str(src), "--format", "json", "--no-cache"],
        "export": ["export", str(src), "-o", str(out), "--no-cache", "--force"],
    }[verb]
    outcome = run_verb(argv)
    verdict = judge(outcome, out if verb == "export" and out.exists() else None)
    assert not verdict.startswith("BAD"), f"{case.name} {verb}: {verdict}"
    return verdict


@pytest.mark.parametrize("case", SAMPLE, ids=lambda c: c.name)
def test_corpus_sample_through_info(tmp_path: Path, case: Case) -> None:
    _run_case(tmp_path, case, "info")


@pytest.mark.parametrize("verb", ["report", "export"])
@pytest.mark.parametrize("case", TIME_CASES, ids=lambda c: c.name)
def test_corpus_times_and_metadata_through_report_and_export(
    tmp_path: Path, case: Case, verb: str
) -> None:
    verdict = _run_case(tmp_path, case, verb)
    if case.name.startswith("meta_"):
        assert verdict == "recovered" or case.name == "meta_schema_list"  # ignored: said
    if case.name.startswith("nonfinite_"):
        assert verdict == "error"


# -- a few real processes: nothing hangs, nothing eats memory ---------------------------------


def _explorer(*argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "explorer", *argv],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        input=stdin,
        capture_output=True,
        timeout=120,
    )


def _one_error_line(proc: subprocess.CompletedProcess[bytes]) -> str:
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("explorer: error:"), err
    return lines[0]


def test_special_files_are_refused_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "t.json"
    os.mkfifo(fifo)
    assert "not a regular file" in _one_error_line(_explorer("info", str(fifo)))
    assert "not a regular file" in _one_error_line(_explorer("report", "/dev/zero"))


def test_gzip_bomb_stops_with_one_line(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip_bomb(128 << 20))
    proc = _explorer("info", str(bomb))
    assert "gzip bomb" in _one_error_line(proc)


def test_deep_nesting_names_event_and_field(tmp_path: Path) -> None:
    doc = encode(base_trace()).replace(b'"args": {}', b'"args": {"x": ' + b"[" * 100_000 + b"}", 1)
    p = tmp_path / "deep.json"
    p.write_bytes(doc)
    line = _one_error_line(_explorer("export", str(p), "-o", str(tmp_path / "x.pftrace")))
    assert "event 1, field 'args'" in line and "nests 100,004 levels deep" in line


def test_stdin_is_read_once_and_works(tmp_path: Path) -> None:
    proc = _explorer("info", "-", "--json", stdin=encode(base_trace()))
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["slices"] == len([e for e in base_trace()["traceEvents"] if e["ph"] == "X"])
    assert info["rank"] == 0


def test_base_trace_is_correct_when_undamaged(tmp_path: Path) -> None:
    """The control: the corpus' base trace loads exactly, so every damaged variant is judged
    against a trace that is right."""
    doc = base_trace()
    p = tmp_path / "t.json"
    p.write_bytes(encode(copy.deepcopy(doc)))
    t = explorer.load(p, use_cache=False)
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(t.slices) == len(xs)
    t0 = min(e["ts"] for e in doc["traceEvents"] if "ts" in e)
    assert sorted(t.slices["ts"].tolist()) == sorted(round((e["ts"] - t0) * 1000) for e in xs)
    assert t.metadata["start_ns"] == doc["baseTimeNanoseconds"] + int(t0) * 1000
    assert t.rank == 0 and t.metadata["warnings"] == []

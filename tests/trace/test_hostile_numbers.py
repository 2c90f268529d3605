"""Numbers no profiler writes — integers of hundreds of digits, floats beyond float range,
step numbers and pids beyond what int64 or Perfetto's int32 hold — and a flow's ``bp``
given as a list: each is a warning with the value kept where it can be, or one line naming
the event and the field; never a traceback, through every verb that reads the trace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

BIG = "1" + "0" * 400  # an integer no float holds (msgspec decodes it as a Python int)


def _ev(**kw: object) -> dict:
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::mm",
        "pid": 1,
        "tid": 1,
        "ts": 1.0,
        "dur": 2.0,
        **kw,
    }


def _write(path: Path, events: list[dict], **top: object) -> Path:
    path.write_text(json.dumps({"traceEvents": events, **top}).replace('"BIG"', BIG))
    return path


def _explorer(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "explorer", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(cwd)},
        timeout=120,
    )


def _verbs(trace: Path) -> list[list[str]]:
    out = trace.parent / "out"
    return [
        ["info", "--no-cache", str(trace)],
        ["report", "--no-cache", str(trace)],
        ["export", "--no-cache", "--force", str(trace), "-o", str(out) + ".json"],
        ["export", "--no-cache", "--force", str(trace), "-o", str(out) + ".pftrace"],
    ]


FLOW = {"cat": "ac2g", "name": "fwdbwd", "pid": 1, "tid": 1}


@pytest.mark.parametrize(
    ("events", "says"),
    [
        ([_ev(ts="BIG")], "event 0 has a timestamp with 401 digits"),
        ([_ev(dur="BIG")], "event 0 has a duration with 401 digits"),
        ([_ev(pid="BIG")], "event 0 has pid = 1000"),
        ([_ev(), _ev(tid="BIG")], "event 1 has tid = 1000"),
        (
            [
                _ev(),
                {"ph": "s", "id": "BIG", "ts": 1, **FLOW},
                {"ph": "f", "id": 1, "ts": 2, **FLOW},
            ],
            "event 1 has id = 1000",
        ),
    ],
    ids=["ts", "dur", "pid", "tid", "flow-id"],
)
def test_an_integer_beyond_float_is_one_line_naming_event_and_field(
    tmp_path: Path, events: list[dict], says: str
) -> None:
    trace = _write(tmp_path / "t.json", events)
    for args in _verbs(trace):
        done = _explorer(*args, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr[-2000:])
        assert len(done.stderr.splitlines()) == 1 and says in done.stderr, done.stderr
        assert len(done.stderr) < 400  # the number is not spelled out in full


def _warned_and_ran(trace: Path, warning: str) -> None:
    for args in _verbs(trace):
        done = _explorer(*args, cwd=trace.parent)
        assert done.returncode == 0, (args, done.stderr[-2000:])
        assert "Traceback" not in done.stderr
        assert warning in done.stdout + done.stderr, (args, done.stdout, done.stderr)


def test_a_counter_value_beyond_float_is_left_out_with_a_warning(tmp_path: Path) -> None:
    events = [
        _ev(),
        {"ph": "C", "name": "mem", "pid": 1, "ts": 1, "args": {"v": "BIG"}},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 2, "args": {"v": 7}},
    ]
    trace = _write(tmp_path / "t.json", events)
    _warned_and_ran(trace, "1 counter values were integers beyond any float")
    import explorer

    t = explorer.load(trace, use_cache=False)
    assert t.counters["value"].tolist() == [7.0]  # the other sample kept, exactly


def test_base_time_beyond_float_range_is_ignored_with_a_warning(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text('{"baseTimeNanoseconds": 1e400, "traceEvents": [' + json.dumps(_ev()) + "]}")
    _warned_and_ran(trace, "ignored baseTimeNanoseconds = inf")


def test_a_flow_bp_given_as_a_list_is_no_binding_point(tmp_path: Path) -> None:
    events = [
        _ev(ts=1.0, dur=10.0),
        {"ph": "s", "id": 1, "ts": 2, "bp": ["e"], **FLOW},
        {"ph": "f", "id": 1, "ts": 5, "bp": ["e"], **FLOW},
    ]
    trace = _write(tmp_path / "t.json", events)
    for args in _verbs(trace):
        done = _explorer(*args, cwd=tmp_path)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("number", [2**63, 10**30])
def test_profiler_step_numbers_beyond_int64_are_numbered_by_position(
    tmp_path: Path, number: int
) -> None:
    import explorer

    events = [
        _ev(name=f"ProfilerStep#{number}", cat="user_annotation", ts=0.0, dur=10.0),
        _ev(name="ProfilerStep#3", cat="user_annotation", ts=10.0, dur=10.0),
        _ev(ts=1.0),
    ]
    trace = _write(tmp_path / "t.json", events)
    for args in _verbs(trace):
        done = _explorer(*args, cwd=tmp_path)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    steps = explorer.load(trace, use_cache=False).steps()
    assert steps["step"].tolist() == [0, 1]
    assert steps["name"].tolist() == [f"ProfilerStep#{number}", "ProfilerStep#3"]


def test_pids_beyond_int32_export_to_perfetto_with_their_names(tmp_path: Path) -> None:
    events = [_ev(pid=-(2**63), tid=-(2**63)), _ev(pid=2**31, tid=2**40, ts=5.0)]
    trace = _write(tmp_path / "t.json", events)
    out = tmp_path / "t.pftrace"
    done = _explorer("export", "--no-cache", str(trace), "-o", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert str(-(2**63)).encode() in out.read_bytes()  # the track's name keeps the pid
    assert str(2**31).encode() in out.read_bytes()


@pytest.mark.parametrize("tail", [b"1121.", b"1121.5e", b"1121.5e-", b"-"])
def test_a_cut_inside_a_number_is_recovered_as_any_cut(tmp_path: Path, tail: bytes) -> None:
    """msgspec calls a document that ends in ``"ts": 1121.`` an invalid number, not a
    truncation: it was "the JSON is malformed"; it is the cut it is."""
    import explorer

    events = [_ev(ts=float(i)) for i in range(5)]
    text = json.dumps({"traceEvents": events}).encode()
    cut = text[: text.rindex(b'"ts": ') + 6] + tail
    trace = tmp_path / "t.json"
    trace.write_bytes(cut)
    t = explorer.load(trace, use_cache=False)
    assert len(t.slices) == 4
    assert any("cut short" in w for w in t.metadata["warnings"])


@pytest.mark.parametrize("stdin", [False, True], ids=["file", "stdin"])
def test_bytes_that_are_not_utf8_in_a_metadata_key_are_one_line_naming_the_metadata(
    tmp_path: Path, stdin: bool
) -> None:
    """Inside ``deviceProperties``, after the events: a msgspec.DecodeError escaped the
    chunked reader, and the careful one named an event that is not there."""
    doc = {"traceEvents": [_ev(), _ev(ts=5.0)], "deviceProperties": [{"id": 0, "name": "x"}]}
    trace = tmp_path / "t.json"
    trace.write_bytes(json.dumps(doc).encode().replace(b'"name": "x"', b'"n\xffame": "x"'))
    if stdin:
        with open(trace, "rb") as f:
            done = subprocess.run(
                [sys.executable, "-m", "explorer", "info", "-"],
                stdin=f,
                capture_output=True,
                text=True,
                env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                timeout=120,
            )
    else:
        done = _explorer("info", "--no-cache", str(trace), cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr[-2000:]
    assert "the metadata, field 'deviceProperties'" in done.stderr and "not UTF-8" in done.stderr

"""Bad input: one clear message naming the file and the problem — never a traceback — and
a recovered prefix for traces cut short by a crashed run."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

import explorer
from explorer.cli.main import main
from explorer.errors import TraceError


def _kineto(n: int = 50) -> dict:
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python3"}}]
    for i in range(n):
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"aten::op{i % 3}",
                "pid": 1,
                "tid": 1,
                "ts": 1000.0 + 10 * i,
                "dur": 5.0,
                "args": {"External id": i, "nested": {"a": [1, 2]}},
            }
        )
    return {"schemaVersion": 1, "deviceProperties": [], "traceEvents": events}


def _write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _error(path: Path) -> str:
    with pytest.raises(TraceError) as exc:
        explorer.load(path, use_cache=False)
    msg = str(exc.value)
    assert str(path) in msg and "\n" not in msg
    return msg


def test_not_json(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_bytes(b"\x00\x01binary")
    assert "not JSON" in _error(tmp_path / "a.json")


def test_json_without_events(tmp_path: Path) -> None:
    assert "traceEvents" in _error(_write(tmp_path / "a.json", {"hello": 1}))


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "e.json").write_bytes(b"")
    assert "empty" in _error(tmp_path / "e.json")


def test_corrupt_gzip(tmp_path: Path) -> None:
    good = gzip.compress(json.dumps(_kineto()).encode())
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF
    bad[len(bad) // 2 + 1] ^= 0xFF
    (tmp_path / "c.json.gz").write_bytes(bytes(bad))
    assert "gzip" in _error(tmp_path / "c.json.gz") or "malformed" in _error(tmp_path / "c.json.gz")


@pytest.mark.parametrize("cut", [0.5, 0.8, 0.97])
def test_truncated_json_is_recovered(tmp_path: Path, cut: float) -> None:
    text = json.dumps(_kineto(200))
    p = tmp_path / "t.json"
    p.write_text(text[: int(len(text) * cut)])
    t = explorer.load(p, use_cache=False)
    assert 0 < len(t.slices) < 200
    # Every recovered event is complete and is one of the originals, in order.
    assert list(t.slices["name"].astype(str)) == [f"aten::op{i % 3}" for i in range(len(t.slices))]
    # The warning counts events: the slices plus the one process_name metadata event.
    assert any("cut short" in w and f" {len(t.slices) + 1} " in w for w in t.metadata["warnings"])


def test_truncated_gzip_is_recovered(tmp_path: Path) -> None:
    data = gzip.compress(json.dumps(_kineto(500)).encode())
    p = tmp_path / "t.json.gz"
    p.write_bytes(data[: int(len(data) * 0.7)])
    t = explorer.load(p, use_cache=False)
    assert 0 < len(t.slices) < 500
    assert any("cut short" in w for w in t.metadata["warnings"])


def test_wrong_types(tmp_path: Path) -> None:
    doc = _kineto(5)
    doc["traceEvents"][3]["ts"] = "yesterday"
    msg = _error(_write(tmp_path / "w.json", doc))
    assert "event 3" in msg and "timestamp" in msg


def test_missing_timestamp(tmp_path: Path) -> None:
    doc = _kineto(5)
    del doc["traceEvents"][2]["ts"]
    assert "no timestamp" in _error(_write(tmp_path / "m.json", doc))


def test_nan_duration(tmp_path: Path) -> None:
    doc = _kineto(5)
    doc["traceEvents"][4]["dur"] = float("nan")
    assert "NaN duration" in _error(_write(tmp_path / "n.json", doc))


def test_negative_duration(tmp_path: Path) -> None:
    doc = _kineto(5)
    doc["traceEvents"][4]["dur"] = -3.0
    assert "negative duration" in _error(_write(tmp_path / "neg.json", doc))


def test_integer_beyond_int64(tmp_path: Path) -> None:
    doc = _kineto(5)
    doc["traceEvents"][2]["args"]["External id"] = 2**70
    assert "64-bit" in _error(_write(tmp_path / "big.json", doc))


def test_event_that_is_not_an_object(tmp_path: Path) -> None:
    doc = _kineto(5)
    doc["traceEvents"].append(42)
    assert "not an object" in _error(_write(tmp_path / "o.json", doc))


def test_string_pids_and_tids_are_data_not_errors(tmp_path: Path) -> None:
    doc = _kineto(5)
    for e in doc["traceEvents"]:
        e["pid"], e["tid"] = "worker-a", "main"
    t = explorer.load(_write(tmp_path / "s.json", doc), use_cache=False)
    assert len(t.slices) == 5 and list(t.tracks["pid"]) == ["worker-a"]


def test_bare_event_array(tmp_path: Path) -> None:
    t = explorer.load(_write(tmp_path / "arr.json", _kineto(7)["traceEvents"]), use_cache=False)
    assert len(t.slices) == 7


def test_missing_path() -> None:
    with pytest.raises(TraceError, match="no such file"):
        explorer.load("/nonexistent/trace.json")


def test_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no trace files"):
        explorer.load(tmp_path)


def test_unescaped_quotes_in_kineto_names_are_repaired(tmp_path: Path) -> None:
    # Kineto writes a module-level frame's name with its docstring quotes unescaped.
    raw = (
        b'{"traceEvents": [\n  {\n    "ph": "X",\n    "cat": "python_function",\n'
        b'    "name": "torch/profiler/_cupti_monitor.py(0):     """",\n'
        b'    "pid": 1,\n    "tid": 1,\n    "ts": 1.0,\n    "dur": 2.0\n  }\n]}'
    )
    (tmp_path / "k.json").write_bytes(raw)
    t = explorer.load(tmp_path / "k.json", use_cache=False)
    assert t.slices["name"].iat[0] == 'torch/profiler/_cupti_monitor.py(0):     """'
    assert any("unescaped" in w for w in t.metadata["warnings"])


@pytest.mark.parametrize(
    "content",
    [
        "[]",
        '{"traceEvents": []}',
        '{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}}]}',
    ],
)
@pytest.mark.parametrize("verb", ["info", "report", "export", "diff", "view"])
def test_a_trace_without_events_is_one_line_and_status_2_for_every_verb(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str, content: str
) -> None:
    from explorer.cli.main import main

    path = tmp_path / "empty.json"
    path.write_text(content)
    out = tmp_path / "out.pftrace"
    argv = {
        "info": ["info", str(path)],
        "report": ["report", str(path)],
        "export": ["export", str(path), "-o", str(out)],
        "diff": ["diff", str(path), str(path)],
        "view": ["view", str(path), "--screenshot", str(tmp_path / "v.png")],
    }[verb]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "no events" in err[0]
    assert not out.exists()


# -- every case of issue 11, by name ---------------------------------------------------------


def _load(path: Path) -> explorer.Trace:
    return explorer.load(path, use_cache=False)


@pytest.mark.parametrize(
    "field,value,what",
    [
        ("dur", 1e16, "duration"),
        ("ts", 1e18, "timestamp"),
        ("ts", 2**64, "timestamp"),
        ("ts", 1e308, "timestamp"),
        ("dur", 1e308, "duration"),
        ("ts", -1e18, "timestamp"),
    ],
)
def test_times_beyond_int64_ns_name_the_event(
    tmp_path: Path, field: str, value: float, what: str
) -> None:
    doc = _kineto(5)
    doc["traceEvents"][3][field] = value
    msg = _error(_write(tmp_path / "big.json", doc))
    assert "event 3 ('aten::op2')" in msg and what in msg and "64-bit nanoseconds" in msg


@pytest.mark.parametrize("block", [1, 2, 1 << 20])
def test_times_are_checked_in_blocks_with_the_first_bad_timestamp_named_first(
    tmp_path: Path, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad end early and a bad timestamp later: the timestamp is named, whichever block
    each lies in; X events without ``dur`` are counted across blocks, the first named."""
    from explorer.trace import events

    monkeypatch.setattr(events, "_CHECK_BLOCK", block)
    doc = _kineto(8)
    for k in (2, 5, 7):
        del doc["traceEvents"][k]["dur"]
    assert "event 2" in " ".join(_load(_write(tmp_path / "ok.json", doc)).metadata["warnings"])
    assert any(
        w.startswith("3 'X' events have no 'dur'") and "(the first: event 2" in w
        for w in _load(_write(tmp_path / "ok.json", doc)).metadata["warnings"]
    )
    doc["traceEvents"][1]["dur"] = 1e16
    doc["traceEvents"][6]["ts"] = 1e18
    msg = _error(_write(tmp_path / "bad.json", doc))
    assert "event 6 ('aten::op2') has a timestamp" in msg
    del doc["traceEvents"][6]["ts"]
    msg = _error(_write(tmp_path / "bad.json", doc))
    assert "event 1 ('aten::op0') has a duration" in msg


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("field", ["ts", "dur"])
def test_non_finite_times_name_the_event(tmp_path: Path, field: str, literal: str) -> None:
    text = json.dumps(_kineto(5)).replace(f'"{field}": 1020.0', f'"{field}": {literal}')
    text = text.replace('"dur": 5.0', f'"dur": {literal}', 1) if field == "dur" else text
    (tmp_path / "n.json").write_text(text)
    msg = _error(tmp_path / "n.json")
    assert f"{literal} {'duration' if field == 'dur' else 'timestamp'}" in msg


def test_negative_timestamps_never_wrap_in_an_export(tmp_path: Path) -> None:
    doc = _kineto(5)
    del doc["deviceProperties"]
    for e in doc["traceEvents"][1:]:
        e["ts"] -= 5000.0  # every timestamp negative, no baseTimeNanoseconds
    src = _write(tmp_path / "neg.json", doc)
    trace = _load(src)
    assert trace.metadata["start_ns"] == 0
    assert any("before 1970" in w for w in trace.metadata["warnings"])
    # Times within the trace are unchanged: the first op starts at 0, the others 10 µs apart.
    assert trace.slices["ts"].tolist() == [10_000 * i for i in range(5)]
    out = tmp_path / "out.json"
    assert main(["export", str(src), "-o", str(out), "--no-results"]) == 0
    events = json.loads(out.read_text())["traceEvents"]
    assert min(e["ts"] for e in events if "ts" in e) >= 0


@pytest.mark.parametrize(
    "key,value,warning",
    [
        ("baseTimeNanoseconds", float("nan"), "baseTimeNanoseconds"),
        ("baseTimeNanoseconds", 1e30, "baseTimeNanoseconds"),
        ("deviceProperties", 5, "deviceProperties"),
        ("distributedInfo", {"rank": "zero"}, "distributedInfo.rank"),
        ("distributedInfo", {"rank": None}, "distributedInfo.rank"),
        ("explorer", {"settings": "x"}, "explorer.settings"),
        ("synthetic", "no", "synthetic"),
    ],
)
def test_metadata_of_the_wrong_type_is_ignored_with_a_warning(
    tmp_path: Path, key: str, value: object, warning: str
) -> None:
    doc = _kineto(5)
    doc[key] = value
    trace = _load(_write(tmp_path / "m.json", doc))
    assert len(trace.slices) == 5
    assert [w for w in trace.metadata["warnings"] if w.startswith(f"ignored {warning}")]
    assert trace.rank == -1 and trace.synthetic is False
    assert 0 <= trace.metadata["start_ns"]  # 1000 µs: the file's first timestamp, from 0
    # ... and every verb runs on it.
    for argv in (["info", "--json"], ["report", "--format", "json"]):
        assert main([argv[0], str(tmp_path / "m.json"), *argv[1:], "--no-cache"]) == 0


def test_pid_beyond_64_bits_is_one_line(tmp_path: Path) -> None:
    doc = _kineto(5)
    doc["traceEvents"][2]["pid"] = 2**64
    msg = _error(_write(tmp_path / "p.json", doc))
    assert "event 2 has pid = 18446744073709551616" in msg


@pytest.mark.parametrize("rank", [0, 3])
def test_rank_zero_is_rank_zero(tmp_path: Path, rank: int, capsys) -> None:
    doc = _kineto(5)
    doc["distributedInfo"] = {"rank": rank, "world_size": 4}
    src = _write(tmp_path / "r.json", doc)
    assert main(["report", str(src), "--format", "json", "--no-cache"]) == 0
    assert json.loads(capsys.readouterr().out)["trace"]["rank"] == rank


def test_x_without_dur_is_zero_length_with_a_warning(tmp_path: Path) -> None:
    doc = _kineto(5)
    del doc["traceEvents"][2]["dur"]
    trace = _load(_write(tmp_path / "x.json", doc))
    assert sorted(trace.slices["dur"].tolist()) == [0, 5000, 5000, 5000, 5000]
    assert any(
        "1 'X' events have no 'dur'" in w and "event 2" in w for w in trace.metadata["warnings"]
    )


def test_events_without_ph_are_ignored_with_a_warning(tmp_path: Path) -> None:
    doc = _kineto(5)
    del doc["traceEvents"][2]["ph"]
    del doc["traceEvents"][4]["ph"]
    trace = _load(_write(tmp_path / "p.json", doc))
    assert len(trace.slices) == 3
    assert any(w.startswith("2 events have no 'ph'") for w in trace.metadata["warnings"])


def test_utf8_bom_is_dropped(tmp_path: Path) -> None:
    (tmp_path / "b.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(_kineto(5)).encode())
    trace = _load(tmp_path / "b.json")
    assert len(trace.slices) == 5 and trace.metadata["warnings"] == []


def test_deep_nesting_names_event_and_field(tmp_path: Path) -> None:
    raw = json.dumps(_kineto(5)).encode()
    raw = raw.replace(
        b'"nested": {"a": [1, 2]}', b'"nested": ' + b"[" * 100_000 + b"]" * 100_000, 1
    )
    (tmp_path / "d.json").write_bytes(raw)
    msg = _error(tmp_path / "d.json")
    # document, traceEvents, the event, its args: 4 levels above the 100,000 brackets
    assert "event 1, field 'args'" in msg and "nests 100,004 levels deep" in msg


@pytest.mark.parametrize("field", ["name", "cat", "ph", "pid", "tid", "id"])
@pytest.mark.parametrize("value", [[1, 2], {"a": 1}])
def test_structured_values_in_scalar_fields_name_event_and_field(
    tmp_path: Path, field: str, value: object
) -> None:
    doc = _kineto(5)
    doc["traceEvents"].append(
        {"ph": "s", "cat": "ac2g", "name": "f", "id": 1, "pid": 1, "tid": 1, "ts": 1001.0}
    )
    doc["traceEvents"][-1 if field == "id" else 3][field] = value
    msg = _error(_write(tmp_path / "f.json", doc))
    assert f"event {6 if field == 'id' else 3} has {field} = " in msg


def test_non_utf8_bytes_name_event_and_field(tmp_path: Path) -> None:
    raw = json.dumps(_kineto(5)).encode().replace(b'"aten::op1"', b'"aten::op\xe9"', 1)
    (tmp_path / "u.json").write_bytes(raw)
    msg = _error(tmp_path / "u.json")
    assert "event 2, field 'name'" in msg and "not UTF-8" in msg


def test_non_utf8_bytes_in_args_never_reach_an_export(tmp_path: Path) -> None:
    raw = json.dumps(_kineto(5)).encode().replace(b'"a": [1, 2]', b'"a": "\xff\xfe"', 1)
    (tmp_path / "u.json").write_bytes(raw)
    assert "event 1, field 'args'" in _error(tmp_path / "u.json")


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "f.json")
    assert "not a regular file" in _error(tmp_path / "f.json")


def test_gzip_bomb_is_stopped_before_it_is_inflated(tmp_path: Path) -> None:
    import zlib

    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    data = c.compress(b'{"traceEvents": [') + c.compress(b" " * (80 << 20)) + c.flush()
    (tmp_path / "b.json.gz").write_bytes(data)
    assert len(data) < 200_000
    assert "gzip bomb" in _error(tmp_path / "b.json.gz")


def test_export_prints_every_load_warning(tmp_path: Path, capsys) -> None:
    text = json.dumps(_kineto(200))
    src = tmp_path / "t.json"
    src.write_text(text[: len(text) // 2])  # cut short: recovered with a warning
    assert main(["export", str(src), "-o", str(tmp_path / "o.pftrace"), "--no-cache"]) == 0
    assert "explorer: warning: the trace was cut short" in capsys.readouterr().err


def test_cut_inside_a_large_args_keeps_every_event_before_it(tmp_path: Path) -> None:
    """A cut inside an event whose args hold thousands of objects: every ``}`` before the cut
    closes an args object, not an event. All complete events before it are kept, found in
    one pass (trying cuts brace by brace gave up after 10,000 and kept none)."""
    doc = _kineto(300)
    big = {"ph": "X", "cat": "cpu_op", "name": "big", "pid": 1, "tid": 1, "ts": 9000.0,
           "dur": 1.0, "args": {"x": [{"a": 1}] * 25_000}}  # fmt: skip
    doc["traceEvents"].append(big)
    text = json.dumps(doc)
    p = tmp_path / "t.json"
    p.write_text(text[: len(text) - 40_000])  # inside the args, about 20,000 objects in
    t = explorer.load(p, use_cache=False)
    assert len(t.slices) == 300
    assert any(" 301 complete events" in w for w in t.metadata["warnings"])

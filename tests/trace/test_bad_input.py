"""Bad input: one clear message naming the file and the problem — never a traceback — and
a recovered prefix for traces cut short by a crashed run."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import explorer
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

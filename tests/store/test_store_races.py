"""The cache under concurrency: a trace replaced while it is parsed, another process
re-caching a trace that is open, several processes caching the same trace at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import explorer
from explorer.readers import read as load_trace
from explorer.store import cache
from tests.conftest import ROOT
from tests.store.test_store_roundtrip import assert_same_model


def _doc(n: int, tag: str) -> dict:
    return {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"{tag}{i % 7}",
                "pid": 1,
                "tid": 1,
                "ts": 10.0 * i,
                "dur": 5.0,
                "args": {"tag": tag, "i": i},
            }
            for i in range(n)
        ]
    }


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.parametrize("how", ["replaced", "rewritten in place", "same size and mtime"])
def test_trace_replaced_while_parsed_is_parsed_again(how: str, tmp_path: Path) -> None:
    p = tmp_path / "run.json"
    p.write_text(json.dumps(_doc(20, "old")))
    new = tmp_path / "new.json"
    new.write_text(json.dumps(_doc(25 if how != "same size and mtime" else 20, "new")))

    def swap(_fraction: float, message: str) -> None:
        if message != "decoding JSON":  # the old bytes are read; the parse is under way
            return
        if how == "rewritten in place":
            p.write_bytes(new.read_bytes())
        else:
            st = p.stat()
            os.replace(new, p)
            if how == "same size and mtime":
                assert p.stat().st_size == st.st_size
                os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))

    first = explorer.load(p, progress=swap)
    assert first.args(0)["tag"] == "old"  # what was read, as read
    again = explorer.load(p)
    assert again.args(0)["tag"] == "new"
    assert_same_model(load_trace(p, use_cache=False), again.data)


def test_open_trace_keeps_its_own_args_when_another_process_recaches(tmp_path: Path) -> None:
    p = tmp_path / "run.json"
    p.write_text(json.dumps(_doc(50, "old")))
    explorer.load(p)  # writes the entry
    messages: list[str] = []
    opened = explorer.load(p, progress=lambda _f, m: messages.append(m))
    assert messages == ["loaded from cache"]  # its args are not decoded yet
    p.write_text(json.dumps(_doc(50, "new")))
    out = subprocess.run(
        [sys.executable, "-c", f"import explorer; explorer.load({str(p)!r})"],
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    recached = cache.load_cached(p)
    assert recached is not None and recached.args(0)["tag"] == "new"  # the entry was replaced
    assert [opened.args(i) for i in range(50)] == [{"tag": "old", "i": i} for i in range(50)]


def test_processes_caching_one_trace_at_once_all_succeed(tmp_path: Path) -> None:
    p = tmp_path / "run.json"
    p.write_text(json.dumps(_doc(3000, "x")))
    code = f"import explorer; t = explorer.load({str(p)!r}); print(len(t), t.args(2999)['i'])"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(4)
    ]
    outs = [pr.communicate(timeout=120) for pr in procs]
    assert [pr.returncode for pr in procs] == [0] * 4, [e.decode() for _, e in outs]
    assert [o.decode().split() for o, _ in outs] == [["3000", "2999"]] * 4
    assert_same_model(load_trace(p, use_cache=False), cache.load_cached(p))
    leftovers = [x.name for x in cache.entry_path(p).parent.iterdir() if x.name.startswith(".")]
    assert leftovers == []  # no temporary or set-aside entry is left behind

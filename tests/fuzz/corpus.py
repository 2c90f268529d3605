"""A fixed corpus of hostile trace files, and the judge of what Explorer did with each.

Each case is ``(name, bytes, file suffix)``, made from one small valid Kineto trace by one
kind of damage: truncation, bit flips, a wrong type in each field, huge or non-finite
numbers, wrong metadata, deep nesting, bad encodings, a gzip bomb. The corpus is the same on
every run (seeded), so ``scripts/fuzz_corpus.py`` can give counts per outcome.

:func:`run_verb` runs a CLI verb in-process and :func:`judge` says which of the allowed
outcomes it was — ``error`` (exit 2, one line on stderr), ``recovered`` (exit 0 with a
warning), ``ok`` (exit 0, a correct result) — or why it was not allowed.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import random
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.cli.main import main

INT64_MIN = -(2**63)


def base_trace(n: int = 12) -> dict[str, Any]:
    """A small, valid Kineto trace: metadata, a process name, nested CPU ops, a kernel with
    its flow, a counter and a memory event."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python3"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 1000.0, "dur": 40.0 * n, "args": {}},
    ]  # fmt: skip
    for i in range(n):
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 3}", "pid": 1, "tid": 1,
             "ts": 1001.0 + 40 * i, "dur": 30.0, "args": {"External id": i, "Sequence number": i}}
        )  # fmt: skip
    events += [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 1005.0, "dur": 5.0, "args": {"correlation": 7, "External id": 0}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1020.0,
         "dur": 12.0, "args": {"correlation": 7, "device": 0, "stream": 7}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 7, "pid": 1, "tid": 1, "ts": 1005.0},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 7, "pid": 0, "tid": 7, "ts": 1020.0,
         "bp": "e"},
        {"ph": "C", "name": "util", "pid": 1, "tid": 0, "ts": 1010.0, "args": {"value": 3}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
         "ts": 1011.0, "s": "t", "args": {"Device Type": 0, "Device Id": -1, "Bytes": 64,
                                          "Total Allocated": 64, "Total Reserved": 0, "Addr": 1}},
    ]  # fmt: skip
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "FakeGPU"}],
        "distributedInfo": {"rank": 0, "world_size": 1},
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        "traceEvents": events,
    }


def encode(doc: Any) -> bytes:
    return json.dumps(doc).encode()


@dataclass
class Case:
    name: str
    data: bytes
    suffix: str = ".json"


#: Values of the wrong type (or out of range) given to each event field in turn.
WRONG_VALUES: dict[str, Any] = {
    "list": [1, 2],
    "object": {"a": 1},
    "string": "x",
    "null": None,
    "bool": True,
    "beyond_u64": 2**64,
    "negative": -5,
    "huge_float": 1e308,
    "neg_huge": -1e18,
}
EVENT_FIELDS = ("ph", "name", "cat", "pid", "tid", "ts", "dur", "id", "bp", "s", "args")
NUMBERS = {
    "dur_1e16": ("dur", 1e16),
    "ts_1e18": ("ts", 1e18),
    "ts_2p64": ("ts", 2**64),
    "ts_1e308": ("ts", 1e308),
    "dur_1e308": ("dur", 1e308),
    "ts_negative": ("ts", -500.0),
    "ts_neg_1e18": ("ts", -1e18),
    "dur_2p63": ("dur", 2**63),
}
METADATA = {
    "base_nan": ("baseTimeNanoseconds", float("nan")),
    "base_1e30": ("baseTimeNanoseconds", 1e30),
    "base_string": ("baseTimeNanoseconds", "x"),
    "base_negative": ("baseTimeNanoseconds", -(10**20)),
    "device_properties_5": ("deviceProperties", 5),
    "device_properties_list_of_ints": ("deviceProperties", [1, 2]),
    "distributed_rank_zero_string": ("distributedInfo", {"rank": "zero", "world_size": 2}),
    "distributed_rank_null": ("distributedInfo", {"rank": None}),
    "distributed_rank_huge": ("distributedInfo", {"rank": 2**70}),
    "distributed_5": ("distributedInfo", 5),
    "explorer_settings_x": ("explorer", {"settings": "x", "steps": "many"}),
    "explorer_5": ("explorer", 5),
    "synthetic_no": ("synthetic", "no"),
    "schema_list": ("schemaVersion", [1]),
}


def corpus(seed: int = 11) -> Iterator[Case]:
    """Every case of the fixed corpus (about 250)."""
    rng = random.Random(seed)
    good = encode(base_trace())
    yield Case("valid", good)
    yield Case("valid_gz", gzip.compress(good), ".json.gz")
    # Truncations and bit flips.
    for k in range(1, 20):
        yield Case(f"truncated_{k}", good[: len(good) * k // 20])
    gz = gzip.compress(good)
    for k in range(1, 6):
        yield Case(f"truncated_gz_{k}", gz[: len(gz) * k // 6], ".json.gz")
    for k in range(40):
        b = bytearray(good)
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        yield Case(f"bitflip_{k}", bytes(b))
    for k in range(10):
        b = bytearray(gz)
        b[rng.randrange(10, len(b))] ^= 1 << rng.randrange(8)
        yield Case(f"bitflip_gz_{k}", bytes(b), ".json.gz")
    # A wrong type in each field of an event of each kind.
    for fld in EVENT_FIELDS:
        for label, value in WRONG_VALUES.items():
            for row in (3, 15, 16):  # a cpu op, the kernel, the flow start
                doc = base_trace()
                doc["traceEvents"][row][fld] = value
                yield Case(f"field_{fld}_{label}_ev{row}", encode(doc))
    # Events missing ph / dur, events that are not objects.
    doc = base_trace()
    del doc["traceEvents"][3]["ph"]
    yield Case("no_ph", encode(doc))
    doc = base_trace()
    del doc["traceEvents"][3]["dur"]
    yield Case("x_without_dur", encode(doc))
    for label, value in (("int", 42), ("string", "x"), ("list", [1]), ("null", None)):
        doc = base_trace()
        doc["traceEvents"].insert(2, value)
        yield Case(f"event_is_{label}", encode(doc))
    # Huge and non-finite numbers.
    for label, (fld, value) in NUMBERS.items():
        doc = base_trace()
        doc["traceEvents"][4][fld] = value
        yield Case(f"number_{label}", encode(doc))
    for literal in ("NaN", "Infinity", "-Infinity"):
        for fld in ("ts", "dur"):
            text = encode(base_trace()).replace(
                f'"{fld}": 30.0'.encode(), f'"{fld}": {literal}'.encode(), 1
            )
            text = text.replace(b'"ts": 1121.0', f'"ts": {literal}'.encode(), 1)
            yield Case(f"nonfinite_{fld}_{literal}", text)
    doc = base_trace()
    del doc["baseTimeNanoseconds"]
    doc["traceEvents"][4]["ts"] = -500.0
    yield Case("number_ts_negative_no_base", encode(doc))
    # Wrong metadata.
    for label, (key, value) in METADATA.items():
        doc = base_trace()
        doc[key] = value
        yield Case(f"meta_{label}", encode(doc))
    doc = base_trace()
    for e in doc["traceEvents"]:
        if e.get("pid") == 1:
            e["pid"] = 2**64
    yield Case("pid_2p64", encode(doc))
    # Deep nesting in args, in a name, as the whole document.
    deep = b"[" * 100_000 + b"]" * 100_000
    text = good.replace(b'"args": {}', b'"args": {"x": ' + deep + b"}", 1)
    yield Case("deep_args", text)
    yield Case("deep_args_unclosed", good.replace(b'"args": {}', b'"args": ' + b"[" * 100_000, 1))
    yield Case("deep_name", good.replace(b'"name": "gemm"', b'"name": ' + deep, 1))
    yield Case("deep_document", deep)
    # Encodings.
    yield Case("bom", b"\xef\xbb\xbf" + good)
    yield Case("utf16", json.dumps(base_trace()).encode("utf-16"))
    yield Case("latin1_name", good.replace(b'"gemm"', b'"g\xe9mm"', 1))
    yield Case("bad_utf8_args", good.replace(b'"args": {}', b'"args": {"k": "\xff\xfe"}', 1))
    yield Case("nul_bytes", good.replace(b'"gemm"', b'"ge\x00mm"', 1))
    yield Case("lone_surrogate", good.replace(b'"gemm"', b'"g\\ud800mm"', 1))
    # Structure.
    yield Case("empty", b"")
    yield Case("top_scalar", b"42")
    yield Case("top_string", b'"traceEvents"')
    yield Case("events_object", b'{"traceEvents": {"a": 1}}')
    yield Case("events_null", b'{"traceEvents": null}')
    yield Case("empty_events", b'{"traceEvents": []}')
    yield Case("bare_array", encode(base_trace()["traceEvents"]))
    # Gzip bombs: small compressed, large inflated.
    yield Case("gzip_bomb", gzip_bomb(128 << 20), ".json.gz")
    yield Case("gzip_bomb_multi_member", gzip_bomb(40 << 20) * 4, ".json.gz")


_BOMBS: dict[int, bytes] = {}


def gzip_bomb(size: int) -> bytes:
    """A gzip member that inflates to ``size`` bytes of a JSON-looking prefix and spaces
    (about 1000:1)."""
    if size not in _BOMBS:
        c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        parts = [c.compress(b'{"traceEvents": [')]
        block = b" " * (1 << 20)
        for _ in range(size >> 20):
            parts.append(c.compress(block))
        parts.append(c.flush())
        _BOMBS[size] = b"".join(parts)
    return _BOMBS[size]


# -- running verbs and judging outcomes -------------------------------------------------------


@dataclass
class Outcome:
    verb: str
    rc: int | None
    out: str
    err: str
    crash: str = ""  # the exception that escaped main(), if any


def run_verb(argv: list[str]) -> Outcome:
    """``explorer ARGV`` in-process; stdout and stderr captured."""
    out, err = io.StringIO(), io.StringIO()
    crash = ""
    rc: int | None = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse
            rc = int(exc.code or 0)
        except BaseException as exc:  # noqa: BLE001 — a crash is what this judges
            crash = f"{type(exc).__name__}: {exc}"[:300]
    return Outcome(argv[0], rc, out.getvalue(), err.getvalue(), crash)


_NS_KEY = re.compile(r"(_ns|^ts|^dur|^start|^end)$")


def bad_times(value: Any, key: str = "") -> list[str]:
    """Negative or wrapped times anywhere in a JSON value (keys ending in _ns, ts, dur)."""
    found: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            found += bad_times(v, str(k))
    elif isinstance(value, list):
        for v in value:
            found += bad_times(v, key)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if _NS_KEY.search(key) and (value < 0 or value != value or value >= 2**63 - 1):
            found.append(f"{key}={value}")
    return found


def judge(o: Outcome, output_file: Path | None = None) -> str:
    """``error``, ``recovered`` or ``ok`` — or ``BAD: why`` for anything not allowed."""
    if o.crash:
        return f"BAD: crashed ({o.crash})"
    if "Traceback" in o.err or "Traceback" in o.out:
        return "BAD: traceback"
    err_lines = [ln for ln in o.err.splitlines() if ln.strip()]
    if o.rc == 2:
        errors = [ln for ln in err_lines if ln.startswith("explorer: error:")]
        if len(errors) != 1:
            return f"BAD: exit 2 with {len(errors)} error lines: {o.err[:200]!r}"
        return "error"
    if o.rc != 0:
        return f"BAD: exit {o.rc}: {o.err[:200]!r}"
    texts = [o.out]
    if output_file is not None and output_file.suffix == ".json":
        try:
            texts.append(output_file.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as exc:
            return f"BAD: the output is not UTF-8 ({exc})"
    for text in texts:
        if not text.lstrip().startswith("{"):  # JSON's numbers are checked one by one below
            if "-9223372036854775808" in text or "-9.223372036854776e+18" in text:
                return "BAD: a wrapped time in the output"
        else:  # (where a pid of -2^63 in a track's label is no time)
            try:
                doc = json.loads(text)
            except ValueError as exc:
                return f"BAD: the output is not valid JSON ({exc})"
            bad = bad_times(_events_relative(doc))
            if bad:
                return f"BAD: negative or wrapped times {bad[:3]}"
    warned = any(ln.startswith("explorer: warning:") for ln in err_lines) or "warning:" in o.out
    return "recovered" if warned else "ok"


def _events_relative(doc: Any) -> Any:
    """What to scan: a report or info document as is; an export's events (their ``ts`` is
    relative to ``baseTimeNanoseconds``, so never negative)."""
    if isinstance(doc, dict) and "traceEvents" in doc:
        return {"events": doc["traceEvents"], "base_ns": doc.get("baseTimeNanoseconds", 0)}
    return doc

"""A seeded generator of hostile input, standing in the suite: structural damage (cuts at
every kind of token, bit flips, splices), semantic hostility (integers of hundreds of
digits, flows in cycles and ids shared by thousands of events, steps that overlap, nest,
repeat or have numbers beyond int64, pids at the int64 edge), hostile paths and run
directories (a corrupt rank, duplicate rank numbers, a symlink loop, many tiny ranks) and
hostile SQL. For every case: no traceback, no hang, the input unchanged, nothing written
outside the output asked for, and the output valid (:func:`tests.fuzz.corpus.judge`).

The same cases on every run (``random.Random(SEED)``); each case's name says how to make
it again. The whole file runs in well under a minute on two cores."""

from __future__ import annotations

import contextlib
import copy
import gzip
import hashlib
import random
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from explorer.cli.sql import query_trace
from explorer.readers import read as load_trace
from explorer.store.query import QueryError
from tests.fuzz.corpus import Case, base_trace, encode, judge, run_verb

SEED = 26
#: The most a case may take (in-process): past it, a hang.
CASE_SECONDS = 60


@contextlib.contextmanager
def _no_hang(seconds: int = CASE_SECONDS) -> Iterator[None]:
    def hung(signum: int, frame: Any) -> None:
        raise AssertionError(f"hung for {seconds} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _tree(d: Path) -> dict[str, str]:
    """Every file under ``d`` (symlinks as where they point) and its hash."""
    out = {}
    for p in sorted(d.rglob("*")):
        rel = str(p.relative_to(d))
        if p.is_symlink():
            out[rel] = "-> " + str(p.readlink())
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# -- the generator ----------------------------------------------------------------------------

BIG = 10**400  # json.dumps writes it as digits; no float holds it


def _semantic(rng: random.Random) -> Iterator[Case]:
    """Well-formed JSON with values no profiler writes."""
    n = len(base_trace()["traceEvents"])
    for k in range(12):  # an integer of 400 digits in a random field of a random event
        doc = base_trace()
        row = rng.randrange(1, n)
        field = rng.choice(["ts", "dur", "pid", "tid", "id", "args"])
        ev = doc["traceEvents"][row]
        if field == "args":
            ev["args"] = {rng.choice(["value", "External id", "correlation", "Bytes"]): BIG}
        else:
            ev[field] = rng.choice([BIG, -BIG, 2**63, -(2**63), 2**64])
        yield Case(f"big_{field}_ev{row}_{k}", encode(doc))
    doc = base_trace()
    doc["traceEvents"].append({"ph": "C", "name": "c", "pid": 1, "ts": 1010.0, "args": {"v": BIG}})
    yield Case("big_counter", encode(doc))
    for base in (1e308, -1e308, BIG, 2**63):
        doc = base_trace()
        doc["baseTimeNanoseconds"] = base
        yield Case(f"base_{str(base)[:6]}", encode(doc).replace(b"1e+308", b"1e400"))
    # Flows: cycles, ends before starts, one id shared by thousands of events, bp lists.
    flow = {"cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1}
    doc = base_trace()
    for i in range(3000):
        doc["traceEvents"].append({"ph": "stf"[i % 3], "id": 7, "ts": 1001.0 + (i % 400), **flow})
    yield Case("flow_id_shared_3000", encode(doc))
    doc = base_trace()
    for i in range(200):  # a -> b -> a ...: each flow ends where the next starts
        doc["traceEvents"].append({"ph": "s", "id": i, "ts": 1001.0 + 40 * (i % 12), **flow})
        doc["traceEvents"].append({"ph": "f", "id": i, "ts": 1001.0 + 40 * ((i + 1) % 12), **flow})
    yield Case("flow_cycles", encode(doc))
    doc = base_trace()
    for e in doc["traceEvents"]:
        if e.get("ph") in ("s", "f"):
            e["bp"] = rng.choice([["e"], {"e": 1}, "x", 5])
    yield Case("flow_bp_wrong_types", encode(doc))
    # Steps that overlap, nest, repeat, or are numbered beyond int64.
    for label, steps in (
        ("overlap", [(1000.0, 300.0, 1), (1100.0, 300.0, 2), (1200.0, 300.0, 3)]),
        ("nested", [(1000.0, 480.0, 1), (1010.0, 100.0, 2), (1020.0, 10.0, 3)]),
        ("repeated", [(1000.0, 100.0, 5), (1100.0, 100.0, 5), (1200.0, 100.0, 5)]),
        ("beyond_int64", [(1000.0, 100.0, 2**63), (1100.0, 100.0, 10**30)]),
        ("zero_length", [(1000.0, 0.0, 1), (1000.0, 0.0, 2)]),
    ):
        doc = base_trace()
        doc["traceEvents"] = [e for e in doc["traceEvents"] if "ProfilerStep" not in e["name"]]
        for ts, dur, num in steps:
            doc["traceEvents"].append(
                {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{num}",
                 "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}
            )  # fmt: skip
        yield Case(f"steps_{label}", encode(doc))
    doc = base_trace()
    doc["traceEvents"] += [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
         "ts": 1000.0 + i * 0.001, "dur": 0.001, "args": {}}
        for i in range(2000)
    ]  # fmt: skip
    yield Case("steps_2000_tiny", encode(doc))
    doc = base_trace()
    for e in doc["traceEvents"]:
        if e.get("pid") == 1:
            e["pid"] = -(2**63)
            e["tid"] = rng.choice([2**63 - 1, -(2**63), 2**40])
    yield Case("pid_int64_min", encode(doc))


def _structural(rng: random.Random) -> Iterator[Case]:
    """The base trace damaged as bytes: cuts (at a random byte, and just after each kind of
    token: a number's '.', an 'e', a '-', a quote, a backslash), bit flips, splices."""
    good = encode(base_trace())
    for k in range(10):
        yield Case(f"cut_at_{k}", good[: rng.randrange(1, len(good))])
    text = good.replace(b'"ts": 1121.0', b'"ts": 1121.5e3', 1)
    for token in (b".5", b"e3", b'"aten', b"\\", b"-", b"tr", b"nul"):
        body = text.replace(
            b'"name": "aten::op2"', b'"name": "a\\\\b", "x": -1, "y": true, "z": null', 1
        )
        at = body.find(token, len(body) // 3)
        if at > 0:
            yield Case(f"cut_after_{token.decode()!r}", body[: at + 1])
    gz = gzip.compress(good)
    for k in range(4):
        yield Case(f"cut_gz_{k}", gz[: rng.randrange(10, len(gz))], ".json.gz")
    for k in range(10):
        b = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        yield Case(f"bytes_{k}", bytes(b))
    for k in range(4):  # a piece of the trace repeated or moved elsewhere
        a, b = sorted(rng.sample(range(len(good)), 2))
        c = rng.randrange(len(good))
        yield Case(f"splice_{k}", good[:c] + good[a:b] + good[c:])
    yield Case("png", b"\x89PNG\r\n\x1a\n" + bytes(rng.randrange(256) for _ in range(512)))
    yield Case("random_bytes", bytes(rng.randrange(256) for _ in range(4096)))


def cases() -> list[Case]:
    rng = random.Random(SEED)
    return [*_semantic(rng), *_structural(rng)]


CASES = cases()


# -- traces through the verbs -------------------------------------------------------------


def _check(tmp_path: Path, case: Case, argv: list[str], out: Path | None = None) -> str:
    before = _tree(tmp_path)
    with _no_hang():
        outcome = run_verb(argv)
    verdict = judge(outcome, out)
    assert not verdict.startswith("BAD"), (case.name, argv[0], verdict, outcome.err[-500:])
    after = _tree(tmp_path)
    if out is not None:
        after.pop(out.name, None)
    assert after == before, (case.name, "files changed", set(after) ^ set(before))
    return verdict


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_generated_case_through_info_and_report(tmp_path: Path, case: Case) -> None:
    src = tmp_path / f"t{case.suffix}"
    src.write_bytes(case.data)
    verdict = _check(tmp_path, case, ["info", str(src), "--json", "--no-cache"])
    if verdict != "error":  # what loads must also analyse and export
        _check(tmp_path, case, ["report", str(src), "--format", "json", "--no-cache"])
        out = tmp_path / "out.json"
        _check(tmp_path, case, ["export", str(src), "-o", str(out), "--no-cache"], out)
        out = tmp_path / "out.pftrace"
        _check(tmp_path, case, ["export", str(src), "-o", str(out), "--no-cache"], out)


# -- run directories and paths ------------------------------------------------------------


def _rank_file(d: Path, rank: int, doc: dict[str, Any] | None = None) -> Path:
    doc = copy.deepcopy(doc or base_trace())
    doc["distributedInfo"] = {"rank": rank, "world_size": 4}
    p = d / f"worker{rank}.pt.trace.json"
    p.write_bytes(encode(doc))
    return p


def _run_dirs(root: Path) -> Iterator[tuple[str, Path]]:
    d = root / "corrupt_rank"
    d.mkdir()
    for r in range(3):
        _rank_file(d, r)
    (d / "worker3.pt.trace.json").write_bytes(encode(base_trace())[:300])
    yield "corrupt_rank", d
    d = root / "duplicate_ranks"
    d.mkdir()
    for i in range(3):
        p = _rank_file(d, 1)
        p.rename(d / f"host{i}.pt.trace.json")
    yield "duplicate_ranks", d
    d = root / "symlink_loop"
    (d / "sub").mkdir(parents=True)
    _rank_file(d, 0)
    (d / "sub" / "up").symlink_to(d, target_is_directory=True)
    (d / "a.json").symlink_to(d / "b.json")
    (d / "b.json").symlink_to(d / "a.json")
    yield "symlink_loop", d
    d = root / "many_tiny_ranks"
    d.mkdir()
    tiny = base_trace(n=1)
    for r in range(300):
        _rank_file(d, r, tiny)
    yield "many_tiny_ranks", d
    d = root / "png_rank"
    d.mkdir()
    _rank_file(d, 0)
    (d / "worker1.pt.trace.json").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    yield "png_rank", d


def test_hostile_run_directories(tmp_path: Path) -> None:
    for name, d in _run_dirs(tmp_path):
        case = Case(name, b"")
        _check(tmp_path, case, ["info", str(d), "--json", "--no-cache"])


# -- SQL ------------------------------------------------------------------------------------

_ESCAPES = [
    "COPY (SELECT 1) TO '{f}'",
    "COPY (SELECT 1) TO '{f}' (FORMAT parquet)",
    "EXPORT DATABASE '{d}'",
    "ATTACH '{f}' AS x",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "RESET lock_configuration",
    "PRAGMA profiling_output = '{f}'",
    "CALL enable_logging(storage_path = '{d}')",
    "CREATE SECRET (TYPE s3)",
]
_READS = [
    "read_text('{p}')",
    "read_blob('{p}')",
    "read_csv('{p}')",
    "read_csv_auto('{p}')",
    "read_json_auto('{p}')",
    "read_parquet('{p}')",
    "glob('{p}')",
    "'{p}'",
    "parquet_scan('{p}')",
    "sniff_csv('{p}')",
]
_PATHS = ["/etc/passwd", "/etc/*", "/**/*.parquet", "{trace}", "{d}/*", "~/.bashrc"]
_WRAPS = [
    "{q}",
    "EXPLAIN {q}",
    "EXPLAIN ANALYZE {q}",
    "WITH w AS ({q}) SELECT * FROM w",
    "SELECT * FROM ({q})",
    "SELECT count(*) FROM slices UNION ALL SELECT count(*) FROM ({q})",
    "SELECT 1; {q}",
    "{q}; SELECT 1",
    "/* comment */ {q} -- tail",
]


def _sql_cases(rng: random.Random, trace: Path, d: Path) -> Iterator[str]:
    for k in range(40):
        if k % 3 == 0:
            q = rng.choice(_ESCAPES)
        else:
            q = "SELECT * FROM " + rng.choice(_READS).replace("{p}", rng.choice(_PATHS))
        yield rng.choice(_WRAPS).format(q=q).format(f=d / f"out{k}", d=d, trace=trace)
    yield "SELECT '\udc80' AS s"
    yield "SELECT sum(a.range * b.range) FROM range(1000000) a, range(1000000) b"
    yield "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT max(n) FROM r"
    yield "SELECT * FROM range(100000000)"
    yield ""
    yield ";;;"


def test_hostile_sql_never_escapes(tmp_path: Path) -> None:
    trace = tmp_path / "T.json"
    trace.write_bytes(encode(base_trace()))
    model = load_trace(trace, use_cache=False)
    before = _tree(tmp_path)
    rng = random.Random(SEED)
    refused = 0
    for sql in _sql_cases(rng, trace, tmp_path):
        with _no_hang():
            try:  # refused in one line, or (EXPLAIN without ANALYZE runs nothing) a plan
                said = query_trace(model, sql, timeout=1, max_rows=10_000).to_string()
                assert sql.startswith("EXPLAIN ") and "ANALYZE" not in sql, sql
            except QueryError as err:
                said = str(err)
                assert "\n" not in said and said.startswith("SQL: "), (sql, said)
                refused += 1
        assert "root:" not in said, sql  # nothing of /etc/passwd
    assert refused >= 40
    assert _tree(tmp_path) == before
    # and the tables are still there, whole
    n = int(query_trace(model, "SELECT count(*) AS n FROM slices")["n"].iat[0])
    assert n == len(model.slices)

"""The loader's fast paths against the plain computations they replace: the slices' order
against ``np.lexsort``, where the event array closes against following the depth byte by
byte, a chunk's vocabulary codes against ``pd.factorize``, and a real trace's chunk
columns against the events decoded one at a time, and its field codes from distinct
combinations against a pass per field."""

from __future__ import annotations

import gzip
import random
import re
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pytest

from explorer.errors import TraceError
from explorer.trace.build import _order_by_track_then_start, slice_order
from explorer.trace.event_chunk import (
    Vocabulary,
    _codes_by_combination,
    _codes_per_field,
    _field_codes,
    decode_chunk,
)
from explorer.trace.event_types import EVENTS
from explorer.trace.events import InMemoryColumns
from explorer.trace.flows import _by_src_then_dst, _flow_keys, _pairs_with_equal_keys
from explorer.trace.json_position import _depths, array_close
from tests.conftest import SAMPLE_TRACES, shared_trace_files


def test_slice_order_is_the_lexsort_of_track_start_longest_first_and_file_order() -> None:
    rng = np.random.default_rng(7)
    for k in range(600):
        n = int(rng.integers(0, 400))
        track = rng.integers(0, 5, n)
        dur = rng.integers(0, 6, n)
        row = rng.permutation(n)
        if k % 2:  # few distinct starts: mostly ties
            ts = rng.integers(0, 30, n)
        else:  # distinct starts but a few slices starting with another on its track
            ts = rng.integers(0, 10**9, n)
            copies = rng.integers(0, max(n, 1), n // 20)
            ts[copies] = ts[copies[::-1]]
            track[copies] = track[copies[::-1]]
        expected = np.lexsort((row, -dur, ts, track))
        assert np.array_equal(slice_order(track, ts, dur, row), expected)
    # Starts too wide to pack beside the track and the position, but not beside a
    # track's own positions: sorted a track at a time, same answer.
    for k in range(300):
        n = int(rng.integers(65, 400))
        track = rng.integers(0, 6, n)
        track[0] = 5
        ts = rng.integers(2**53, 2**54, n)
        if k % 3 == 0:  # shared starts on a track
            ts[rng.integers(0, n, n // 4)] = ts[0]
            track[: n // 3] = track[0]
        dur = rng.integers(0, 6, n)
        row = rng.permutation(n)
        assert (n - 1).bit_length() + int(ts.max()).bit_length() + 3 > 63
        assert _order_by_track_then_start(track, ts, 54) is not None
        expected = np.lexsort((row, -dur, ts, track))
        assert np.array_equal(slice_order(track, ts, dur, row), expected)
    # Starts too wide to pack beside the track: the plain lexsort, same answer.
    ts = np.array([2**61, 0, 2**61, 5])
    track = np.array([3, 3, 1, 1])
    dur = np.array([1, 2, 3, 4])
    row = np.arange(4)
    assert np.array_equal(slice_order(track, ts, dur, row), np.lexsort((row, -dur, ts, track)))


def _close_by_depth(rest: bytes) -> int | None:
    depth, _, _ = _depths(np.frombuffer(rest, np.uint8), 1, False, False)
    closed = np.flatnonzero(depth == 0)
    return int(closed[0]) if len(closed) else None


@pytest.mark.parametrize(
    "rest",
    [
        b" ]",
        b'{"a":1}\n ]',
        b'{"a":"}]"},{"b":1}], "x": [{}]}',
        b'{"a":[{"b":1}]}, {"c":"\\"}]"}]',
        b'{"a":1},{"b":[{}]}] , "c": 2}',
        b"",
        b'{"a":1}',
        b'{"a":"}]"}',
        b'{"a": 1}, ]',
        b'], "b": [{}]}',
    ],
)
def test_array_close_is_where_the_depth_returns_to_zero(rest: bytes) -> None:
    assert array_close(rest) == _close_by_depth(rest)


def test_array_close_on_random_text_matches_the_depth_scan() -> None:
    rng = random.Random(3)
    pieces = [b"{", b"}", b"[", b"]", b'"', b"\\", b",", b"1", b":", b" ", b"}]", b'"a"']
    for _ in range(5000):
        rest = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 16)))
        assert array_close(rest) == _close_by_depth(rest), rest


def test_array_close_of_deeply_nested_text_falls_back_to_the_depth_scan() -> None:
    rest = b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}]"
    assert array_close(rest) == len(rest) - 1


def test_pid_codes_are_pd_factorize_in_first_appearance_order() -> None:
    values: list[Any] = ["b", None, 3, "3", 3.0, 2.5, None, "b", -1, 2.5]
    codes, uniques = Vocabulary(False).codes(iter(values), len(values))
    expected, distinct = pd.factorize(np.array(values, dtype=object))
    assert codes.tolist() == (expected + 1).tolist()  # a fresh vocabulary; None: 0
    assert [u for u in uniques if u is not None] == list(distinct)


def test_name_codes_group_values_by_their_text() -> None:
    values: list[Any] = ["b", None, "a", "b", 1, 1.0, "1", None, 2.5, "", "a", 7]
    codes, _ = Vocabulary(True).codes(iter(values), len(values))
    texts = ["" if v is None else v if isinstance(v, str) else f"{v:g}" for v in values]
    assert codes.tolist() == pd.factorize(np.array(["", *texts], dtype=object))[0][1:].tolist()


def test_vocabulary_codes_of_bool_and_int_pids_are_ints() -> None:
    codes, uniques = Vocabulary(False).codes(iter([True, 1, 2]), 3)
    assert uniques == [1, 2] and all(type(u) is int for u in uniques)
    assert codes.tolist() == [1, 1, 2]


def test_vocabulary_refuses_unhashable_values() -> None:
    with pytest.raises(TypeError):
        Vocabulary(True).codes(iter(["a", ["b"]]), 2)


class _Plain(msgspec.Struct):
    ph: Any = None
    name: Any = None
    cat: Any = None
    pid: Any = None
    tid: Any = None
    args: dict[str, Any] = {}


def test_a_slice_arg_key_spelled_with_escapes_is_read() -> None:
    text = (
        b'[{"ph":"X","name":"a","ts":1,"dur":1,"args":{"B\\u0079tes": 5}},'
        b'{"ph":"X","name":"b","ts":2,"dur":1,"args":{"correlation": 9}}]'
    )
    chunk = decode_chunk("t.json", text)
    assert chunk.slice_args["Bytes"].tolist() == [5, -1]
    assert chunk.slice_args["correlation"].tolist() == [-1, 9]


def test_chunk_columns_of_a_real_trace_match_its_events_one_by_one() -> None:
    path = SAMPLE_TRACES / "cpu_transformer.pt.trace.json.gz"
    doc = msgspec.json.decode(gzip.decompress(path.read_bytes()))
    text = msgspec.json.encode(doc["traceEvents"])
    chunk = decode_chunk(path, text)
    events = msgspec.json.decode(text, type=list[_Plain])
    assert chunk.n == len(events)
    for key, values in (("name", "names"), ("cat", "cats"), ("pid", "pids"), ("tid", "tids")):
        vocabulary = getattr(chunk, values)
        got = [vocabulary[c] for c in getattr(chunk, key)]
        want = list(map(attrgetter(key), events))
        if key in ("name", "cat"):
            want = ["" if v is None else str(v) for v in want]
        assert got == want, key
    slices = [e for e in events if e.ph in ("X", "B")]
    assert len(chunk.args_rows) == len(slices)
    for field, arg in (("external_id", "External id"), ("correlation", "correlation")):
        want = [int(e.args.get(arg, -1)) for e in slices]
        assert chunk.slice_args[field].tolist() == want, field
    for field, arg in (("external_id_old", "external id"), ("Bytes", "Bytes")):
        assert not any(arg in e.args for e in slices)
        assert (chunk.slice_args[field] == -1).all()


def _same_codes(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, np.ndarray):
            assert got[key].dtype == value.dtype and np.array_equal(got[key], value), key
        elif isinstance(value, int):
            assert got[key] == value, key
        else:
            assert [(type(v), v) for v in got[key]] == [(type(v), v) for v in value], key


def _events(text: bytes) -> list[Any]:
    return EVENTS.decode(text)


def test_codes_by_combination_equal_a_pass_per_field_on_real_traces() -> None:
    paths = sorted(SAMPLE_TRACES.glob("*.json*")) + shared_trace_files()
    assert len(paths) >= 5
    for path in paths:
        raw = path.read_bytes()
        doc = msgspec.json.decode(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        events = doc["traceEvents"] if isinstance(doc, dict) else doc
        evs = _events(msgspec.json.encode(events))
        got = _codes_by_combination(evs)
        assert got is not None, path
        _same_codes(got, _codes_per_field(path, evs, 0))


def test_codes_by_combination_equal_a_pass_per_field_on_mixed_values() -> None:
    rng = random.Random(11)
    pool: list[Any] = ["a", "b", "1", 1, 1.0, True, False, 0, 2.5, None, -3, "", 7, "7"]
    phs: list[Any] = ["X", "B", "E", "i", "I", "C", "M", "s", "f", "P", "", None]
    for _ in range(400):
        n = rng.randint(0, 60)
        events = [
            {
                k: rng.choice(pool)
                for k in ("name", "cat", "pid", "tid")
                if rng.random() < 0.9  # sometimes absent
            }
            | ({"ph": rng.choice(phs)} if rng.random() < 0.95 else {})
            for _ in range(n)
        ]
        evs = _events(msgspec.json.encode(events))
        got = _codes_by_combination(evs)
        assert got is not None
        _same_codes(got, _codes_per_field("t.json", evs, 0))


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"ph": 3, "name": "a"}, "event 2 has ph = 3, not a string"),
        ({"ph": "X", "name": ["a"]}, "event 2 has name = ['a']"),
        ({"ph": "X", "pid": {"a": 1}}, "event 2 has pid = {'a': 1}"),
        ({"ph": "X", "tid": 2.0**70}, "event 2 has tid = 1.1805916207174113e+21"),
    ],
)
def test_a_chunk_with_an_odd_value_names_its_event(event: dict[str, Any], message: str) -> None:
    ok = {"ph": "X", "name": "a", "pid": 1, "tid": 1}
    evs = _events(msgspec.json.encode([ok, ok, event, ok]))
    assert _codes_by_combination(evs) is None
    with pytest.raises(TraceError, match=re.escape(message)):
        _field_codes("t.json", evs, 0)


def test_flow_keys_are_equal_exactly_for_equal_category_and_id() -> None:
    rng = np.random.default_rng(5)
    for k in range(300):
        n = int(rng.integers(0, 300))
        cat = rng.integers(-1, 4, n)
        if k % 3 == 0:  # ids beside text ids (negative codes)
            ids = rng.integers(-5, 40, n)
        elif k % 3 == 1:  # correlation ids
            ids = rng.integers(0, 2**32, n) // int(rng.integers(1, 2**31))
        else:  # too wide to pack beside the category: factorized
            ids = rng.choice(np.array([-(2**63), 2**62, 0, 7, -2]), n)
        key = _flow_keys(cat, ids)
        assert key.dtype == np.int64 and len(key) == n
        pairs = list(zip(cat.tolist(), ids.tolist(), strict=True))
        same = np.equal.outer(key, key)
        want = np.array([[a == b for b in pairs] for a in pairs], bool).reshape(n, n)
        assert np.array_equal(same, want), k


def test_pairs_with_equal_keys_are_the_inner_merge() -> None:
    rng = np.random.default_rng(6)
    for k in range(300):
        na, nb = int(rng.integers(0, 60)), int(rng.integers(0, 60))
        a_key, b_key = rng.integers(-3, 12 if k % 2 else 200, na), rng.integers(-3, 12, nb)
        a, b = rng.permutation(1000)[:na], rng.permutation(1000)[:nb]
        src, dst = _pairs_with_equal_keys(a_key, a, b_key, b)
        merged = pd.DataFrame({"c": a_key, "src": a}).merge(pd.DataFrame({"c": b_key, "dst": b}))
        assert sorted(zip(src.tolist(), dst.tolist(), strict=True)) == sorted(
            zip(merged["src"].tolist(), merged["dst"].tolist(), strict=True)
        )
        assert src.dtype == dst.dtype == np.int64


def test_flows_by_src_then_dst_is_the_stable_lexsort() -> None:
    rng = np.random.default_rng(8)
    for k in range(300):
        n = int(rng.integers(0, 200))
        hi = [5, 2**20, 2**40][k % 3]  # the last too wide to pack: the lexsort itself
        src, dst = rng.integers(0, hi, n), rng.integers(0, 5 if k % 2 else hi, n)
        assert np.array_equal(_by_src_then_dst(src, dst), np.lexsort((dst, src)))


@pytest.mark.parametrize("expected", [None, (10**6, 4000), (10**9, 10)])
def test_in_memory_columns_equal_their_pieces_joined(expected: tuple[int, int] | None) -> None:
    """Without a size hint, with one that fits, with one far too large (capped)."""
    rng = np.random.default_rng(9)
    columns = InMemoryColumns()
    if expected is not None:
        columns.expect(*expected)
    pieces: dict[str, list[Any]] = {"a": [], "b": [], "blob": []}
    for _ in range(300):  # several doublings past the first buffer
        n = int(rng.integers(0, 2000))
        a, b = rng.integers(-(2**40), 2**40, n), rng.random(n) < 0.5
        blob = rng.bytes(int(rng.integers(0, 500)))
        for key, piece in (("a", a), ("b", b), ("blob", blob)):
            columns.add(key, piece)
            pieces[key].append(piece)
    a = columns.array("a", np.int64)
    assert a.dtype == np.int64 and np.array_equal(a, np.concatenate(pieces["a"]))
    b = columns.array("b", np.bool_)
    assert b.dtype == np.bool_ and np.array_equal(b, np.concatenate(pieces["b"]))
    assert columns.array("blob", np.uint8).tobytes() == b"".join(pieces["blob"])
    assert columns.array("never", np.float64).dtype == np.float64

"""``explorer.trace.order.lexsort`` gives ``np.lexsort``'s order exactly: on random keys
with many ties, on keys that do not pack (floats, spans past int64), and on the points of a
real trace's dependency graph."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.trace.order import lexsort, lexsort_ties, stable_argsort


@pytest.mark.parametrize("seed", range(20))
def test_the_same_order_as_numpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 2000))
    keys: list[np.ndarray] = [rng.integers(-3, 4, n) for _ in range(int(rng.integers(1, 6)))]
    if seed % 4 == 1:
        keys.append(rng.integers(0, 2, n).astype(bool))
    if seed % 4 == 2:
        keys.insert(0, rng.random(n))  # a float tie-break
        keys.insert(len(keys) - 1, rng.random(n))  # and one under the primary key
    if seed % 4 == 3:
        keys.append(rng.random(n))  # a float primary key: not packed
    assert np.array_equal(lexsort(keys), np.lexsort(tuple(keys)))


@pytest.mark.parametrize("seed", range(12))
def test_tie_breakers_asked_for_the_tied_rows_only(seed: int) -> None:
    """:func:`lexsort_ties` is ``np.lexsort`` of all the keys while the tie-breakers are
    made for the rows that tie on the first two keys only — also where the second key is
    a float (the first alone packs) and where the first is (numpy sorts everything)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 3000))
    first = rng.integers(0, 4, n)
    second = rng.integers(0, 50, n) if seed % 3 == 0 else rng.integers(0, 5, n)
    if seed % 3 == 1:
        second = second.astype(np.float64)
    if seed % 3 == 2 and seed % 2:
        first = first.astype(np.float64)
    rest = [rng.integers(0, 3, n), rng.integers(-2, 2, n)]
    asked: list[np.ndarray] = []

    def rest_of(rows: np.ndarray) -> list[np.ndarray]:
        asked.append(rows)
        return [k[rows] for k in rest]

    got = lexsort_ties(first, second, rest_of)
    assert np.array_equal(got, np.lexsort((*rest, second, first)))
    if first.dtype.kind != "f" and second.dtype.kind != "f":
        pairs = first * 1000 + second
        _, counts = np.unique(pairs, return_counts=True)
        tied = int(counts[counts > 1].sum())
        assert sum(len(r) for r in asked) == tied  # none of the rows alone in their pair


def test_keys_too_wide_to_pack() -> None:
    big = np.array([np.iinfo(np.int64).max, 0, np.iinfo(np.int64).min + 1, 0])
    keys = [np.array([1, 0, 1, 0]), np.array([3, 2, 1, 0]), big]
    assert np.array_equal(lexsort(keys), np.lexsort(tuple(keys)))
    wide = np.array([2**40, 0, 2**40, 1], np.int64)
    keys = [np.array([1, 0, 0, 1]), wide, wide]
    assert np.array_equal(lexsort(keys), np.lexsort(tuple(keys)))


def test_a_real_traces_points() -> None:
    """The keys the dependency graph sorts a thread's points by (track, time, then ends
    before starts, inner before outer), on a real trace, with points at one instant."""
    from explorer.readers import read
    from tests.conftest import SAMPLE_TRACES

    s = read(SAMPLE_TRACES / "cpu_transformer.pt.trace.json.gz", use_cache=False).slices
    ids = np.arange(len(s))
    ts, end = s["ts"].to_numpy(), s["ts"].to_numpy() + s["dur"].to_numpy()
    pt = np.concatenate([ids, ids])
    is_end = np.r_[np.zeros(len(ids), bool), np.ones(len(ids), bool)]
    t = np.where(is_end, end[pt], ts[pt])
    track = s["track"].to_numpy()[pt]
    keys = [np.where(is_end, -pt, pt), is_end, -(end - ts)[pt], t, track]
    tied = len(t) - len(np.unique(track.astype(np.int64) * (int(t.max()) + 1) + t))
    assert tied > 0  # points at one instant: the tie-break keys decide
    assert np.array_equal(lexsort(keys), np.lexsort(tuple(keys)))


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int16, np.uint8, np.uint64, bool])
@pytest.mark.parametrize("span", [2, 1000, 1 << 16, (1 << 16) + 1, 1 << 40])
def test_stable_argsort_is_numpy_s_stable_order(dtype: type, span: int) -> None:
    """Small spans take the 16-bit radix sort, larger ones numpy's own: the same order,
    ties in input order, for signed keys below zero too."""
    rng = np.random.default_rng(span)
    info = np.iinfo(np.int64 if dtype is bool else dtype)
    top = min(span, int(info.max))
    keys = rng.integers(0, top, 5000, dtype=np.int64)
    if info.min < 0:
        keys -= min(top // 2, 1 << 14)
    a = keys.astype(dtype)
    assert np.array_equal(stable_argsort(a), np.argsort(a, kind="stable"))

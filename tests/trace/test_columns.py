"""The column helpers of :mod:`explorer.trace.columns`, against numpy's own answers."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.trace.columns import dense_ranks


@pytest.mark.parametrize("seed", range(4))
def test_dense_ranks_answer_as_np_unique(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cases = [
        rng.integers(0, 50, 1000),  # a small range: counted
        rng.integers(0, 10**12, 1000),  # a wide one: sorted
        rng.integers(-5, 5, 1000),  # negative: sorted
        np.zeros(0, np.int64),
        np.array([7]),
    ]
    for values in cases:
        present, inverse = dense_ranks(values)
        want, want_inverse = np.unique(values, return_inverse=True)
        assert np.array_equal(present, want) and present.dtype == values.dtype
        assert np.array_equal(inverse, want_inverse.reshape(-1))

"""Turning lists of JSON values into typed numpy columns, with errors that name the event.

Values in real traces are not always the type the format promises (``"stream": "0x0"``,
``"size": "2560"``, ids as strings). Conversion tries the fast vectorised path first and,
only when that fails, walks the values to coerce what can be coerced and to report the
first value that cannot.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np
import pandas as pd

from explorer.errors import TraceError

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


def floats(
    values: Sequence[Any], *, path: object, what: str, where: Callable[[int], str]
) -> np.ndarray:
    """float64 column; None → NaN. A value that is not a number is an error."""
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.empty(len(values), np.float64)
    for i, v in enumerate(values):
        if v is None:
            out[i] = math.nan
            continue
        try:
            out[i] = float(v)
        except OverflowError:  # an integer of hundreds of digits
            raise TraceError(
                path,
                f"{where(i)} has {what} with {len(str(abs(v)))} digits, beyond any number a "
                "clock or counter holds",
                "the file is damaged or was not written by a profiler",
            ) from None
        except (TypeError, ValueError):
            raise TraceError(
                path,
                f"{where(i)} has {what} {short(v)}, which is not a number",
                "the file is damaged or was not written by a profiler",
            ) from None
    return out


def short(v: Any, n: int = 40) -> str:
    """``repr(v)`` cut to about ``n`` characters: a value quoted in a message."""
    r = repr(v)
    return r if len(r) <= n else r[: n - 3] + "..."


def ints(
    values: Sequence[Any] | np.ndarray, *, path: object, what: str, where: Callable[[int], str]
) -> np.ndarray:
    """int64 column; None or unparseable strings → -1; hex strings parsed; beyond int64 is an
    error (it cannot be an id any tool wrote, and silently wrapping it would link wrong events)."""
    obj = np.array(values, dtype=object) if not isinstance(values, np.ndarray) else values
    if obj.ndim == 1:
        none = np.equal(obj, np.array(None))
        if none.all():
            return np.full(len(obj), -1, np.int64)
        try:
            filled = obj.copy()
            filled[none] = -1
            out = filled.astype(np.int64)
            return out  # floats are truncated: ids are whole numbers in practice
        except (TypeError, ValueError, OverflowError):
            pass
    out = np.full(len(values), -1, np.int64)
    for i, v in enumerate(values):
        if v is None or v == "":
            continue
        if isinstance(v, bool):
            out[i] = int(v)
            continue
        if isinstance(v, str):
            try:
                v = int(v, 0)
            except ValueError:
                try:
                    v = int(float(v))
                except ValueError:
                    continue  # a label, not a number: no id
        elif isinstance(v, float):
            if math.isnan(v):
                continue
            v = int(v)
        elif not isinstance(v, int):
            continue
        if not INT64_MIN <= v <= INT64_MAX:
            raise TraceError(
                path,
                f"{where(i)} has {what} {v}, beyond the 64-bit range",
                "the file is damaged; re-capture it",
            )
        out[i] = v
    return out


def strings(values: Sequence[Any]) -> list[str]:
    """Every value as a string ('' for None), the way the file spelled it."""
    return ["" if v is None else v if isinstance(v, str) else num_str(v) for v in values]


def num_str(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def dense_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` for integers: the distinct values, sorted,
    and each value's place among them. Non-negative values within a few times their count
    of zero (group keys made of category codes) are counted rather than sorted: 1.3 s ->
    ~20 ms for a million keys; others are sorted, as ``np.unique`` does."""
    values = np.asarray(values)
    if len(values) == 0 or values.min() < 0 or int(values.max()) >= 4 * len(values) + 4096:
        present, inverse = np.unique(values, return_inverse=True)
        return present, inverse.reshape(-1)
    seen = np.zeros(int(values.max()) + 1, bool)
    seen[values] = True
    # places as int32 where they fit: a million-edge critical path's keys are coded here
    rank = np.cumsum(seen, dtype=np.int32 if len(seen) < 2**31 else np.intp)
    rank -= 1
    return np.flatnonzero(seen).astype(values.dtype), rank[values]


def category_values(values: pd.Categorical | pd.Series) -> np.ndarray:
    """A categorical column as an object array of its values (None where missing), each
    row pointing at its category's one string. What ``column.to_numpy()`` returns, without
    a new string per row: with Arrow-backed categories that is a string object per slice
    (at 8.4M slices, 700 MB that the heap then keeps)."""
    cat = values.array if isinstance(values, pd.Series) else values
    names = np.empty(len(cat.categories) + 1, dtype=object)
    names[:-1] = [str(n) for n in cat.categories]
    return names[cat.codes]


def category_matches(values: pd.Categorical | pd.Series, rx: re.Pattern[str]) -> np.ndarray:
    """Per row of a categorical column: does its value match ``rx`` (``search``)? The regex
    runs once per distinct value, then the answers are spread through the codes; a missing
    value never matches."""
    cat = values.array if isinstance(values, pd.Series) else values
    names = cat.categories.astype(str)
    hit = np.fromiter((bool(rx.search(n)) for n in names), bool, len(names))
    return np.append(hit, False)[cat.codes]


def category_in(values: pd.Categorical | pd.Series, names: Collection[str]) -> np.ndarray:
    """Per row of a categorical column: is its value one of ``names``? Compared once per
    distinct value, then spread through the codes (no string per row); a missing value is
    in none. What ``np.isin(column.to_numpy(), names)`` answers."""
    cat = values.array if isinstance(values, pd.Series) else values
    if not isinstance(cat, pd.Categorical):
        return np.isin(np.asarray(cat, dtype=object), list(names))
    hit = np.isin(np.asarray(cat.categories.astype(str), dtype=object), list(names))
    return np.append(hit, False)[cat.codes]

"""A trace file's top-level metadata, checked once while decoding: a value of the wrong
type or out of range is dropped with a warning, so that nothing downstream meets a
``NaN`` base time, a ``"zero"`` rank or a ``deviceProperties`` that is a number.

What each key must be (anything else is ignored, with a warning naming the key and value):

* ``baseTimeNanoseconds``: a whole number of nanoseconds since 1970 that fits int64;
* ``deviceProperties``: a list of objects (entries that are not objects are dropped);
* ``distributedInfo``: an object; its ``rank``/``world_size``: whole numbers ≥ 0;
* top-level ``rank``/``world_size`` likewise; ``format``: a string;
* ``explorer`` (Explorer's own block): an object; its ``settings``/``environment``:
  objects; its ``rank``/``world_size``/``steps``: whole numbers ≥ 0;
* ``synthetic``: ``true`` or ``false``.
"""

from __future__ import annotations

import math
from typing import Any

from explorer.trace.columns import short as _short

INT64_MAX = 2**63 - 1
_RANK_MAX = 2**31 - 1


def _whole(v: Any, lo: int, hi: int) -> int | None:
    """``v`` as an int when it is a whole number in ``[lo, hi]`` (integral floats too)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, float):
        if not math.isfinite(v) or not v.is_integer():
            return None
        v = int(v)
    if isinstance(v, int) and lo <= v <= hi:
        return v
    return None


def _check_ints(block: dict[str, Any], keys: tuple[str, ...], where: str, hi: int) -> list[str]:
    warnings = []
    for key in keys:
        if key not in block:
            continue
        v = _whole(block[key], 0, hi)
        if v is None:
            warnings.append(f"ignored {where}{key} = {_short(block[key])}: not a whole number ≥ 0")
            del block[key]
        else:
            block[key] = v
    return warnings


def _check_objects(block: dict[str, Any], keys: tuple[str, ...], where: str) -> list[str]:
    warnings = []
    for key in keys:
        if key in block and not isinstance(block[key], dict):
            warnings.append(f"ignored {where}{key} = {_short(block[key])}: not an object")
            del block[key]
    return warnings


def check_metadata(meta: dict[str, Any]) -> list[str]:
    """Drop (in place) the metadata values that are not what the format says; one warning
    for each."""
    warnings: list[str] = []
    if "baseTimeNanoseconds" in meta:
        v = _whole(meta["baseTimeNanoseconds"], 0, INT64_MAX)
        if v is None:
            warnings.append(
                f"ignored baseTimeNanoseconds = {_short(meta['baseTimeNanoseconds'])}: not "
                "nanoseconds since 1970 that fit 64 bits; absolute times start at 0"
            )
            del meta["baseTimeNanoseconds"]
        else:
            meta["baseTimeNanoseconds"] = v
    props = meta.get("deviceProperties")
    if props is not None:
        kept = [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []
        if not isinstance(props, list) or len(kept) != len(props):
            warnings.append(
                f"ignored deviceProperties entries that are not objects ({_short(props)})"
            )
            meta["deviceProperties"] = kept
    warnings += _check_objects(meta, ("distributedInfo", "explorer"), "")
    if isinstance(meta.get("distributedInfo"), dict):
        meta["distributedInfo"] = dict(meta["distributedInfo"])
        warnings += _check_ints(
            meta["distributedInfo"], ("rank", "world_size"), "distributedInfo.", _RANK_MAX
        )
    if isinstance(meta.get("explorer"), dict):
        meta["explorer"] = dict(meta["explorer"])
        ex = meta["explorer"]
        warnings += _check_objects(ex, ("settings", "environment"), "explorer.")
        warnings += _check_ints(ex, ("rank", "world_size"), "explorer.", _RANK_MAX)
        warnings += _check_ints(ex, ("steps", "elapsed_ns"), "explorer.", INT64_MAX)
    warnings += _check_ints(meta, ("rank", "world_size"), "", _RANK_MAX)
    if "format" in meta and not isinstance(meta["format"], str):
        warnings.append(f"ignored format = {_short(meta['format'])}: not a string")
        del meta["format"]
    if "synthetic" in meta and not isinstance(meta["synthetic"], bool):
        warnings.append(
            f"ignored synthetic = {_short(meta['synthetic'])}: not true or false "
            "(the trace is taken as measured)"
        )
        del meta["synthetic"]
    return warnings

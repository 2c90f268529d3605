"""Helpers for the collector tests: read a written trace with nothing but json and gzip."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def read_trace(path: Path) -> dict[str, Any]:
    """The trace document, read the way any other tool would (plain gzip + json)."""
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def explorer_events(doc: dict[str, Any], cat: str) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("cat") == cat]

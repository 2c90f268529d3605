"""Every warning a load produced, on stderr, for every verb: a recovered or guessed value is
never silent, whatever the output format or destination."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from explorer.trace.model import TraceData
    from explorer.trace_api import Trace


def print_load_warnings(trace: Trace | TraceData) -> None:
    """``explorer: warning: ...`` on stderr, one line per reader warning of ``trace``."""
    print_warnings(trace.metadata.get("warnings", []) or [])


def print_warnings(warnings: list[str]) -> None:
    """``explorer: warning: ...`` on stderr, one line per warning."""
    for w in warnings:
        print(f"explorer: warning: {w}", file=sys.stderr)

"""Every warning a load produced, on stderr, for every verb: a recovered or guessed value is
never silent, whatever the output format or destination."""

from __future__ import annotations

import sys
from typing import Any


def print_load_warnings(trace: Any) -> None:
    """``explorer: warning: ...`` on stderr, one line per reader warning of ``trace``."""
    for w in trace.metadata.get("warnings", []) or []:
        print(f"explorer: warning: {w}", file=sys.stderr)

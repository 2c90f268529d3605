"""``explorer diff A B``: what changed between two runs (step time, breakdown, ops,
kernels, source lines, findings), in text, Markdown, JSON or HTML."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from explorer.errors import UsageError


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "diff",
        help="what changed between two traces (before -> after)",
        description="Compare trace A (before) with trace B (after): median step time and "
        "breakdown with spread, ops, kernels and source lines added/removed/changed, findings "
        "that appeared, disappeared or changed. Works across devices (CUDA vs MTIA vs CPU).",
    )
    p.add_argument("a", help="the 'before' trace (file or directory)")
    p.add_argument("b", help="the 'after' trace (file or directory)")
    p.add_argument("--format", "-f", choices=["text", "markdown", "json", "html"], default="text")
    p.add_argument("--top", type=int, default=15, help="rows per table (default 15)")
    p.add_argument("-o", "--output", default=None, help="write to this file instead of stdout")
    p.add_argument(
        "--no-cache", action="store_true", help="ignore and do not write the trace cache"
    )
    return p


def run(args: argparse.Namespace) -> int:
    import explorer
    from explorer.analysis.diff import diff
    from explorer.report.diff_render import render_diff

    if args.top < 1:
        raise UsageError("--top must be at least 1")
    a = explorer.load(args.a, use_cache=not args.no_cache)
    b = explorer.load(args.b, use_cache=not args.no_cache)
    text = render_diff(diff(a, b), args.format, top=args.top)
    if args.output is not None:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0

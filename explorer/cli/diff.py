"""``explorer diff A B``: what changed between two runs (step time, breakdown, ops,
kernels, source lines, findings), in text, Markdown, JSON or HTML."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from explorer.cli.load_warnings import print_load_warnings
from explorer.errors import UsageError
from explorer.safe_write import atomic_write, check_target
from explorer.trace.loading import input_files


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
    p.add_argument("--force", action="store_true", help="overwrite OUTPUT if it exists")
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
    inputs = [*input_files(args.a), *input_files(args.b)]
    if args.output is not None:  # refuse a bad -o before the (slow) loads
        check_target(args.output, inputs=inputs, force=args.force)
    a = explorer.load(args.a, use_cache=not args.no_cache)
    print_load_warnings(a)
    b = explorer.load(args.b, use_cache=not args.no_cache)
    print_load_warnings(b)
    text = render_diff(diff(a.data, b.data), args.format, top=args.top)
    if args.output is not None:
        sources = [t.metadata.get("source", "") for t in (a, b)]
        out = atomic_write(
            args.output,
            lambda tmp: tmp.write_text(text, encoding="utf-8"),
            inputs=[*inputs, *filter(None, sources)],
            force=args.force,
        )
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0

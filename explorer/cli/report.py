"""``explorer report TRACE``: the findings and breakdown, headless (terminal, CI, files).

Exit status: 0 when every ``--fail-on`` rule passes, 1 when one fires (each fired rule is
printed on stderr), 2 for a user error (unreadable trace, unknown step, bad rule).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from explorer.errors import UsageError
from explorer.trace.model import step_regex


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "report",
        help="why the steps are slow and which lines are responsible (text, markdown, json, html)",
        description="Analyse a trace: step time breakdown per device, ranked findings with "
        "source lines, top lines, memory. Exits 1 when a --fail-on rule fires.",
    )
    p.add_argument("trace", help="trace file (.json/.json.gz) or directory")
    p.add_argument("--format", "-f", choices=["text", "markdown", "json", "html"], default="text")
    p.add_argument(
        "--step",
        type=int,
        default=None,
        help="only this step (its number, e.g. 12 for ProfilerStep#12)",
    )
    p.add_argument(
        "--steps",
        metavar="REGEX",
        default=None,
        help="take steps from host annotations matching REGEX (default: ProfilerStep#N, "
        "else the whole trace)",
    )
    p.add_argument(
        "--top", type=int, default=10, help="at most K findings and source lines (default 10)"
    )
    p.add_argument(
        "--fail-on", action="append", default=[], metavar="EXPR",
        help="exit 1 when crossed, e.g. 'input_stall>10%%', 'sync_stall>5ms', 'compute<50%%' (repeatable)",
    )  # fmt: skip
    p.add_argument(
        "-o", "--output", default=None, help="write the report to this file instead of stdout"
    )
    p.add_argument(
        "--color", choices=["auto", "always", "never"], default="auto", help="colour text output"
    )
    p.add_argument(
        "--no-cache", action="store_true", help="ignore and do not write the trace cache"
    )
    return p


def run(args: argparse.Namespace) -> int:
    import explorer
    from explorer.report import document, render
    from explorer.report.fail_on import evaluate, parse

    rules = [parse(r) for r in args.fail_on]  # bad rules fail before the (slow) load
    if args.steps is not None:
        step_regex(args.steps)  # a bad pattern fails before the (slow) load
    if args.top < 1:
        raise UsageError("--top must be at least 1")
    trace = explorer.load(args.trace, use_cache=not args.no_cache, progress=_progress())
    if args.steps is not None:
        trace.use_steps(args.steps)
    to_file = args.output is not None
    color = args.color == "always" or (
        args.color == "auto"
        and not to_file
        and sys.stdout.isatty()
        and "NO_COLOR" not in os.environ
    )
    text = render(trace, format=args.format, step=args.step, top=args.top, color=color)
    if to_file:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    if not rules:
        return 0
    fired = evaluate(rules, document(trace, step=args.step, top=args.top))
    for msg in fired:
        print(f"explorer: FAIL {msg}", file=sys.stderr)
    return 1 if fired else 0


def _progress() -> Any:
    """The lead's terminal progress bar when attached to a TTY, else nothing."""
    from explorer.cli.progress import terminal_progress

    return terminal_progress()

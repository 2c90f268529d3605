"""``explorer report TRACE``: the findings and breakdown, headless (terminal, CI, files).

Exit status: 0 when every ``--fail-on`` rule passes, 1 when one fires (each fired rule is
printed on stderr), 2 for a user error (unreadable trace, unknown step, bad rule).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

from explorer.cli.load_warnings import print_load_warnings
from explorer.errors import UsageError
from explorer.safe_write import atomic_write, check_target
from explorer.trace.loading import input_files


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "report",
        help="why the steps are slow and which lines are responsible (text, markdown, json, html)",
        description="Analyse a trace: step time breakdown per device, ranked findings with "
        "source lines, top lines, memory. Exits 1 when a --fail-on rule fires.",
    )
    p.add_argument("trace", help="trace file (.json/.json.gz), directory, or - for stdin")
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
    p.add_argument("--force", action="store_true", help="overwrite OUTPUT if it exists")
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
        try:
            re.compile(args.steps)
        except re.error as exc:
            raise UsageError(
                f"--steps {args.steps!r} is not a valid regular expression: {exc}"
            ) from None
    if args.top < 1:
        raise UsageError("--top must be at least 1")
    inputs = input_files(args.trace)
    if args.output is not None:  # refuse a bad -o before the (slow) load
        check_target(args.output, inputs=inputs, force=args.force)
    trace = explorer.load(args.trace, use_cache=not args.no_cache, progress=_progress())
    print_load_warnings(trace)
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
        out = atomic_write(
            args.output,
            lambda tmp: tmp.write_text(text, encoding="utf-8"),
            inputs=[*inputs, trace.metadata.get("source", args.trace)],
            force=args.force,
        )
        print(f"wrote {out}", file=sys.stderr)
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
    try:
        from explorer.cli.progress import terminal_progress
    except ModuleNotFoundError:
        return None
    return terminal_progress()

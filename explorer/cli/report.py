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

from explorer.cli import options
from explorer.errors import UsageError
from explorer.safe_write import atomic_write, check_target
from explorer.trace.step_options import STEP_NESTINGS, StepOptions


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = options.verb_parser(
        sub,
        "report",
        "why the steps are slow and which lines are responsible (text, markdown, json, html)",
        """Analyse a trace: step time breakdown per device, ranked findings with source lines,
        top lines, memory. Exits 1 when a --fail-on rule fires.""",
    )
    options.add_trace_input(
        p,
        "trace file (.json/.json.gz), directory, or - for stdin; a directory of per-rank "
        "traces, a TensorBoard dir with several workers or a quoted glob gives the job report",
    )
    options.add_report_format(p)
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
        "--step-nesting",
        choices=list(STEP_NESTINGS),
        default="outermost",
        help="where step annotations nest (an inner one inside an outer one), which are the "
        "steps (default: outermost); the report says which annotation defined them",
    )
    options.add_step_range(p, "analyse")
    p.add_argument(
        "--top", type=int, default=10, help="at most K findings and source lines (default 10)"
    )
    p.add_argument(
        "--fail-on", action="append", default=[], metavar="EXPR",
        help="exit 1 when crossed, e.g. 'input_stall>10%%', 'sync_stall>5ms', 'compute<50%%' (repeatable)",
    )  # fmt: skip
    options.add_output(p, "write the report to this file instead of stdout")
    p.add_argument(
        "--color", choices=["auto", "always", "never"], default="auto", help="colour text output"
    )
    options.add_job_options(p)
    return p


def run(args: argparse.Namespace) -> int:
    from explorer.report import render_document, stored_document

    steps = StepOptions(args.steps, args.step_nesting)  # a bad pattern fails before the load
    # A report this Explorer made of this file as it is now, read back before anything is
    # loaded or imported (pandas, the analyses): the same document, in Python's start time.
    stored = (
        stored_document(Path(args.trace), args.step, args.top, steps.pattern, steps.nesting)
        if _may_be_stored(args)
        else None
    )
    if stored is None:
        return _run_analysed(args, steps)
    rules = _rules(args)
    inputs = [Path(args.trace)]
    if args.output is not None:
        check_target(args.output, inputs=inputs, force=args.force)
    from explorer.cli.load_warnings import print_warnings

    print_warnings(stored["trace"]["warnings"])
    text = render_document(stored, args.format, _color(args))
    return _written(args, text, [*inputs, stored["trace"]["path"] or args.trace], stored, rules)


def _may_be_stored(args: argparse.Namespace) -> bool:
    """Whether a stored document may answer: one trace file, through the cache, the whole
    trace (a ``--step-range`` window is analysed for the run)."""
    return (
        args.top >= 1
        and not args.no_cache
        and args.step_range is None
        and args.trace != "-"
        and Path(args.trace).is_file()
    )


def _rules(args: argparse.Namespace) -> list[Any]:
    """The ``--fail-on`` rules, parsed (a bad rule fails before the slow load)."""
    if not args.fail_on:
        return []
    from explorer.report.fail_on import parse

    return [parse(r) for r in args.fail_on]


def _color(args: argparse.Namespace) -> bool:
    return args.color == "always" or (
        args.color == "auto"
        and args.output is None
        and sys.stdout.isatty()
        and "NO_COLOR" not in os.environ
    )


def _written(
    args: argparse.Namespace, text: str, inputs: list[Any], doc: dict[str, Any], rules: list[Any]
) -> int:
    """Write the report where it goes, then judge the ``--fail-on`` rules on its document."""
    if args.output is not None:
        out = atomic_write(
            args.output,
            lambda tmp: tmp.write_text(text, encoding="utf-8"),
            inputs=inputs,
            force=args.force,
        )
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    if not rules:
        return 0
    from explorer.report.fail_on import evaluate

    fired = evaluate(rules, doc)
    for msg in fired:
        print(f"explorer: FAIL {msg}", file=sys.stderr)
    return 1 if fired else 0


def _run_analysed(args: argparse.Namespace, steps: StepOptions) -> int:
    """The report computed: the trace loaded (from the cache when it can be) and analysed."""
    from explorer.analysis.memory_need import analysed_window, check_analyses_fit
    from explorer.cli.load_warnings import print_load_warnings, print_warnings
    from explorer.job import is_job
    from explorer.processes import while_waiting
    from explorer.readers import input_files, read
    from explorer.report import document, import_analyses, render_document
    from explorer.store.cache import cache_write_of, not_cached_warning
    from explorer.trace_api import Trace

    if is_job(args.trace):
        return run_job(args)
    if args.top < 1:
        raise UsageError("--top must be at least 1")
    rules = _rules(args)
    inputs = input_files(args.trace)
    if args.output is not None:  # refuse a bad -o before the (slow) load
        check_target(args.output, inputs=inputs, force=args.force)
    with while_waiting(import_analyses):  # the imports while the decode workers parse
        # the cache entry written while the analyses run (the document finishes it)
        trace = Trace(
            read(
                args.trace,
                use_cache=not args.no_cache,
                progress=_progress(args.trace),
                defer_cache_write=True,
            )
        )
    write = cache_write_of(trace.data)
    try:
        print_load_warnings(trace)
        data, note = analysed_window(
            trace.data.with_step_options(steps), args.step_range, args.step
        )
        if note:
            print(f"explorer: note: {note}", file=sys.stderr)
        check_analyses_fit(
            data, "the report's analyses", "info, sql and export --no-results work within it"
        )
        doc = document(data, step=args.step, top=args.top)  # the report's and --fail-on's
    finally:
        failed = write.finish() if write is not None else None
    if failed is not None:
        print_warnings([not_cached_warning(failed)])
    text = render_document(doc, args.format, _color(args))
    return _written(args, text, [*inputs, trace.metadata.get("source", args.trace)], doc, rules)


def run_job(args: argparse.Namespace) -> int:
    """The job report: many ranks, the straggler and why (see :mod:`explorer.job`)."""
    from explorer.cli.progress import rank_progress
    from explorer.job import job_document
    from explorer.job.fail_on import evaluate_job, parse_job_rule
    from explorer.job.render import render as render_job
    from explorer.readers import input_files

    rules = [parse_job_rule(r) for r in args.fail_on]
    if args.step is not None:
        raise UsageError("--step is for one trace; a job report covers every step")
    if args.step_range is not None:
        raise UsageError("--step-range is for one trace; a job report covers every step")
    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be at least 1")
    doc = job_document(
        args.trace, scheduler=args.scheduler, workers=args.workers, store=args.store,
        use_cache=not args.no_cache, steps=StepOptions(args.steps, args.step_nesting), progress=rank_progress(),
    )  # fmt: skip
    text = render_job(doc, args.format)
    if args.output is not None:
        out = atomic_write(
            args.output,
            lambda tmp: tmp.write_text(text, encoding="utf-8"),
            inputs=input_files(args.trace),
            force=args.force,
        )
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    fired = evaluate_job(rules, doc)
    for msg in fired:
        print(f"explorer: FAIL {msg}", file=sys.stderr)
    return 1 if fired else 0


def _progress(source: str) -> Any:
    """The lead's terminal progress bar when attached to a TTY, else nothing."""
    from explorer.cli.progress import terminal_progress

    return terminal_progress(source=source)

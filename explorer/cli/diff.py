"""``explorer diff A B``: what changed between two runs (step time, breakdown, ops,
kernels, source lines, findings), in text, Markdown, JSON or HTML.

Two jobs (run directories or globs of several ranks) are compared rank by rank: median step
time per rank before and after, and the straggler change (:mod:`explorer.job.diff`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from explorer.cli import options
from explorer.cli.load_warnings import print_load_warnings
from explorer.errors import UsageError
from explorer.readers import input_files
from explorer.safe_write import atomic_write, check_target


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = options.verb_parser(
        sub,
        "diff",
        "what changed between two traces (before -> after)",
        """Compare trace A (before) with trace B (after): median step time and breakdown with
        spread, ops, kernels and source lines added/removed/changed, findings that appeared,
        disappeared or changed. Works across devices (CUDA vs MTIA vs CPU).""",
    )
    p.add_argument("a", help="the 'before' trace (file or directory), or job (run dir or glob)")
    p.add_argument("b", help="the 'after' trace (file or directory), or job (run dir or glob)")
    options.add_report_format(p)
    p.add_argument("--top", type=int, default=15, help="rows per table (default 15)")
    options.add_output(p, "write to this file instead of stdout")
    options.add_no_cache(p)
    options.add_job_options(p, store=False)  # two jobs' ranks would share one store
    return p


def run(args: argparse.Namespace) -> int:
    import explorer
    from explorer.analysis.diff import diff
    from explorer.job import is_job
    from explorer.report.diff_render import render_diff

    if args.top < 1:
        raise UsageError("--top must be at least 1")
    inputs = [*input_files(args.a), *input_files(args.b)]
    if args.output is not None:  # refuse a bad -o before the (slow) loads
        check_target(args.output, inputs=inputs, force=args.force)
    jobs = [is_job(args.a), is_job(args.b)]
    sources: list[str] = []
    if any(jobs):
        text = _job_diff_text(args, jobs)
    else:
        a = explorer.load(args.a, use_cache=not args.no_cache)
        print_load_warnings(a)
        b = explorer.load(args.b, use_cache=not args.no_cache)
        print_load_warnings(b)
        text = render_diff(diff(a.data, b.data), args.format, top=args.top)
        sources = [t.metadata.get("source", "") for t in (a, b)]
    if args.output is not None:
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


def _job_diff_text(args: argparse.Namespace, jobs: list[bool]) -> str:
    """Two jobs, rank by rank (both must be jobs)."""
    from explorer.cli.progress import rank_progress
    from explorer.job import job_document
    from explorer.job.diff import job_diff, render_job_diff

    if not all(jobs):
        one = args.b if jobs[0] else args.a
        raise UsageError(
            f"{one}: is one trace, the other side is a job of several ranks; compare two "
            "jobs (run directories), or two single traces (e.g. one rank of each job)"
        )
    if args.format not in ("text", "json"):
        raise UsageError(f"--format {args.format}: two jobs are compared as text or json")
    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be at least 1")
    a, b = (
        job_document(
            run,
            scheduler=args.scheduler,
            workers=args.workers,
            use_cache=not args.no_cache,
            progress=rank_progress(),
        )  # fmt: skip
        for run in (args.a, args.b)
    )
    return render_job_diff(job_diff(a, b), args.format)

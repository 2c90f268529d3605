"""``explorer export TRACE -o OUT [--format perfetto|chrome]``: write a trace for
ui.perfetto.dev (``.pftrace``) or any tool that reads Chrome JSON (``.json``/``.json.gz``),
with Explorer's findings and critical path as rows of their own.

``explorer export RUN_DIR -o job.pftrace``: every rank of a job in one Perfetto trace, one
process group per rank (``rank K``), on the clock the job report aligns (see
:mod:`explorer.job.export`); the line printed states each rank's shift."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from explorer.analysis.memory_need import analysed_window, check_analyses_fit
from explorer.cli import options
from explorer.cli.load_warnings import print_load_warnings
from explorer.errors import UsageError
from explorer.export import FORMATS, format_for_path
from explorer.readers import input_files
from explorer.safe_write import atomic_write, check_target
from explorer.units import fmt_bytes, fmt_ns


def add_parser(sub: Any) -> argparse.ArgumentParser:
    endings = "; ".join(f"{fmt}: {', '.join(e)}" for fmt, e in FORMATS.items())
    p = options.verb_parser(
        sub,
        "export",
        "write a trace as Perfetto protobuf (.pftrace) or Chrome JSON",
        f"""Write TRACE for other tools. The format follows OUT's ending ({endings}) unless
        --format says otherwise. Explorer's results come as rows of an "Explorer" group:
        "Findings" (one slice per finding over the time it covers, its text in args, arrows
        to its evidence) and "Critical path" (the report's path as runs: consecutive path
        time on one thread or stream is one slice named after its top op, with the track,
        the slices it passes through and its top ops in args; the runs cover the path's
        time exactly), plus an arrow between the original slices wherever the path crosses
        from one track to another (a launch, a sync, a hand-off). After a report they are
        read from the store, not computed again.""",
    )
    options.add_trace_input(
        p,
        "trace file (.json/.json.gz), directory, or - for stdin; a run directory or "
        "glob of several ranks writes the whole job (Perfetto only)",
    )
    options.add_output(p, "file to write", required=True, force="OUT")
    p.add_argument("--format", choices=sorted(FORMATS), help="output format (default: from OUT)")
    p.add_argument(
        "--no-results",
        action="store_true",
        help="leave out Explorer's Findings and Critical path rows (faster on huge traces)",
    )
    options.add_step_range(p, "write the findings and critical path of")
    options.add_job_options(p)
    return p


def run(args: argparse.Namespace) -> int:
    import explorer
    from explorer.cli.progress import terminal_progress
    from explorer.export import export
    from explorer.export.results import Results, results_in_child
    from explorer.job import is_job

    if is_job(args.trace):
        return run_job(args)
    inputs = input_files(args.trace)
    check_target(args.output, inputs=inputs, force=args.force)  # before the (slow) load
    fmt = args.format or format_for_path(Path(args.output))
    trace = explorer.load(
        args.trace, use_cache=not args.no_cache, progress=terminal_progress(source=args.trace)
    )
    print_load_warnings(trace)
    started = time.perf_counter()
    options = {"results": Results()} if args.no_results else {}
    if not args.no_results:
        data, note = analysed_window(trace.data, args.step_range)
        check_analyses_fit(
            data,
            "the findings and critical path written with the trace",
            "export --no-results writes the trace's own events within it",
        )
        if data.window is not None:  # results of some steps, named in the whole trace
            if note:
                print(f"explorer: note: {note}", file=sys.stderr)
            # in a child process: the memory its analyses take goes back for the export
            options["results"] = results_in_child(data).of_whole_trace(data.window)
            del data
    summaries = []
    out = atomic_write(
        args.output,
        lambda tmp: summaries.append(export(trace.data, tmp, format=fmt, **options)),
        inputs=[*inputs, trace.metadata.get("source", args.trace)],
        force=args.force,
    )
    summary = summaries[0]
    summary.path = out
    took = time.perf_counter() - started
    print(describe(summary, fmt, took))
    for note in summary.notes:
        print(f"explorer: warning: {note}", file=sys.stderr)
    if trace.synthetic:
        print(
            "explorer: note: this trace is SYNTHETIC (scenario generator), not measured",
            file=sys.stderr,
        )
    return 0


def describe(summary: Any, fmt: str, seconds: float) -> str:
    """One line saying what was written."""
    parts = [f"{summary.slices:,} slices", f"{summary.flows:,} flows"]
    if summary.counter_samples:
        parts.append(f"{summary.counter_samples:,} counter samples")
    if getattr(summary, "memory_events", 0):
        parts.append(f"{summary.memory_events:,} memory events")
    if summary.instants:
        parts.append(f"{summary.instants:,} instants")
    if summary.result_slices:
        parts.append(f"{summary.result_slices:,} Explorer result slices")
    if getattr(summary, "lane_tracks", 0):
        parts.append(f"{summary.lane_tracks} extra rows for overlapping slices")
    return (
        f"wrote {summary.path} ({fmt}, {fmt_bytes(summary.bytes)}) in {seconds:.1f} s: "
        + ", ".join(parts)
    )


def run_job(args: argparse.Namespace) -> int:
    """Every rank of the job at ``args.trace`` in one Perfetto trace, aligned."""
    from explorer.cli.progress import rank_progress
    from explorer.job import job_document
    from explorer.job.export import job_to_perfetto

    if args.step_range is not None:
        raise UsageError("--step-range is for one trace; a job is exported whole")
    inputs = input_files(args.trace)
    fmt = args.format or format_for_path(Path(args.output))
    if fmt != "perfetto":
        raise UsageError(
            f"{args.output}: a job is exported as one Perfetto trace (one process group per "
            "rank); end the name in .pftrace, or export one rank's file as Chrome JSON"
        )
    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be at least 1")
    check_target(args.output, inputs=inputs, force=args.force)  # before the (slow) analysis
    doc = job_document(
        args.trace, scheduler=args.scheduler, workers=args.workers, store=args.store,
        use_cache=not args.no_cache, progress=rank_progress(),
    )  # fmt: skip
    started = time.perf_counter()
    written = []
    out = atomic_write(
        args.output,
        lambda tmp: written.append(job_to_perfetto(doc, tmp, results=not args.no_results)),
        inputs=inputs,
        force=args.force,
    )
    job = written[0]
    took = time.perf_counter() - started
    print(
        f"wrote {out} (perfetto, {fmt_bytes(job.bytes)}) in {took:.1f} s: "
        f"{len(job.ranks)} ranks as process groups 'rank K', {job.slices:,} slices"
    )
    print(
        "clock shifts (subtracted from each rank's timestamps to align collective ends): "
        + ", ".join(f"rank {r} {_shift(s)}" for r, s in job.shifts_ns.items())
    )
    for w in doc["warnings"]:
        print(f"explorer: warning: {w}", file=sys.stderr)
    if doc["synthetic"]:
        print("explorer: note: this job is SYNTHETIC, not measured", file=sys.stderr)
    return 0


def _shift(ns: int) -> str:
    """``+1234567 ns (1.23 ms)``: exact, then readable; ``0 ns`` for no shift."""
    return f"{ns:+d} ns ({fmt_ns(abs(ns))})" if ns else "0 ns"

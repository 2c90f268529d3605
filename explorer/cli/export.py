"""``explorer export TRACE -o OUT [--format perfetto|chrome]``: write a trace for
ui.perfetto.dev (``.pftrace``) or any tool that reads Chrome JSON (``.json``/``.json.gz``),
with Explorer's findings and critical path as rows of their own."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from explorer.errors import UsageError
from explorer.export import FORMATS, format_for_path
from explorer.units import fmt_bytes


def add_parser(sub: Any) -> argparse.ArgumentParser:
    endings = "; ".join(f"{fmt}: {', '.join(e)}" for fmt, e in FORMATS.items())
    p = sub.add_parser(
        "export",
        help="write a trace as Perfetto protobuf (.pftrace) or Chrome JSON",
        description="Write TRACE for other tools. The format follows OUT's ending "
        f"({endings}) unless --format says otherwise.",
    )
    p.add_argument("trace", help="trace file (.json/.json.gz) or directory")
    p.add_argument("-o", "--output", required=True, help="file to write")
    p.add_argument("--format", choices=sorted(FORMATS), help="output format (default: from OUT)")
    p.add_argument("--force", action="store_true", help="overwrite OUT if it exists")
    p.add_argument(
        "--no-results",
        action="store_true",
        help="leave out Explorer's Findings and Critical path rows (faster on huge traces)",
    )
    p.add_argument("--no-cache", action="store_true", help="ignore and do not write the cache")
    return p


def check_paths(trace: str, output: str, force: bool) -> Path:
    """The output path, once it is safe to write: never the input, never a file the user
    did not ask to replace, in a folder that exists."""
    out = Path(output)
    src = Path(trace)
    if src.exists() and out.resolve() == src.resolve():
        raise UsageError(f"{out}: this is the input trace — choose another output file")
    if out.is_dir():
        raise UsageError(
            f"{out}: is a directory — give a file name such as {out / 'trace.pftrace'}"
        )
    if out.exists() and not force:
        raise UsageError(f"{out}: already exists — pass --force to overwrite it")
    if not out.parent.exists():
        raise UsageError(f"{out}: folder {out.parent} does not exist — create it first")
    return out


def run(args: argparse.Namespace) -> int:
    import explorer
    from explorer.cli.progress import terminal_progress
    from explorer.export import export
    from explorer.export.results import Results

    out = check_paths(args.trace, args.output, args.force)
    fmt = args.format or format_for_path(out)
    trace = explorer.load(args.trace, use_cache=not args.no_cache, progress=terminal_progress())
    # Write beside the target and rename at the end: an interrupted export never leaves a
    # half-written file under the name the user asked for.
    partial = out.with_name(f".partial-{os.getpid()}-{out.name}")
    started = time.perf_counter()
    try:
        options = {"results": Results()} if args.no_results else {}
        summary = export(trace, partial, format=fmt, **options)
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
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

"""``explorer view TRACE``: open the desktop explorer, or render it to a PNG headless.

On a job (what ``explorer report`` treats as one: a directory of per-rank traces, a
TensorBoard dir with several workers, a quoted glob) it opens the job overview instead:
the rank × step heatmap, the straggler and why, the collectives, the ranks' timelines.
"""

from __future__ import annotations

import argparse
import re

from explorer.errors import UsageError


def _size(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)[xX](\d+)", text.strip())
    if not m or int(m.group(1)) < 200 or int(m.group(2)) < 200:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size like 1600x1000 (at least 200x200)"
        )
    return int(m.group(1)), int(m.group(2))


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "view",
        help="open the desktop explorer (timeline, findings, source, memory...)",
        description="Open the desktop explorer on a trace. With --screenshot, render the "
        "window offscreen to a PNG and exit (no display needed).",
    )
    p.add_argument(
        "trace",
        nargs="?",
        help="trace file or directory (omit to open an empty window); a directory of "
        "per-rank traces or a quoted glob opens the job overview",
    )
    p.add_argument("--screenshot", metavar="OUT.png", help="save the window as a PNG and exit")
    p.add_argument("--force", action="store_true", help="overwrite OUT.png if it exists")
    p.add_argument(
        "--size",
        type=_size,
        default=(1600, 1000),
        metavar="WxH",
        help="window size (default 1600x1000)",
    )
    p.add_argument(
        "--select",
        metavar="EVENT",
        help="select an event: its id, or the first event whose name contains this text",
    )
    p.add_argument(
        "--finding",
        type=int,
        metavar="N",
        help="open on finding N (1 = the costliest, as 'explorer report' numbers them): "
        "its evidence zoomed and its source line shown",
    )
    return p


def run(args: argparse.Namespace) -> int:
    from explorer.job import is_job

    if args.screenshot and not args.trace:
        raise UsageError("--screenshot needs a trace: explorer view TRACE --screenshot OUT.png")
    if args.finding is not None and not args.trace:
        raise UsageError("--finding needs a trace: explorer view TRACE --finding 1")
    if args.trace and is_job(args.trace):
        return _run_job(args)
    try:
        from explorer.ui.app import main
    except ImportError as exc:  # PyQt6 missing or broken
        raise UsageError(_NO_QT.format(exc=exc)) from exc
    return main(
        args.trace,
        screenshot=args.screenshot,
        size=args.size,
        select=args.select,
        finding=args.finding,
        force=args.force,
    )


_NO_QT = (
    "the desktop explorer needs PyQt6 and pyqtgraph ({exc}); 'explorer report TRACE' works "
    "without them"
)


def _run_job(args: argparse.Namespace) -> int:
    """The job overview (several ranks): bad input is refused before any window opens."""
    from explorer.job.run_dir import job_files

    for flag, value in (("--select", args.select), ("--finding", args.finding)):
        if value is not None:
            raise UsageError(
                f"{flag} is for one trace; open one rank with 'explorer view RANK_FILE {flag} ...'"
            )
    job_files(args.trace)  # fewer than two ranks, two files for one rank: one line, exit 2
    try:
        from explorer.ui.job_app import main
    except ImportError as exc:  # PyQt6 missing or broken
        raise UsageError(_NO_QT.format(exc=exc)) from exc
    return main(args.trace, screenshot=args.screenshot, size=args.size, force=args.force)

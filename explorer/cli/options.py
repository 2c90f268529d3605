"""What the verbs' parsers share, defined once: how a verb's parser is made, and the options
several verbs take (the report format, where output goes, the cache switch, the options of
a job of several ranks). A verb adds only what is its own; the same flag never says two
things in two verbs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from explorer.report import FORMATS as REPORT_FORMATS


def verb_parser(
    subparsers: Any, name: str, summary: str, description: str | None = None
) -> argparse.ArgumentParser:
    """The parser of verb ``name``: ``summary`` is its line in ``explorer --help``,
    ``description`` heads its own ``--help`` (the summary when there is none)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=summary, description=description or summary
    )
    return parser


def add_report_format(parser: argparse.ArgumentParser) -> None:
    """``--format/-f``: the report renderers' formats (:data:`explorer.report.FORMATS`)."""
    parser.add_argument("--format", "-f", choices=list(REPORT_FORMATS), default="text")


def add_output(
    parser: argparse.ArgumentParser, what: str, required: bool = False, force: str = "OUTPUT"
) -> None:
    """``-o/--output`` (``what`` it writes) and ``--force`` to replace an existing file
    (nothing a user has is overwritten without it)."""
    parser.add_argument("-o", "--output", required=required, default=None, help=what)
    add_force(parser, f"overwrite {force} if it exists")


def add_force(parser: argparse.ArgumentParser, what: str) -> None:
    """``--force``: replace a file the user already has (``what``)."""
    parser.add_argument("--force", action="store_true", help=what)


def add_trace_input(parser: argparse.ArgumentParser, what: str) -> None:
    """The positional ``trace`` (``what`` this verb accepts there) and ``--no-cache``, how
    it is read."""
    parser.add_argument("trace", help=what)
    add_no_cache(parser)


def add_no_cache(parser: argparse.ArgumentParser) -> None:
    """``--no-cache``: neither read nor write the trace cache (see :mod:`explorer.store`)."""
    parser.add_argument(
        "--no-cache", action="store_true", help="ignore and do not write the trace cache"
    )


def add_job_options(parser: argparse.ArgumentParser, store: bool = True) -> None:
    """How a job (several ranks) runs: ``--scheduler``, ``--workers`` and, with ``store``,
    ``--store``."""
    job = parser.add_argument_group("jobs (several ranks)")
    job.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="run the ranks on this Dask scheduler (default: $EXPLORER_DASK_SCHEDULER, else a "
        "local cluster of processes)",
    )
    job.add_argument("--workers", type=int, default=None, help="local worker processes")
    if store:
        job.add_argument(
            "--store",
            metavar="DIR",
            default=None,
            help="write the ranks' tables here (default: the cache dir)",
        )


def non_negative(kind: type[int] | type[float]) -> Callable[[str], Any]:
    """An option's type: a number of ``kind`` that is 0 or more (finite)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not 0 <= value < float("inf"):
            raise argparse.ArgumentTypeError(f"{text!r}: give a number of 0 or more")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its message
    return parse


def step_range(text: str) -> tuple[int, int]:
    """``--step-range FIRST:LAST`` (both included; ``N`` alone is ``N:N``)."""
    first, sep, last = text.partition(":")
    try:
        a = int(first)
        b = int(last) if sep else a
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not FIRST:LAST (step numbers, e.g. 10:40)"
        ) from None
    if b < a:
        raise argparse.ArgumentTypeError(f"{text!r}: the last step comes before the first")
    return a, b


def add_step_range(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--step-range",
        type=step_range,
        default=None,
        metavar="FIRST:LAST",
        help=f"{what} steps FIRST to LAST only (their numbers, both included): a window of "
        "the trace, read and analysed on its own; without it, a trace whose analyses do "
        "not fit in memory is analysed over the steps that fit, and the output says so",
    )

"""Entry point of the ``explorer`` command.

Thin by design: each verb lives in its own module (``explorer/cli/<verb>.py``) exposing
``add_parser(subparsers) -> argparse.ArgumentParser`` and ``run(args) -> int``, and is listed
once in :data:`COMMANDS` (an explicit registry, like memray's ``_COMMANDS``: a verb module
that fails to import is an error, never a silently missing verb). A command line naming a
verb imports that verb's module only (``explorer report`` never imports what ``sql`` or
``view`` need: DuckDB, the viewer's checks); ``explorer --help`` and anything argparse must
refuse import them all. Verb modules import their heavy dependencies inside ``run``. This
module parses,
dispatches, and turns :class:`~explorer.errors.ExplorerError` into one line on stderr
and exit status 2 — a user never sees a traceback for a problem they can fix.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from explorer import __version__
from explorer.errors import ExplorerError
from explorer.processes import exit_now, sigterm_unwinds
from explorer.safe_write import os_error_line

#: Every verb, in the order ``--help`` lists them; verb ``v`` lives in ``explorer.cli.v``.
COMMANDS: tuple[str, ...] = ("demo", "info", "report", "diff", "export", "view", "sql", "whatif")
VERBS: tuple[str, ...] = COMMANDS


def verb_module(verb: str) -> ModuleType:
    """The module of ``verb`` (imported on first use)."""
    return importlib.import_module(f"explorer.cli.{verb}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command's parser: every verb's, or with ``only`` that verb's alone (what a
    command line naming it needs to parse it)."""
    parser = argparse.ArgumentParser(
        prog="explorer",
        description="Why is this training step slow, and which line of my code is responsible?",
        epilog="Run 'explorer VERB --help' for a verb's options. 'explorer TRACE' opens the viewer.",
    )
    parser.add_argument("--version", action="version", version=f"explorer {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb in [only] if only is not None else VERBS:
        module = verb_module(verb)
        p = module.add_parser(sub)
        p.set_defaults(_run=module.run)
    return parser


def unrecognized(extra: list[str], parser: argparse.ArgumentParser) -> str:
    """argparse's "unrecognized arguments" message, each flag followed by the closest of
    ``parser``'s when one is close (``--setp``: did you mean ``--step``?). Python 3.14's
    ``suggest_on_error`` does this; this works on 3.10 too."""
    flags = [f for f in parser._option_string_actions if f.startswith("--")]
    said = []
    for word in extra:
        close = (
            difflib.get_close_matches(word.split("=", 1)[0], flags, n=1, cutoff=0.6)
            if word.startswith("--")
            else []
        )
        said.append(f"{word} (did you mean {close[0]}?)" if close else word)
    return "unrecognized arguments: " + " ".join(said)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # 'explorer TRACE' is short for 'explorer view TRACE'.
    if argv and argv[0] not in VERBS and not argv[0].startswith("-") and os.path.exists(argv[0]):
        argv = ["view", *argv]
    verb = argv[0] if argv and argv[0] in VERBS else None
    parser = build_parser(verb)
    args, extra = parser.parse_known_args(argv)
    if extra:  # what argparse would refuse, with the verb's usage and the closest flags
        verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        target = verbs.choices.get(args.verb, parser) if args.verb else parser
        target.error(unrecognized(extra, target))
    if args.verb is None:
        parser.print_help()
        return 0
    try:
        # SIGTERM unwinds the verb as Ctrl-C does (a job's Dask cluster closed, temporary
        # files removed), then ends the process as it asks.
        with sigterm_unwinds():
            return int(args._run(args) or 0)
    except ExplorerError as exc:
        print(f"explorer: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:  # numpy's, Arrow's or msgspec's, anywhere in a verb
        print(
            "explorer: error: out of memory (free memory, raise this process's memory "
            "limit, or run it on a larger machine)",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print("explorer: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # the machine's, not the input's: a full disk, a lost mount
        print(f"explorer: error: {os_error_line(exc)}", file=sys.stderr)
        return 2


def command() -> NoReturn:
    """The ``explorer`` command (its console script, ``python -m explorer``): :func:`main`,
    then the process ends at once (:func:`~explorer.processes.exit_now`) rather than
    freeing a loaded trace object by object. Code calling :func:`main` keeps its process."""
    exit_now(main())


if __name__ == "__main__":  # pragma: no cover
    command()

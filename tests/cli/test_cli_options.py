"""The options several verbs share are defined once (``explorer/cli/options.py``): the same
flag says the same thing in every verb, and the report formats are the renderers'."""

from __future__ import annotations

import argparse

import pytest

from explorer.cli.main import COMMANDS, build_parser, main
from explorer.report import FORMATS
from tests.conftest import SAMPLE_TRACES


def _verb_parsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((a for a in parser._actions if flag in a.option_strings), None)


@pytest.mark.parametrize(
    ("flag", "verbs"),
    [
        ("--no-cache", {"info", "report", "diff", "export", "sql"}),
        ("--scheduler", {"report", "diff", "export"}),
        ("--workers", {"report", "diff", "export"}),
    ],
)
def test_a_shared_flag_says_one_thing(flag: str, verbs: set[str]) -> None:
    parsers = _verb_parsers()
    having = {v for v, p in parsers.items() if _option(p, flag) is not None}
    assert verbs <= having
    helps = {_option(parsers[v], flag).help for v in verbs}  # type: ignore[union-attr]
    assert len(helps) == 1, helps


def test_every_verb_has_a_summary_and_a_description() -> None:
    parsers = _verb_parsers()
    assert set(parsers) == set(COMMANDS)
    for verb, parser in parsers.items():
        assert parser.description, verb


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["report", "diff"])
def test_report_formats_are_the_renderers(verb: str, tmp_path, capsys) -> None:
    parser = _verb_parsers()[verb]
    assert tuple(_option(parser, "--format").choices) == FORMATS  # type: ignore[union-attr]
    trace = str(SAMPLE_TRACES / "cpu_slow_dataloader.pt.trace.json.gz")
    for fmt in FORMATS:
        out = tmp_path / f"{verb}.{fmt}"
        argv = [verb, trace, trace] if verb == "diff" else [verb, trace]
        assert main([*argv, "--format", fmt, "-o", str(out)]) == 0
        assert out.stat().st_size > 0
    capsys.readouterr()

"""The text report reads as a person would write it, on every real trace we have: no
``(1 segments``, no bracket left open or closed twice on a line, no name cut mid-word, no
``Collectives ()``, bandwidths in human units (not ``1.11e-05 GB/s``), memory holders named
by op and line (not ``<built-in method empty of type object at 0x7f…>``), and the
profiler's nameless ``process / thread`` row nowhere (issue 29)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import explorer
from explorer.analysis.critical_path import critical_path
from explorer.report import render
from tests.conftest import SAMPLE_TRACES, SHARED_TRACES, shared_trace_files

SAMPLES = sorted(p.name for p in SAMPLE_TRACES.glob("*.json.gz"))
SHARED = [p.name for p in shared_trace_files()]
TRACELENS = sorted(p.name for p in (SHARED_TRACES / "tracelens").glob("*.json.gz"))
JOBS = ["ddp_4rank_slow_input", "ddp_4rank_broadcast_chain"]

_PLURAL_OF_ONE = re.compile(r"(?<![\d.,])1 (segments|steps|ranks|findings|events|slices|calls)\b")
_SCIENTIFIC = re.compile(r"\d[eE][-+]?\d+\s*[kMGT]?B/s")
_HOLDER_FRAME = re.compile(r"<built-in (method|function)[^>]*>")


def _unbalanced(line: str) -> bool:
    pairs = {"(": ")", "[": "]"}
    open_: list[str] = []
    for ch in line:
        if ch in pairs:
            open_.append(pairs[ch])
        elif ch in ")]" and (not open_ or open_.pop() != ch):
            return True
    return bool(open_)


def problems(text: str, track_labels: list[str]) -> list[str]:
    """Every line of ``text`` that breaks one of the rules, with the rule it breaks."""
    out = []
    for line in text.splitlines():
        if _PLURAL_OF_ONE.search(line):
            out.append(f"plural of one: {line}")
        if _unbalanced(line):
            out.append(f"unbalanced brackets: {line}")
        if "Collectives ()" in line:
            out.append(f"no collective named: {line}")
        if _SCIENTIFIC.search(line):
            out.append(f"bandwidth in scientific notation: {line}")
        if "process / thread" in line:
            out.append(f"the nameless track: {line}")
        if " in " in line and " x " in line and _HOLDER_FRAME.search(line.split(" x ", 1)[1]):
            out.append(f"a memory holder named by a Python frame: {line}")
    # Where the path runs: each row's track column (the table's ``where``, up to its ``top
    # op`` column) is a whole track name, or one cut after a word and marked "…" — never
    # mid-word.
    where = text.split("Where it runs", 1)[1].splitlines()[1:] if "Where it runs" in text else []
    header = next((i for i, line in enumerate(where) if "where" in line and "top op" in line), None)
    if header is None and where:
        out.append("the 'Where it runs' table has no 'where' / 'top op' header")
    left, right = (
        (where[header].index("where"), where[header].index("top op"))
        if header is not None
        else (0, 0)
    )
    for line in where[header + 1 :] if header is not None else []:
        if not line.strip():
            break
        column = line[left:right].rstrip()
        if column in track_labels:
            continue
        head = column.split("…", 1)[0]
        whole = [lbl for lbl in track_labels if lbl.startswith(head) and len(lbl) > len(head)]
        if "…" not in column or not whole:
            out.append(f"track name cut short or unknown ({column!r}): {line}")
        elif all(lbl[len(head) - 1].isalnum() and lbl[len(head)].isalnum() for lbl in whole):
            out.append(f"track name cut mid-word ({column!r}): {line}")
    return out


def _check(path: Path) -> None:
    data = explorer.load(path).data
    text = render(data, "text")
    labels = [str(x) for x in critical_path(data, None, all_steps=True).segments["label"]]
    found = problems(text, labels)
    assert not found, "\n".join(found[:10])


def test_the_rules_catch_what_they_describe() -> None:
    """Each rule fails the line it is written against (lines from the reports before)."""
    labels = ["python3 (16717) / thread 16717 (explorer)"]

    def where_row(start: str, length: str, track: str, op: str) -> str:
        return f"  {start:>8}  {length:>6}  {track:<40}  {op}"

    header = where_row("start", "length", "where", "top op")
    bad = [
        "  Where it runs (1 segments, longest first):",
        header,
        where_row("433 µs", "5.32 s", "python3 (16717) / thread 16717 (explo", "sleep"),
        "     why:   Collectives () run on host for 179 ms with no compute alongside.",
        "broadcast     1      4 B   121 ms  60.7 ms      60.3 ms    360 µs  rank 0   1.11e-05 GB/s",
        "    other         process / thread                                         0 slices",
        "  cpu 7.09 MiB 1.19 s 2.04 MiB in 6 x <built-in method empty of type object at 0x7fb6>",
    ]
    found = problems("\n".join(bad), labels)
    for line in bad:
        if line != header:
            assert any(line in f for f in found), line
    assert any("track name cut" in f for f in found)
    good = "\n".join(
        ["  Where it runs (1 segment)", header,
         where_row("433 µs", "5.32 s", "python3 (16717) / thread 16717…", "sleep")]
    )  # fmt: skip
    assert problems(good, labels) == []
    assert problems("  Where it runs (1 segment)\n  433 µs  5.32 s  python3", labels)  # no header


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_trace_reports_read_well(name: str) -> None:
    _check(SAMPLE_TRACES / name)


@pytest.mark.parametrize("name", SHARED)
def test_shared_trace_reports_read_well(name: str, shared_traces: Path) -> None:
    _check(shared_traces / name)


@pytest.mark.slow  # real H100/MI300X models: seconds of analysis each
@pytest.mark.parametrize("name", TRACELENS)
def test_tracelens_trace_reports_read_well(name: str, shared_traces: Path) -> None:
    _check(shared_traces / "tracelens" / name)


@pytest.mark.slow  # whole jobs, each on a Dask cluster
@pytest.mark.parametrize("name", JOBS)
def test_job_reports_read_well(name: str) -> None:
    """The job report's collectives table: bus bandwidth in human units."""
    import contextlib
    import io

    from explorer.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", str(SAMPLE_TRACES / name)]) == 0
    text = out.getvalue()
    assert "bus bw" in text
    found = problems(text, [])
    assert not found, "\n".join(found[:10])

"""--fail-on rules: parsing, and evaluation on report documents of synthetic scenarios."""

from __future__ import annotations

import pytest

from explorer.errors import UsageError
from explorer.report import document
from explorer.report.fail_on import Rule, evaluate, parse
from explorer.scenarios import generate
from explorer.trace.build import trace_from_events
from explorer.trace_api import Trace


def _doc(name: str) -> dict:
    d = generate(name, steps=4, seed=0)
    t = Trace(
        trace_from_events(d["traceEvents"], {k: v for k, v in d.items() if k != "traceEvents"})
    )
    return document(t)


@pytest.fixture(scope="module")
def sync_storm() -> dict:
    return _doc("sync_storm")


def test_parse() -> None:
    assert parse("input_stall>10%") == Rule("input_stall>10%", "input_stall", ">", 10.0, True)
    assert parse(" sync_stall >= 5ms ") == Rule("sync_stall >= 5ms", "sync_stall", ">=", 5e6, False)
    assert parse("compute<50") == Rule("compute<50", "compute", "<", 50.0, True)
    assert parse("step_time>1.5s").value == 1.5e9
    assert parse("other_idle<=250us").value == 250_000


@pytest.mark.parametrize(
    "bad", ["input_stall", "input_stall=>3%", "nonsense>1%", "step_time>5%", ">5%"]
)
def test_malformed_rules_are_usage_errors(bad: str) -> None:
    with pytest.raises(UsageError):
        parse(bad)


def test_finding_rules(sync_storm: dict) -> None:
    lost = sync_storm["summary"]["time_lost_by_kind"]["sync_stall"]
    share = 100 * lost / sync_storm["summary"]["total_ns"]
    assert 5 < share < 50
    fired = evaluate([parse("sync_stall>5%")], sync_storm)
    assert len(fired) == 1 and "sync_stall" in fired[0] and f"{share:.2f}%" in fired[0]
    assert evaluate([parse("sync_stall>50%")], sync_storm) == []
    assert evaluate([parse(f"sync_stall>{lost / 1e6 * 0.9:.3f}ms")], sync_storm)
    assert evaluate([parse(f"sync_stall>{lost / 1e6 * 1.1:.3f}ms")], sync_storm) == []
    assert evaluate([parse("input_stall>0%")], sync_storm) == []  # no such finding: 0


def test_category_and_step_time_rules(sync_storm: dict) -> None:
    compute = (
        sync_storm["summary"]["breakdown"]["cuda:0"]["compute"] / sync_storm["summary"]["total_ns"]
    )
    assert evaluate([parse(f"compute<{100 * compute + 1:.1f}%")], sync_storm)
    assert evaluate([parse(f"compute<{100 * compute - 1:.1f}%")], sync_storm) == []
    fired = evaluate([parse("compute<100%"), parse("step_time>1ns")], sync_storm)
    assert len(fired) == 2 and "on cuda:0" in fired[0]


def test_clean_passes_strict_rules() -> None:
    doc = _doc("clean")
    rules = [
        parse(f"{k}>2%") for k in ("input_stall", "sync_stall", "memcpy_stall", "launch_bound")
    ]
    assert evaluate(rules, doc) == []

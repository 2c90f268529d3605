"""The detector registry: declarations are checked, and a detector can only measure the
breakdown reasons it declared (a typo is an error, not a detector that finds nothing)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from types import ModuleType

import pytest

import explorer
from explorer.analysis import breakdown
from explorer.analysis.detectors import DETECTORS, FINDING_KINDS, declared, registry
from explorer.analysis.detectors.context import Context
from explorer.analysis.findings import findings

SAMPLES = sorted((Path(__file__).resolve().parents[2] / "sample_traces").glob("*.json.gz"))


def _module(name: str, kind: str, reasons: tuple[str, ...]) -> ModuleType:
    mod = ModuleType(name)
    mod.KIND, mod.REASONS = kind, reasons
    mod.detect = lambda ctx: []
    return mod


def test_a_typo_in_a_declared_reason_is_an_error() -> None:
    with pytest.raises(ValueError, match="host_inptu"):
        declared(_module("typo", "input_stall", ("host_inptu",)))


def test_a_kind_declared_twice_is_an_error() -> None:
    a = _module("a", "sync_stall", ("host_sync",))
    b = _module("b", "sync_stall", ("sync_refill",))
    with pytest.raises(ValueError, match="sync_stall"):
        registry((a, b))


def test_measuring_an_undeclared_or_unknown_reason_is_an_error() -> None:
    ctx = Context(explorer.load(SAMPLES[0]))
    with ctx.reading(frozenset({"host_input"})):
        ctx.measure("host_input")
        with pytest.raises(ValueError, match="host_sync"):
            ctx.measure("host_sync")
    with pytest.raises(ValueError, match="host_inptu"):
        ctx.measure("host_inptu")


def test_each_detector_declares_every_reason_its_source_names() -> None:
    """Independent of the registry's own check: every string literal in a detector module
    that is a breakdown reason name must be in that module's REASONS."""
    reasons = {r for r, _ in (*breakdown.DEVICE_REASONS, *breakdown.HOST_REASONS)}
    for d in DETECTORS:
        source = inspect.getsource(inspect.getmodule(d.detect))
        literals = {
            n.value
            for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
        assert literals & reasons <= d.reasons, d.kind


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_findings_kinds_come_from_the_registry(path: Path) -> None:
    found = findings(explorer.load(path))  # every detector runs under its declaration
    assert {f.kind for f in found} <= set(FINDING_KINDS)
    assert len(FINDING_KINDS) == len(set(FINDING_KINDS)) == len(DETECTORS)

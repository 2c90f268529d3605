"""The analysis memo: declared keys, dependencies that are true, one result across threads,
and the step pattern as a setting that drops exactly what depends on it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import explorer
from explorer.analysis import memory
from explorer.analysis.attribution import slice_sources
from explorer.analysis.breakdown import breakdown, timelines
from explorer.analysis.by_source import by_source
from explorer.analysis.critical_path import critical_path
from explorer.analysis.findings import findings
from explorer.analysis.steps import steps
from explorer.errors import UsageError
from explorer.trace import memo as memo_mechanism
from explorer.trace.memo import NOT_STORED, declared, dependents, memoised

CNN = Path(__file__).resolve().parents[2] / "sample_traces" / "cpu_cnn.pt.trace.json.gz"
#: A user's step annotation in that trace: four ``forward`` ranges, not ProfilerStep#N.
PATTERN = r"^forward$"


def _everything(trace: Any) -> dict[str, Any]:
    """Every memoised analysis of ``trace``, as plain comparable data."""
    return {
        "steps": steps(trace),
        "breakdown": breakdown(trace),
        "by_source": by_source(trace),
        "sources": slice_sources(trace),
        "findings": [f.to_dict() for f in findings(trace)],
        "allocations": memory.allocations(trace),
        "timeline": memory.memory_timeline(trace),
        "critical_path": critical_path(trace).to_dict(),
    }


def _assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], pd.DataFrame):
            pd.testing.assert_frame_equal(a[k], b[k], obj=k)
        else:
            assert a[k] == b[k], k


def test_changing_the_step_pattern_gives_what_a_fresh_trace_gives() -> None:
    """The declared dependencies are true: results kept before the pattern changed never
    leak into results after it (compared with a trace that had the pattern from the start)."""
    before = explorer.load(CNN)
    default = _everything(before)
    before.use_steps(PATTERN)
    after = _everything(before)
    fresh = explorer.load(CNN)
    fresh.use_steps(PATTERN)
    _assert_same(after, _everything(fresh))
    assert len(after["steps"]) == 4 and list(after["steps"]["name"]) == ["forward"] * 4
    assert not default["steps"]["name"].eq("forward").any()
    before.use_steps(None)  # and back: the default steps again
    _assert_same(_everything(before), default)


def test_a_trace_with_other_steps_keeps_its_own_dependents_and_shares_the_rest() -> None:
    """``with_steps`` is a view: the results computed from the steps are its own, every
    other result is the first trace's (not computed again), and the first trace keeps
    all of its own."""
    from explorer.trace.source import user_frames

    trace = explorer.load(CNN).data
    default = _everything(trace)
    # the stacks parsed here too (with a stored frame_codes, nothing above needs them)
    frames = user_frames(trace)
    kept = trace.memo.names()
    view = trace.with_steps(PATTERN)
    dropped = dependents("step_pattern")
    assert {"steps", "breakdown", "findings", "critical_path"} <= dropped
    assert view.memo.names() == kept - dropped
    assert user_frames(view) is frames  # parsing stacks again would be wasted
    assert view.step_pattern == PATTERN and trace.step_pattern is None
    assert list(steps(view)["name"]) == ["forward"] * 4
    _assert_same(_everything(trace), default)  # the first trace is unchanged
    assert trace.memo.names() == kept
    assert trace.with_steps(None) is trace  # its own options: itself
    assert view.with_steps(PATTERN, "innermost").step_nesting == "innermost"


def test_step_options_are_a_value_without_a_setter() -> None:
    """A bad pattern or nesting fails where the options are made and changes nothing; the
    model has no setter for them (the façade's use_steps is the one setter)."""
    trace = explorer.load(CNN).data
    bd = breakdown(trace)
    with pytest.raises(UsageError, match="not a valid regular expression"):
        trace.with_steps("(")
    with pytest.raises(UsageError, match="innermost"):
        trace.with_steps(PATTERN, "middle")
    with pytest.raises(AttributeError):
        trace.step_pattern = PATTERN  # type: ignore[misc]
    assert trace.step_pattern is None
    assert breakdown(trace) is bd


def test_threads_share_one_result() -> None:
    """Eight threads asking at once all get the one kept object (none computes its own)."""
    trace = explorer.load(CNN)
    got: list[Any] = []
    start = threading.Barrier(8)

    def ask() -> None:
        start.wait()
        got.append(timelines(trace))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(g is got[0] for g in got)


def test_a_result_computed_across_a_setting_change_is_not_kept() -> None:
    trace = explorer.load(CNN)

    def produce() -> str:
        trace.memo.invalidate("step_pattern")  # what this computes from is dropped meanwhile
        return "stale"

    assert trace.memo.compute("steps", ("x",), produce) == "stale"
    assert trace.memo.peek("steps", ("x",)) is None


def test_keys_are_declared() -> None:
    trace = explorer.load(CNN)
    with pytest.raises(KeyError, match="not a declared memo key"):
        trace.memo.compute("breakdwon", (), lambda: 1)
    with pytest.raises(KeyError):
        trace.memo.peek("slice_source")
    assert trace.memo.peek("slice_sources") is None
    slice_sources(trace)
    assert trace.memo.peek("slice_sources") is slice_sources(trace)
    assert set(dependents("user_frames")) <= set(declared())


def test_every_key_the_package_declares_depends_on_declared_names() -> None:
    """Keys are declared where their analyses are defined; once every module is imported,
    each dependency names a declared key or option, and a misspelt one is refused."""
    import importlib
    import pkgutil

    for info in pkgutil.walk_packages(explorer.__path__, "explorer."):
        if not info.name.startswith(("explorer.ui", "explorer.collect", "explorer.__main__")):
            importlib.import_module(info.name)
    memo_mechanism.check()
    keys = declared()
    assert {"steps", "breakdown", "findings", "critical_path", "user_frames"} <= set(keys)
    assert keys["steps"] == ("step_pattern", "step_nesting")
    assert "breakdown" in dependents("step_nesting") and "user_frames" not in dependents(
        "step_pattern"
    )

    @memoised("test_misspelt_dependency", depends_on=("launchr",))
    def misspelt(trace: Any) -> int:
        return 1

    try:
        assert misspelt(explorer.load(CNN).data) == 1
        with pytest.raises(ValueError, match="depends on undeclared"):
            memo_mechanism.check()
    finally:  # the registry is the process's: leave no bad key for the tests after this
        del memo_mechanism._KEYS["test_misspelt_dependency"]
        memo_mechanism._closure.clear()
    with pytest.raises(ValueError, match="declared twice"):
        memoised("steps", depends_on=("step_pattern",))


def test_results_handed_over_are_kept_once_and_stored(tmp_path: Path) -> None:
    """What another process computed for the same tables (:meth:`Memo.kept` there) is
    kept here as if computed here (and stored beside the tables), never over a result
    already kept, and not at all when an invalidation came since the work began."""
    import shutil

    source = CNN.with_name("cpu_slow_dataloader.pt.trace.json.gz")  # a trace with findings
    path = tmp_path / source.name
    shutil.copy(source, path)
    computed = explorer.load(path, use_cache=False).data  # as another process, storing nothing
    found = findings(computed)
    assert found
    breakdown(computed)
    handed = computed.memo.kept(["findings", "breakdown", "critical_path"])
    assert {name for name, _ in handed} == {"findings", "breakdown"}  # what was computed

    trace = explorer.load(path).data
    (options,) = [o for name, o in handed if name == "findings"]
    assert trace.memo.store is not None
    assert trace.memo.store.load("findings", options) is NOT_STORED
    before = trace.memo.generation
    trace.memo.invalidate("step_pattern")
    trace.memo.adopt(handed, before)  # stale: nothing kept
    assert trace.memo.peek("findings") is None

    mine = breakdown(trace)
    trace.memo.adopt(handed, trace.memo.generation)
    (kept_findings,) = [v for (name, _), v in handed.items() if name == "findings"]
    assert trace.memo.peek("findings", options) is kept_findings  # kept: not computed again
    assert [f.to_dict() for f in findings(trace)] == [f.to_dict() for f in found]
    assert breakdown(trace) is mine  # a result already kept stays
    reopened = explorer.load(path).data
    stored = reopened.memo.store
    assert stored is not None
    assert [f.to_dict() for f in stored.load("findings", options)] == [f.to_dict() for f in found]

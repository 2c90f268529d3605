"""``explorer.collect`` is one object, whatever was imported first (issue: it used to be a
function until a submodule import rebound the name to a module)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHECK = """
import inspect, pydoc, sys
import explorer
assert "torch" not in sys.modules, "import explorer must not import torch"
{first}
obj = explorer.collect
import explorer.collect.session, explorer.collect.trace_writer
from explorer.collect import neuron_test_backend, Collector
assert explorer.collect is obj is sys.modules["explorer.collect"], (explorer.collect, obj)
assert callable(obj)
params = list(inspect.signature(obj).parameters)
assert params == ["out_dir", "options"], params
doc = pydoc.render_doc(obj)
assert "explorer.collect(out_dir" in doc, doc[:400]
c = obj("{out}", sampler_interval_s=None)
assert isinstance(c, Collector), type(c)
print("ok")
"""


@pytest.mark.parametrize(
    "first", ["pass", "import explorer.collect.session", "from explorer.collect import annotate"]
)
def test_explorer_collect_is_one_object_whatever_is_imported_first(
    first: str, tmp_path: Path
) -> None:
    code = CHECK.format(first=first, out=tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]

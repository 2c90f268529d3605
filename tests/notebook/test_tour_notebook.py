"""docs/explorer_tour.ipynb runs top to bottom as Jupyter runs it (nbclient driving a
real ipykernel), and every cell shows what it is there to show.

Each code cell declares what it shows in its tags: ``stream`` (printed text), ``html``
(a rich display or a DataFrame), ``figure`` (a PNG that is not blank), ``html-or-note``
(the real shared trace, or the note saying it is absent), ``setup`` (nothing more). A
cell that errors, or shows nothing of what it declares, fails the test; so does a display
that lost the findings' lines or the job's straggler.
"""

from __future__ import annotations

import base64
import io
import sys
import time
from html import escape
from typing import Any

import nbclient
import nbformat
import numpy as np
import pytest
from jupyter_client.manager import KernelManager
from matplotlib.image import imread

from tests.conftest import ROOT, SHARED_TRACES

NOTEBOOK = ROOT / "docs" / "explorer_tour.ipynb"
#: Per cell: the demo's training (torch's import, three steps) and the job's Dask
#: cluster take the longest on a loaded 2-core machine.
CELL_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def executed() -> tuple[Any, float]:
    """The notebook after a run, and how long the run took."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    km = KernelManager(kernel_name="python3")
    km.kernel_spec.argv[0] = sys.executable  # this interpreter (the venv's), not PATH's python
    client = nbclient.NotebookClient(
        nb, km=km, timeout=CELL_TIMEOUT_S, resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    t0 = time.monotonic()
    try:
        client.execute()
    finally:
        if km.has_kernel:  # a kernel we start is ours to stop
            km.shutdown_kernel(now=True)
    return nb, time.monotonic() - t0


def _code_cells(nb: Any) -> list[Any]:
    return [c for c in nb.cells if c.cell_type == "code"]


def _html(cell: Any) -> str:
    return "".join(str(o.get("data", {}).get("text/html", "")) for o in cell.outputs)


def _pngs(cell: Any) -> list[np.ndarray]:
    return [
        imread(io.BytesIO(base64.b64decode(o["data"]["image/png"])), format="png")
        for o in cell.outputs
        if "image/png" in o.get("data", {})
    ]


def _stream(cell: Any) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def _cell(nb: Any, first_line: str) -> Any:
    (cell,) = [c for c in _code_cells(nb) if c.source.splitlines()[0].startswith(first_line)]
    return cell


def _drawn(png: np.ndarray) -> bool:
    """Not blank: the image has ink (pixels well off the background) in some quantity."""
    rgb = png[..., :3]
    ink = np.abs(rgb - rgb[0, 0]).sum(axis=-1) > 0.3
    return float(ink.mean()) > 0.01


def test_every_cell_runs_and_shows_what_it_declares(executed: tuple[Any, float]) -> None:
    nb, seconds = executed
    cells = _code_cells(nb)
    assert len(cells) >= 12
    for cell in cells:
        tags = set(cell.metadata.get("tags", []))
        assert tags, f"cell declares nothing: {cell.source[:60]!r}"
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.source
        if "stream" in tags:
            assert _stream(cell).strip(), cell.source
        if "html" in tags:
            assert _html(cell).strip(), cell.source
        if "figure" in tags:
            pngs = _pngs(cell)
            assert len(pngs) == 1 and _drawn(pngs[0]), cell.source
        if "html-or-note" in tags:
            if SHARED_TRACES.is_dir():
                assert "Step time by category" in _html(cell)
                assert len(_pngs(cell)) == 1 and _drawn(_pngs(cell)[0])
            else:
                assert "Skipped:" in _stream(cell)
    print(f"the tour ran in {seconds:.1f} s")


def test_the_demo_shows_its_findings_at_its_own_lines(executed: tuple[Any, float]) -> None:
    nb, _ = executed
    shown = _html(_cell(nb, "trace = explorer.load(demo_path)"))
    assert "<svg" in shown and "Step time by category — host" in shown
    assert "Findings (" in shown and "Top source lines" in shown
    found = _html(_cell(nb, "found = trace.findings()"))
    # The demo's dataset decodes slowly on purpose: an input stall, at the script's lines.
    assert "[input_stall]" in found
    assert "demo_train.py:" in found


def test_the_diff_and_the_job_name_what_changed_and_who_is_late(
    executed: tuple[Any, float],
) -> None:
    nb, _ = executed
    diff = _html(_cell(nb, "before = explorer.load("))
    assert "<td>input_stall</td><td>appeared</td>" in diff
    job = _html(_cell(nb, "job = explorer.load_job("))
    assert "rank 2 (straggler)" in job
    assert escape("make_job_traces.py:60 (__getitem__)") in job

"""A directory stands for the traces a user captured — never for Explorer's own outputs
written into it, nor for hidden temporary files a killed writer left behind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import explorer
from explorer.cli.main import main
from explorer.readers.rank_dir import trace_files
from tests.conftest import SAMPLE_TRACES


def test_outputs_written_into_the_directory_do_not_change_what_it_means(
    tmp_path: Path, capsys
) -> None:
    trace = tmp_path / "cnn.pt.trace.json.gz"
    shutil.copyfile(SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz", trace)
    d = str(tmp_path)
    assert main(["export", d, "-o", str(tmp_path / "x.json"), "--no-results"]) == 0
    assert main(["export", d, "-o", str(tmp_path / "x.json.gz"), "--no-results"]) == 0
    assert main(["report", d, "-f", "json", "-o", str(tmp_path / "r.json")]) == 0
    assert main(["diff", d, str(trace), "-f", "json", "-o", str(tmp_path / "d.json")]) == 0
    # What a SIGKILLed collector or writer leaves: hidden, complete-looking traces.
    shutil.copyfile(
        SAMPLE_TRACES / "cpu_transformer.pt.trace.json.gz", tmp_path / ".t.cycle0.json.gz"
    )
    (tmp_path / ".explorer-tmp-1-ab.json").write_bytes((tmp_path / "x.json").read_bytes())
    capsys.readouterr()
    assert trace_files(tmp_path) == [trace]
    assert main(["info", d, "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["path"] == str(trace) and "holds" not in out.err
    # Named explicitly, an export is a trace like any other.
    again = explorer.load(tmp_path / "x.json", use_cache=False)
    assert len(again.slices) == len(explorer.load(trace, use_cache=False).slices)


def test_traces_inside_hidden_folders_are_not_found(tmp_path: Path) -> None:
    (tmp_path / ".cache").mkdir()
    (tmp_path / "run").mkdir()
    shutil.copyfile(SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz", tmp_path / ".cache" / "a.json.gz")
    shutil.copyfile(SAMPLE_TRACES / "cpu_cnn.pt.trace.json.gz", tmp_path / "run" / "b.json.gz")
    assert trace_files(tmp_path) == [tmp_path / "run" / "b.json.gz"]

"""`sandfleet runs --html` and `show RUN --html` through the CLI's own entry point."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sandfleet.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "trajectories" / "sales_by_region.jsonl"


def test_runs_html_writes_the_list_and_every_run_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("run-a", "run-b"):
        (tmp_path / name).mkdir()
        shutil.copy(EXAMPLE, tmp_path / name / "trajectory.jsonl")
    (tmp_path / "not-a-run").mkdir()

    assert main(["runs", "--html", "--results-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "index.html")
    index = (tmp_path / "index.html").read_text()
    assert index.count('/trajectory.html">') == 2
    run_page = (tmp_path / "run-a" / "trajectory.html").read_text()
    assert '<a href="../index.html">&larr; all runs</a>' in run_page


def test_show_html_of_a_file_that_is_no_trajectory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bogus = tmp_path / "bogus.jsonl"
    bogus.write_text("[1, 2]\n{}\n")
    assert main(["show", str(bogus), "--html"]) == 2
    err = capsys.readouterr().err
    assert "cannot write the page" in err and "Traceback" not in err

"""The local run index: which folders are runs, their order, and what `show RUN` resolves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandfleet.runs.index import RunNotFoundError, list_runs, resolve_run
from sandfleet.runs.outcomes import TaskOutcome, write_result_file


def finished_run(results: Path, run_id: str, task_id: str, finished_at: str) -> Path:
    folder = results / run_id
    outcome = TaskOutcome(id=task_id, stop_reason="submitted", turns=2, finished_at=finished_at)
    write_result_file(folder / "result.json", outcome)
    (folder / "trajectory.jsonl").write_text('{"kind": "meta"}\n')
    return folder


def test_runs_are_listed_newest_first_with_unfinished_runs_dated_by_their_start(
    tmp_path: Path,
) -> None:
    finished_run(tmp_path, "a-20261126T100000Z", "a", "2026-11-26T10:00:05+00:00")
    finished_run(tmp_path, "b-20261126T120000Z", "b", "2026-11-26T12:00:09+00:00")
    running = tmp_path / "a-20261126T110000Z"
    running.mkdir()
    meta = {"kind": "meta", "task_id": "a", "started_at": "2026-11-26T11:00:00.5+00:00"}
    (running / "trajectory.jsonl").write_text(json.dumps(meta) + "\n")
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / "stray.txt").write_text("x")

    runs = list_runs(tmp_path)

    assert [run.run_id for run in runs] == [
        "b-20261126T120000Z",
        "a-20261126T110000Z",
        "a-20261126T100000Z",
    ]
    assert runs[1].outcome is None and runs[1].task_id == "a"
    assert runs[1].to_record()["stop_reason"] is None
    assert runs[0].to_record()["submitted"] is True


def test_a_run_is_found_by_id_task_prefix_or_path_and_ambiguity_is_an_error(
    tmp_path: Path,
) -> None:
    old = finished_run(tmp_path, "sales-20261126T100000Z", "sales", "2026-11-26T10:00:05+00:00")
    new = finished_run(tmp_path, "sales-20261126T120000Z", "sales", "2026-11-26T12:00:05+00:00")
    trajectory = "trajectory.jsonl"

    assert resolve_run(tmp_path, old.name) == old / trajectory
    assert resolve_run(tmp_path, "sales") == new / trajectory  # a task id: its newest run
    assert resolve_run(tmp_path, "sales-20261126T10") == old / trajectory
    assert resolve_run(tmp_path, str(old)) == old / trajectory
    assert resolve_run(tmp_path, str(old / trajectory)) == old / trajectory
    with pytest.raises(RunNotFoundError, match="matches 2 runs"):
        resolve_run(tmp_path, "sales-2026")
    with pytest.raises(RunNotFoundError, match="no run 'nope'"):
        resolve_run(tmp_path, "nope")

"""Batch bookkeeping: reading the task list, the append-only results log, and what resume skips."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from sandfleet.cli.batch_files import (
    BatchFileError,
    ResultsLog,
    ids_to_skip,
    latest_outcomes,
    read_task_lines,
)
from sandfleet.runs.folders import run_id, task_folder_name
from sandfleet.runs.outcomes import RunFailure, TaskOutcome


def outcome(task_id: str, stop_reason: str = "submitted", answer: str | None = "42") -> TaskOutcome:
    return TaskOutcome(id=task_id, stop_reason=stop_reason, answer=answer, turns=2, finished_at="t")


def test_task_lines_are_read_skipping_blank_lines(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "x"}\n\n{"id": "b", "task_dir": "d"}\n')

    assert [line["id"] for line in read_task_lines(tasks)] == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"id": "a"}\n{"id": \n', r"tasks.jsonl:2: not valid JSON"),
        ('["a"]\n', "expected a JSON object"),
        ('{"prompt": "p"}\n', "needs a non-empty string id"),
        ('{"id": "a"}\n{"id": "a"}\n', "already used on line 1"),
    ],
)
def test_a_malformed_task_list_is_reported_with_its_line(
    tmp_path: Path, text: str, message: str
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(text)

    with pytest.raises(BatchFileError, match=message):
        read_task_lines(tasks)


def test_appended_outcomes_load_back_in_order(tmp_path: Path) -> None:
    log = ResultsLog(tmp_path / "out" / "results.jsonl")

    log.append(outcome("a"))
    log.append(outcome("b", "max_turns"))

    loaded = log.load()
    assert [(o.id, o.stop_reason) for o in loaded] == [("a", "submitted"), ("b", "max_turns")]
    assert loaded[0] == outcome("a")


def test_a_missing_log_is_an_empty_one(tmp_path: Path) -> None:
    assert ResultsLog(tmp_path / "none.jsonl").load() == []


def test_a_line_torn_by_a_crash_is_cut_off_so_appending_resumes_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    log = ResultsLog(path)
    log.append(outcome("a"))
    with path.open("a") as file:
        file.write('{"id": "b", "stop_re')

    assert [o.id for o in log.load()] == ["a"]
    log.append(outcome("c"))
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == ["a", "c"]


def test_a_last_line_missing_only_its_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(outcome("a").to_record()))
    log = ResultsLog(path)

    assert [o.id for o in log.load()] == ["a"]
    log.append(outcome("b"))
    assert [o.id for o in log.load()] == ["a", "b"]


def test_a_corrupt_line_in_the_middle_is_an_error_not_silently_dropped(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(
        '{"id": "a", "stop_reason": "submitted"}\nnot json\n{"id": "b", "stop_reason": "x"}\n'
    )

    with pytest.raises(BatchFileError, match=r"results.jsonl:2"):
        ResultsLog(path).load()


def test_records_from_a_newer_version_with_extra_keys_still_load(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text('{"id": "a", "stop_reason": "submitted", "future_field": 1}\n')

    assert ResultsLog(path).load() == [TaskOutcome(id="a", stop_reason="submitted")]


def test_resume_skips_every_recorded_id_and_the_latest_line_per_id_wins() -> None:
    history = [outcome("a", "model_error"), outcome("b", "max_turns"), outcome("a", "submitted")]

    latest = latest_outcomes(history)

    assert latest["a"].stop_reason == "submitted"
    assert ids_to_skip(latest, retry_failed=False) == {"a", "b"}


def test_retry_failed_runs_failed_tasks_again_but_not_finished_ones() -> None:
    latest = latest_outcomes(
        [
            outcome("ok"),
            outcome("out_of_turns", "max_turns"),
            outcome("endpoint", "model_error"),
            outcome("launch", RunFailure.LAUNCH_FAILED),
            outcome("bad_input", RunFailure.INVALID_TASK),
            outcome("lost", "sandbox_lost"),
        ]
    )

    assert ids_to_skip(latest, retry_failed=True) == {"ok", "out_of_turns"}


def test_task_ids_become_distinct_safe_folder_names() -> None:
    assert task_folder_name("math-001") == "math-001"
    assert task_folder_name("a/b").startswith("a_b-")
    assert task_folder_name("a/b") != task_folder_name("a_b")
    assert task_folder_name("..") != ".."
    assert "/" not in task_folder_name("../../etc/passwd")


def test_every_bad_line_is_reported_at_once_with_its_number(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        '{"id": "a", "prompt": "x"}\n{"id": \n[1]\n{"id": "a"}\n{"prompt": "p"}\n{"id": "b"}\n'
    )

    with pytest.raises(BatchFileError) as raised:
        read_task_lines(tasks)

    message = str(raised.value)
    assert message.startswith(f"4 bad lines in {tasks}:")
    for number, problem in [
        (2, "not valid JSON"),
        (3, "expected a JSON object"),
        (4, "id 'a' already used on line 1"),
        (5, "needs a non-empty string id"),
    ]:
        assert f"tasks.jsonl:{number}: {problem}" in message
    assert ":6:" not in message


def test_batch_exit_codes_say_what_went_wrong() -> None:
    from sandfleet.cli.batch import batch_exit_code

    model_errors = [outcome("a", "model_error"), outcome("b", "model_error")]
    assert batch_exit_code(model_errors, total=2, stopped=False) == 3
    assert batch_exit_code(model_errors[:1], total=5, stopped=True) == 3
    assert batch_exit_code([*model_errors, outcome("c")], total=3, stopped=False) == 1
    assert batch_exit_code([outcome("a"), outcome("b")], total=2, stopped=False) == 0
    # Every task submitted, one without an answer: its own code, never success.
    no_answer = [outcome("a"), outcome("b", answer=None)]
    assert batch_exit_code(no_answer, total=2, stopped=False) == 5
    assert batch_exit_code([outcome("a", answer="  \n")], total=1, stopped=False) == 5
    assert batch_exit_code([*no_answer, outcome("c", "max_turns")], total=3, stopped=False) == 1
    assert batch_exit_code([outcome("a")], total=2, stopped=False) == 130


def test_run_ids_are_the_task_folder_and_the_utc_start_second() -> None:
    started = datetime.datetime(2026, 11, 26, 21, 45, 1, 900, tzinfo=datetime.UTC)
    assert run_id("01_sales_by_region", started) == "01_sales_by_region-20261126T214501Z"
    assert run_id("01_sales_by_region", started, 1) == "01_sales_by_region-20261126T214501Z-2"
    assert run_id("a b", started).startswith("a_b-")  # unsafe ids get the safe folder name

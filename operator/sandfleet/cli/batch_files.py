"""The batch's two JSON Lines files: the task list it reads and the results log it appends to."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sandfleet.errors import SandfleetError
from sandfleet.json_lines import JsonLinesLog
from sandfleet.runs.outcomes import TaskOutcome


class BatchFileError(SandfleetError):
    """The task list (or the results log being resumed) is not valid JSON Lines."""


def read_task_lines(path: Path) -> list[dict[str, Any]]:
    """Every task line of TASKS.jsonl, checked for what bookkeeping needs: an object with a
    unique string id. Every bad line is reported at once (one error naming them all), so a
    file is fixed in one go. Everything else is checked per task, so one bad task fails alone."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise BatchFileError(f"cannot read {path}: {error}") from error
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        problem = _line_problem(line, number, seen)
        if isinstance(problem, str):
            problems.append(f"{path}:{number}: {problem}")
        else:
            records.append(problem)
    if len(problems) == 1:
        raise BatchFileError(problems[0])
    if problems:
        listed = "\n  ".join(problems)
        raise BatchFileError(f"{len(problems)} bad lines in {path}:\n  {listed}")
    return records


def _line_problem(line: str, number: int, seen: dict[str, int]) -> dict[str, Any] | str:
    """The line's record, or what is wrong with it (records its id in `seen`)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        return f"not valid JSON ({error.msg})"
    if not isinstance(record, dict):
        return "expected a JSON object"
    task_id = record.get("id")
    if not isinstance(task_id, str) or not task_id:
        return "needs a non-empty string id"
    if task_id in seen:
        return f"id {task_id!r} already used on line {seen[task_id]}"
    seen[task_id] = number
    return record


class ResultsLog(JsonLinesLog[TaskOutcome]):
    """--out: one JSON line per finished task, appended and flushed to disk as each finishes,
    so a crash loses at most the tasks still running (they run again on resume)."""

    what = "a result line"
    error = BatchFileError

    def parse(self, record: Any) -> TaskOutcome:
        return TaskOutcome.from_record(record)

    def record(self, item: TaskOutcome) -> dict[str, Any]:
        return item.to_record()


def latest_outcomes(outcomes: Iterable[TaskOutcome]) -> dict[str, TaskOutcome]:
    """The last recorded outcome per id (a retried task appends a newer line)."""
    latest: dict[str, TaskOutcome] = {}
    for outcome in outcomes:
        latest[outcome.id] = outcome
    return latest


def ids_to_skip(latest: Mapping[str, TaskOutcome], *, retry_failed: bool) -> set[str]:
    """Ids a resumed batch does not run again: all recorded ones, or only the ones that did
    not fail when retry_failed is set."""
    if not retry_failed:
        return set(latest)
    return {task_id for task_id, outcome in latest.items() if not outcome.failed}

"""The batch's two JSON Lines files: the task list it reads and the results log it appends to."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sandfleet.cli.results import TaskOutcome
from sandfleet.errors import SandfleetError


class BatchFileError(SandfleetError):
    """The task list (or the results log being resumed) is not valid JSON Lines."""


def read_task_lines(path: Path) -> list[dict[str, Any]]:
    """Every task line of TASKS.jsonl, checked for what bookkeeping needs: an object with a
    unique string id. Everything else is checked per task, so one bad task fails alone."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise BatchFileError(f"cannot read {path}: {error}") from error
    records: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise BatchFileError(f"{path}:{number}: not valid JSON ({error.msg})") from error
        if not isinstance(record, dict):
            raise BatchFileError(f"{path}:{number}: expected a JSON object")
        task_id = record.get("id")
        if not isinstance(task_id, str) or not task_id:
            raise BatchFileError(f"{path}:{number}: needs a non-empty string id")
        if task_id in seen:
            raise BatchFileError(
                f"{path}:{number}: id {task_id!r} already used on line {seen[task_id]}"
            )
        seen[task_id] = number
        records.append(record)
    return records


class ResultsLog:
    """--out: one JSON line per finished task, appended and flushed to disk as each finishes,
    so a crash loses at most the tasks still running (they run again on resume)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> list[TaskOutcome]:
        """Every recorded outcome, oldest first. A torn last line (the process died while
        writing it) is cut off the file so the next append starts on a clean line."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as error:
            raise BatchFileError(f"cannot read {self.path}: {error}") from error
        outcomes: list[TaskOutcome] = []
        offset = 0
        lines = data.split(b"\n")
        for index, line in enumerate(lines):
            is_last = index == len(lines) - 1
            if line.strip():
                try:
                    outcomes.append(TaskOutcome.from_record(json.loads(line)))
                except (ValueError, TypeError, AttributeError) as error:
                    if not is_last:
                        raise BatchFileError(
                            f"{self.path}:{index + 1}: not a result line ({error})"
                        ) from error
                    self._truncate(offset)
                    break
            offset += len(line) + 1
        else:
            if data and not data.endswith(b"\n"):
                # A complete record without its newline: finish the line.
                with self.path.open("ab") as log:
                    log.write(b"\n")
        return outcomes

    def _truncate(self, size: int) -> None:
        with self.path.open("r+b") as log:
            log.truncate(size)

    def append(self, outcome: TaskOutcome) -> None:
        """Append one line and fsync it (blocking: call it from a worker thread)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(outcome.to_record(), ensure_ascii=False) + "\n"
        # One write() of the whole line: concurrent appends never interleave inside a line.
        with self.path.open("a", encoding="utf-8") as log:
            log.write(line)
            log.flush()
            os.fsync(log.fileno())


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

"""The local runs under a results folder: what `sandfleet runs` lists and `show` resolves.

Each run has its own folder <results-dir>/<run-id>/ holding trajectory.jsonl and, once it
ended, result.json. A folder with neither is not a run.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path
from typing import Any

from sandfleet.errors import SandfleetError
from sandfleet.runs.folders import RESULT_FILE, TRAJECTORY_FILE
from sandfleet.runs.outcomes import TaskOutcome


class RunNotFoundError(SandfleetError):
    """No run, or more than one, answers to the name given."""


@dataclasses.dataclass(frozen=True, slots=True)
class RunEntry:
    run_id: str
    folder: Path
    task_id: str
    when: datetime.datetime | None
    """When the run finished (result.json), else when it started (the trajectory's meta)."""
    outcome: TaskOutcome | None
    """None for a run without result.json (still running, or killed hard)."""

    @property
    def trajectory(self) -> Path:
        return self.folder / TRAJECTORY_FILE

    def to_record(self) -> dict[str, Any]:
        outcome = self.outcome
        return {
            "run_id": self.run_id,
            "task_id": self.task_id,
            "when": self.when.isoformat() if self.when else None,
            "stop_reason": outcome.stop_reason if outcome else None,
            "submitted": outcome.submitted if outcome else False,
            "status": outcome.status if outcome else None,
            "answer": outcome.answer if outcome else None,
            "turns": outcome.turns if outcome else None,
            "total_time_s": outcome.total_time_s if outcome else None,
            "folder": str(self.folder),
            "trajectory": str(self.trajectory) if self.trajectory.exists() else None,
        }


def list_runs(results_dir: Path) -> list[RunEntry]:
    """Every run folder under results_dir, newest first (blocking: reads files)."""
    if not results_dir.is_dir():
        return []
    entries = [entry for folder in results_dir.iterdir() if (entry := read_run(folder)) is not None]
    oldest = datetime.datetime.min.replace(tzinfo=datetime.UTC)
    return sorted(entries, key=lambda entry: (entry.when or oldest, entry.run_id), reverse=True)


def read_run(folder: Path) -> RunEntry | None:
    """The run recorded in folder, or None when the folder holds no run."""
    outcome = TaskOutcome.read(folder / RESULT_FILE)
    meta = _first_record(folder / TRAJECTORY_FILE)
    if outcome is None and meta is None:
        return None
    if outcome is not None:
        task_id, when = outcome.id, _parse_time(outcome.finished_at)
    else:
        assert meta is not None
        task_id, when = str(meta.get("task_id") or "?"), _parse_time(meta.get("started_at"))
    return RunEntry(folder.name, folder, task_id, when, outcome)


def resolve_run(results_dir: Path, name: str) -> Path:
    """The trajectory file `name` means: a trajectory file, a run folder, a run id under
    results_dir, a task id (its newest run), or a unique prefix of a run id. Raises
    RunNotFoundError saying why not."""
    path = Path(name)
    if path.is_file():
        return path
    if path.is_dir() and (path / TRAJECTORY_FILE).exists():
        return path / TRAJECTORY_FILE
    runs = list_runs(results_dir)
    exact = [run for run in runs if run.run_id == name]
    newest_of_task = [run for run in runs if run.task_id == name][:1]  # runs: newest first
    matches = exact or newest_of_task or [run for run in runs if run.run_id.startswith(name)]
    if not matches:
        raise RunNotFoundError(
            f"no run {name!r} in {results_dir} (list them with `sandfleet runs`)"
        )
    if len(matches) > 1:
        shown = ", ".join(run.run_id for run in matches[:5])
        more = f" and {len(matches) - 5} more" if len(matches) > 5 else ""
        raise RunNotFoundError(f"{name!r} matches {len(matches)} runs: {shown}{more}")
    run = matches[0]
    if not run.trajectory.exists():
        raise RunNotFoundError(f"run {run.run_id} has no {TRAJECTORY_FILE} in {run.folder}")
    return run.trajectory


def _first_record(path: Path) -> dict[str, Any] | None:
    try:
        with path.open(encoding="utf-8") as lines:
            record = json.loads(lines.readline())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("kind") == "meta" else None


def _parse_time(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)

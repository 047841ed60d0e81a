"""What a run came to: TaskOutcome, written as its folder's result.json and as a batch line.

The exit code each outcome means is the CLI's (sandfleet.cli.exit_codes).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sandfleet.agent import AgentResult, StopReason
from sandfleet.agent.results import SUBMITTED_NO_ANSWER
from sandfleet.runs.folders import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, TRAJECTORY_FILE


class RunFailure(enum.StrEnum):
    """Stop reasons added for runs that never reached the agent loop."""

    INVALID_TASK = "invalid_task"
    """The task folder, prompt file or batch line could not be loaded."""
    LAUNCH_FAILED = "launch_failed"
    """The sandbox could not be started."""
    INTERNAL_ERROR = "internal_error"
    """An unexpected exception (a bug); the error field holds its text."""


NO_ANSWER = SUBMITTED_NO_ANSWER
"""The status of a run that called submit without an answer (the CLI exits 5)."""


# Runs that ended because something broke, as opposed to the model finishing or running out
# of turns or context; the batch progress bar counts these as failed.
FAILED_STOP_REASONS = frozenset(
    {
        StopReason.MODEL_ERROR,
        StopReason.SANDBOX_LOST,
        StopReason.CANCELLED,
        *RunFailure,
    }
)


@dataclasses.dataclass(frozen=True, slots=True)
class TaskOutcome:
    """What one task came to: written as result.json and as one line of a batch's --out file."""

    id: str
    stop_reason: str
    """A StopReason value or a RunFailure value."""
    answer: str | None = None
    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_time_s: float = 0.0
    tool_time_s: float = 0.0
    wall_time_s: float = 0.0
    """The agent loop's own time (as AgentResult reports it)."""
    total_time_s: float = 0.0
    """What the user waited: sandbox start, the loop, copying outputs back."""
    output_files: tuple[str, ...] = ()
    """Paths of the copied-back output files, relative to the output folder."""
    error: str | None = None
    model: str | None = None
    copy_back: dict[str, Any] | None = None
    """What copying output/ back did (files, bytes, skipped entries, truncated); None when
    nothing was copied back (see sandfleet.sandbox.copy_back.CopyReport.to_record)."""
    results_dir: str | None = None
    """The task's folder: output/, trajectory.jsonl and result.json live there."""
    trajectory: str | None = None
    finished_at: str = ""
    """ISO 8601 UTC time the outcome was recorded."""
    run_id: str | None = None
    """The run's own id, the name of its folder (<task-id>-<UTC time>[-n]); None for a task
    that never got a folder (an invalid batch line)."""

    @property
    def submitted(self) -> bool:
        return self.stop_reason == StopReason.SUBMITTED

    @property
    def answered(self) -> bool:
        """Whether there is an answer: the answer file's content, or the model's last text."""
        return bool(self.answer and self.answer.strip())

    @property
    def status(self) -> str:
        """The stop reason, except `submitted_no_answer` for a submit without an answer."""
        return NO_ANSWER if self.submitted and not self.answered else self.stop_reason

    @property
    def failed(self) -> bool:
        return self.stop_reason in FAILED_STOP_REASONS

    def to_record(self) -> dict[str, Any]:
        record = dataclasses.asdict(self)
        record["output_files"] = list(self.output_files)
        record["status"] = self.status  # derived: from_record ignores it
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> TaskOutcome:
        """Read a record back, ignoring keys this version does not know (forward compatible)."""
        known = {field.name for field in dataclasses.fields(cls)}
        values = {key: value for key, value in record.items() if key in known}
        values["output_files"] = tuple(values.get("output_files") or ())
        return cls(**values)

    @classmethod
    def read(cls, path: Path) -> TaskOutcome | None:
        """A run folder's result.json; None when it is missing, unreadable or not a record
        (a run still going, or one cut off before it wrote its result)."""
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            return cls.from_record(record) if isinstance(record, Mapping) else None
        except (OSError, ValueError, TypeError):
            return None

    @classmethod
    def from_agent_result(
        cls,
        result: AgentResult,
        *,
        model: str | None,
        results_dir: Path,
        output_files: list[str],
        total_time_s: float,
        error: str | None = None,
        copy_back: dict[str, Any] | None = None,
    ) -> TaskOutcome:
        trajectory = result.trajectory_path or results_dir / TRAJECTORY_FILE
        return cls(
            id=result.task_id,
            stop_reason=str(result.stop_reason),
            answer=result.answer,
            turns=result.turns,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            model_time_s=round(result.model_time_s, 3),
            tool_time_s=round(result.tool_time_s, 3),
            wall_time_s=round(result.wall_time_s, 3),
            total_time_s=round(total_time_s, 3),
            output_files=tuple(output_files),
            error=result.error or error,
            model=model,
            copy_back=copy_back,
            results_dir=str(results_dir),
            trajectory=str(trajectory),
            finished_at=utc_now(),
            run_id=results_dir.name,
        )

    @classmethod
    def failure(
        cls,
        task_id: str,
        reason: RunFailure | StopReason,
        error: str,
        *,
        model: str | None = None,
        results_dir: Path | None = None,
        total_time_s: float = 0.0,
    ) -> TaskOutcome:
        return cls(
            id=task_id,
            stop_reason=str(reason),
            error=error,
            model=model,
            results_dir=str(results_dir) if results_dir else None,
            total_time_s=round(total_time_s, 3),
            finished_at=utc_now(),
            run_id=results_dir.name if results_dir else None,
        )


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def write_result_file(path: Path, outcome: TaskOutcome) -> None:
    """Write result.json atomically, so readers never see half a file (blocking: use a thread)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    temporary = path.with_name(path.name + ".tmp")
    text = json.dumps(outcome.to_record(), indent=2) + "\n"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    with open(os.open(temporary, flags, PRIVATE_FILE_MODE), "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temporary, path)

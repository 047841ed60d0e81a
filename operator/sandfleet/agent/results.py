"""How a run ended: StopReason, per-turn timings and the AgentResult."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Any


class StopReason(enum.StrEnum):
    SUBMITTED = "submitted"
    """The model called `submit`."""
    MAX_TURNS = "max_turns"
    """The turn budget ran out before `submit`."""
    MODEL_ERROR = "model_error"
    """The endpoint rejected a request or kept failing after the SDK's retries."""
    CONTEXT_EXCEEDED = "context_exceeded"
    """The transcript no longer fits the context window, even with max_tokens shrunk and
    old observations clipped."""
    NO_TOOL_CALL = "no_tool_call"
    """The model kept replying without a tool call after max_nudges nudges in a row; its
    last text is the answer unless it wrote the answer file."""
    SANDBOX_LOST = "sandbox_lost"
    """The sandbox's runtime died or became unreachable."""
    CANCELLED = "cancelled"
    """The run's task was cancelled (Ctrl-C, shutdown, a deleted session)."""


SUBMITTED_NO_ANSWER = "submitted_no_answer"
"""The status (not a stop reason: the loop did stop on submit) that results show for a run
that called submit with no answer: no answer file and no text. Counted apart from
answered submits wherever results are summed, so a submit is never taken for a success."""


@dataclasses.dataclass(frozen=True, slots=True)
class TurnTiming:
    turn: int
    model_s: float
    """Waiting for the model, including the endpoint slot and SDK retries."""
    tool_s: float
    """Running the reply's tool calls in the sandbox."""
    overhead_s: float
    """Everything else in the turn: the loop's own cost (bookkeeping, trajectory writes)."""


@dataclasses.dataclass(frozen=True, slots=True)
class AgentResult:
    task_id: str
    stop_reason: StopReason
    answer: str | None
    """The answer file's content (surrounding whitespace stripped) if it exists, else the
    last text the model wrote."""
    turns: int
    prompt_tokens: int
    completion_tokens: int
    model_time_s: float
    tool_time_s: float
    wall_time_s: float
    output_files: list[str]
    """Files under the sandbox's output_dir (absolute sandbox paths) when the run ended."""
    error: str | None
    trajectory_path: Path | None
    turn_timings: tuple[TurnTiming, ...] = ()
    answer_from_file: bool = False
    """Whether `answer` is the answer file's content (else the model's last text, or None).
    Benchmarks score the file alone, as the seed project does."""

    def to_record(self) -> dict[str, Any]:
        """JSON-ready form (the trajectory's result record and result.json)."""
        return {
            "task_id": self.task_id,
            "stop_reason": self.stop_reason.value,
            "answer": self.answer,
            "turns": self.turns,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "model_time_s": round(self.model_time_s, 6),
            "tool_time_s": round(self.tool_time_s, 6),
            "wall_time_s": round(self.wall_time_s, 6),
            "output_files": list(self.output_files),
            "error": self.error,
            "trajectory_path": str(self.trajectory_path) if self.trajectory_path else None,
        }

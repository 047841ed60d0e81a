"""Reports a run as it happens: trajectory records (when writing one) and progress events."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from sandfleet.agent.config import AgentConfig
from sandfleet.agent.events import (
    EventSink,
    ModelReplied,
    ModelRetried,
    ObservationReceived,
    RunFinished,
    ToolCalled,
    TurnStarted,
    one_line,
    summarize_arguments,
)
from sandfleet.agent.model import ModelTurn
from sandfleet.agent.model_retries import ModelRetry
from sandfleet.agent.prompts import PathsView
from sandfleet.agent.results import AgentResult
from sandfleet.tool_calls import ToolCall, ToolSpec
from sandfleet.trajectory.format import FORMAT_VERSION
from sandfleet.trajectory.writer import TrajectoryWriter


class RunRecorder:
    """One method per thing that happens in a run; each writes its record and event.

    Event objects are only built when someone listens, keeping unobserved runs cheap.
    """

    def __init__(
        self, task_id: str, trajectory: TrajectoryWriter | None, on_event: EventSink | None
    ) -> None:
        self._task_id = task_id
        self._trajectory = trajectory
        self._on_event = on_event

    def started(
        self,
        *,
        model: str,
        config: AgentConfig,
        specs: Sequence[ToolSpec],
        paths: PathsView,
        input_files: list[dict[str, Any]] | None,
    ) -> None:
        """The meta record: with it (and the tool calls) a run can be replayed.

        `input_files` comes from task_inputs.describe_input_files (None: the task has none).
        """
        if self._trajectory is None:
            return
        meta: dict[str, Any] = {
            "kind": "meta",
            "format": FORMAT_VERSION,
            "task_id": self._task_id,
            "model": model,
            "base_url": config.base_url,
            "max_turns": config.max_turns,
            "max_tokens": config.max_tokens,
            "temperature": config.temperature,
            "top_p": config.top_p,
            "seed": config.seed,
            "extra_body": dict(config.extra_body) if config.extra_body else None,
            "max_nudges": config.max_nudges,
            "tools": [spec.name for spec in specs],
            "offer_undo_edit": config.offer_undo_edit,
            "tool_timeout_s": config.tool_timeout_s,
            "remaining_turns_notice": config.remaining_turns_notice,
            "paths": {
                "working_dir": paths.working_dir,
                "input_dir": paths.input_dir,
                "output_dir": paths.output_dir,
                "answer_file": paths.answer_file,
            },
            "input_files": input_files or [],
            "started_at": datetime.datetime.now(datetime.UTC).isoformat(),
        }
        if config.record_tokens:  # only then: trajectories without it stay as they were
            meta["record_tokens"] = True
        self._write(meta)

    def message(self, turn: int, role: str, content: str) -> None:
        self._write({"kind": "message", "turn": turn, "role": role, "content": content})

    def turn_started(self, turn: int, max_turns: int) -> None:
        if self._on_event is not None:
            self._on_event(TurnStarted(self._task_id, turn, max_turns))

    def replied(
        self, turn: int, reply: ModelTurn, *, model_s: float, max_tokens: int | None
    ) -> None:
        message: dict[str, Any] = {
            "kind": "message",
            "turn": turn,
            "role": "assistant",
            "content": reply.text,
        }
        if reply.tool_calls:  # all of them, also those a crash keeps from being run (resume)
            message["tool_calls"] = [
                {"call_id": call.call_id, "name": call.name, "arguments": call.arguments}
                for call in reply.tool_calls
            ]
        if reply.reasoning:
            message["reasoning"] = reply.reasoning
        if reply.finish_reason:
            message["finish_reason"] = reply.finish_reason
        self._write(message)
        self._write(
            {
                "kind": "usage",
                "turn": turn,
                "prompt_tokens": reply.usage.prompt_tokens,
                "completion_tokens": reply.usage.completion_tokens,
                "model_s": round(model_s, 6),
                "max_tokens": max_tokens,
            }
        )
        if reply.tokens is not None:
            self._write(reply.tokens.to_record(turn))
        if self._on_event is not None:
            text = one_line(reply.text)
            self._on_event(ModelReplied(self._task_id, turn, text, len(reply.tool_calls), model_s))

    def retried(self, turn: int, retry: ModelRetry) -> None:
        """A model request of `turn` failed and is sent again after retry.wait_s."""
        self._write(
            {
                "kind": "retry",
                "turn": turn,
                "attempt": retry.attempt,
                "attempts": retry.attempts,
                "cause": retry.cause,
                "status_code": retry.status_code,
                "attempt_s": retry.attempt_s,
                "wait_s": retry.wait_s,
                "at": datetime.datetime.now(datetime.UTC).isoformat(),
            }
        )
        if self._on_event is not None:
            self._on_event(
                ModelRetried(
                    self._task_id, turn, retry.attempt, retry.attempts, retry.cause,
                    retry.wait_s, retry.attempt_s,
                )
            )  # fmt: skip

    def tool_called(self, turn: int, call: ToolCall) -> None:
        self._write(
            {
                "kind": "tool_call",
                "turn": turn,
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            }
        )
        if self._on_event is not None:
            summary = summarize_arguments(call.name, call.arguments)
            self._on_event(ToolCalled(self._task_id, turn, call.name, summary))

    def observed(self, turn: int, call: ToolCall, output: str, tool_s: float) -> None:
        self._write(
            {
                "kind": "observation",
                "turn": turn,
                "call_id": call.call_id,
                "name": call.name,
                "output": output,
                "duration_s": round(tool_s, 6),
            }
        )
        if self._on_event is not None:
            short = one_line(output)
            self._on_event(ObservationReceived(self._task_id, turn, call.name, short, tool_s))

    def max_tokens_reduced(self, turn: int, old: int | None, new: int, reason: str) -> None:
        self._write(
            {
                "kind": "notice",
                "turn": turn,
                "event": "max_tokens_reduced",
                "old": old,
                "new": new,
                "reason": reason,
            }
        )

    def context_shortened(
        self, turn: int, *, kept_turns: int, clipped: list[dict[str, Any]], reason: str
    ) -> None:
        """Old observations were clipped so the transcript fits again; `clipped` lists them
        (turn, call_id, name, chars, kept_chars). The records keep the full observations;
        resume clips them again the same way (context_shortening.clip_observation)."""
        self._write(
            {
                "kind": "notice",
                "turn": turn,
                "event": "context_shortened",
                "kept_turns": kept_turns,
                "clipped": clipped,
                "reason": reason,
            }
        )

    def resumed(
        self, turn: int, *, turns_done: int, lost_calls: Sequence[str], synthesized: Sequence[Any]
    ) -> None:
        """The notice that another process continues the run here, then the records resume
        made up for the interrupted turn (lost-call observations, a missing nudge)."""
        self._write(
            {
                "kind": "notice",
                "turn": turn,
                "event": "resumed",
                "turns_done": turns_done,
                "lost_calls": list(lost_calls),
            }
        )
        for record in synthesized:
            self._write(record)

    def suspended(self, turn: int) -> None:
        self._write({"kind": "notice", "turn": turn, "event": "suspended"})

    def finished(self, result: AgentResult) -> None:
        self._write({"kind": "result", **result.to_record()})
        if self._on_event is not None:
            self._on_event(RunFinished(result))

    def _write(self, record: dict[str, Any]) -> None:
        if self._trajectory is not None:
            self._trajectory.write(record)

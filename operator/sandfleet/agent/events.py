"""Progress events a run reports to its caller (the CLI renders them), with short summaries."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

from sandfleet.agent.results import AgentResult

_SUMMARY_CHARS = 120


@dataclasses.dataclass(frozen=True, slots=True)
class TurnStarted:
    task_id: str
    turn: int
    max_turns: int


@dataclasses.dataclass(frozen=True, slots=True)
class ModelReplied:
    task_id: str
    turn: int
    text: str
    """The reply's text, shortened to one line."""
    tool_calls: int
    model_s: float


@dataclasses.dataclass(frozen=True, slots=True)
class ModelRetried:
    """A model request failed and is tried again after `wait_s` (model_retries.ModelRetry)."""

    task_id: str
    turn: int
    attempt: int
    """The attempt that failed, from 1."""
    attempts: int
    """Attempts allowed in all."""
    cause: str
    wait_s: float
    attempt_s: float
    """How long the failed attempt took."""


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCalled:
    task_id: str
    turn: int
    name: str
    arguments: str
    """Short one-line form, e.g. the bash command or "view /testbed/x.py"."""


@dataclasses.dataclass(frozen=True, slots=True)
class ObservationReceived:
    task_id: str
    turn: int
    name: str
    output: str
    """The observation shortened to one line."""
    tool_s: float


@dataclasses.dataclass(frozen=True, slots=True)
class RunFinished:
    result: AgentResult
    """Also sent for a cancelled run, just before CancelledError propagates."""


AgentEvent = (
    TurnStarted | ModelReplied | ModelRetried | ToolCalled | ObservationReceived | RunFinished
)
EventSink = Callable[[AgentEvent], None]


def one_line(text: str, limit: int = _SUMMARY_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def summarize_arguments(name: str, arguments: str) -> str:
    """The part of a call a human wants to see in a progress line."""
    try:
        decoded = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return one_line(arguments)
    if not isinstance(decoded, dict):
        return one_line(arguments)
    if name == "execute_bash":
        return one_line(str(decoded.get("command", "")))
    if name == "str_replace_editor":
        return one_line(f"{decoded.get('command', '?')} {decoded.get('path', '?')}")
    return one_line(arguments)

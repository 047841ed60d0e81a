"""The environment's pure core: configuration, observations, step results and episode state.

Nothing here talks to a sandbox. The first observation is built exactly as the agent loop
builds its transcript (the same prompt templates, filled the same way, and the same tool
schemas), so a policy trained through the environment sees what a `sandfleet run` shows it.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from sandfleet.agent.config import Task
from sandfleet.agent.prompts import (
    DEFAULT_INSTANCE_PROMPT,
    DEFAULT_SYSTEM_PROMPT,
    PathsView,
    fill_template,
    template_values,
)
from sandfleet.tool_calls import ToolCall, ToolSpec

if TYPE_CHECKING:
    from sandfleet.clients.runtime.client import ResetResult
    from sandfleet.sandbox.core import SandboxCore

RewardFn = Callable[[str | None, "SandboxCore"], float | Awaitable[float]]
"""Scores a finished episode: (the answer file's text or None, the sandbox) -> reward. It may
be async, and may look at the sandbox (run the task's tests, say) before the next reset."""


@dataclasses.dataclass(frozen=True, slots=True)
class EnvConfig:
    """How episodes run; the defaults are the agent loop's (AgentConfig)."""

    max_turns: int = 100
    """Steps per episode; the step that reaches it ends the episode (info.truncated)."""
    tool_timeout_s: float = 120.0
    """Bound on one bash command; a timeout is an observation, as in a run."""
    max_output_chars: int = 0
    """Cap on a command's output (0: the runtime's default)."""
    system_prompt: str | None = None
    """Seed-format template; None: the task's own, else prompts.DEFAULT_SYSTEM_PROMPT."""
    instance_prompt: str | None = None
    """Seed-format template around the task text; None: the task's own, else the default."""
    offer_undo_edit: bool = True
    reattach_attempts: int = 5
    """How often a bash step whose call dropped re-attaches to its command before the
    sandbox counts as lost (attempts back off from 0.1 s to 2 s)."""

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if self.reattach_attempts < 0:
            raise ValueError("reattach_attempts must not be negative")


@dataclasses.dataclass(frozen=True, slots=True)
class Observation:
    """What `reset(task)` returns: the prompt a policy starts from."""

    episode_id: str
    task_id: str
    messages: list[dict[str, Any]]
    """The system and user messages in the chat-completions shape (the loop's transcript)."""
    tools: list[dict[str, Any]]
    """The tool schemas as chat-completions `tools` (execute_bash, str_replace_editor,
    submit): send them with every request."""
    reset: ResetResult
    """What the sandbox's reset did (processes killed, paths restored, its duration)."""


@dataclasses.dataclass(frozen=True, slots=True)
class StepInfo:
    """What a step did besides its observation."""

    turn: int
    """1 for the first step of an episode."""
    tool: str
    """The tool name the call named (as sent, even when unknown)."""
    call_id: str
    malformed: bool = False
    """The call could not run as sent (bad JSON, unknown tool, missing argument); the
    observation is the message the agent loop gives for it."""
    submitted: bool = False
    truncated: bool = False
    """The episode reached max_turns without a submit."""
    sandbox_lost: bool = False
    """The sandbox died or became unreachable: terminal, and not the policy's doing, so a
    trainer should mask the rollout rather than learn from it."""
    error: str | None = None
    """Why the sandbox counts as lost, or (batch) what else failed."""
    answer: str | None = None
    """The answer file's text when the episode ended (None: no answer file)."""
    reward: float | None = None
    """The reward function's value when the episode ended (None: no function, or lost)."""
    duration_s: float = 0.0


class StepResult(NamedTuple):
    """`observation, done, info = await env.step(call)`."""

    observation: str
    """The tool result text the model sees."""
    done: bool
    info: StepInfo

    def message(self) -> dict[str, Any]:
        """The observation as the chat-completions tool message to append."""
        return {"role": "tool", "tool_call_id": self.info.call_id, "content": self.observation}


def prompt_messages(task: Task, paths: PathsView, config: EnvConfig) -> list[dict[str, Any]]:
    """The system and user messages the agent loop starts a run of `task` with."""
    values = template_values(paths, task.prompt)
    system = task.system_prompt or config.system_prompt or DEFAULT_SYSTEM_PROMPT
    instance = task.instance_prompt or config.instance_prompt or DEFAULT_INSTANCE_PROMPT
    return [
        {"role": "system", "content": fill_template(system, values)},
        {"role": "user", "content": fill_template(instance, values)},
    ]


def function_tools(specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs as chat-completions `tools` entries (as the OpenAI adapter sends them)."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.parameters,
            },
        }
        for spec in specs
    ]


def as_tool_call(call: ToolCall | Mapping[str, Any]) -> ToolCall:
    """A ToolCall from itself or from a chat-completions tool call
    (`{"id": ..., "function": {"name": ..., "arguments": "<json>"}}`)."""
    if isinstance(call, ToolCall):
        return call
    function = call.get("function")
    if not isinstance(function, Mapping):
        raise ValueError("a tool call needs a 'function' object with 'name' and 'arguments'")
    arguments = function.get("arguments", "")
    return ToolCall(
        call_id=str(call.get("id") or f"call_{uuid.uuid4().hex[:24]}"),
        name=str(function.get("name", "")),
        arguments=arguments if isinstance(arguments, str) else json.dumps(arguments),
    )


def new_episode_id() -> str:
    return f"ep-{uuid.uuid4().hex[:16]}"


def command_id(episode_id: str, turn: int) -> str:
    """The id a step's bash command runs under: one per (episode, turn), so after a dropped
    call the step re-attaches to its own command and never to another episode's."""
    return f"{episode_id}.t{turn}"


@dataclasses.dataclass(slots=True)
class EpisodeState:
    """Where an episode stands; `done` once it submitted, was truncated or lost its sandbox."""

    episode_id: str
    task_id: str
    reward: RewardFn | None = None
    turn: int = 0
    done: bool = False

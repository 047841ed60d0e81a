"""The provider-neutral model interface the agent loop talks to, and the errors it may raise."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from sandfleet.agent.token_records import TokenRecord
from sandfleet.errors import ModelError
from sandfleet.tool_calls import ToolCall

if TYPE_CHECKING:
    from sandfleet.tool_calls import ToolSpec


@dataclasses.dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class ModelTurn:
    """One reply of the model, already parsed out of the provider's format."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    message: Any
    """The reply as the provider wants it back in the transcript (appended verbatim)."""
    reasoning: str | None = None
    """Reasoning text some endpoints return next to the answer (kept for the trajectory)."""
    finish_reason: str | None = None
    tokens: TokenRecord | None = None
    """Token ids and logprobs, when the run records them (AgentConfig.record_tokens)."""


class Model(Protocol):
    """A chat model with function calling.

    Transcript items are opaque to the loop: the model builds them (system, user and tool
    result messages, plus `ModelTurn.message`) and the loop only appends them in order, so
    a turn never converts the whole transcript again.
    """

    @property
    def name(self) -> str: ...

    def system_message(self, text: str) -> Any: ...

    def user_message(self, text: str) -> Any: ...

    def tool_result_message(self, call: ToolCall, output: str) -> Any: ...

    def assistant_message(self, text: str, tool_calls: Sequence[ToolCall]) -> Any:
        """An earlier reply rebuilt from its recorded text and calls (resuming a run)."""
        ...

    async def complete(
        self, transcript: Sequence[Any], tools: Sequence[ToolSpec], *, max_tokens: int | None
    ) -> ModelTurn:
        """Return the next reply. Raises ModelError (ContextLengthExceededError when the
        prompt plus `max_tokens` does not fit) once the endpoint's own retries are spent."""
        ...

    async def aclose(self) -> None: ...


class ChatCompletionsMessages:
    """Transcript items in the chat-completions shape (OpenAI, vLLM, SGLang all accept it).

    Models that speak this format inherit the message builders of the Model protocol.
    """

    def system_message(self, text: str) -> dict[str, Any]:
        return {"role": "system", "content": text}

    def user_message(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    def tool_result_message(self, call: ToolCall, output: str) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": call.call_id, "content": output}

    def assistant_message(self, text: str, tool_calls: Sequence[ToolCall]) -> dict[str, Any]:
        """The same item openai_chat builds for a live reply (content null beside calls)."""
        if not tool_calls:
            return {"role": "assistant", "content": text}
        return {
            "role": "assistant",
            "content": text or None,
            "tool_calls": [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in tool_calls
            ],
        }


class ContextLengthExceededError(ModelError):
    """The prompt plus the completion budget exceed the model's context window."""

    def __init__(
        self,
        message: str,
        *,
        context_window: int | None = None,
        prompt_tokens: int | None = None,
        status_code: int | None = 400,
    ) -> None:
        super().__init__(message, status_code=status_code)
        self.context_window = context_window
        """The window size the endpoint reported, when its message says so."""
        self.prompt_tokens = prompt_tokens
        """Tokens in the prompt alone, when the endpoint's message says so."""

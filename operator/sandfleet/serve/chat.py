"""POST /v1/chat/completions: the request read, the answer as the `openai` package's own
ChatCompletion and ChatCompletionChunk types.

Streaming shows the work: each sandbox step (the command, then its clipped observation)
as `reasoning_content` deltas, the field reasoning-model UIs render, never as `tool_calls`
(a client must not think it has to run them); the final answer as `content` deltas.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice
from openai.types.chat.chat_completion_chunk import ChoiceDelta
from openai.types.completion_usage import CompletionUsage
from pydantic import BaseModel, ConfigDict, Field

from sandfleet.agent import StopReason
from sandfleet.serve.engine import Outcome, Step, StepEvent, StepStarted
from sandfleet.serve.errors import ApiError, bad_request
from sandfleet.serve.files import InputFile, decode_file
from sandfleet.serve.prompts import Turn

ENDPOINT = "chat.completions"
FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "function_call"]


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class ChatRequest(BaseModel):
    """The fields of openai's CompletionCreateParams this server reads (others ignored)."""

    model_config = ConfigDict(extra="ignore")
    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    n: int | None = Field(default=None, ge=1, le=1)


def read_messages(messages: list[dict[str, Any]]) -> tuple[list[Turn], list[InputFile]]:
    """The turns and attached files of `messages`; ApiError 400 naming the bad field."""
    turns: list[Turn] = []
    files: list[InputFile] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise bad_request(f"unknown role {role!r}", f"{where}.role")
        text = _content_text(message.get("content"), where, files)
        turns.append(Turn("system" if role == "developer" else str(role), text))
    if turns[-1].role != "user":
        raise bad_request("the last message must be the user's", f"messages[{len(turns) - 1}].role")
    return turns, files


def _content_text(content: object, where: str, files: list[InputFile]) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise bad_request("content must be a string or a list of parts", f"{where}.content")
    texts = []
    for index, part in enumerate(content):
        param = f"{where}.content[{index}]"
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "file" and isinstance(part.get("file"), Mapping):
            file = part["file"]
            if file.get("file_id") is not None and file.get("file_data") is None:
                raise bad_request("file_id is not supported: send file_data (base64)",
                                  f"{param}.file.file_id", "invalid_file")  # fmt: skip
            files.append(decode_file(f"{param}.file", file.get("filename"),
                                     file.get("file_data"), len(files)))  # fmt: skip
        else:
            raise bad_request(
                f"unsupported content part {kind!r}: this server reads `text` and `file` parts",
                f"{param}.type",
            )
    return "\n".join(texts)


def finish_reason(outcome: Outcome) -> FinishReason:
    stop = outcome.result.stop_reason
    return "length" if stop in (StopReason.MAX_TURNS, StopReason.CONTEXT_EXCEEDED) else "stop"


def usage(outcome: Outcome) -> CompletionUsage:
    result = outcome.result
    return CompletionUsage(
        prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens,
        total_tokens=result.prompt_tokens + result.completion_tokens,
    )


def step_text(event: StepEvent) -> str:
    """A step as reasoning text: the command when it starts, the observation when done."""
    step = event.step
    if isinstance(event, StepStarted):
        prefix = "$ " if step.tool == "execute_bash" else ""
        return f"{prefix}{step.code}\n"
    return f"{step.output or ''}\n\n"


def _reasoning(steps: tuple[Step, ...]) -> str:
    return "".join(step_text(StepStarted(s)) + f"{s.output or ''}\n\n" for s in steps)


def completion(
    completion_id: str, model: str, outcome: Outcome, extension: dict[str, Any]
) -> dict[str, Any]:
    """The non-streamed answer: a ChatCompletion (plus the `sandfleet` extension field)."""
    message = ChatCompletionMessage(
        role="assistant",
        content=outcome.result.answer or "",
        reasoning_content=_reasoning(outcome.steps),  # type: ignore[call-arg]
    )
    body = ChatCompletion(
        id=completion_id,
        object="chat.completion",
        created=int(time.time()),
        model=model,
        choices=[Choice(index=0, message=message, finish_reason=finish_reason(outcome))],
        usage=usage(outcome),
        sandfleet=extension,  # type: ignore[call-arg]
    )
    return body.model_dump(mode="json", exclude_unset=True)


class ChunkWriter:
    """SSE lines of one streamed completion, each a ChatCompletionChunk."""

    def __init__(self, completion_id: str, model: str) -> None:
        self._id = completion_id
        self._model = model
        self._created = int(time.time())

    def _chunk(self, choices: list[ChunkChoice], **extra: Any) -> str:
        chunk = ChatCompletionChunk(
            id=self._id, object="chat.completion.chunk", created=self._created,
            model=self._model, choices=choices, **extra,
        )  # fmt: skip
        return f"data: {chunk.model_dump_json(exclude_unset=True)}\n\n"

    def delta(self, finish: FinishReason | None = None, **fields: Any) -> str:
        choice = ChunkChoice(index=0, delta=ChoiceDelta(**fields), finish_reason=finish)
        return self._chunk([choice])

    def usage(self, outcome: Outcome, extension: dict[str, Any]) -> str:
        return self._chunk([], usage=usage(outcome), sandfleet=extension)


def sse_error(error: ApiError) -> str:
    """An error after the stream began: the `openai` client raises it as an APIError."""
    import json

    return f"data: {json.dumps(error.body())}\n\n"


async def stream_lines(
    writer: ChunkWriter,
    first: StepEvent | None,
    events: AsyncIterator[StepEvent],
) -> AsyncIterator[str]:
    """The role chunk, then the steps as reasoning deltas (the caller adds the answer)."""
    yield writer.delta(role="assistant", content="")
    if first is not None:
        yield writer.delta(reasoning_content=step_text(first))
    async for event in events:
        yield writer.delta(reasoning_content=step_text(event))

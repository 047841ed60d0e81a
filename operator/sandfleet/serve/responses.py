"""POST /v1/responses: the request read, the answer as the `openai` package's own Response
and response stream event types.

Each sandbox step is a `code_interpreter_call` output item (its code: the command; its
outputs: the observation as logs; its container: the sandbox), which clients already
render, then the answer as a `message` item. Streaming sends the standard event sequence.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Literal

from openai.types.responses import (
    Response,
    ResponseCodeInterpreterCallCodeDeltaEvent,
    ResponseCodeInterpreterCallCodeDoneEvent,
    ResponseCodeInterpreterCallCompletedEvent,
    ResponseCodeInterpreterCallInProgressEvent,
    ResponseCodeInterpreterCallInterpretingEvent,
    ResponseCodeInterpreterToolCall,
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseErrorEvent,
    ResponseInProgressEvent,
    ResponseOutputItem,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
    ResponseUsage,
)
from openai.types.responses.response_code_interpreter_tool_call import OutputLogs
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from pydantic import BaseModel, ConfigDict, Field

from sandfleet.serve.engine import Outcome, Step
from sandfleet.serve.errors import ApiError, bad_request
from sandfleet.serve.files import InputFile, decode_file
from sandfleet.serve.prompts import Turn

ENDPOINT = "responses"
Status = Literal["completed", "in_progress"]


class ResponsesRequest(BaseModel):
    """The fields of openai's ResponseCreateParams this server reads (others ignored)."""

    model_config = ConfigDict(extra="ignore")
    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool = True
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    max_output_tokens: int | None = Field(default=None, ge=1)


def read_input(request: ResponsesRequest) -> tuple[list[Turn], list[InputFile]]:
    """The turns and attached files of `input`; ApiError 400 naming the bad field."""
    turns = [Turn("system", request.instructions)] if request.instructions else []
    files: list[InputFile] = []
    if isinstance(request.input, str):
        return [*turns, Turn("user", request.input)], files
    if not request.input:
        raise bad_request("input must not be empty", "input")
    for index, item in enumerate(request.input):
        where = f"input[{index}]"
        if item.get("type", "message") != "message":
            raise bad_request(f"unsupported input item {item.get('type')!r}: send messages",
                              f"{where}.type")  # fmt: skip
        role = item.get("role")
        if role not in ("user", "system", "developer", "assistant"):
            raise bad_request(f"unknown role {role!r}", f"{where}.role")
        text = _content_text(item.get("content"), where, files)
        turns.append(Turn("system" if role == "developer" else str(role), text))
    if turns[-1].role != "user":
        raise bad_request("the last input item must be the user's",
                          f"input[{len(request.input) - 1}].role")  # fmt: skip
    return turns, files


def _content_text(content: object, where: str, files: list[InputFile]) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request("content must be a string or a list of parts", f"{where}.content")
    texts = []
    for index, part in enumerate(content):
        param = f"{where}.content[{index}]"
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "input_file":
            if part.get("file_id") is not None and part.get("file_data") is None:
                raise bad_request("file_id is not supported: send file_data (base64)",
                                  f"{param}.file_id", "invalid_file")  # fmt: skip
            files.append(decode_file(param, part.get("filename"), part.get("file_data"),
                                     len(files)))  # fmt: skip
        else:
            raise bad_request(
                f"unsupported content part {kind!r}: this server reads input_text and "
                "input_file parts",
                f"{param}.type",
            )
    return "\n".join(texts)


def step_item(response_id: str, container: str, step: Step) -> ResponseCodeInterpreterToolCall:
    done = step.output is not None
    return ResponseCodeInterpreterToolCall(
        id=f"ci_{response_id.removeprefix('resp_')}_{step.index}",
        type="code_interpreter_call",
        code=step.code,
        container_id=container,
        outputs=[OutputLogs(type="logs", logs=step.output or "")] if done else None,
        status="completed" if done else "in_progress",
    )


def message_item(response_id: str, text: str | None) -> ResponseOutputMessage:
    content = [] if text is None else [
        ResponseOutputText(type="output_text", text=text, annotations=[])
    ]  # fmt: skip
    return ResponseOutputMessage(
        id=f"msg_{response_id.removeprefix('resp_')}",
        type="message",
        role="assistant",
        content=content,  # type: ignore[arg-type]
        status="in_progress" if text is None else "completed",
    )


def _usage(outcome: Outcome) -> ResponseUsage:
    result = outcome.result
    return ResponseUsage(
        input_tokens=result.prompt_tokens,
        input_tokens_details=InputTokensDetails(cached_tokens=0, cache_write_tokens=0),
        output_tokens=result.completion_tokens,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
        total_tokens=result.prompt_tokens + result.completion_tokens,
    )


class ResponseShape:
    """What every Response of one request shares (id, model, the request's echoes)."""

    def __init__(self, response_id: str, model: str, request: ResponsesRequest) -> None:
        self.id = response_id
        self.model = model
        self.request = request
        self.created_at = time.time()

    def build(
        self,
        status: Status,
        output: list[ResponseOutputItem],
        outcome: Outcome | None = None,
        extension: dict[str, Any] | None = None,
    ) -> Response:
        extra: dict[str, Any] = {}
        if outcome is not None:
            extra["usage"] = _usage(outcome)
        if extension is not None:
            extra["sandfleet"] = extension
        return Response(
            id=self.id, object="response", created_at=self.created_at, model=self.model,
            output=output, parallel_tool_calls=False, tool_choice="auto", tools=[],
            status=status, previous_response_id=self.request.previous_response_id,
            instructions=self.request.instructions,
            temperature=self.request.temperature, top_p=self.request.top_p,
            max_output_tokens=self.request.max_output_tokens, **extra,
        )  # fmt: skip


def response_body(
    shape: ResponseShape, container: str, outcome: Outcome, extension: dict[str, Any]
) -> dict[str, Any]:
    output: list[ResponseOutputItem] = [step_item(shape.id, container, s) for s in outcome.steps]
    output.append(message_item(shape.id, outcome.result.answer or ""))
    return shape.build("completed", output, outcome, extension).model_dump(
        mode="json", exclude_unset=True
    )


class EventWriter:
    """The SSE events of one streamed response, numbered in order."""

    def __init__(self, shape: ResponseShape, container: str) -> None:
        self._shape = shape
        self._container = container
        self._sequence = 0
        self._items: list[ResponseOutputItem] = []
        self._index: dict[int, int] = {}

    def _event(self, event: BaseModel) -> str:
        data = event.model_dump_json(exclude_unset=True)
        self._sequence += 1
        return f"event: {event.type}\ndata: {data}\n\n"  # type: ignore[attr-defined]

    def _next(self) -> int:
        return self._sequence

    def started(self) -> list[str]:
        response = self._shape.build("in_progress", [])
        return [
            self._event(ResponseCreatedEvent(type="response.created", response=response,
                                             sequence_number=self._next())),
            self._event(ResponseInProgressEvent(type="response.in_progress", response=response,
                                                sequence_number=self._next())),
        ]  # fmt: skip

    def step_started(self, step: Step) -> list[str]:
        item = step_item(self._shape.id, self._container, step)
        index = self._index[step.index] = len(self._items)
        self._items.append(item)
        common: dict[str, Any] = {"item_id": item.id, "output_index": index}
        return [
            self._event(ResponseOutputItemAddedEvent(type="response.output_item.added",
                                                     item=item, output_index=index,
                                                     sequence_number=self._next())),
            self._event(ResponseCodeInterpreterCallInProgressEvent(
                type="response.code_interpreter_call.in_progress", sequence_number=self._next(),
                **common)),
            self._event(ResponseCodeInterpreterCallCodeDeltaEvent(
                type="response.code_interpreter_call_code.delta", delta=step.code,
                sequence_number=self._next(), **common)),
            self._event(ResponseCodeInterpreterCallCodeDoneEvent(
                type="response.code_interpreter_call_code.done", code=step.code,
                sequence_number=self._next(), **common)),
            self._event(ResponseCodeInterpreterCallInterpretingEvent(
                type="response.code_interpreter_call.interpreting", sequence_number=self._next(),
                **common)),
        ]  # fmt: skip

    def step_finished(self, step: Step) -> list[str]:
        item = step_item(self._shape.id, self._container, step)
        index = self._index[step.index]
        self._items[index] = item
        return [
            self._event(ResponseCodeInterpreterCallCompletedEvent(
                type="response.code_interpreter_call.completed", item_id=item.id,
                output_index=index, sequence_number=self._next())),
            self._event(ResponseOutputItemDoneEvent(type="response.output_item.done", item=item,
                                                    output_index=index,
                                                    sequence_number=self._next())),
        ]  # fmt: skip

    def answered(self, outcome: Outcome, extension: dict[str, Any]) -> list[str]:
        text = outcome.result.answer or ""
        index = len(self._items)
        pending = message_item(self._shape.id, None)
        part = ResponseOutputText(type="output_text", text="", annotations=[])
        full = ResponseOutputText(type="output_text", text=text, annotations=[])
        done = message_item(self._shape.id, text)
        self._items.append(done)
        common: dict[str, Any] = {"item_id": done.id, "output_index": index, "content_index": 0}
        response = self._shape.build("completed", list(self._items), outcome, extension)
        return [
            self._event(ResponseOutputItemAddedEvent(type="response.output_item.added",
                                                     item=pending, output_index=index,
                                                     sequence_number=self._next())),
            self._event(ResponseContentPartAddedEvent(type="response.content_part.added",
                                                      part=part, sequence_number=self._next(),
                                                      **common)),
            self._event(ResponseTextDeltaEvent(type="response.output_text.delta", delta=text,
                                               logprobs=[], sequence_number=self._next(),
                                               **common)),
            self._event(ResponseTextDoneEvent(type="response.output_text.done", text=text,
                                              logprobs=[], sequence_number=self._next(),
                                              **common)),
            self._event(ResponseContentPartDoneEvent(type="response.content_part.done",
                                                     part=full, sequence_number=self._next(),
                                                     **common)),
            self._event(ResponseOutputItemDoneEvent(type="response.output_item.done", item=done,
                                                    output_index=index,
                                                    sequence_number=self._next())),
            self._event(ResponseCompletedEvent(type="response.completed", response=response,
                                               sequence_number=self._next())),
        ]  # fmt: skip

    def failed(self, error: ApiError) -> str:
        return self._event(ResponseErrorEvent(type="error", message=error.message,
                                              code=error.code, param=error.param,
                                              sequence_number=self._next()))  # fmt: skip

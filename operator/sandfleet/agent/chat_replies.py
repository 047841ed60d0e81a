"""A chat completion as a ModelTurn: every field the loop uses checked, since the SDK does
not validate a reply's types, so whatever an endpoint sends becomes a ModelTurn or a
ModelError (openai_chat's replies; no openai import needed: the reply is duck-typed)."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from sandfleet.agent.model import ModelTurn, Usage
from sandfleet.agent.token_records import token_record
from sandfleet.errors import ModelError
from sandfleet.tool_calls import ToolCall


def _malformed(detail: str) -> ModelError:
    """The reply does not follow the chat-completions schema."""
    return ModelError(f"the model endpoint sent a malformed reply: {detail}")


def model_turn(response: Any, *, record_tokens: bool = False) -> ModelTurn:
    """The reply as a ModelTurn. The SDK does not validate a reply's types, so every field
    used here is checked: whatever an endpoint sends becomes a ModelTurn or a ModelError."""
    if isinstance(response, str | bytes):  # the SDK hands over a body it could not type
        raise _malformed(f"not a chat completion but text: {response[:80]!r}")
    if isinstance(response, list | int | float | bool) or response is None:
        raise _malformed(f"not a chat completion but {type(response).__name__}")
    if not response.choices:
        raise ModelError("the model endpoint returned no choices")
    choice = response.choices[0]
    message = choice.message
    raw_calls = message.tool_calls or ()
    if not isinstance(raw_calls, list | tuple):
        raise _malformed(f"tool_calls is {type(raw_calls).__name__}, not a list")
    calls = [call for call in (_tool_call(raw) for raw in raw_calls) if call is not None]
    content = _text(message.content, "the message content")
    item: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        item["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in calls
        ]
    elif content is None:
        item["content"] = ""
    extra = message.model_extra or {}
    reasoning = extra.get("reasoning_content") or extra.get("reasoning")
    usage = response.usage
    finish_reason = choice.finish_reason
    return ModelTurn(
        text=content or "",
        tool_calls=tuple(calls),
        usage=Usage(_count(usage.prompt_tokens), _count(usage.completion_tokens))
        if usage
        else Usage(),
        message=item,
        reasoning=_text(reasoning, "reasoning") if isinstance(reasoning, str) else None,
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        tokens=token_record(response, choice) if record_tokens else None,
    )


def _tool_call(raw: Any) -> ToolCall | None:
    function = getattr(raw, "function", None) or getattr(raw, "custom", None)
    if function is None:
        if isinstance(raw, str | int | float | list | dict):  # not an object the SDK typed
            raise _malformed(f"a tool call is {type(raw).__name__}, not an object")
        return None
    name = _text(getattr(function, "name", None), "a tool call's function name")
    if name is None:
        raise _malformed("a tool call has no function name")
    arguments = getattr(function, "arguments", None)
    if arguments is None:
        arguments = getattr(function, "input", "")
    if isinstance(arguments, dict | list):  # a non-conforming server sent an object
        arguments = json.dumps(arguments, ensure_ascii=False)
    arguments = _text(arguments, "a tool call's arguments") or ""
    # Tool results are matched by id; some servers leave it empty.
    raw_id = str(raw.id) if isinstance(raw.id, int) else raw.id  # a lenient server's number
    call_id = _text(raw_id, "a tool call's id") or f"call_{uuid.uuid4().hex[:24]}"
    return ToolCall(call_id, name, arguments)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(value: Any, what: str) -> str | None:
    """A string of the reply, lone surrogates (which UTF-8 cannot carry) replaced by U+FFFD."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise _malformed(f"{what} is {type(value).__name__}, not a string")
    return str(_SURROGATE.sub("\ufffd", value))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0

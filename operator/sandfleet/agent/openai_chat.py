"""The Model adapter over the openai SDK's chat completions: the only module importing openai.

Works with any OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, llama.cpp, ...). Retries
of 408/409/429/5xx and connection errors are the SDK's (max_retries, with backoff and
Retry-After); this module only classifies what is left after them.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, cast

import openai

from sandfleet.agent.config import AgentConfig
from sandfleet.agent.context_overflow import context_length_error
from sandfleet.agent.model import (
    ChatCompletionsMessages,
    ContextLengthExceededError,
    ModelError,
    ModelTurn,
    Usage,
)
from sandfleet.agent.token_records import TOKEN_REQUEST_FIELDS, token_record
from sandfleet.logs import get_logger
from sandfleet.tool_calls import ToolCall, ToolSpec

log = get_logger(__name__)

# Local servers (vLLM, llama.cpp) ignore the key, but the SDK refuses to start without one.
_PLACEHOLDER_API_KEY = "EMPTY"

# One semaphore per endpoint and event loop: asyncio primitives belong to a single loop,
# and tests (or a CLI calling asyncio.run twice) may run several loops in one process.
_ENDPOINT_SLOTS: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]
] = weakref.WeakKeyDictionary()


def endpoint_slots(endpoint: str, size: int) -> asyncio.Semaphore:
    """The semaphore bounding requests in flight to `endpoint` from this event loop.

    The first caller for an endpoint sets its size; later sizes are ignored.
    """
    per_loop = _ENDPOINT_SLOTS.setdefault(asyncio.get_running_loop(), {})
    slots = per_loop.get(endpoint)
    if slots is None:
        slots = per_loop[endpoint] = asyncio.Semaphore(size)
    return slots


class OpenAIChatModel(ChatCompletionsMessages):
    """Chat completions with function calling over one AsyncOpenAI client.

    Safe to share between concurrent runs in one event loop (it keeps no per-run state).
    """

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        *,
        model: str,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        extra_body: Mapping[str, Any] | None = None,
        endpoint_concurrency: int = 64,
        record_tokens: bool = False,
    ) -> None:
        """`record_tokens`: ask for token ids and logprobs and put them on each ModelTurn."""
        self._client = client
        self._model = model
        self._temperature = temperature
        self._top_p = top_p
        self._seed = seed
        self._record_tokens = record_tokens
        self._logprob_options: dict[str, Any] = {}
        if record_tokens:
            # logprobs and top_logprobs are OpenAI's own parameters: the SDK sends them as
            # such; the rest goes in the body, where the user's extra_body wins.
            wanted = dict(TOKEN_REQUEST_FIELDS)
            self._logprob_options = {
                name: wanted.pop(name) for name in ("logprobs", "top_logprobs")
            }
            extra_body = {**wanted, **(extra_body or {})}
        self._extra_body = dict(extra_body) if extra_body else None
        self._endpoint = str(client.base_url).rstrip("/")
        self._concurrency = endpoint_concurrency
        self._schemas_for: Sequence[ToolSpec] | None = None
        self._schemas: list[dict[str, Any]] = []

    @classmethod
    def from_config(cls, config: AgentConfig) -> OpenAIChatModel:
        """An OpenAIChatModel for `config` (endpoint, key, timeout, retries, sampling).

        Raises ModelError when the SDK cannot be set up (e.g. no API key for OpenAI itself).
        """
        api_key = config.api_key
        if api_key is None and config.base_url is not None:
            api_key = _PLACEHOLDER_API_KEY
        try:
            client = openai.AsyncOpenAI(
                api_key=api_key,
                base_url=config.base_url,
                timeout=config.request_timeout_s,
                max_retries=config.max_retries,
                http_client=(
                    None
                    if config.follow_redirects
                    else openai.DefaultAsyncHttpxClient(follow_redirects=False)
                ),
            )
        except openai.OpenAIError as exc:
            raise ModelError(f"cannot set up the OpenAI client: {exc}") from exc
        return cls(
            client,
            model=config.model,
            temperature=config.temperature,
            top_p=config.top_p,
            seed=config.seed,
            extra_body=config.extra_body,
            endpoint_concurrency=config.endpoint_concurrency,
            record_tokens=config.record_tokens,
        )

    @property
    def name(self) -> str:
        return self._model

    async def complete(
        self, transcript: Sequence[Any], tools: Sequence[ToolSpec], *, max_tokens: int | None
    ) -> ModelTurn:
        options = self._request_options(tools, max_tokens)
        async with endpoint_slots(self._endpoint, self._concurrency):
            started = time.perf_counter()
            try:
                response = await self._client.chat.completions.create(
                    model=self._model,
                    messages=transcript,
                    **options,
                )
            except openai.APIStatusError as exc:
                overflow = _overflow(exc)
                if overflow is not None:
                    raise overflow from exc
                message = _describe(exc) + _not_found_hint(exc.status_code, self._endpoint)
                raise ModelError(message, status_code=exc.status_code) from exc
            except openai.APITimeoutError as exc:
                raise ModelError(self._timed_out()) from exc
            except openai.APIConnectionError as exc:
                cause = exc.__cause__ or exc
                raise ModelError(
                    f"cannot reach the model endpoint {self._endpoint}: {cause}"
                ) from exc
            except openai.OpenAIError as exc:
                raise ModelError(f"{type(exc).__name__}: {exc}") from exc
            except ValueError as exc:  # a 200 whose body is not JSON (the SDK's json.loads)
                raise ModelError(
                    f"the model endpoint sent a reply that is not JSON: {exc}"
                ) from exc
        log.debug("model_replied", model=self._model, latency_s=time.perf_counter() - started)
        try:
            return _model_turn(response, record_tokens=self._record_tokens)
        except (AttributeError, TypeError, ValueError) as exc:  # a non-conforming server
            raise ModelError(f"the model endpoint sent a malformed reply: {exc}") from exc

    def _request_options(self, tools: Sequence[ToolSpec], max_tokens: int | None) -> dict[str, Any]:
        """The keyword arguments of one chat-completions request beyond model and messages:
        only the knobs that are set, so an endpoint's own defaults apply to the rest."""
        sampling = {
            "max_tokens": max_tokens,
            "temperature": self._temperature,
            "top_p": self._top_p,
            "seed": self._seed,
        }
        options: dict[str, Any] = {k: v for k, v in sampling.items() if v is not None}
        options.update(self._logprob_options)
        if self._extra_body:
            options["extra_body"] = self._extra_body
        if tools:  # no tools (a plain-LLM request): no `tools` key, which servers reject empty
            options["tools"] = cast(Any, self._function_tools(tools))
        return options

    async def aclose(self) -> None:
        await self._client.close()

    def _timed_out(self) -> str:
        timeout = self._client.timeout  # a float, or an httpx.Timeout with a read limit
        limit = getattr(timeout, "read", timeout)
        seconds = f"{limit:g} s" if isinstance(limit, int | float) else "its time limit"
        return (
            f"the model endpoint {self._endpoint} timed out: no answer within {seconds}, the "
            "request timeout (raise it with --request-timeout or SANDFLEET_REQUEST_TIMEOUT)"
        )

    def _function_tools(self, tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
        # tool_specs() hands every run the same tuple, so this converts once per process.
        if tools is not self._schemas_for:
            self._schemas = [
                {
                    "type": "function",
                    "function": {
                        "name": spec.name,
                        "description": spec.description,
                        "parameters": spec.parameters,
                    },
                }
                for spec in tools
            ]
            self._schemas_for = tools
        return self._schemas


# Statuses an overflow comes with: 400 from vLLM, SGLang, llama.cpp and OpenAI; 413 and
# 422 from some proxies. A 429's "too many tokens" is a rate limit, not the window.
_OVERFLOW_STATUSES = frozenset({400, 413, 422})


def _overflow(exc: openai.APIStatusError) -> ContextLengthExceededError | None:
    if exc.status_code not in _OVERFLOW_STATUSES:
        return None
    body = exc.body if isinstance(exc.body, Mapping) else None
    error_type = getattr(exc, "type", None)
    return context_length_error(
        _endpoint_message(exc), getattr(exc, "code", None), error_type=error_type, details=body
    )


def _describe(exc: openai.APIStatusError) -> str:
    return f"the model endpoint answered HTTP {exc.status_code}: {_endpoint_message(exc)}"


def _not_found_hint(status: int, endpoint: str) -> str:
    """For a 404 at an endpoint without /v1: where OpenAI-compatible servers serve."""
    if status != 404 or endpoint.rstrip("/").endswith("/v1"):
        return ""
    return (
        f" (the endpoint answered 404 at {endpoint}/chat/completions; OpenAI-compatible "
        f"servers usually serve under /v1: try --base-url {endpoint}/v1)"
    )


def _endpoint_message(exc: openai.APIStatusError) -> str:
    """The endpoint's own error message, without the SDK's "Error code: N - " prefix."""
    body = exc.body
    if isinstance(body, Mapping) and isinstance(body.get("message"), str) and body["message"]:
        return str(body["message"])
    return exc.message


def _malformed(detail: str) -> ModelError:
    """The reply does not follow the chat-completions schema."""
    return ModelError(f"the model endpoint sent a malformed reply: {detail}")


def _model_turn(response: Any, *, record_tokens: bool = False) -> ModelTurn:
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

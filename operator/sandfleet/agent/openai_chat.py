"""The Model adapter over the openai SDK's chat completions: the only module importing openai.

Works with any OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, llama.cpp, ...). Retries
of 408/409/429/5xx, timeouts and connection errors are model_retries' (the SDK's own are off,
so each retry can be reported): this module says which failures are retryable and
classifies what is left after them. Connecting (TCP and the TLS handshake) has its own short
timeout, so an endpoint that never answers the handshake fails in seconds, not after the
long read timeout.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletion

from sandfleet.agent.chat_replies import model_turn
from sandfleet.agent.config import AgentConfig
from sandfleet.agent.context_overflow import context_length_error
from sandfleet.agent.endpoint_hints import (
    connect_timed_out,
    plain_http_instead_of_tls,
    tls_failed,
    v1_base_url,
)
from sandfleet.agent.events import one_line
from sandfleet.agent.model import ChatCompletionsMessages, ContextLengthExceededError, ModelTurn
from sandfleet.agent.model_retries import Retryable, with_retries
from sandfleet.agent.token_records import TOKEN_REQUEST_FIELDS
from sandfleet.errors import ModelError
from sandfleet.logs import get_logger
from sandfleet.tool_calls import ToolSpec

log = get_logger(__name__)

# Local servers (vLLM, llama.cpp) ignore the key, but the SDK refuses to start without one.
_PLACEHOLDER_API_KEY = "EMPTY"

CONNECT_TIMEOUT_S = 10.0
"""Bound on opening a connection to the endpoint: TCP connect and TLS handshake (the request
timeout bounds the rest). Generous for any reachable server, short next to the default
600 s request timeout that a handshake nobody answers would otherwise wait out."""

# Statuses worth another attempt (as the openai SDK's own retries chose them): request
# timeout, lock conflict, rate limit, server errors.
_RETRY_STATUSES = frozenset({408, 409, 429})

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
        max_retries: int = 0,
    ) -> None:
        """`record_tokens`: ask for token ids and logprobs and put them on each ModelTurn;
        `max_retries`: retries of a failed request (model_retries), on top of any the client
        does itself."""
        self._max_retries = max_retries
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
                timeout=openai.Timeout(
                    config.request_timeout_s,
                    connect=min(CONNECT_TIMEOUT_S, config.request_timeout_s),
                ),
                max_retries=0,  # with_retries does them, reporting each one
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
            max_retries=config.max_retries,
        )

    @property
    def name(self) -> str:
        return self._model

    def with_sampling(
        self, *, temperature: float | None, top_p: float | None, seed: int | None
    ) -> OpenAIChatModel:
        """The same model and client with other sampling settings (None keeps this one's):
        a server's per-request knobs without a client, and its connections, per request."""
        return OpenAIChatModel(
            self._client,
            model=self._model,
            temperature=self._temperature if temperature is None else temperature,
            top_p=self._top_p if top_p is None else top_p,
            seed=self._seed if seed is None else seed,
            extra_body=self._extra_body,
            endpoint_concurrency=self._concurrency,
            record_tokens=False,
            max_retries=self._max_retries,
        )

    async def complete(
        self, transcript: Sequence[Any], tools: Sequence[ToolSpec], *, max_tokens: int | None
    ) -> ModelTurn:
        options = self._request_options(tools, max_tokens)
        async with endpoint_slots(self._endpoint, self._concurrency):
            started = time.perf_counter()
            try:
                response = await with_retries(
                    lambda: self._create(transcript, options),
                    max_retries=self._max_retries,
                    classify=self._retryable,
                )
            except openai.APIStatusError as exc:
                overflow = _overflow(exc)
                if overflow is not None:
                    raise overflow from exc
                message = _describe(exc) + _not_found_hint(exc.status_code, self._endpoint)
                raise ModelError(message, status_code=exc.status_code) from exc
            except openai.APITimeoutError as exc:
                raise ModelError(self._timed_out(exc)) from exc
            except openai.APIConnectionError as exc:
                raise ModelError(self._unreachable(exc)) from exc
            except openai.OpenAIError as exc:
                raise ModelError(f"{type(exc).__name__}: {exc}") from exc
            except ValueError as exc:  # a 200 whose body is not JSON (the SDK's json.loads)
                raise ModelError(
                    f"the model endpoint sent a reply that is not JSON: {exc}"
                ) from exc
        log.debug("model_replied", model=self._model, latency_s=time.perf_counter() - started)
        try:
            return model_turn(response, record_tokens=self._record_tokens)
        except (AttributeError, TypeError, ValueError) as exc:  # a non-conforming server
            raise ModelError(f"the model endpoint sent a malformed reply: {exc}") from exc

    async def _create(self, transcript: Sequence[Any], options: dict[str, Any]) -> Any:
        """One attempt. An https:// endpoint that fails the TLS handshake or never answers
        it is asked once over plain HTTP: a server that answers so is a wrong scheme, said at
        once instead of retried."""
        body = {"model": self._model, "messages": transcript, **options}
        body.update(body.pop("extra_body", None) or {})
        try:
            # The SDK's low-level post, not chat.completions.create: create first walks the
            # whole body against its TypedDicts (about 1 ms per call for the paper's prompt
            # and tool schemas, on every turn), a walk that changes nothing in a body of
            # plain JSON like this one (its params have no aliases).
            return await self._client.post("/chat/completions", cast_to=ChatCompletion,
                                           body=body)  # fmt: skip
        except openai.APIConnectionError as exc:
            if (
                self._endpoint.startswith("https:")
                and (tls_failed(exc) or connect_timed_out(exc))
                and await plain_http_instead_of_tls(self._endpoint)
            ):
                raise ModelError(
                    f"the endpoint {self._endpoint} answered plain HTTP, not TLS: use http:// "
                    "in --base-url"
                ) from exc
            raise

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

    def _retryable(self, error: BaseException) -> Retryable | None:
        """Whether a failed attempt deserves another (None: raise it now), and why it failed."""
        if isinstance(error, openai.APIStatusError):
            status = error.status_code
            if (status not in _RETRY_STATUSES and status < 500) or _overflow(error) is not None:
                return None
            return Retryable(
                f"HTTP {status}: {one_line(_endpoint_message(error), 200)}",
                status_code=status,
                retry_after_s=_retry_after(error),
            )
        if isinstance(error, openai.APITimeoutError):
            return Retryable(self._timeout_cause(error))
        if isinstance(error, openai.APIConnectionError):
            if self._endpoint.startswith("https:") and tls_failed(error):
                return None  # a TLS mismatch does not heal; _unreachable says what it is
            return Retryable(f"connection failed: {error.__cause__ or error}")
        return None

    def _timeout_cause(self, error: openai.APITimeoutError) -> str:
        if connect_timed_out(error):
            return f"could not connect within {self._limit('connect')}"
        return f"no answer within {self._limit('read')}"

    def _limit(self, phase: str) -> str:
        timeout = self._client.timeout  # a float, or a Timeout with connect and read limits
        limit = getattr(timeout, phase, timeout)
        return f"{limit:g} s" if isinstance(limit, int | float) else "its time limit"

    def _timed_out(self, error: openai.APITimeoutError) -> str:
        if connect_timed_out(error):
            return (
                f"cannot reach the model endpoint {self._endpoint}: no connection within "
                f"{self._limit('connect')}"
            )
        return (
            f"the model endpoint {self._endpoint} timed out: no answer within "
            f"{self._limit('read')}, the request timeout (raise it with "
            "--request-timeout-seconds or SANDFLEET_REQUEST_TIMEOUT_SECONDS)"
        )

    def _unreachable(self, error: openai.APIConnectionError) -> str:
        cause = error.__cause__ or error
        if self._endpoint.startswith("https:") and tls_failed(error):
            return f"no TLS connection to the model endpoint {self._endpoint}: {cause}"
        return f"cannot reach the model endpoint {self._endpoint}: {cause}"

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
    suggestion = v1_base_url(endpoint) if status == 404 else None
    if suggestion is None:
        return ""
    return (
        f" (the endpoint answered 404 at {endpoint}/chat/completions; OpenAI-compatible "
        f"servers usually serve under /v1: try --base-url {suggestion})"
    )


def _retry_after(exc: openai.APIStatusError) -> float | None:
    """The endpoint's Retry-After (or the non-standard retry-after-ms) in seconds."""
    headers = exc.response.headers
    for header, divisor in (("retry-after-ms", 1000), ("retry-after", 1)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            return float(value) / divisor
        except ValueError:
            continue  # an HTTP date: rare from model servers, backoff is fine then
    return None


def _endpoint_message(exc: openai.APIStatusError) -> str:
    """The endpoint's own error message, without the SDK's "Error code: N - " prefix."""
    body = exc.body
    if isinstance(body, Mapping) and isinstance(body.get("message"), str) and body["message"]:
        return str(body["message"])
    return exc.message

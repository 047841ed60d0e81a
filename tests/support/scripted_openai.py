"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1 (stdlib asyncio only).

Real HTTP/1.1 with keep-alive, so the real `openai` client talks to it unchanged. Each
POST .../chat/completions consumes the next step of a script (or asks a responder
function): a reply with text and/or tool calls and usage, an HTTP error (429 with
Retry-After, 500, a 400 context-length error, ...) or a hang that lasts until released.
With a ContextWindow, a request whose messages are too long is answered with the
overflow 400 llama.cpp or vLLM would send, without consuming a step. Every request body is
recorded for assertions. With `tokens="vllm"` or `tokens="llama.cpp"`, a reply carries token
ids and logprobs the way that server returns them when asked (a toy tokenizer stands in for
the model's: ToyTokens below).

Also runnable as a process for benchmarks:
    python -m tests.support.scripted_openai --bench-tool-turns 10
prints "PORT\\n" once listening and answers every conversation with that many
execute_bash calls, then a submit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal

TokenFamily = Literal["vllm", "llama.cpp"]


class ToyTokens:
    """A toy chat template and tokenizer: every UTF-8 byte is its own token id, and each
    message is <|role|> + body + <|end|>. Like a real template it renders a conversation
    append-only, so turn k+1's prompt starts with turn k's prompt and completion."""

    ROLES: ClassVar[Mapping[str, int]] = {"system": 256, "user": 257, "assistant": 258, "tool": 259}
    END = 260
    GENERATION = ROLES["assistant"]
    """The generation prompt ending every prompt: the assistant's role marker."""

    @staticmethod
    def text(text: str) -> list[int]:
        return list(text.encode("utf-8"))

    @staticmethod
    def body(message: Mapping[str, Any]) -> str:
        """What a message renders as between its markers (tool calls after the text)."""
        rendered = str(message.get("content") or "")
        for call in message.get("tool_calls") or ():
            function = call["function"]
            rendered += f"<call>{function['name']} {function['arguments']}</call>"
        return rendered

    @classmethod
    def message(cls, message: Mapping[str, Any]) -> list[int]:
        return [cls.ROLES[message["role"]], *cls.text(cls.body(message)), cls.END]

    @classmethod
    def prompt(cls, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        ids = [token for message in messages for token in cls.message(message)]
        return [*ids, cls.GENERATION]

    @classmethod
    def completion(cls, message: Mapping[str, Any]) -> list[int]:
        return [*cls.text(cls.body(message)), cls.END]

    @staticmethod
    def logprob(token: int) -> float:
        """A made-up logprob of a sampled token, exact in binary (sixteenths)."""
        return -((token % 13) + 1) / 16

    @classmethod
    def piece(cls, token: int) -> str:
        if token < 256:
            return bytes([token]).decode("latin-1")
        return "<|end|>" if token == cls.END else "<|assistant|>"


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    411: "Length Required",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@dataclasses.dataclass(frozen=True)
class ScriptedCall:
    name: str
    arguments: str | Mapping[str, Any] = "{}"
    """A mapping is sent as JSON; a string is sent as is (so it may be malformed)."""
    call_id: str | None = None


@dataclasses.dataclass(frozen=True)
class Reply:
    text: str | None = None
    tool_calls: Sequence[ScriptedCall] = ()
    prompt_tokens: int = 10
    completion_tokens: int = 5
    finish_reason: str | None = None
    reasoning: str | None = None
    """Sent as the vLLM-style `reasoning_content` field of the message."""
    delay_s: float = 0.0
    """Simulated generation latency before the reply is sent."""


@dataclasses.dataclass(frozen=True)
class Fail:
    status: int
    message: str = "scripted failure"
    code: str | int | None = None
    retry_after_s: float | None = None
    """Sent as a Retry-After header (seconds; fractions allowed, the SDK accepts them)."""
    error_type: str = "scripted_error"
    fields: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """More fields of the error object (llama.cpp's n_prompt_tokens and n_ctx)."""


@dataclasses.dataclass(frozen=True)
class Raw:
    """Any body at all, as a broken or hostile endpoint sends it: `body` bytes go out as is,
    a mapping or list is sent as JSON (so it may break the chat-completions schema)."""

    body: bytes | Mapping[str, Any] | list[Any]
    status: int = 200
    content_type: str = "application/json"


@dataclasses.dataclass(frozen=True)
class Hang:
    """Hold the request open until `release` is set (then answer `then`) or the client leaves."""

    release: asyncio.Event | None = None
    then: Reply | Fail | None = None


Step = Reply | Fail | Hang | Raw


def tool_call(name: str, arguments: str | Mapping[str, Any] = "{}") -> ScriptedCall:
    return ScriptedCall(name, arguments)


def bash(command: str) -> ScriptedCall:
    return ScriptedCall("execute_bash", {"command": command})


def submit() -> ScriptedCall:
    return ScriptedCall("submit", {})


def context_length_failure(
    window: int, prompt_tokens: int, requested: int, *, code: str | None = "context_length_exceeded"
) -> Fail:
    """A 400 worded the way vLLM reports an overflowing request (vLLM itself sends no code)."""
    return Fail(
        400,
        f"This model's maximum context length is {window} tokens. However, you requested "
        f"{prompt_tokens + requested} tokens ({prompt_tokens} in the messages, {requested} "
        "in the completion). Please reduce the length of the messages or completion.",
        code=code,
        error_type="BadRequestError",
    )


@dataclasses.dataclass
class ContextWindow:
    """A context window the server enforces, counting a token per 4 characters of the
    request's messages and tools (a stand-in for the model's tokenizer).

    With `above_first_request`, the window is `tokens` more than the first request's size,
    so a test does not depend on the length of the prompts and tool descriptions.
    """

    tokens: int
    server: Literal["llama.cpp", "vllm"] = "llama.cpp"
    above_first_request: bool = False
    first_request_tokens: int | None = None

    def prompt_tokens(self, body: Any) -> int:
        body = body or {}
        size = len(json.dumps(body.get("messages", []))) + len(json.dumps(body.get("tools", [])))
        return size // 4

    def rejection(self, body: Any) -> Fail | None:
        """The server's 400 when the request does not fit, else None. llama.cpp checks the
        prompt alone; vLLM the prompt plus max_tokens."""
        prompt = self.prompt_tokens(body)
        if self.first_request_tokens is None:
            self.first_request_tokens = prompt
        window = self.tokens + (self.first_request_tokens if self.above_first_request else 0)
        requested = int((body or {}).get("max_tokens") or 0)
        if self.server == "llama.cpp":
            if prompt < window:
                return None
            return Fail(
                400,
                f"request ({prompt} tokens) exceeds the available context size "
                f"({window} tokens), try increasing it",
                code=400,
                error_type="exceed_context_size_error",
                fields={"n_prompt_tokens": prompt, "n_ctx": window},
            )
        if prompt + requested <= window:
            return None
        return context_length_failure(window, prompt, requested, code=None)


@dataclasses.dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: Mapping[str, str]
    """Lower-cased names."""
    body: Any
    received_at: float


class ScriptedOpenAIServer:
    """`async with ScriptedOpenAIServer([Reply(...), Fail(429, ...)]) as server:` then point
    an AsyncOpenAI client (or AgentConfig.base_url) at `server.base_url`."""

    def __init__(
        self,
        script: Iterable[Step] = (),
        *,
        responder: Callable[[RecordedRequest], Step] | None = None,
        host: str = "127.0.0.1",
        context_window: ContextWindow | None = None,
        tokens: TokenFamily | None = None,
        only_under_v1: bool = False,
        models: Sequence[str] = ("m",),
    ) -> None:
        """`host`: the address to listen on; another local address (a test cluster's bridge)
        makes the server reachable from pods. `tokens`: answer token requests (logprobs,
        return_token_ids) as that server family does; None ignores them, as OpenAI-compatible
        servers without token data do. `only_under_v1`: serve only below /v1, as vLLM and
        OpenAI do (by default any path ending in /chat/completions is served). `models`: the
        ids GET .../models lists."""
        self.host = host
        self.only_under_v1 = only_under_v1
        self.models = tuple(models)
        self.tokens = tokens
        self.context_window = context_window
        self.overflows = 0
        """Requests answered with the context window's rejection."""
        self._script: list[Step] = list(script)
        self._responder = responder
        self.requests: list[RecordedRequest] = []
        self._arrived = asyncio.Condition()
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._ids = itertools.count(1)
        self.port = 0
        self.in_flight = 0
        """Chat requests received and not yet answered."""
        self.max_in_flight = 0

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def add(self, *steps: Step) -> None:
        self._script.extend(steps)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    async def start(self) -> ScriptedOpenAIServer:
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        # Closing the sockets lets every handler (hung ones too) see EOF and return.
        for writer in self._connections.values():
            writer.close()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def __aenter__(self) -> ScriptedOpenAIServer:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def wait_for_requests(self, count: int, timeout_s: float = 10.0) -> None:
        """Return once `count` requests have arrived (raises TimeoutError after timeout_s)."""
        async with asyncio.timeout(timeout_s), self._arrived:
            await self._arrived.wait_for(lambda: len(self.requests) >= count)

    # --- HTTP ---------------------------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        try:
            while await self._serve_one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, path, _ = request_line.split(" ", 2)
        headers = {}
        for line in header_lines:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        if "content-length" not in headers and method == "POST":
            await _respond(writer, 411, {"error": {"message": "content-length required"}})
            return False
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
        body = json.loads(raw) if raw else None
        request = RecordedRequest(method, path, headers, body, time.monotonic())
        async with self._arrived:
            self.requests.append(request)
            self._arrived.notify_all()
        keep_alive = headers.get("connection", "").lower() != "close"
        routed = not self.only_under_v1 or path.startswith("/v1/")
        if routed and method == "GET" and path.endswith("/models"):
            listing = [
                {"id": name, "object": "model", "owned_by": "scripted"} for name in self.models
            ]
            await _respond(writer, 200, {"object": "list", "data": listing})
            return keep_alive
        if not routed or method != "POST" or not path.endswith("/chat/completions"):
            await _respond(writer, 404, {"error": {"message": f"no route {method} {path}"}})
            return keep_alive
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            rejection = self.context_window.rejection(body) if self.context_window else None
            if rejection is not None:
                self.overflows += 1
                return await self._answer(rejection, body, reader, writer, keep_alive)
            return await self._answer(self._next_step(request), body, reader, writer, keep_alive)
        finally:
            self.in_flight -= 1

    async def _answer(
        self,
        step: Step,
        body: Any,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        keep_alive: bool,
    ) -> bool:
        if isinstance(step, Hang):
            resumed = await self._hang(step, reader)
            if resumed is None:
                return False
            step = resumed
        if isinstance(step, Raw):
            data = step.body if isinstance(step.body, bytes) else json.dumps(step.body).encode()
            await _send(writer, step.status, data, {"content-type": step.content_type})
            return keep_alive
        if isinstance(step, Fail):
            extra = {}
            if step.retry_after_s is not None:
                extra["retry-after"] = f"{step.retry_after_s:g}"
            error = {
                "message": step.message,
                "type": step.error_type,
                "code": step.code,
                **step.fields,
            }
            await _respond(writer, step.status, {"error": error}, extra)
            return keep_alive
        if step.delay_s:
            await asyncio.sleep(step.delay_s)
        await _respond(writer, 200, self._completion(step, body))
        return keep_alive

    def _next_step(self, request: RecordedRequest) -> Step:
        if self._script:
            return self._script.pop(0)
        if self._responder is not None:
            return self._responder(request)
        return Fail(400, "scripted server: the script is exhausted")

    async def _hang(self, step: Hang, reader: asyncio.StreamReader) -> Reply | Fail | None:
        # Watching the socket too: a client that gives up (timeout, cancellation) closes it.
        waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(reader.read(1))]
        if step.release is not None:
            waiters.append(asyncio.ensure_future(step.release.wait()))
        try:
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        if waiters[0] in done or step.then is None:
            return None
        return step.then

    def _completion(self, reply: Reply, body: Any) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.call_id or f"call_{next(self._ids)}",
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": call.arguments
                        if isinstance(call.arguments, str)
                        else json.dumps(call.arguments),
                    },
                }
                for call in reply.tool_calls
            ]
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
        completion: dict[str, Any] = {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": (body or {}).get("model", "scripted"),
            "choices": [choice],
            "usage": {
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "total_tokens": reply.prompt_tokens + reply.completion_tokens,
            },
        }
        if self.tokens is not None:
            self._add_tokens(completion, choice, body or {})
        return completion

    def _add_tokens(self, completion: dict[str, Any], choice: dict[str, Any], body: Any) -> None:
        """Token ids and logprobs where the family puts them, when the request asks.

        vLLM (>= 0.10.2): return_token_ids -> top-level prompt_token_ids and the choice's
        token_ids; logprobs -> choice.logprobs.content of {token, logprob, bytes,
        top_logprobs}. llama.cpp: no prompt ids; logprobs (with top_logprobs > 0) -> the
        same entries plus the token "id"."""
        prompt = ToyTokens.prompt(body.get("messages", []))
        generated = ToyTokens.completion(choice["message"])
        asked_ids = bool(body.get("return_token_ids"))
        if self.tokens == "vllm" and asked_ids:
            completion["prompt_token_ids"] = prompt
            choice["token_ids"] = generated
        wants_logprobs = bool(body.get("logprobs"))
        if self.tokens == "llama.cpp":
            wants_logprobs = wants_logprobs and int(body.get("top_logprobs") or 0) > 0
        if not wants_logprobs:
            return
        entries = []
        for token in generated:
            piece = ToyTokens.piece(token)
            entry: dict[str, Any] = {
                "token": piece,
                "logprob": ToyTokens.logprob(token),
                "bytes": list(piece.encode("utf-8")),
                "top_logprobs": [],
            }
            if self.tokens == "llama.cpp":
                entry["id"] = token
            entries.append(entry)
        choice["logprobs"] = {"content": entries}


async def _respond(
    writer: asyncio.StreamWriter,
    status: int,
    payload: Any,
    extra_headers: Mapping[str, str] | None = None,
) -> None:
    await _send(
        writer, status, json.dumps(payload).encode(),
        {"content-type": "application/json", **(extra_headers or {})},
    )  # fmt: skip


async def _send(
    writer: asyncio.StreamWriter, status: int, data: bytes, headers: Mapping[str, str]
) -> None:
    lines = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}",
        f"content-length: {len(data)}",
        "connection: keep-alive",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data)
    await writer.drain()


def bench_responder(tool_turns: int) -> Callable[[RecordedRequest], Step]:
    """Every conversation: `tool_turns` execute_bash calls, then submit (stateless)."""

    def respond(request: RecordedRequest) -> Step:
        done = sum(1 for m in request.body.get("messages", ()) if m.get("role") == "tool")
        if done < tool_turns:
            return Reply(tool_calls=[bash(f"echo step {done}")], prompt_tokens=100 + done)
        return Reply(text="done", tool_calls=[submit()])

    return respond


async def _serve_forever(tool_turns: int) -> None:
    server = await ScriptedOpenAIServer(responder=bench_responder(tool_turns)).start()
    print(server.port, flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bench-tool-turns", type=int, default=10)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(args.bench_tool_turns))

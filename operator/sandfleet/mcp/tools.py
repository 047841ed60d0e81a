"""The MCP session's tools on one lazily opened sandbox, without the MCP SDK.

`execute_bash` and `str_replace_editor` are the agent loop's tools: the same schemas
(`tool_specs`), the same parser and the same observation texts (sandfleet.tool_calls), so
a model sees over MCP what it sees in a Sandfleet run. `upload_file`, `download_file` and
`reset` are the program's helpers a framework needs around them. `submit` is left out: an
MCP client's agent ends its own run.

A bad call (unknown tool, bad arguments, an edit the editor refuses, a file too big) is an
`is_error` outcome whose text is for the model; it never ends the session. Only a lost
sandbox or one that cannot be opened raises.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio

from sandfleet.errors import SandboxLostError, SandfleetError, ToolError
from sandfleet.logs import get_logger
from sandfleet.sandbox.core import SandboxCore
from sandfleet.tool_calls import (
    EXECUTE_BASH,
    STR_REPLACE_EDITOR,
    BashRequest,
    SubmitRequest,
    ToolCallError,
    ToolSpec,
    editor_error_observation,
    editor_observation,
    observe,
    parse_tool_call,
    run_editor_request,
    tool_specs,
)

log = get_logger(__name__)

UPLOAD_FILE = "upload_file"
DOWNLOAD_FILE = "download_file"
RESET = "reset"
MAX_TRANSFER_BYTES = 4 * 1024 * 1024
"""Largest file `upload_file` writes or `download_file` returns (decoded bytes): one MCP
message carries the whole file, base64 makes it a third bigger, and it lands in the
model's context unless the client keeps it out."""
_ENCODINGS = ("text", "base64")


@dataclasses.dataclass(frozen=True, slots=True)
class Caller:
    """Who a session's sandbox is opened for: the bearer token of the request that opens
    it (None over stdio) and, where the server lets callers choose, their namespace and
    pool (None: the server's own settings)."""

    token: str | None = dataclasses.field(default=None, repr=False)
    namespace: str | None = None
    pool: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Identity:
    """Who sent an HTTP request, as the server's verifier decided: a session is bound to
    `name` (another identity gets 404 for its id), its sandbox is opened for `caller`."""

    name: str
    caller: Caller


SandboxOpener = Callable[[Caller], AbstractAsyncContextManager[SandboxCore]]
"""Opens the session's sandbox for a caller; leaving the context releases it."""


def _transfer_parameters(*, upload: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "path": {"type": "string", "description": "Absolute path in the sandbox."},
        "encoding": {
            "type": "string",
            "enum": list(_ENCODINGS),
            "description": "`text` (UTF-8, the default) or `base64` for binary content.",
        },
    }
    required = ["path"]
    if upload:
        properties["content"] = {
            "type": "string",
            "description": "The whole file, as UTF-8 text or base64 (see `encoding`).",
        }
        properties["mode"] = {
            "type": "integer",
            "description": "Permission bits, e.g. 493 (0o755) for a script; default 420 (0o644).",
        }
        required.append("content")
    return {"type": "object", "properties": properties, "required": required}


def mcp_tool_specs() -> tuple[ToolSpec, ...]:
    """The tools an MCP client lists: the loop's two sandbox tools, then the helpers."""
    limit = f"{MAX_TRANSFER_BYTES // (1024 * 1024)} MiB"
    loop_tools = tuple(spec for spec in tool_specs() if spec.name in _LOOP_TOOLS)
    return (
        *loop_tools,
        ToolSpec(
            UPLOAD_FILE,
            f"Write a file into the sandbox (parent directories are created, an existing "
            f"file is replaced). At most {limit}.",
            _transfer_parameters(upload=True),
        ),
        ToolSpec(
            DOWNLOAD_FILE,
            f"Read a file from the sandbox, as text or base64. At most {limit}.",
            _transfer_parameters(upload=False),
        ),
        ToolSpec(
            RESET,
            "Put the sandbox back to its starting state: every process killed, the shell "
            "restarted, the working files as they were when the sandbox was opened.",
            {"type": "object", "properties": {}, "required": []},
        ),
    )


_LOOP_TOOLS = (STR_REPLACE_EDITOR, EXECUTE_BASH)


@dataclasses.dataclass(frozen=True, slots=True)
class ToolOutcome:
    text: str
    is_error: bool = False


class SessionTools:
    """The tools of one MCP session; its sandbox opens at the first call that needs it and
    is released by `close()` (the end of the session)."""

    def __init__(
        self, opener: SandboxOpener, *, tool_timeout_s: float = 0, label: str = ""
    ) -> None:
        self._opener = opener
        self._tool_timeout_s = tool_timeout_s
        self._label = label
        self._lock = anyio.Lock()  # the client may send calls concurrently
        self._stack = contextlib.AsyncExitStack()
        self._sandbox: SandboxCore | None = None
        self._closed = False
        self._caller = Caller()

    @property
    def opened(self) -> bool:
        return self._sandbox is not None

    async def call(
        self, name: str, arguments: Mapping[str, Any] | None, *, caller: Caller | None = None
    ) -> ToolOutcome:
        """Run one tool call; raises SandfleetError only when the sandbox cannot be opened
        or is lost. `caller` is whom the sandbox is opened for, if this call opens it.

        A lost sandbox is released at once (SandboxLostError propagates): the session's next
        call opens a fresh one rather than failing forever."""
        self._caller = caller or Caller()
        try:
            return await self._call(name, arguments or {})
        except SandboxLostError:
            async with self._lock:
                log.warning("mcp_sandbox_lost", session=self._label)
                self._sandbox = None
                stack, self._stack = self._stack, contextlib.AsyncExitStack()
            with contextlib.suppress(SandfleetError):
                await stack.aclose()
            raise

    async def _call(  # noqa: PLR0911 (one return per kind of outcome)
        self, name: str, arguments: Mapping[str, Any]
    ) -> ToolOutcome:
        if name == UPLOAD_FILE:
            return await self._upload(arguments)
        if name == DOWNLOAD_FILE:
            return await self._download(arguments)
        if name == RESET:
            return await self._reset()
        tools = tool_specs() if name in _LOOP_TOOLS else ()
        try:
            request = parse_tool_call(name, arguments, tools=tools)
        except ToolCallError as error:
            return ToolOutcome(str(error), is_error=True)
        sandbox = await self._sandbox_now()
        if isinstance(request, BashRequest):
            observation = await observe(sandbox.client, request, timeout_s=self._tool_timeout_s)
            return ToolOutcome(observation)
        if isinstance(request, SubmitRequest):  # not offered (see `tools` above)
            return ToolOutcome(f"Unknown action: {name}", is_error=True)
        try:
            # Not `observe`: an editor refusal has the same text, and is an MCP tool error.
            output = await run_editor_request(sandbox.client, request)
        except ToolError as error:
            return ToolOutcome(editor_error_observation(str(error)), is_error=True)
        return ToolOutcome(editor_observation(output))

    async def close(self) -> None:
        """Release the sandbox (if one was opened); later calls are refused."""
        self._closed = True
        if self._sandbox is not None:
            log.info("mcp_sandbox_releasing", session=self._label)
        self._sandbox = None
        await self._stack.aclose()

    async def _sandbox_now(self) -> SandboxCore:
        async with self._lock:
            if self._closed:
                raise SandfleetError("this MCP session has ended")
            if self._sandbox is None:
                self._sandbox = await self._stack.enter_async_context(self._opener(self._caller))
                log.info("mcp_sandbox_opened", session=self._label)
            return self._sandbox

    async def _upload(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        try:
            path = _string(arguments, "path", UPLOAD_FILE)
            data = _decoded_content(arguments)
            mode = _mode(arguments.get("mode"))
        except ToolCallError as error:
            return ToolOutcome(str(error), is_error=True)
        sandbox = await self._sandbox_now()
        try:
            result = await sandbox.upload(data, path, mode=mode)
        except ToolError as error:
            return ToolOutcome(f"Error: {error}", is_error=True)
        return ToolOutcome(f"Wrote {result.size} bytes to {result.path}.")

    async def _download(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        try:
            path = _string(arguments, "path", DOWNLOAD_FILE)
            encoding = _encoding(arguments)
        except ToolCallError as error:
            return ToolOutcome(str(error), is_error=True)
        sandbox = await self._sandbox_now()
        chunks: list[bytes] = []
        size = 0
        try:
            async with contextlib.aclosing(sandbox.client.download_chunks(path)) as stream:
                async for chunk in stream:
                    size += len(chunk)
                    if size > MAX_TRANSFER_BYTES:  # closing the stream cancels the transfer
                        return ToolOutcome(
                            f"Error: {path} is larger than {MAX_TRANSFER_BYTES} bytes, the most "
                            "download_file returns. Split it or compress it in the sandbox "
                            "first.",
                            is_error=True,
                        )
                    chunks.append(chunk)
        except ToolError as error:
            return ToolOutcome(f"Error: {error}", is_error=True)
        data = b"".join(chunks)
        if encoding == "base64":
            return ToolOutcome(base64.b64encode(data).decode("ascii"))
        try:
            return ToolOutcome(data.decode("utf-8"))
        except UnicodeDecodeError:
            return ToolOutcome(
                f"Error: {path} is not UTF-8 text; download it with encoding `base64`.",
                is_error=True,
            )

    async def _reset(self) -> ToolOutcome:
        if self._sandbox is None:  # nothing ran yet: it is as fresh as it gets
            return ToolOutcome("The sandbox is in its starting state.")
        sandbox = await self._sandbox_now()
        try:
            result = await sandbox.reset()
        except ToolError as error:
            return ToolOutcome(f"Error: the sandbox cannot be reset: {error}", is_error=True)
        return ToolOutcome(
            f"The sandbox is back in its starting state ({result.killed_processes} processes "
            f"killed, {result.closed_sessions} shells closed, "
            f"{result.removed_paths + result.restored_paths} paths restored)."
        )


def _string(arguments: Mapping[str, Any], name: str, tool: str) -> str:
    value = arguments.get(name)
    if not isinstance(value, str) or not value:
        raise ToolCallError(f"Error: {tool} needs the parameter `{name}` as a non-empty string.")
    return value


def _encoding(arguments: Mapping[str, Any]) -> str:
    encoding = arguments.get("encoding") or "text"
    if encoding not in _ENCODINGS:
        raise ToolCallError(
            f"Error: `encoding` must be one of {', '.join(_ENCODINGS)}, got {encoding!r}."
        )
    return str(encoding)


def _decoded_content(arguments: Mapping[str, Any]) -> bytes:
    content = arguments.get("content")
    if not isinstance(content, str):
        raise ToolCallError("Error: upload_file needs the parameter `content` as a string.")
    if _encoding(arguments) == "text":
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate
            raise ToolCallError("Error: `content` is not valid text; send it as base64.") from None
    else:
        try:
            data = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise ToolCallError("Error: `content` is not valid base64.") from None
    if len(data) > MAX_TRANSFER_BYTES:
        raise ToolCallError(
            f"Error: the file is {len(data)} bytes; upload_file takes at most "
            f"{MAX_TRANSFER_BYTES}. Send it in parts and join them with execute_bash."
        )
    return data


def _mode(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0o7777:
        raise ToolCallError("Error: `mode` must be permission bits, an integer from 0 to 4095.")
    return value

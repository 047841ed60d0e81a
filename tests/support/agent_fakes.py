"""In-process fakes for agent-loop tests and benchmarks: a scripted Model and a tiny sandbox."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import posixpath
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sandfleet.agent import ModelError, ModelTurn, ToolCall, ToolSpec, Usage
from sandfleet.agent.model import ChatCompletionsMessages
from sandfleet.errors import SandboxLostError, ToolError
from sandfleet.sandbox.facade import SandboxPaths


def turn(
    text: str = "",
    *calls: tuple[str, str | Mapping[str, Any]],
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
) -> ModelTurn:
    """A ModelTurn from (tool name, arguments) pairs; mapping arguments become JSON."""
    tool_calls = tuple(
        ToolCall(f"call_{i}", name, args if isinstance(args, str) else json.dumps(args))
        for i, (name, args) in enumerate(calls)
    )
    message = {"role": "assistant", "content": text, "calls": [c.call_id for c in tool_calls]}
    return ModelTurn(text, tool_calls, Usage(prompt_tokens, completion_tokens), message)


@dataclasses.dataclass
class ModelCall:
    transcript_length: int
    last_item: Any
    max_tokens: int | None


class ScriptedModel(ChatCompletionsMessages):
    """Replays ModelTurns (or raises scripted exceptions) in order; records each call.

    With `hold_call=n`, the n-th call (from 1) sets `waiting` and then waits for `release`,
    so a test can look at the run while it is paused mid-turn.
    """

    def __init__(
        self,
        script: Iterable[ModelTurn | BaseException],
        *,
        repeat_last: bool = False,
        hold_call: int | None = None,
    ) -> None:
        self._script = list(script)
        self._repeat_last = repeat_last
        self._hold_call = hold_call
        self.calls: list[ModelCall] = []
        self.transcript: Sequence[Any] = ()
        self.waiting = asyncio.Event()
        self.release = asyncio.Event()
        self.closed = False

    @property
    def name(self) -> str:
        return "scripted"

    async def complete(
        self, transcript: Sequence[Any], tools: Sequence[ToolSpec], *, max_tokens: int | None
    ) -> ModelTurn:
        self.transcript = transcript
        self.calls.append(ModelCall(len(transcript), transcript[-1], max_tokens))
        if len(self.calls) == self._hold_call:
            self.waiting.set()
            await self.release.wait()
        if not self._script:
            raise ModelError("scripted model: script exhausted")
        step = (
            self._script[0] if self._repeat_last and len(self._script) == 1 else self._script.pop(0)
        )
        if isinstance(step, BaseException):
            raise step
        return step

    async def aclose(self) -> None:
        self.closed = True


ToolHandler = Callable[["FakeSandbox", str, Mapping[str, Any]], Awaitable[str] | str]


class FakeSandbox:
    """An in-memory sandbox: files in a dict, tool calls answered by `handler`.

    The default handler understands `execute_bash` commands of the form
    `echo TEXT > PATH` (writes a file) and otherwise echoes the command.
    """

    def __init__(
        self,
        handler: ToolHandler | None = None,
        *,
        paths: SandboxPaths | None = None,
        lose_after_calls: int | None = None,
    ) -> None:
        self.paths = paths or SandboxPaths()
        self.files: dict[str, bytes] = {}
        self.tool_calls: list[tuple[str, dict[str, Any]]] = []
        self._handler = handler or default_tool_handler
        self._lose_after = lose_after_calls

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        if self._lose_after is not None and len(self.tool_calls) >= self._lose_after:
            raise SandboxLostError("runtime agent unreachable (fake)")
        self.tool_calls.append((name, dict(arguments)))
        output = self._handler(self, name, arguments)
        return output if isinstance(output, str) else await output

    async def upload(self, source: Path | bytes, remote: str, *, mode: int | None = None) -> object:
        if isinstance(source, Path):
            source = await asyncio.to_thread(source.read_bytes)
        self.files[remote] = source
        return remote

    async def download(self, remote: str, local: Path) -> int:
        if remote not in self.files:
            raise ToolError(f"no such file: {remote}", code="NOT_FOUND")
        await asyncio.to_thread(local.write_bytes, self.files[remote])
        return len(self.files[remote])

    async def list_files(self, remote_dir: str) -> list[FakeEntry]:
        prefix = remote_dir.rstrip("/") + "/"
        entries = [
            FakeEntry(p, False, len(d)) for p, d in self.files.items() if p.startswith(prefix)
        ]
        if not entries:
            raise ToolError(f"no such directory: {remote_dir}", code="NOT_FOUND")
        return sorted(entries, key=lambda e: e.path)


@dataclasses.dataclass(frozen=True)
class FakeEntry:
    path: str
    is_dir: bool
    size: int


def default_tool_handler(sandbox: FakeSandbox, name: str, arguments: Mapping[str, Any]) -> str:
    if name == "execute_bash":
        command = str(arguments.get("command", ""))
        if command.startswith("echo ") and " > " in command:
            text, path = command[5:].split(" > ", 1)
            target = posixpath.join(sandbox.paths.working_dir, path.strip())
            sandbox.files[posixpath.normpath(target)] = (text.strip("'\"") + "\n").encode()
            return "Exit code: 0\nExecution output of \\[execute_bash]:\n\\[STDOUT]\n"
        return f"Exit code: 0\nExecution output of \\[execute_bash]:\n\\[STDOUT]\n{command}\n"
    return f"Execution output of \\[str_replace_editor]:\n{arguments.get('command')} ok"

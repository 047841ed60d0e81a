"""One request's agent loop in a sandbox: its steps reported as they happen, its outcome.

The loop is the project's own (sandfleet.agent); this module only watches it: a wrapper
around the sandbox reports every tool call (the full command and its observation, which the
loop's own one-line events shorten), and a wrapper around the model times each upstream
call and measures how much of the final prompt the environment (observations) wrote.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sandfleet.agent import AgentConfig, AgentResult, Model, ModelTurn, Task, run_agent
from sandfleet.agent.sandbox_access import FileEntryView
from sandfleet.errors import SandfleetError
from sandfleet.logs import get_logger
from sandfleet.sandbox.copy_back import CopyLimits
from sandfleet.sandbox.facade import Sandbox
from sandfleet.tool_calls import ToolCall, ToolSpec

log = get_logger(__name__)

OBSERVATION_CLIP = 2000
"""Characters of an observation a client sees per step (the model sees all of it)."""


@dataclasses.dataclass(slots=True)
class Step:
    """One tool call the loop made in the sandbox."""

    index: int
    tool: str
    code: str
    """The bash command, or the editor call in one readable line."""
    output: str | None = None
    """The observation (clipped to OBSERVATION_CLIP); None while the call runs."""
    seconds: float = 0.0


@dataclasses.dataclass(frozen=True, slots=True)
class StepStarted:
    step: Step


@dataclasses.dataclass(frozen=True, slots=True)
class StepFinished:
    step: Step


StepEvent = StepStarted | StepFinished
Emit = Callable[[StepEvent], None]


@dataclasses.dataclass(frozen=True, slots=True)
class OutputFile:
    name: str
    """Relative to the output folder (POSIX form)."""
    size: int


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """What one run produced: the loop's result plus what serving adds to it."""

    result: AgentResult
    steps: tuple[Step, ...]
    model_calls: int
    environment_share: float | None
    """Share of the last prompt's characters that were tool observations (an estimate of
    the environment's share of tokens); None without a model call."""
    files: tuple[OutputFile, ...] = ()

    def accounting(self) -> dict[str, Any]:
        """The `sandfleet` extension field of a response: turns, times, shares."""
        result = self.result
        return {
            "stop_reason": result.stop_reason.value,
            "turns": result.turns,
            "model_calls": self.model_calls,
            "tool_calls": len(self.steps),
            "model_time_s": round(result.model_time_s, 6),
            "tool_time_s": round(result.tool_time_s, 6),
            "wall_time_s": round(result.wall_time_s, 6),
            "environment_token_share": (
                None if self.environment_share is None else round(self.environment_share, 4)
            ),
        }


def describe_call(tool: str, arguments: Mapping[str, Any]) -> str:
    """The code a client sees for a step: the bash command itself, or the editor call."""
    if tool == "execute_bash":
        return str(arguments.get("command", ""))
    details = {k: v for k, v in arguments.items() if k not in ("command", "path")}
    line = f"str_replace_editor {arguments.get('command', '?')} {arguments.get('path', '?')}"
    if details:
        line += " " + json.dumps(details, ensure_ascii=False)
    return line


def clip(text: str, limit: int = OBSERVATION_CLIP) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters]"


class WatchedSandbox:
    """The AgentSandbox the loop sees: the real sandbox, every tool call reported.

    `fresh`: nothing has run in the sandbox before this loop (a new one, not a
    conversation's), so until a tool runs its output folder is empty: a loop that answers
    without a tool skips listing it (a round trip to the runtime on the answer's path).
    """

    def __init__(self, sandbox: Sandbox, emit: Emit, *, fresh: bool = False) -> None:
        self._sandbox = sandbox
        self._emit = emit
        self._fresh = fresh
        self.steps: list[Step] = []

    @property
    def paths(self) -> Any:
        return self._sandbox.paths

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        step = Step(len(self.steps), name, describe_call(name, arguments))
        self.steps.append(step)
        self._emit(StepStarted(step))
        started = time.perf_counter()
        output = await self._sandbox.call_tool(name, arguments)
        step.seconds = time.perf_counter() - started
        step.output = clip(output)
        self._emit(StepFinished(step))
        return output

    async def upload(self, source: Path | bytes, remote: str, *, mode: int | None = None) -> object:
        return await self._sandbox.upload(source, remote, mode=mode)

    async def download(self, remote: str, local: Path) -> int:
        return await self._sandbox.download(remote, local)

    async def list_files(self, remote_dir: str) -> Sequence[FileEntryView]:
        if self._fresh and not self.steps and remote_dir == self._sandbox.paths.output_dir:
            return []
        return await self._sandbox.list_files(remote_dir)


class TimedModel:
    """The upstream model, each call timed (`on_call` gets its seconds)."""

    def __init__(self, model: Model, on_call: Callable[[float], None]) -> None:
        self._model = model
        self._on_call = on_call
        self.calls = 0
        self.environment_share: float | None = None

    @property
    def name(self) -> str:
        return self._model.name

    def system_message(self, text: str) -> Any:
        return self._model.system_message(text)

    def user_message(self, text: str) -> Any:
        return self._model.user_message(text)

    def tool_result_message(self, call: ToolCall, output: str) -> Any:
        return self._model.tool_result_message(call, output)

    def assistant_message(self, text: str, tool_calls: Sequence[ToolCall]) -> Any:
        return self._model.assistant_message(text, tool_calls)

    async def complete(
        self, transcript: Sequence[Any], tools: Sequence[ToolSpec], *, max_tokens: int | None
    ) -> ModelTurn:
        self.environment_share = _environment_share(transcript)
        started = time.perf_counter()
        try:
            return await self._model.complete(transcript, tools, max_tokens=max_tokens)
        finally:
            self.calls += 1
            self._on_call(time.perf_counter() - started)

    async def aclose(self) -> None:
        """The upstream client is shared by every request: closed by the server, not here."""


def _environment_share(transcript: Sequence[Any]) -> float | None:
    total = environment = 0
    for item in transcript:
        message = item if isinstance(item, Mapping) else {}
        content = message.get("content")
        size = len(content) if isinstance(content, str) else 0
        for call in message.get("tool_calls") or ():
            size += len(str(call.get("function", {}).get("arguments", "")))
        total += size
        if message.get("role") == "tool":
            environment += size
    return environment / total if total else None


async def run_loop(
    *,
    task: Task,
    sandbox: Sandbox,
    model: Model,
    config: AgentConfig,
    emit: Emit,
    on_model_call: Callable[[float], None],
    outputs_to: Path,
    limits: CopyLimits,
    fresh: bool = False,
) -> Outcome:
    """Run the loop for `task` in `sandbox`, then copy its output folder to `outputs_to`
    (`fresh`: nothing ran in the sandbox before, see WatchedSandbox).

    CancelledError propagates (the client went away); the caller releases the sandbox.
    """
    watched = WatchedSandbox(sandbox, emit, fresh=fresh)
    timed = TimedModel(model, on_model_call)
    result = await run_agent(task, watched, timed, config)
    files: tuple[OutputFile, ...] = ()
    if result.output_files:
        files = await _copy_outputs(sandbox, outputs_to, limits)
    return Outcome(result, tuple(watched.steps), timed.calls, timed.environment_share, files)


async def _copy_outputs(
    sandbox: Sandbox, local: Path, limits: CopyLimits
) -> tuple[OutputFile, ...]:
    try:
        report = await sandbox.copy_tree(sandbox.paths.output_dir, local, limits)
    except (SandfleetError, OSError) as error:
        log.warning("serve_outputs_not_copied", error=str(error))
        return ()
    sizes = await asyncio.to_thread(
        lambda: {name: (local / name).stat().st_size for name in report.files}
    )
    return tuple(OutputFile(name, sizes[name]) for name in sorted(report.files))


async def forget_answer(sandbox: Sandbox) -> None:
    """Before a follow-up in a kept sandbox: the last answer file must not answer again."""
    command = f"rm -f {shlex.quote(sandbox.paths.answer_file)}"
    await sandbox.call_tool("execute_bash", {"command": command})

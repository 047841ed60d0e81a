"""SandboxEnv: one sandbox as a Gymnasium-style environment over the agent's tools.

`observation = await env.reset(task)` resets the sandbox (runtime Reset: processes,
working tree, environment), places the task's files and returns the prompt;
`observation, done, info = await env.step(tool_call)` runs one tool call exactly as the
agent loop would (the same parser, the same observation texts, the same messages for a
malformed call). A `submit` ends the episode and calls the reward function.

A bash step runs as a detached command whose id derives from (episode, turn): when its
call drops (a connection reset, a proxy restart), the step re-attaches to the command and
gets its exit code and output once, instead of losing them or running the command twice.
Only when the sandbox stays unreachable is the step terminal with `info.sandbox_lost`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time
from collections.abc import Mapping
from typing import Any

from sandfleet.agent.config import Task
from sandfleet.agent.sandbox_access import output_files, read_answer, upload_task_files
from sandfleet.clients.runtime.client import CommandResult
from sandfleet.errors import SandboxLostError, SandfleetError, ToolError
from sandfleet.logs import get_logger
from sandfleet.rl.episode import (
    EnvConfig,
    EpisodeState,
    Observation,
    RewardFn,
    StepInfo,
    StepResult,
    as_tool_call,
    command_id,
    function_tools,
    new_episode_id,
    prompt_messages,
)
from sandfleet.sandbox.core import SandboxCore
from sandfleet.tool_calls import (
    SUBMITTED_OBSERVATION,
    BashRequest,
    SandboxRequest,
    SubmitRequest,
    ToolCall,
    ToolCallError,
    bash_observation,
    observe,
    parse_tool_call,
    tool_specs,
)

log = get_logger(__name__)

_BACKOFF_S = (0.1, 0.25, 0.5, 1.0, 2.0)


class EpisodeNotStartedError(SandfleetError, RuntimeError):
    """step() before reset(), or after the episode ended."""


class SandboxEnv:
    """One sandbox, many episodes: `reset(task)` then `step(call)` until `done`.

    The environment does not own the sandbox unless `owns_sandbox` (then `close()` closes
    it). Reset keeps the sandbox's binding (session, token, tenant): reusing it for the next
    episode never hands it to another caller.
    """

    def __init__(
        self,
        sandbox: SandboxCore,
        config: EnvConfig | None = None,
        *,
        reward: RewardFn | None = None,
        owns_sandbox: bool = False,
    ) -> None:
        self.sandbox = sandbox
        self.config = config or EnvConfig()
        self._reward = reward
        self._owns_sandbox = owns_sandbox
        self._specs = tool_specs(offer_undo_edit=self.config.offer_undo_edit)
        self._tools = function_tools(self._specs)
        self._episode: EpisodeState | None = None

    @property
    def episode_id(self) -> str | None:
        return self._episode.episode_id if self._episode is not None else None

    @property
    def turn(self) -> int:
        return self._episode.turn if self._episode is not None else 0

    @property
    def done(self) -> bool:
        return self._episode is None or self._episode.done

    async def reset(self, task: Task, *, reward: RewardFn | None = None) -> Observation:
        """A fresh episode of `task` in a pristine sandbox; returns the initial prompt.
        `reward` scores this episode instead of the environment's reward function (e.g. one
        that knows this task's expected answer). Raises SandboxLostError when the sandbox is
        gone, ToolError (FAILED_PRECONDITION) when its runtime keeps no baseline,
        TaskFileError for an unreadable local file."""
        self._episode = None
        report = await self.sandbox.reset()
        await upload_task_files(self.sandbox, task.files)
        episode = EpisodeState(new_episode_id(), task.id, reward=reward or self._reward)
        self._episode = episode
        log.debug("env_reset", episode=episode.episode_id, task=task.id, reset_s=report.duration_s)
        return Observation(
            episode_id=episode.episode_id,
            task_id=task.id,
            messages=prompt_messages(task, self.sandbox.paths, self.config),
            tools=[dict(tool) for tool in self._tools],
            reset=report,
        )

    async def step(self, call: ToolCall | Mapping[str, Any]) -> StepResult:
        """Run one tool call (a ToolCall, or a chat-completions tool call mapping).

        Never raises for what the model or the sandbox did: a malformed call is an
        observation (info.malformed), a dead sandbox a terminal step (info.sandbox_lost).
        Raises EpisodeNotStartedError before reset or after done, and whatever the reward
        function raises.
        """
        episode = self._episode
        if episode is None or episode.done:
            raise EpisodeNotStartedError("call reset(task) first: no episode is running")
        tool_call = as_tool_call(call)
        episode.turn += 1
        started = time.perf_counter()
        info = StepInfo(turn=episode.turn, tool=tool_call.name, call_id=tool_call.call_id)
        try:
            request = parse_tool_call(tool_call.name, tool_call.arguments, tools=self._specs)
        except ToolCallError as exc:
            observation, info = str(exc), _with(info, malformed=True)
        else:
            try:
                if isinstance(request, SubmitRequest):
                    observation, info = SUBMITTED_OBSERVATION, _with(info, submitted=True)
                else:
                    observation = await self._run(request, episode)
            except SandboxLostError as exc:
                episode.done = True
                log.warning("env_sandbox_lost", episode=episode.episode_id, error=str(exc))
                info = _with(info, sandbox_lost=True, error=str(exc))
                return StepResult("", True, _with(info, duration_s=_since(started)))
        if not info.submitted and episode.turn >= self.config.max_turns:
            info = _with(info, truncated=True)
        done = info.submitted or info.truncated
        if done:
            episode.done = True
            info = await self._score(info)
        return StepResult(observation, done, _with(info, duration_s=_since(started)))

    async def close(self) -> None:
        """Close the sandbox if this environment owns it."""
        self._episode = None
        if self._owns_sandbox:
            await self.sandbox.close()

    # --- running a request ------------------------------------------------------------------
    async def _run(self, request: SandboxRequest, episode: EpisodeState) -> str:
        if not isinstance(request, BashRequest):
            return await observe(
                self.sandbox.client, request, max_output_chars=self.config.max_output_chars
            )
        return await self._bash(request.command, command_id(episode.episode_id, episode.turn))

    async def _bash(self, command: str, command_id: str) -> str:
        try:
            result = await self._start(command, command_id)
        except ToolError as exc:
            if exc.code != "ALREADY_EXISTS":  # a command bash cannot take (a NUL, ...)
                return str(exc)
            # The id is this step's own: gRPC's transparent retry of a dropped call re-sent
            # it while the first copy runs. Collect that one instead of running it twice.
            log.info("env_step_call_retried", command_id=command_id)
            result = await self._reattach(command, command_id, None)
        except SandboxLostError as exc:
            log.info("env_step_call_dropped", command_id=command_id, error=str(exc))
            result = await self._reattach(command, command_id, exc)
        return bash_observation(result)

    async def _start(self, command: str, command_id: str) -> CommandResult:
        return await self.sandbox.client.run_detached(
            command,
            command_id=command_id,
            timeout_s=self.config.tool_timeout_s,
            max_output_chars=self.config.max_output_chars,
        )

    async def _reattach(
        self, command: str, command_id: str, dropped: SandboxLostError | None
    ) -> CommandResult:
        """The dropped command's result from the runtime; SandboxLostError when it stays
        unreachable. NOT_FOUND means the command never reached the runtime: it runs now."""
        last = dropped or SandboxLostError(f"the command {command_id} could not be re-attached")
        attempts = self.config.reattach_attempts if dropped is not None else 1
        for attempt in range(attempts):
            if dropped is not None or attempt > 0:
                await asyncio.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])
            try:
                result = await self.sandbox.client.attach_command(
                    command_id, timeout_s=self.config.tool_timeout_s or 3600.0
                )
            except SandboxLostError as exc:
                last = exc
                continue
            except ToolError as exc:
                if exc.code != "NOT_FOUND":
                    raise SandboxLostError(f"re-attaching {command_id} failed: {exc}") from exc
                log.info("env_command_not_started", command_id=command_id)
                return await self._start(command, command_id)
            log.info("env_step_reattached", command_id=command_id, attempt=attempt + 1)
            return result
        raise last

    async def _score(self, info: StepInfo) -> StepInfo:
        """The answer and (with a reward function) the reward of a finished episode."""
        try:
            files = await output_files(self.sandbox)
            answer = await read_answer(self.sandbox, files)
        except ValueError:  # an oversized answer file: no answer
            answer = None
        except SandboxLostError as exc:
            return _with(info, sandbox_lost=True, error=f"reading the answer: {exc}")
        reward: float | None = None
        episode = self._episode
        score = episode.reward if episode is not None else None
        if score is not None:
            value = score(answer, self.sandbox)
            reward = float(await value if inspect.isawaitable(value) else value)
        return _with(info, answer=answer, reward=reward)


def _with(info: StepInfo, **changes: Any) -> StepInfo:
    return dataclasses.replace(info, **changes)


def _since(started: float) -> float:
    return time.perf_counter() - started

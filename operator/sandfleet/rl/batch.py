"""SandboxEnvBatch: N environments stepped together, each one's failure its own.

`reset_all(tasks)` and `step(calls)` run every environment concurrently (asyncio). A
failure in one environment (a lost sandbox, a reward function that raised) becomes that
environment's entry in the result list and never cancels the others.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from sandfleet.agent.config import Task
from sandfleet.errors import SandboxLostError
from sandfleet.logs import get_logger
from sandfleet.rl.env import SandboxEnv
from sandfleet.rl.episode import EnvConfig, Observation, RewardFn, StepInfo, StepResult
from sandfleet.sandbox.core import SandboxCore, close_all
from sandfleet.tool_calls import ToolCall

if TYPE_CHECKING:
    from sandfleet.backends.local import LocalSandboxConfig
    from sandfleet.sandbox.opening import ClusterOptions

log = get_logger(__name__)

Call = ToolCall | Mapping[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class ResetFailure:
    """An environment whose reset failed; it has no episode until a later reset succeeds."""

    index: int
    error: str
    sandbox_lost: bool
    """The sandbox is gone (mask it, replace it); False: another failure (a task file)."""


class SandboxEnvBatch:
    """N SandboxEnvs; build one from sandboxes, or with `local(n)`, `on_cluster(n, ...)` or
    `fork(sandbox, n)`, which own their sandboxes (closed by `close()` / `async with`)."""

    def __init__(self, envs: Sequence[SandboxEnv]) -> None:
        if not envs:
            raise ValueError("a batch needs at least one environment")
        self.envs = list(envs)

    def __len__(self) -> int:
        return len(self.envs)

    @classmethod
    def of(
        cls,
        sandboxes: Sequence[SandboxCore],
        config: EnvConfig | None = None,
        *,
        reward: RewardFn | None = None,
        owns_sandboxes: bool = True,
    ) -> Self:
        return cls(
            [
                SandboxEnv(sandbox, config, reward=reward, owns_sandbox=owns_sandboxes)
                for sandbox in sandboxes
            ]
        )

    @classmethod
    async def local(
        cls,
        count: int,
        sandbox_config: LocalSandboxConfig | None = None,
        config: EnvConfig | None = None,
        *,
        reward: RewardFn | None = None,
    ) -> Self:
        """`count` local sandboxes (all or none)."""
        from sandfleet.backends.local import LocalBackend, LocalSandboxConfig
        from sandfleet.sandbox.facade import Sandbox

        if count < 1:
            raise ValueError(f"count must be at least 1, not {count}")
        backend = LocalBackend(sandbox_config or LocalSandboxConfig())
        results = await asyncio.gather(
            *(Sandbox.open(backend) for _ in range(count)), return_exceptions=True
        )
        opened = [r for r in results if isinstance(r, SandboxCore)]
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            await asyncio.shield(close_all(opened))
            raise failures[0]
        return cls.of(opened, config, reward=reward)

    @classmethod
    async def on_cluster(
        cls,
        count: int,
        namespace: str | None = None,
        config: EnvConfig | None = None,
        *,
        reward: RewardFn | None = None,
        pool: str | None = None,
        template: str | None = None,
        gateway: str | None = None,
        token: str | None = None,
        options: ClusterOptions | None = None,
        claim_id: str | None = None,
    ) -> Self:
        """`count` sandboxes from one gateway claim (Sandbox.on_cluster_many's arguments)."""
        from sandfleet.sandbox.facade import Sandbox

        sandboxes = await Sandbox.on_cluster_many(
            count, namespace, pool=pool, template=template, gateway=gateway, token=token,
            options=options, claim_id=claim_id,
        )  # fmt: skip
        return cls.of(sandboxes, config, reward=reward)

    @classmethod
    async def fork(
        cls,
        sandbox: SandboxCore,
        count: int,
        config: EnvConfig | None = None,
        *,
        reward: RewardFn | None = None,
    ) -> Self:
        """`count` forks of a prepared sandbox; every reset returns to the fork point."""
        return cls.of(await sandbox.fork(count), config, reward=reward)

    async def reset_all(
        self, tasks: Sequence[Task], rewards: Sequence[RewardFn | None] | None = None
    ) -> list[Observation | ResetFailure]:
        """Reset every environment for its task (one task per environment, in order);
        `rewards`, when given, scores each episode instead of the environment's function."""
        if len(tasks) != len(self.envs):
            raise ValueError(f"{len(tasks)} tasks for {len(self.envs)} environments")
        scores = list(rewards) if rewards is not None else [None] * len(tasks)
        if len(scores) != len(tasks):
            raise ValueError(f"{len(scores)} reward functions for {len(tasks)} tasks")
        results = await asyncio.gather(
            *(
                env.reset(task, reward=score)
                for env, task, score in zip(self.envs, tasks, scores, strict=True)
            ),
            return_exceptions=True,
        )
        out: list[Observation | ResetFailure] = []
        for index, result in enumerate(results):
            if isinstance(result, Observation):
                out.append(result)
                continue
            _reraise_control(result)
            log.warning("env_reset_failed", index=index, error=repr(result))
            out.append(ResetFailure(index, str(result), isinstance(result, SandboxLostError)))
        return out

    async def step(self, calls: Sequence[Call | None]) -> list[StepResult | None]:
        """One call per environment (None: leave that one alone this round, e.g. done).

        A step that raises (a reward function's error, a step on an ended episode) comes
        back as a done StepResult whose info.error says what happened."""
        if len(calls) != len(self.envs):
            raise ValueError(f"{len(calls)} calls for {len(self.envs)} environments")

        async def one(env: SandboxEnv, call: Call | None) -> StepResult | None:
            return None if call is None else await env.step(call)

        results = await asyncio.gather(
            *(one(env, call) for env, call in zip(self.envs, calls, strict=True)),
            return_exceptions=True,
        )
        out: list[StepResult | None] = []
        for index, (result, env) in enumerate(zip(results, self.envs, strict=True)):
            if not isinstance(result, BaseException):
                out.append(result)
                continue
            _reraise_control(result)
            log.warning("env_step_failed", index=index, error=repr(result))
            call = calls[index]
            tool = call.name if isinstance(call, ToolCall) else ""
            info = StepInfo(turn=env.turn, tool=tool, call_id="", error=repr(result))
            out.append(StepResult("", True, info))
        return out

    async def close(self) -> None:
        results = await asyncio.gather(*(env.close() for env in self.envs), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                log.warning("env_close_failed", error=repr(result))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def _reraise_control(error: BaseException) -> None:
    """Cancellation and interpreter exits are not an environment's failure."""
    if not isinstance(error, Exception):
        raise error

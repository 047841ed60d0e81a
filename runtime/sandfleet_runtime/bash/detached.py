"""Commands started with a caller-chosen id: they outlive the call that started them.

A trainer's RPC can drop (its client restarted, a gateway replica died) while a long
command runs; the command's exit code must not be lost with it. A command with an id runs
as a task of its own; the call that started it merely waits for it. When the call drops,
the task goes on and its result waits here until AttachCommand collects it, once.

Bounds on uncollected results (a caller that never comes back must not grow the runtime):
at most MAX_FINISHED are kept, each for at most FINISHED_TTL_S after it finished; the
oldest go first. Each result's output is already capped like any command's.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import time
from collections.abc import Awaitable, Callable

from sandfleet_runtime.bash.command import CommandResult
from sandfleet_runtime.errors import AlreadyExistsError, InvalidArgumentError, NotFoundError

__all__ = ["COMMAND_ID", "FINISHED_TTL_S", "MAX_FINISHED", "DetachedCommands"]

log = logging.getLogger(__name__)

COMMAND_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")
MAX_FINISHED = 256
"""Uncollected results kept at most."""
FINISHED_TTL_S = 3600.0
"""Seconds an uncollected result is kept after its command finished."""


class DetachedCommands:
    """Running and finished-but-uncollected commands, by id."""

    def __init__(
        self, *, max_finished: int = MAX_FINISHED, finished_ttl_s: float = FINISHED_TTL_S
    ) -> None:
        self._max_finished = max_finished
        self._ttl_s = finished_ttl_s
        self._tasks: dict[str, asyncio.Task[CommandResult]] = {}
        self._finished: collections.OrderedDict[str, float] = collections.OrderedDict()
        """Ids whose task is done and nobody collected, oldest first, with the finish time."""

    def __len__(self) -> int:
        return len(self._tasks)

    @staticmethod
    def validate(command_id: str) -> None:
        if not COMMAND_ID.fullmatch(command_id):
            raise InvalidArgumentError(
                f"Invalid command id {command_id[:80]!r}: use 1 to 128 letters, digits, '.',"
                " '_' or '-'."
            )

    async def run(
        self, command_id: str, start: Callable[[], Awaitable[CommandResult]]
    ) -> CommandResult:
        """Starts the command under `command_id` and waits for it; a cancelled wait leaves it
        running, and its result for `attach()`."""
        self.validate(command_id)
        self._expire()
        if command_id in self._tasks:
            state = "is still running" if command_id not in self._finished else "has finished"
            raise AlreadyExistsError(
                f"A command with id {command_id!r} {state} and its result was not collected;"
                " attach to it (AttachCommand) or choose another id."
            )

        async def body() -> CommandResult:
            return await start()

        task = asyncio.get_running_loop().create_task(body())
        self._tasks[command_id] = task
        task.add_done_callback(lambda _: self._on_done(command_id, task))
        return await self._collect(command_id, task)

    async def attach(self, command_id: str) -> CommandResult:
        """Waits for the command (at once when finished) and hands its result over, once."""
        self.validate(command_id)
        self._expire()
        task = self._tasks.get(command_id)
        if task is None:
            raise NotFoundError(
                f"No command with id {command_id!r}: it was never started, its result was"
                " already collected, or it was dropped (by a reset, or after"
                f" {self._ttl_s:.0f} s / {self._max_finished} uncollected results)."
            )
        return await self._collect(command_id, task)

    async def _collect(self, command_id: str, task: asyncio.Task[CommandResult]) -> CommandResult:
        # shield: the caller going away must not cancel the command.
        result = await asyncio.shield(task)
        if self._tasks.get(command_id) is not task:  # another caller collected it first
            raise NotFoundError(f"The result of command {command_id!r} was already collected.")
        del self._tasks[command_id]
        self._finished.pop(command_id, None)
        return result

    def _on_done(self, command_id: str, task: asyncio.Task[CommandResult]) -> None:
        if self._tasks.get(command_id) is not task:
            return
        if task.cancelled() or task.exception() is not None:
            # Errors reach whoever waits; an error nobody waits for is not kept.
            log.info("detached_command_failed", extra={"command_id": command_id})
        self._finished[command_id] = time.monotonic()
        # Collection happens right after (same loop step) when a caller waits; only
        # results without a caller count against the bound, so trim lazily on next use.

    def _expire(self) -> None:
        now = time.monotonic()
        while self._finished:
            command_id, finished_at = next(iter(self._finished.items()))
            if len(self._finished) <= self._max_finished and now - finished_at < self._ttl_s:
                break
            del self._finished[command_id]
            task = self._tasks.pop(command_id, None)
            log.info(
                "detached_result_dropped", extra={"command_id": command_id, "task": bool(task)}
            )

    async def drop_all(self) -> int:
        """Forgets every command (Reset): running ones were stopped with their sessions."""
        tasks, self._tasks = dict(self._tasks), {}
        self._finished.clear()
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        return len(tasks)

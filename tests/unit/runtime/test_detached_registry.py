"""DetachedCommands bounds and exactly-once collection, with plain coroutines instead of bash.

The commands here are asyncio coroutines returning a CommandResult: the registry only
schedules and keeps them, so no shell is needed to test what it keeps and for how long.
"""

from __future__ import annotations

import asyncio

import pytest

from sandfleet_runtime.bash.command import CommandResult, Outcome
from sandfleet_runtime.bash.detached import DetachedCommands
from sandfleet_runtime.errors import AlreadyExistsError, NotFoundError


def _result(text: str) -> CommandResult:
    return CommandResult(text, "", 0, Outcome.EXITED, False, False, len(text), 0, 0.0, "/")


async def _start_and_drop(registry: DetachedCommands, command_id: str, text: str) -> None:
    """Starts a command and cancels the call that started it (a dropped RPC)."""
    gate = asyncio.Event()

    async def command() -> CommandResult:
        await gate.wait()
        return _result(text)

    call = asyncio.ensure_future(registry.run(command_id, command))
    await asyncio.sleep(0)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    gate.set()
    await asyncio.sleep(0.01)


async def test_only_the_newest_uncollected_results_are_kept() -> None:
    registry = DetachedCommands(max_finished=2)
    for index in range(3):
        await _start_and_drop(registry, f"c{index}", f"out {index}")

    with pytest.raises(NotFoundError, match="No command with id 'c0'"):
        await registry.attach("c0")
    assert (await registry.attach("c1")).stdout == "out 1"
    assert (await registry.attach("c2")).stdout == "out 2"


async def test_uncollected_results_expire() -> None:
    registry = DetachedCommands(finished_ttl_s=0.05)
    await _start_and_drop(registry, "old", "x")
    await asyncio.sleep(0.1)

    with pytest.raises(NotFoundError):
        await registry.attach("old")


async def test_an_uncollected_result_blocks_its_id_until_attached() -> None:
    registry = DetachedCommands()
    await _start_and_drop(registry, "same", "first")

    with pytest.raises(AlreadyExistsError, match="has finished"):
        await registry.run("same", lambda: asyncio.sleep(0, _result("second")))
    assert (await registry.attach("same")).stdout == "first"


async def test_two_waiters_get_the_result_only_once() -> None:
    registry = DetachedCommands()
    gate = asyncio.Event()

    async def command() -> CommandResult:
        await gate.wait()
        return _result("once")

    starter = asyncio.ensure_future(registry.run("c", command))
    await asyncio.sleep(0)
    attacher = asyncio.ensure_future(registry.attach("c"))
    await asyncio.sleep(0)
    gate.set()
    outcomes = await asyncio.gather(starter, attacher, return_exceptions=True)

    assert sum(isinstance(o, CommandResult) for o in outcomes) == 1
    assert sum(isinstance(o, NotFoundError) for o in outcomes) == 1

"""Commands with an id on a real runtime: they survive a dropped call and are collected once."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandboxLostError, ToolError
from sandfleet_runtime.server import RuntimeServer
from tests.support.runtime_server import running_runtime

pytestmark = pytest.mark.integration


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[tuple[RuntimeServer, str]]:
    async with running_runtime(tmp_path, default_timeout_s=20.0) as started:
        yield started


def _client(runtime: tuple[RuntimeServer, str]) -> RuntimeClient:
    server, token = runtime
    return RuntimeClient(f"127.0.0.1:{server.port}", token)


async def _dropped(call: asyncio.Future[object]) -> None:
    """The call of a closed channel ends locally cancelled (grpc.aio raises CancelledError)."""
    with pytest.raises((SandboxLostError, asyncio.CancelledError)):
        await call


async def _wait_running(client: RuntimeClient, count: int) -> None:
    for _ in range(500):
        if (await client.stats()).running_commands == count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never saw {count} running commands")


async def test_a_dropped_call_leaves_the_command_running_and_attach_gets_its_result_once(
    runtime: tuple[RuntimeServer, str], tmp_path: Path
) -> None:
    first = _client(runtime)
    call = asyncio.ensure_future(
        first.run_detached(
            "echo started; sleep 1.5; echo finished > done.txt; echo out; echo err >&2; exit 3",
            command_id="rollout-7.step-2",
        )
    )
    await _wait_running(first, 1)

    await first.close()  # the client goes away mid-command

    await _dropped(call)
    second = _client(runtime)
    try:
        assert not (tmp_path / "done.txt").exists()
        result = await second.attach_command("rollout-7.step-2")
        assert result.exit_code == 3
        assert result.stdout == "started\nout\n"
        assert result.stderr == "err\n"
        assert (tmp_path / "done.txt").read_text() == "finished\n"

        with pytest.raises(
            ToolError, match=re.escape("No command with id 'rollout-7.step-2'")
        ) as again:
            await second.attach_command("rollout-7.step-2")
        assert again.value.code == "NOT_FOUND"
    finally:
        await second.close()


async def test_attach_after_the_command_finished_returns_at_once(
    runtime: tuple[RuntimeServer, str],
) -> None:
    first = _client(runtime)
    call = asyncio.ensure_future(first.run_detached("sleep 0.5; echo late", command_id="c1"))
    await _wait_running(first, 1)
    await first.close()
    await _dropped(call)
    second = _client(runtime)
    try:
        await _wait_running(second, 0)

        result = await asyncio.wait_for(second.attach_command("c1"), 2.0)

        assert (result.exit_code, result.stdout) == (0, "late\n")
    finally:
        await second.close()


async def test_a_running_id_cannot_be_reused_and_a_returned_result_is_not_kept(
    runtime: tuple[RuntimeServer, str],
) -> None:
    client = _client(runtime)
    try:
        call = asyncio.ensure_future(client.run_detached("sleep 1; echo one", command_id="dup"))
        await _wait_running(client, 1)

        with pytest.raises(ToolError, match="'dup' is still running") as duplicate:
            await client.run_detached("echo two", command_id="dup", session="other")
        assert duplicate.value.code == "ALREADY_EXISTS"

        assert (await call).stdout == "one\n"  # the starting call itself collected it
        with pytest.raises(ToolError) as gone:
            await client.attach_command("dup")
        assert gone.value.code == "NOT_FOUND"
        assert (await client.run_detached("echo reused", command_id="dup")).stdout == "reused\n"
    finally:
        await client.close()


async def test_an_invalid_id_is_refused(runtime: tuple[RuntimeServer, str]) -> None:
    client = _client(runtime)
    try:
        with pytest.raises(ToolError, match="Invalid command id") as invalid:
            await client.run_detached("true", command_id="has space")
        assert invalid.value.code == "INVALID_ARGUMENT"
    finally:
        await client.close()


async def test_without_an_id_a_dropped_call_still_stops_the_command(
    runtime: tuple[RuntimeServer, str], tmp_path: Path
) -> None:
    first = _client(runtime)
    call = asyncio.ensure_future(first.run_command("sleep 1; echo ran > ran.txt"))
    await _wait_running(first, 1)

    await first.close()

    await _dropped(call)
    second = _client(runtime)
    try:
        await _wait_running(second, 0)
        await asyncio.sleep(1.5)
        assert not (tmp_path / "ran.txt").exists()
    finally:
        await second.close()


async def test_reset_drops_detached_commands(runtime: tuple[RuntimeServer, str]) -> None:
    first = _client(runtime)
    call = asyncio.ensure_future(first.run_detached("sleep 30", command_id="long"))
    await _wait_running(first, 1)
    await first.close()
    await _dropped(call)
    second = _client(runtime)
    try:
        report = await second.reset()

        assert report.dropped_commands == 1
        with pytest.raises(ToolError) as gone:
            await second.attach_command("long")
        assert gone.value.code == "NOT_FOUND"
        assert (await second.stats()).running_commands == 0
    finally:
        await second.close()

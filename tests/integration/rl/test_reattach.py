"""A bash step whose connection drops mid-command re-attaches and gets the exit code once:
a REAL runtime (in-process, on 127.0.0.1) reached through a TCP relay the test cuts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandfleet import Sandbox, SandboxPaths
from sandfleet.agent import Task
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import ToolError
from sandfleet.rl import SandboxEnv, command_id
from sandfleet.tool_calls import ToolCall
from sandfleet_runtime.server import RuntimeServer
from tests.support.runtime_server import running_runtime
from tests.support.tcp_relay import TcpRelay

pytestmark = pytest.mark.integration


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[tuple[RuntimeServer, str, Path]]:
    workdir = tmp_path / "tree"
    workdir.mkdir()
    async with running_runtime(workdir, default_timeout_s=30.0) as (server, token):
        yield server, token, workdir


async def wait_running(client: RuntimeClient, count: int) -> None:
    for _ in range(1000):
        if (await client.stats()).running_commands == count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never saw {count} running commands")


def bash(command: str) -> ToolCall:
    return ToolCall("c1", "execute_bash", json.dumps({"command": command}))


async def test_a_step_whose_connection_drops_reattaches_and_gets_the_exit_code_once(
    runtime: tuple[RuntimeServer, str, Path],
) -> None:
    server, token, workdir = runtime
    watcher = RuntimeClient(f"127.0.0.1:{server.port}", token)
    async with TcpRelay("127.0.0.1", server.port) as relay:
        sandbox = await Sandbox.connect(
            relay.address, token, paths=SandboxPaths.under(str(workdir))
        )
        env = SandboxEnv(sandbox)
        try:
            await env.reset(Task(id="long", prompt="p"))
            step = asyncio.ensure_future(
                env.step(bash("echo begun >> runs.txt; sleep 1.5; echo finished; exit 7"))
            )
            await wait_running(watcher, 1)
            assert relay.sever() >= 1  # the network drops mid-command
            observation, done, info = await step
        finally:
            await sandbox.close()
    assert observation.startswith("Exit code: Error: Exit code 7\n")
    assert "finished" in observation
    assert (done, info.sandbox_lost, info.malformed) == (False, False, False)
    assert relay.connections >= 2  # the step came back on a new connection
    # The command ran once: re-attaching did not run it again.
    assert (workdir / "runs.txt").read_text() == "begun\n"
    # And its result was collected once: attaching again finds nothing.
    assert env.episode_id is not None
    with pytest.raises(ToolError) as raised:
        await watcher.attach_command(command_id(env.episode_id, 1), timeout_s=1)
    assert raised.value.code == "NOT_FOUND"
    await watcher.close()


async def test_a_client_killed_mid_command_leaves_a_result_a_new_client_collects_by_step_id(
    runtime: tuple[RuntimeServer, str, Path],
) -> None:
    """The trainer process dies (its channel is closed under the running step); a new one
    derives the command id from (episode, turn) and collects the exit code."""
    server, token, workdir = runtime
    address = f"127.0.0.1:{server.port}"
    first = await Sandbox.connect(address, token, paths=SandboxPaths.under(str(workdir)))
    env = SandboxEnv(first)
    await env.reset(Task(id="long", prompt="p"))
    step = asyncio.ensure_future(env.step(bash("sleep 1; exit 3")))
    await wait_running(RuntimeClient(address, token), 1)
    await first.client.close()  # the old client is gone for good
    with pytest.raises((asyncio.CancelledError, Exception)):
        await step
    assert env.episode_id is not None
    second = RuntimeClient(address, token)
    try:
        result = await second.attach_command(command_id(env.episode_id, 1), timeout_s=10)
    finally:
        await second.close()
    assert (result.exit_code, result.timed_out) == (3, False)

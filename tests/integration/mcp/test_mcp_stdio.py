"""`sandfleet mcp` over stdio, as a desktop client launches it, through the SDK's client."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.mcp.mcp_clients import (
    runtime_pids,
    stdio_session,
    text,
    wait_for_no_runtime,
)
from tests.integration.mcp.scenario import check_bad_calls, check_reset, check_tools

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_tools_over_stdio(tmp_path: Path) -> None:
    async with stdio_session(tmp_path / "home", tmp_path / "state") as session:
        await check_tools(session)
        await check_bad_calls(session)
        await check_reset(session)


async def test_the_sandbox_opens_at_the_first_call_and_goes_with_the_client(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    async with stdio_session(tmp_path / "home", state) as session:
        await session.list_tools()
        assert runtime_pids(state) == set()  # listing tools opens nothing
        await session.call_tool("execute_bash", {"command": "sleep 600 &"})
        assert runtime_pids(state), "the first call should have started a sandbox"
    assert await wait_for_no_runtime(state) == set()
    log = (tmp_path / "home" / "server-stderr.log").read_text()
    assert "mcp_session_ended" in log and "Traceback" not in log, log


async def test_two_clients_get_two_sandboxes(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with (
        stdio_session(tmp_path / "a", state) as first,
        stdio_session(tmp_path / "b", state) as second,
    ):
        await first.call_tool("execute_bash", {"command": "echo first > /tmp/mine"})
        seen = await second.call_tool("execute_bash", {"command": "cat /tmp/mine"})
        assert "No such file" in text(seen)
        assert len(runtime_pids(state)) >= 2
    assert await wait_for_no_runtime(state) == set()

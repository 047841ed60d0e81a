"""`sandfleet mcp --transport http` on 127.0.0.1, through the SDK's streamable HTTP client."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tests.integration.cli.harness import cli_environment, run_cli
from tests.integration.mcp.mcp_clients import (
    API_KEY,
    http_server,
    http_session,
    runtime_pids,
    text,
    wait_for_no_runtime,
)
from tests.integration.mcp.scenario import check_bad_calls, check_reset, check_tools

pytestmark = [pytest.mark.integration, pytest.mark.slow]

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


async def test_tools_over_http(tmp_path: Path) -> None:
    async with (
        http_server(tmp_path / "home", tmp_path / "state") as url,
        http_session(url) as session,
    ):
        await check_tools(session)
        await check_bad_calls(session)
        await check_reset(session)


async def test_sessions_get_their_own_sandboxes_released_when_each_ends(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with http_server(tmp_path / "home", state) as url:
        async with http_session(url) as first:
            await first.call_tool("execute_bash", {"command": "echo first > /tmp/mine"})
            async with http_session(url) as second:
                seen = await second.call_tool("execute_bash", {"command": "cat /tmp/mine"})
                assert "No such file" in text(seen)
                both = runtime_pids(state)
            # The second client's exit DELETEs its session: its sandbox goes, the first stays.
            for _ in range(100):
                if runtime_pids(state) < both:
                    break
                await asyncio.sleep(0.2)
            left = runtime_pids(state)
            assert left and left < both, (both, left)
            mine = await first.call_tool("execute_bash", {"command": "cat /tmp/mine"})
            assert "first" in text(mine)
        assert await wait_for_no_runtime(state) == set()


async def test_an_abandoned_session_loses_its_sandbox_at_the_idle_timeout(
    tmp_path: Path,
) -> None:
    """A client that vanishes without a DELETE (no request, no open stream since)."""
    state = tmp_path / "state"
    auth = {**ACCEPT, "Authorization": f"Bearer {API_KEY}"}
    async with (
        http_server(tmp_path / "home", state, "--idle-timeout", "2") as url,
        httpx.AsyncClient(timeout=120) as client,
    ):
        opened = await client.post(url, json=INITIALIZE, headers=auth)
        assert opened.status_code == 200, opened.text
        session = {**auth, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await client.post(url, json=initialized, headers=session)).status_code == 202
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "execute_bash", "arguments": {"command": "echo ran"}},
        }
        ran = await client.post(url, json=call, headers=session)
        assert "ran" in ran.text, ran.text
        assert runtime_pids(state)
        assert await wait_for_no_runtime(state, timeout_s=30) == set()
        gone = await client.post(url, json=call, headers=session)
        assert gone.status_code == 404, gone.text


async def test_stopping_the_server_releases_every_sandbox(tmp_path: Path) -> None:
    state = tmp_path / "state"
    auth = {**ACCEPT, "Authorization": f"Bearer {API_KEY}"}
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "execute_bash", "arguments": {"command": "sleep 600 &"}},
    }
    async with httpx.AsyncClient(timeout=120) as client:
        async with http_server(tmp_path / "home", state) as url:
            opened = await client.post(url, json=INITIALIZE, headers=auth)
            session = {**auth, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            await client.post(url, json=initialized, headers=session)
            await client.post(url, json=call, headers=session)
            assert runtime_pids(state)
        # Ctrl-C with the session still open: the server ended it, and its sandbox with it.
        assert await wait_for_no_runtime(state) == set()
    log = (tmp_path / "home" / "server-stderr.log").read_text()
    assert "mcp_session_ended" in log and "Traceback" not in log, log


async def test_a_client_without_the_key_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with http_server(tmp_path / "home", state) as url, httpx.AsyncClient() as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": API_KEY}):
            answer = await client.post(url, json=INITIALIZE, headers={**ACCEPT, **headers})
            assert answer.status_code == 401, (headers, answer.text)
        # The SDK's own client with a wrong key gets no session either.
        with pytest.raises(BaseException):  # noqa: B017 (the SDK wraps it in a group)
            async with http_session(url, key="wrong") as session:
                await session.list_tools()
        # A browser page's request to a rebound name is refused (DNS rebinding).
        rebound = await client.post(
            url,
            json=INITIALIZE,
            headers={**ACCEPT, "Authorization": f"Bearer {API_KEY}", "Host": "evil.example"},
        )
        assert rebound.status_code in (400, 421), rebound.text
        opened = await client.post(
            url, json=INITIALIZE, headers={**ACCEPT, "Authorization": f"Bearer {API_KEY}"}
        )
        assert opened.status_code == 200, opened.text
    assert runtime_pids(state) == set()


async def test_http_without_a_key_does_not_start(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = await run_cli("mcp", "--transport", "http", env=cli_environment(home), cwd=home)
    assert result.returncode == 2, result
    assert "SANDFLEET_MCP_API_KEY" in result.stderr and "Traceback" not in result.stderr

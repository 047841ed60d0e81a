"""`sandfleet mcp --backend kubernetes`: each MCP session's sandbox claimed through the gateway
as the caller, and released when the session ends.

The gateway is the real one in-process (tests/support/client_gateway.py) in front of a real
runtime agent; its claim path and the Kubernetes API server it asks (TokenReview,
SubjectAccessReview) are stand-ins, as no cluster runs here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.integration.cli.harness import cli_command, cli_environment
from tests.integration.mcp.mcp_clients import http_server, http_session, text
from tests.support.client_gateway import (
    CALLER_TOKEN,
    NAMESPACE,
    ClientGateway,
    gateway_over_child_runtime,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

ACCEPT = {"Accept": "application/json, text/event-stream"}


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[ClientGateway]:
    async with gateway_over_child_runtime(tmp_path) as gateway:
        yield gateway


def cluster_flags(gateway: ClientGateway) -> list[str]:
    return ["--backend", "kubernetes", "--gateway", gateway.address, "-n", NAMESPACE,
            "--pool", "py312"]  # fmt: skip


async def wait_released(gateway: ClientGateway) -> None:
    for _ in range(150):
        if "Release" in gateway.methods() and not gateway.sessions:
            return
        await asyncio.sleep(0.2)


async def test_http_claims_with_the_callers_token_and_releases_at_the_end(
    gateway: ClientGateway, tmp_path: Path
) -> None:
    home, state = tmp_path / "home", tmp_path / "state"
    async with http_server(home, state, *cluster_flags(gateway), key="unused") as url:
        async with http_session(url, key=CALLER_TOKEN) as session:
            await session.list_tools()
            assert gateway.methods() == []  # nothing claimed before the first tool call
            ran = await session.call_tool("execute_bash", {"command": "echo from-the-fleet"})
            assert not ran.isError and "from-the-fleet" in text(ran), text(ran)
            (name, claim, metadata) = gateway.calls[0]
            assert name == "Claim"
            assert (claim.namespace, claim.pool, claim.generate_name) == (
                NAMESPACE,
                "py312",
                "mcp-",
            )
            # The caller's identity, not the server's: the gateway's reviews and quotas apply.
            assert metadata["authorization"] == f"Bearer {CALLER_TOKEN}"
            assert gateway.sessions
        await wait_released(gateway)
        assert gateway.methods() == ["Claim", "Release"]
        assert not gateway.sessions


async def test_a_token_the_cluster_refuses_claims_nothing(
    gateway: ClientGateway, tmp_path: Path
) -> None:
    async with (
        http_server(tmp_path / "home", tmp_path / "state", *cluster_flags(gateway)) as url,
        http_session(url, key="not-a-kubernetes-token") as session,
    ):
        refused = await session.call_tool("execute_bash", {"command": "id"})
        assert refused.isError, text(refused)
        assert "sandbox is not available" in text(refused)
        assert "token was not accepted" in text(refused) and "UNAUTHENTICATED" in text(refused)
        # The session goes on: the refusal was a tool error.
        assert [t.name for t in (await session.list_tools()).tools][:2] == [
            "str_replace_editor", "execute_bash",
        ]  # fmt: skip
        assert not gateway.sessions


async def test_another_token_cannot_use_a_callers_session(
    gateway: ClientGateway, tmp_path: Path
) -> None:
    initialize = {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "probe", "version": "0"}},
    }  # fmt: skip
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    async with (
        http_server(tmp_path / "home", tmp_path / "state", *cluster_flags(gateway)) as url,
        httpx.AsyncClient(timeout=60) as client,
    ):
        owner = {**ACCEPT, "Authorization": f"Bearer {CALLER_TOKEN}"}
        opened = await client.post(url, json=initialize, headers=owner)
        session_id = opened.headers["mcp-session-id"]
        other = {**ACCEPT, "Authorization": "Bearer someone-else", "Mcp-Session-Id": session_id}
        stolen = await client.post(url, json=listing, headers=other)
        assert stolen.status_code == 404, stolen.text


async def test_stdio_claims_with_the_users_token_and_releases_when_the_client_leaves(
    gateway: ClientGateway, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    command, *arguments = cli_command("mcp", *cluster_flags(gateway))
    env = cli_environment(home, SANDFLEET_GATEWAY_TOKEN=CALLER_TOKEN)
    params = StdioServerParameters(command=command, args=arguments, env=env, cwd=str(home))
    with (home / "stderr.log").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            ran = await session.call_tool("execute_bash", {"command": "echo hi"})
            assert not ran.isError and "hi" in text(ran)
            assert gateway.calls[0][2]["authorization"] == f"Bearer {CALLER_TOKEN}"
    await wait_released(gateway)
    assert gateway.methods() == ["Claim", "Release"]

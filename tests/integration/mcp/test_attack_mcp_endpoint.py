"""The cluster's MCP endpoint (`python -m sandfleet.mcp.endpoint`) as an attacker
meets it: no token, a token the API server refuses, and a real tenant's token for a
namespace its RBAC does not cover are all refused (401) before any session or claim; the
tenant's token in its own namespace gets a sandbox claimed with that same token.

The endpoint runs as a real process; the gateway is the real one in-process, in front of a
real runtime agent, and the Kubernetes API server (TokenReview, SubjectAccessReview) is the
stand-in of tests/support/gateway_api.py, as no cluster runs here (tests/cluster has the
chart's).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.integration.mcp.mcp_clients import free_port, http_session, text
from tests.support.client_gateway import (
    CALLER_TOKEN,
    NAMESPACE,
    ClientGateway,
    gateway_over_child_runtime,
)
from tests.support.gateway_api import GATEWAY_SA_TOKEN

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

ACCEPT = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "probe", "version": "0"}},
}  # fmt: skip


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[ClientGateway]:
    async with gateway_over_child_runtime(tmp_path) as gateway:
        yield gateway


@pytest.fixture
async def endpoint(gateway: ClientGateway, tmp_path: Path) -> AsyncIterator[str]:
    """The endpoint process, its own ServiceAccount token in a kubeconfig; its /mcp URL."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": gateway.api.url}}],
        "users": [{"name": "u", "user": {"token": GATEWAY_SA_TOKEN}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))  # fmt: skip
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "SANDFLEET_MCP_HOST": "127.0.0.1",
        "SANDFLEET_MCP_PORT": str(port),
        "SANDFLEET_MCP_GATEWAY": gateway.address,
        "SANDFLEET_MCP_POOL": "py312",
        "SANDFLEET_MCP_KUBECONFIG": str(kubeconfig),
    }
    with (tmp_path / "endpoint.log").open("w") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "sandfleet.mcp.endpoint", env=env, stderr=log,
            stdout=log,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with asyncio.timeout(60), httpx.AsyncClient() as probe:
            while True:
                try:
                    await probe.get(url)
                    break
                except httpx.TransportError:
                    assert process.returncode is None, (tmp_path / "endpoint.log").read_text()
                    await asyncio.sleep(0.2)
        yield url
    finally:
        process.send_signal(2)
        async with asyncio.timeout(60):
            await process.wait()


async def test_only_a_tenant_in_its_own_namespace_gets_a_session(
    gateway: ClientGateway, endpoint: str
) -> None:
    attempts = {
        "no token": {},
        "a token the API server refuses": {"Authorization": "Bearer forged-token"},
        "the tenant, another namespace": {
            "Authorization": f"Bearer {CALLER_TOKEN}", "Sandfleet-Namespace": "kube-system",
        },
        "the tenant, no namespace named": {"Authorization": f"Bearer {CALLER_TOKEN}"},
    }  # fmt: skip
    async with httpx.AsyncClient(timeout=60) as client:
        for what, headers in attempts.items():
            answer = await client.post(endpoint, json=INITIALIZE, headers={**ACCEPT, **headers})
            assert answer.status_code == 401, (what, answer.status_code, answer.text)
            assert "mcp-session-id" not in answer.headers, what
    assert gateway.methods() == []


async def test_the_tenants_sandbox_is_claimed_with_its_own_token_and_released(
    gateway: ClientGateway, endpoint: str
) -> None:
    async with http_session(
        endpoint, key=CALLER_TOKEN, headers={"Sandfleet-Namespace": NAMESPACE}
    ) as session:
        listed = [tool.name for tool in (await session.list_tools()).tools]
        assert listed[:2] == ["str_replace_editor", "execute_bash"]
        assert gateway.methods() == []
        ran = await session.call_tool("execute_bash", {"command": "echo on-the-cluster"})
        assert not ran.isError and "on-the-cluster" in text(ran), text(ran)
        name, claim, metadata = gateway.calls[0]
        assert (name, claim.namespace, claim.pool) == ("Claim", NAMESPACE, "py312")
        assert metadata["authorization"] == f"Bearer {CALLER_TOKEN}"
    for _ in range(150):
        if not gateway.sessions and "Release" in gateway.methods():
            break
        await asyncio.sleep(0.2)
    assert gateway.methods() == ["Claim", "Release"]
    assert not gateway.sessions

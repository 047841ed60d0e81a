"""The chart's MCP endpoint (mcp.enabled) on the real cluster, as a tenant and as an attacker
meet it: a tenant ServiceAccount's token (the chart's session-editor Role in its namespace)
lists the tools, runs a command in a sandbox claimed from the tenant's pool, and the session's
end releases it (its SandboxSession and pod go); no token, a forged token, and the tenant's
token for another tenant's namespace are refused before any session exists.

The release is test_helm_chart's (its module fixtures), upgraded to mcp.enabled for this test.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from tests.cluster.harness.chart_release import (
    GATEWAY,
    RELEASE,
    SESSIONS,
    Installation,
    install_values,
)
from tests.cluster.harness.gateway_clients import service_address
from tests.cluster.harness.helm_cli import CHART_DIR, Helm
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.test_helm_chart import (  # noqa: F401 (module fixtures: one release)
    chart_crds,
    ci_namespaces,
    helm,
    installation,
    kubectl,
)

pytestmark = pytest.mark.cluster

MCP = "sandfleet-mcp"
ACCEPT = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "probe", "version": "0"}},
}  # fmt: skip


async def tenant_bot_token(kube: KubeApi, namespace: str) -> str:
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": 900}}  # fmt: skip
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/tenant-bot/token"
    token: str = (await kube.checked("POST", path, request))["status"]["token"]
    return token


async def mcp_sessions(kube: KubeApi, namespace: str) -> list[dict[str, object]]:
    listed = await kube.checked("GET", SESSIONS.format(ns=namespace))
    return [s for s in listed["items"] if s["metadata"]["name"].startswith("mcp-")]


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_the_mcp_endpoint_serves_a_tenant_token_and_refuses_everyone_else(
    kube: KubeApi,
    helm: Helm,  # noqa: F811 (the fixture imported above)
    installation: Installation,  # noqa: F811
) -> None:
    ns, other = installation.tenant_a, installation.tenant_b
    values = install_values(installation)
    # The test node has no cluster DNS: the endpoint gets the gateway Service's IP.
    gateway = await service_address(kube, installation.namespace, GATEWAY, "grpc")
    values["mcp"] = {"enabled": True, "pool": "warm", "gateway": gateway}
    upgrade = ("upgrade", RELEASE, str(CHART_DIR), "--namespace", installation.namespace)
    await helm.run_async(
        *upgrade, *helm.values_args(values=values), "--wait", "--timeout", "3m", timeout_s=240
    )
    try:
        url = f"http://{await service_address(kube, installation.namespace, MCP, 'http')}/mcp"
        token = await tenant_bot_token(kube, ns)
        refused = {
            "no token": {},
            "a forged token": {"Authorization": "Bearer eyJhbGciOiJSUzI1NiJ9.forged.sig"},
            "the tenant in another namespace": {
                "Authorization": f"Bearer {token}", "Sandfleet-Namespace": other,
            },
        }  # fmt: skip
        async with httpx.AsyncClient(timeout=60) as client:
            for what, headers in refused.items():
                answer = await client.post(url, json=INITIALIZE, headers={**ACCEPT, **headers})
                assert answer.status_code == 401, (what, answer.status_code, answer.text)
        assert await mcp_sessions(kube, other) == []

        headers = {"Authorization": f"Bearer {token}", "Sandfleet-Namespace": ns}
        async with (
            httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(60, read=300)) as http,
            streamable_http_client(url, http_client=http) as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            names = [tool.name for tool in (await session.list_tools()).tools]
            assert names[:2] == ["str_replace_editor", "execute_bash"]
            ran = await session.call_tool("execute_bash", {"command": "echo from-mcp; id -u"})
            (content,) = ran.content
            assert isinstance(content, TextContent)
            assert not ran.isError and "from-mcp" in content.text, content.text
            (claimed,) = await mcp_sessions(kube, ns)
            name = claimed["metadata"]["name"]  # type: ignore[index]
            pod = claimed["status"]["podName"]  # type: ignore[index]
        # The session's end (the client's DELETE) released the sandbox: session and pod go.
        await kube.wait_for(f"{SESSIONS.format(ns=ns)}/{name}", lambda r: r.status == 404, 60)
        await kube.wait_for(f"/api/v1/namespaces/{ns}/pods/{pod}", lambda r: r.status == 404, 60)
    finally:
        await helm.run_async(
            *upgrade, *helm.values_args(values=install_values(installation)), timeout_s=240
        )
        await asyncio.sleep(0)

"""Issue #26 item 8 as the attack, on the real cluster: a tenant whose token is revoked (the
Secret it is bound to deleted, as a revoked or expired token looks to TokenReview) keeps
claiming, and keeps using the sandbox it holds. Before the fix the gateway trusted an accepted
token 30 s (~33 s after revocation, the API server refusing it from ~12 s) and proxied calls
never asked about the caller at all: the runtime token worked for the session's life.

The bound is measured, not assumed: the API server's own refusal time (a TokenReview of the
same token, which shares the API server's token cache with the gateway's reviews) plus the
gateway's accepted-token TTL.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from sandfleet import Sandbox
from sandfleet.clients.gateway.client import GatewayClient
from sandfleet.errors import GatewayAuthError, SandboxLostError
from tests.cluster.gateway.conftest import StartGateway, until_claimable
from tests.cluster.gateway.test_claims import create_pool
from tests.cluster.harness.gateway_clients import tenant_token
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.measurements import record
from tests.cluster.harness.operator_harness import POOLS, SESSIONS

pytestmark = pytest.mark.cluster

POLL_S = 0.25
SLACK_S = 1.5
"""Polling granularity and call latency on top of the measured bound."""
GIVE_UP_S = 60.0


async def review(kube: KubeApi, token: str) -> dict[str, object]:
    """The API server's TokenReview status of `token` (asked as the admin)."""
    answer = await kube.checked(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
    )
    status: dict[str, object] = answer["status"]
    return status


async def test_a_revoked_token_loses_its_claims_and_its_sandboxes_within_the_bound(
    kube: KubeApi, namespace: str, start_gateway: StartGateway
) -> None:
    await create_pool(kube, namespace, "warm", 1)
    gateway = await start_gateway()
    ttl = gateway.settings.token_review_ttl_seconds
    token = await tenant_token(kube, namespace, bound_secret="revoke-me")
    await until_claimable(gateway, namespace, "warm", 1)
    sandbox = await Sandbox.on_cluster(namespace, pool="warm", gateway=gateway.address, token=token)
    client = GatewayClient(gateway.address, token)
    try:
        assert (await sandbox.bash("echo before")).stdout == "before\n"
        await client.connect(namespace, sandbox.name)

        # The API server caches an accepted token (10 s by default): a review now starts that
        # clock, so its refusal below shows its whole revocation delay.
        assert (await review(kube, token))["authenticated"]
        await kube.checked("DELETE", f"/api/v1/namespaces/{namespace}/secrets/revoke-me")
        revoked = time.monotonic()
        refused: dict[str, float] = {}
        while len(refused) < 3 and time.monotonic() - revoked < GIVE_UP_S:
            now = time.monotonic() - revoked
            if "api server" not in refused and not (await review(kube, token)).get("authenticated"):
                refused["api server"] = now
            if "connect" not in refused:
                try:
                    await client.connect(namespace, sandbox.name)
                except GatewayAuthError:
                    refused["connect"] = now
            if "proxied call" not in refused:
                try:
                    await sandbox.client.run_command("true")
                except SandboxLostError as error:
                    assert "not accepted" in str(error), error
                    refused["proxied call"] = now
            await asyncio.sleep(POLL_S)

        record("token_revocation", {"ttl_s": ttl, **{k: round(v, 2) for k, v in refused.items()}})
        assert "api server" in refused, f"the API server still accepts it after {GIVE_UP_S}s"
        # The gateway's trust lasts no longer than the API server's own revocation delay.
        assert ttl <= refused["api server"], (ttl, refused)
        bound = refused["api server"] + ttl + SLACK_S
        assert refused.get("connect", GIVE_UP_S) <= bound, (refused, bound)
        assert refused.get("proxied call", GIVE_UP_S) <= bound, (refused, bound)
        # A fresh claim is refused as well (same review as Connect).
        with pytest.raises(GatewayAuthError, match="not accepted"):
            await Sandbox.on_cluster(namespace, pool="warm", gateway=gateway.address, token=token)
    finally:
        await client.close()
        await sandbox.client.close()
        await kube.request("DELETE", f"{SESSIONS.format(ns=namespace)}/{sandbox.name}")
        await kube.request("DELETE", f"{POOLS.format(ns=namespace)}/warm")

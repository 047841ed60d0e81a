"""The gateway as its clients meet it, on the real cluster: the real GatewayServer (in-process,
as the gateway's own ServiceAccount with the RBAC in manifests/rbac) in front of the real
claim path, the operator as a process, and tenants that are real ServiceAccounts holding only
the tenant Role, authenticated by the API server's TokenReview.

Through the SDK: claim, commands, streaming, upload/download, count, release; wrong, revoked
and cross-namespace tokens; the namespace quota; a replica stopped mid-stream while the
session lives on and is reached again through another replica.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path

import pytest

from sandfleet import ClusterOptions, Sandbox
from sandfleet.errors import (
    GatewayAuthError,
    QuotaExceededError,
    SandboxLostError,
    SandfleetError,
)
from tests.cluster.gateway.conftest import StartGateway, until_claimable
from tests.cluster.gateway.test_claims import create_pool
from tests.cluster.harness.gateway_clients import tenant_token
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import (
    POOLS,
    SESSIONS,
    phase_is,
    wait_no_leftovers,
    wait_session,
)

pytestmark = pytest.mark.cluster


async def wait_gone(kube: KubeApi, path: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while (await kube.request("GET", path)).status != 404:
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} still exists after {timeout_s}s")
        await asyncio.sleep(0.2)


async def test_a_tenant_claims_uses_and_releases_a_sandbox_through_the_gateway(
    kube: KubeApi, namespace: str, start_gateway: StartGateway, tmp_path: Path
) -> None:
    await create_pool(kube, namespace, "warm", 2)
    gateway = await start_gateway()
    token = await tenant_token(kube, namespace)
    await until_claimable(gateway, namespace, "warm", 2)

    started = time.perf_counter()
    options = ClusterOptions(env={"GREETING": "hi"}, files={"in/task.txt": "the task\n"})
    sandbox = await Sandbox.on_cluster(
        namespace, pool="warm", gateway=gateway.address, token=token, options=options
    )
    async with sandbox:
        first = await sandbox.bash("echo $GREETING; cat in/task.txt; whoami")
        claim_to_first_s = time.perf_counter() - started
        assert first.stdout.split()[:4] == ["hi", "the", "task", first.stdout.split()[3]]
        assert first.exit_code == 0
        assert sandbox.session.warm  # type: ignore[union-attr]
        # The session is a real SandboxSession that kubectl sees Ready on the claimed pod.
        body = await wait_session(kube, namespace, sandbox.name, phase_is("Ready"), timeout_s=30)
        assert body["status"]["podName"] == sandbox.session.pod  # type: ignore[union-attr]

        # Streaming: chunks arrive before the command ends.
        chunks: list[tuple[float, str]] = []
        async for item in sandbox.client.stream_command(
            "for i in 1 2 3; do echo $i; sleep 0.3; done"
        ):
            if isinstance(item, tuple):
                chunks.append((time.monotonic(), item[1]))
        assert "".join(text for _, text in chunks).split() == ["1", "2", "3"]
        assert chunks[-1][0] - chunks[0][0] > 0.3

        # Files both ways, bytes exact through the proxy.
        payload = secrets.token_bytes(3 * 1024 * 1024 + 7)
        await sandbox.upload(payload, "/testbed/blob.bin")
        local = tmp_path / "blob.bin"
        assert await sandbox.download("/testbed/blob.bin", local) == len(payload)
        assert local.read_bytes() == payload
        assert (await sandbox.call_tool("str_replace_editor", {
            "command": "view", "path": "/testbed/in/task.txt",
        })).count("the task") == 1  # fmt: skip
    assert claim_to_first_s < 5, claim_to_first_s  # generous: this is a correctness test

    # Closing released the session; the operator reclaims everything it had (and the pool's
    # own objects go with the pool).
    await wait_gone(kube, f"{SESSIONS.format(ns=namespace)}/{sandbox.name}")
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/warm")
    await wait_no_leftovers(kube, namespace, timeout_s=60)


async def test_many_at_once_then_a_full_quota_is_refused_with_the_limit_named(
    kube: KubeApi, namespace: str, start_gateway: StartGateway
) -> None:
    await create_pool(kube, namespace, "warm", 4)
    gateway = await start_gateway(quotas={namespace: 3})
    token = await tenant_token(kube, namespace)
    await until_claimable(gateway, namespace, "warm", 3)

    sandboxes = await Sandbox.on_cluster_many(
        3, namespace, pool="warm", gateway=gateway.address, token=token
    )
    try:
        pods = {s.session.pod for s in sandboxes}  # type: ignore[union-attr]
        assert len(pods) == 3
        outputs = await asyncio.gather(*(s.bash("hostname") for s in sandboxes))
        assert {o.stdout.strip() for o in outputs} == pods
        with pytest.raises(QuotaExceededError, match=rf"{namespace}.*3 of its 3"):
            await Sandbox.on_cluster(namespace, pool="warm", gateway=gateway.address, token=token)
    finally:
        await asyncio.gather(*(s.close() for s in sandboxes))
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/warm")
    await wait_no_leftovers(kube, namespace, timeout_s=60)


async def test_wrong_revoked_and_cross_namespace_tokens_are_refused_clearly(
    kube: KubeApi, namespace: str, start_gateway: StartGateway
) -> None:
    other = f"{namespace}-other"
    await kube.checked(
        "POST", "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}},
    )  # fmt: skip
    try:
        gateway = await start_gateway()
        good = await tenant_token(kube, namespace)
        revoked = await tenant_token(kube, namespace, bound_secret="revoke-me")
        await kube.checked("DELETE", f"/api/v1/namespaces/{namespace}/secrets/revoke-me")

        with pytest.raises(GatewayAuthError, match="not accepted"):
            await Sandbox.on_cluster(namespace, gateway=gateway.address, token="not-a-token")
        # TokenReview refuses a token whose bound object is gone (as it refuses expired ones).
        with pytest.raises(GatewayAuthError, match="not accepted"):
            await Sandbox.on_cluster(namespace, gateway=gateway.address, token=revoked)
        with pytest.raises(GatewayAuthError, match=rf"may not create sandboxsessions.*{other}"):
            await Sandbox.on_cluster(other, gateway=gateway.address, token=good)
    finally:
        await kube.request("DELETE", f"/api/v1/namespaces/{other}")


async def test_a_replica_stopped_mid_stream_fails_the_stream_clearly_and_another_serves_on(
    kube: KubeApi, namespace: str, start_gateway: StartGateway
) -> None:
    await create_pool(kube, namespace, "warm", 1)
    first, second = await start_gateway(), await start_gateway()
    token = await tenant_token(kube, namespace)
    await until_claimable(first, namespace, "warm", 1)
    sandbox = await Sandbox.on_cluster(namespace, pool="warm", gateway=first.address, token=token)
    try:
        seen: list[str] = []

        async def follow() -> None:
            async for item in sandbox.client.stream_command(
                "for i in $(seq 50); do echo $i; sleep 0.2; done"
            ):
                if isinstance(item, tuple):
                    seen.append(item[1])
                    if len(seen) == 2:
                        asyncio.get_running_loop().call_soon(
                            lambda: asyncio.ensure_future(first.stop(grace_s=0))
                        )

        with pytest.raises(SandfleetError) as caught:
            await asyncio.wait_for(follow(), 30)
        assert isinstance(caught.value, SandboxLostError), caught.value
        assert str(caught.value), "the error says what happened"

        # The session lives on (the gateway holds no state of it) ...
        await wait_session(kube, namespace, sandbox.name, phase_is("Ready"), timeout_s=10)
        # ... and the client goes on through the other replica with the same session.
        again = await Sandbox.connect_session(
            sandbox.name, namespace, gateway=second.address, token=token
        )
        async with again:
            assert (await again.bash("echo still here")).stdout == "still here\n"
    finally:
        # Its release would go to the stopped replica: delete the session as an admin.
        await kube.request(
            "DELETE",
            f"/apis/sandfleet.dev/v1alpha1/namespaces/{namespace}/sandboxsessions/{sandbox.name}",
        )

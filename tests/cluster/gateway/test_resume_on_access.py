"""Resume on access through the real gateway: a sandbox claimed through it is suspended with
kubectl (spec.suspend), and the client's next proxied calls (two at once) resume it once,
with its files, working directory and environment, on the same runtime token."""

from __future__ import annotations

import asyncio

import pytest

from sandfleet import Sandbox
from tests.cluster.gateway.conftest import StartGateway, until_claimable
from tests.cluster.gateway.test_claims import create_pool
from tests.cluster.harness.gateway_clients import tenant_token
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import (
    SESSIONS,
    OperatorProcess,
    phase_is,
    wait_session,
)

pytestmark = pytest.mark.cluster


async def test_proxied_calls_resume_a_suspended_session_once(
    kube: KubeApi, namespace: str, start_gateway: StartGateway, operator: OperatorProcess
) -> None:
    await create_pool(kube, namespace, "warm", 1)
    gateway = await start_gateway()
    token = await tenant_token(kube, namespace)
    await until_claimable(gateway, namespace, "warm", 1)
    sandbox = await Sandbox.on_cluster(namespace, pool="warm", gateway=gateway.address, token=token)
    async with sandbox:
        await sandbox.bash("mkdir -p /testbed/w && cd /testbed/w && echo kept > f && export S=7")
        await wait_session(kube, namespace, sandbox.name, phase_is("Ready"), timeout_s=30)
        await kube.checked(
            "PATCH",
            f"{SESSIONS.format(ns=namespace)}/{sandbox.name}",
            {"spec": {"suspend": True}},
            content_type="application/merge-patch+json",
        )
        await wait_session(kube, namespace, sandbox.name, phase_is("Suspended"), timeout_s=60)

        first, second = await asyncio.gather(
            sandbox.bash("pwd; echo $S; cat f"), sandbox.bash("cat /testbed/w/f")
        )
        assert first.stdout.splitlines() == ["/testbed/w", "7", "kept"]
        assert second.stdout == "kept\n"
        body = await wait_session(kube, namespace, sandbox.name, phase_is("Ready"), timeout_s=10)
        assert body["spec"]["suspend"] is False
    resumes = [
        line
        for line in operator.log_lines()
        if '"session_resumed"' in line and f"{namespace}/{sandbox.name}" in line
    ]
    assert len(resumes) == 1, resumes

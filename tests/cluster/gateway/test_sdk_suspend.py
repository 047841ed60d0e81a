"""The SDK's suspend and resume of a cluster sandbox, through the real gateway and operator:
`await sandbox.suspend()` on a claimed sandbox, then `Sandbox.resume(record)`, with the
namespace's session quota in the way: a Suspended session does not count (another claim fits
beside it), and its resume is refused while the namespace is full, then admitted."""

from __future__ import annotations

import asyncio
import os
import re
import time

import pytest

from sandfleet import Sandbox
from sandfleet.errors import QuotaExceededError
from sandfleet.gateway.server import GatewayServer
from tests.cluster.gateway.conftest import StartGateway, until_claimable
from tests.cluster.gateway.test_claims import create_pool
from tests.cluster.harness.gateway_clients import tenant_token
from tests.cluster.harness.kube_api import JsonObject, KubeApi
from tests.cluster.harness.measurements import record as record_numbers
from tests.cluster.harness.operator_harness import SESSIONS

pytestmark = pytest.mark.cluster


async def session_of(kube: KubeApi, namespace: str, name: str) -> JsonObject:
    return await kube.checked("GET", f"{SESSIONS.format(ns=namespace)}/{name}")


async def until_quota_free(gateway: GatewayServer, namespace: str) -> None:
    """Until the gateway's watch shows the released session (it counts no more)."""
    deadline = time.monotonic() + 30
    while gateway.quotas.in_use(namespace) > 0:
        assert time.monotonic() < deadline, gateway.quotas.in_use(namespace)
        await asyncio.sleep(0.1)


async def test_sdk_suspend_and_resume_a_claimed_sandbox_under_a_quota(
    kube: KubeApi, namespace: str, start_gateway: StartGateway
) -> None:
    await create_pool(kube, namespace, "warm", 1)
    gateway = await start_gateway(quotas={namespace: 1})
    token = await tenant_token(kube, namespace)
    await until_claimable(gateway, namespace, "warm", 1)
    where = {"gateway": gateway.address, "token": token}
    sandbox = await Sandbox.on_cluster(namespace, pool="warm", **where)
    name = sandbox.name
    await sandbox.bash("mkdir -p /testbed/w && cd /testbed/w && echo kept > f && export S=7")

    started = time.monotonic()
    record = await sandbox.suspend()
    suspend_s = time.monotonic() - started
    assert (record.id, record.namespace, record.path) == (name, namespace, None)
    assert record.size_bytes > 0 and re.fullmatch(r"[0-9a-f]{64}", record.sha256)
    assert not record.processes_kept and "not kept" in record.note
    assert abs(record.suspended_at - time.time()) < 300
    body = await session_of(kube, namespace, name)
    status = body["status"]
    assert status["phase"] == "Suspended"
    assert not status.get("podName") and status["snapshot"]["sha256"] == record.sha256
    await sandbox.close()  # closed by the suspend already: the session is kept, not released
    assert (await session_of(kube, namespace, name))["metadata"]

    # Suspended, it does not count: another claim fits under the quota of 1 ...
    other = await Sandbox.on_cluster(namespace, pool="warm", **where)
    try:
        # ... and while that one runs, the resume does not fit, and changes nothing.
        with pytest.raises(QuotaExceededError, match=f"namespace {namespace} has 1 of its 1"):
            await Sandbox.resume(record, **where)
        assert (await session_of(kube, namespace, name))["spec"]["suspend"] is True
    finally:
        await other.close()
    await until_quota_free(gateway, namespace)

    started = time.monotonic()
    async with Sandbox.resume(record, **where) as resumed:
        resume_s = time.monotonic() - started
        assert resumed.name == name
        result = await resumed.bash("pwd; echo $S; cat f")
        assert result.stdout.splitlines() == ["/testbed/w", "7", "kept"]
        assert gateway.quotas.in_use(namespace) == 1
    # Single runs, as a client sees them (the call to the answer): not a benchmark.
    record_numbers(
        "sdk_suspend_resume_cluster",
        {"suspend_s": round(suspend_s, 3), "resume_s": round(resume_s, 3),
         "snapshot_bytes": record.size_bytes, "load_average": os.getloadavg()[0]},
    )  # fmt: skip
    # The resumed sandbox owned the session as the claimed one did: closing released it.
    gone = await kube.request("GET", f"{SESSIONS.format(ns=namespace)}/{name}")
    assert gone.status == 404 or gone.body["metadata"].get("deletionTimestamp")

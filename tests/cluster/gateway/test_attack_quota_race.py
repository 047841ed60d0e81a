"""Quotas across gateway replicas, attacked on the real cluster (issue #26, item 7).

A tenant (a ServiceAccount with only the tenant Role) races count=2 claims through two
gateway replicas at once under a quota of 4. Each replica alone sees room for every claim it
gets; before the quota ledger the two together left 8 live sessions. Now the claims reserve
their sessions in the ledger Lease with a resourceVersion precondition: never more than 4
live sessions, every refused claim gets RESOURCE_EXHAUSTED naming the limit, and no pod is
left claimed by a refused claim.
"""

from __future__ import annotations

import asyncio

import pytest

from sandfleet import Sandbox
from sandfleet.errors import QuotaExceededError
from tests.cluster.gateway.conftest import StartGateway, until_claimable
from tests.cluster.gateway.test_claims import create_pool
from tests.cluster.harness.gateway_clients import tenant_token
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import (
    OPERATOR_NAMESPACE,
    POOLS,
    SESSIONS,
    wait_no_leftovers,
)

pytestmark = pytest.mark.cluster

QUOTA = 4
CLAIMS_PER_REPLICA = 2
"""Each replica gets two count=2 claims at once: alone, each replica would admit both."""


async def live_sessions(kube: KubeApi, namespace: str) -> list[str]:
    items = (await kube.checked("GET", SESSIONS.format(ns=namespace)))["items"]
    return [
        s["metadata"]["name"]
        for s in items
        if not s["metadata"].get("deletionTimestamp")
        and (s.get("status") or {}).get("phase") not in ("Succeeded", "Failed", "Expired")
    ]


async def claimed_pods(kube: KubeApi, namespace: str) -> dict[str, str]:
    """Claimed pool pods: pod name -> the session it was claimed for."""
    selector = "sandfleet.dev/state=claimed"
    pods = await kube.checked(
        "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}"
    )
    return {
        p["metadata"]["name"]: p["metadata"]["labels"].get("sandfleet.dev/session", "")
        for p in pods["items"]
        if not p["metadata"].get("deletionTimestamp")
    }


async def test_two_replicas_racing_count_2_claims_never_exceed_the_quota(
    kube: KubeApi,
    namespace: str,
    start_gateway: StartGateway,
) -> None:
    await create_pool(kube, namespace, "warm", 2 * CLAIMS_PER_REPLICA * 2)
    settings = {"quotas": {namespace: QUOTA}, "quota_ledger_namespace": OPERATOR_NAMESPACE}
    replicas = [await start_gateway(**settings), await start_gateway(**settings)]
    token = await tenant_token(kube, namespace)
    for replica in replicas:
        await until_claimable(replica, namespace, "warm", 2 * CLAIMS_PER_REPLICA)

    results = await asyncio.gather(
        *(
            Sandbox.on_cluster_many(2, namespace, pool="warm", gateway=replica.address, token=token)
            for replica in replicas
            for _ in range(CLAIMS_PER_REPLICA)
        ),
        return_exceptions=True,
    )
    granted = [sandboxes for sandboxes in results if isinstance(sandboxes, list)]
    refused = [error for error in results if isinstance(error, BaseException)]
    try:
        assert all(isinstance(e, QuotaExceededError) for e in refused), refused
        assert all(f"of its {QUOTA} sessions" in str(e) for e in refused), refused
        assert len(granted) == QUOTA // 2, f"{len(granted)} claims of 2 granted under {QUOTA}"
        names = {s.name for sandboxes in granted for s in sandboxes}
        assert len(names) == QUOTA
        assert sorted(await live_sessions(kube, namespace)) == sorted(names)
        # Refused claims took no pod: every claimed pod is a granted session's.
        pods = await claimed_pods(kube, namespace)
        assert sorted(pods.values()) == sorted(names), pods
        # The ledger is the gateway's, in its own namespace.
        lease = await kube.checked(
            "GET",
            f"/apis/coordination.k8s.io/v1/namespaces/{OPERATOR_NAMESPACE}/leases/"
            f"sandfleet-quota-{namespace}",
        )
        assert "sandfleet.dev/quota-reservations" in lease["metadata"]["annotations"]
    finally:
        await asyncio.gather(*(s.close() for sandboxes in granted for s in sandboxes))
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/warm")
    await wait_no_leftovers(kube, namespace, timeout_s=60)

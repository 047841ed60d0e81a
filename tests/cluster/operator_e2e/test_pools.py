"""Warm pools: claims are atomic under concurrency, per-session settings arrive at claim
time through the runtime API, and the pool refills."""

from __future__ import annotations

import asyncio
import base64
import urllib.parse

import pytest

from sandfleet import Sandbox
from sandfleet.api.labels import Label, PodState
from tests.cluster.harness.kube_api import KubeApi, condition_is_true
from tests.cluster.harness.operator_harness import (
    POOLS,
    OperatorProcess,
    condition,
    create_session,
    phase_is,
    wait_no_leftovers,
    wait_session,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


async def create_pool(kube: KubeApi, ns: str, name: str, replicas: int) -> None:
    body = {
        "apiVersion": "sandfleet.dev/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": name},
        "spec": {"replicas": replicas},
    }
    await kube.checked("POST", POOLS.format(ns=ns), body)


async def wait_pool_ready(kube: KubeApi, ns: str, name: str, ready: int, timeout_s: float) -> None:
    """The pool's status says `ready` idle sandboxes and the API server holds that many idle,
    Ready pods of it. Both: the status's counts may lag a claim by up to a second
    (STATUS_COUNTS_EVERY_S), so a status read just after a claim can still count the pod
    the claim took."""
    path = f"{POOLS.format(ns=ns)}/{name}"
    await kube.wait_for(
        path,
        lambda r: r.status == 200 and (r.body.get("status") or {}).get("replicas") == ready,
        timeout_s,
    )
    selector = urllib.parse.quote(f"{Label.POOL}={name},{Label.STATE}={PodState.IDLE}")
    await kube.wait_for(
        f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}",
        lambda r: (
            r.status == 200
            and sum(
                not p["metadata"].get("deletionTimestamp") and condition_is_true(p, "Ready")
                for p in r.body["items"]
            )
            == ready
        ),
        timeout_s,
    )


async def session_token(kube: KubeApi, ns: str, body: dict[str, object]) -> str:
    status = body["status"]
    assert isinstance(status, dict)
    secret = await kube.checked(
        "GET", f"/api/v1/namespaces/{ns}/secrets/{status['tokenSecretName']}"
    )
    return base64.b64decode(secret["data"]["token"]).decode()


async def test_a_claim_binds_the_sessions_token_env_and_files_and_the_pool_refills(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    await create_pool(kube, namespace, "warm", 2)
    await wait_pool_ready(kube, namespace, "warm", 2, 120)
    spec = {
        "poolRef": {"name": "warm"},
        "env": [{"name": "GREETING", "value": "hello from the claim"}],
        "files": [{"path": "input/task.txt", "content": "the task"}],
    }
    await create_session(kube, namespace, "claimer", spec)
    body = await wait_session(kube, namespace, "claimer", phase_is("Ready", "Failed"))
    assert body["status"]["phase"] == "Ready", body["status"]
    assert body["status"]["poolName"] == "warm"
    assert condition(body, "Scheduled")["reason"] == "WarmSandboxClaimed"
    assert condition(body, "RuntimeReady")["reason"] == "RuntimeBound"
    pod = await kube.checked(
        "GET", f"/api/v1/namespaces/{namespace}/pods/{body['status']['podName']}"
    )
    assert pod["metadata"]["labels"]["sandfleet.dev/session"] == "claimer"
    assert [o["uid"] for o in pod["metadata"]["ownerReferences"]] == [body["metadata"]["uid"]]

    token = await session_token(kube, namespace, body)
    sandbox = await Sandbox.connect(f"{body['status']['podIP']}:50051", token)
    try:
        result = await sandbox.bash("echo $GREETING; cat /testbed/input/task.txt")
        assert result.stdout.splitlines() == ["hello from the claim", "the task"]
    finally:
        await sandbox.close()
    await wait_pool_ready(kube, namespace, "warm", 2, 120)  # refilled
    await kube.wait_for(  # the "Claims" column: the pool's sandboxes held by sessions now
        f"{POOLS.format(ns=namespace)}/warm",
        lambda r: r.status == 200 and (r.body.get("status") or {}).get("claims") == 1,
        60,
    )

    await kube.checked(
        "DELETE", f"/apis/sandfleet.dev/v1alpha1/namespaces/{namespace}/sandboxsessions/claimer"
    )
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/warm")
    await wait_no_leftovers(kube, namespace, timeout_s=60)


async def test_fifty_concurrent_claims_never_share_a_sandbox(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    claims = 50
    await create_pool(kube, namespace, "crowd", claims)
    await wait_pool_ready(kube, namespace, "crowd", claims, 300)
    spec = {"poolRef": {"name": "crowd"}}
    await asyncio.gather(*(create_session(kube, namespace, f"c{i}", spec) for i in range(claims)))
    bodies = await asyncio.gather(
        *(
            wait_session(kube, namespace, f"c{i}", phase_is("Ready", "Failed"), 300)
            for i in range(claims)
        )
    )
    # The pool is refilling meanwhile; stop it (50 more sandboxes are not what this tests).
    await kube.checked(
        "PATCH",
        f"{POOLS.format(ns=namespace)}/crowd",
        {"spec": {"replicas": 0}},
        content_type="application/merge-patch+json",
    )
    assert {b["status"]["phase"] for b in bodies} == {"Ready"}
    pods = [b["status"]["podName"] for b in bodies]
    assert len(set(pods)) == claims, "two sessions got the same sandbox"
    warm = [b for b in bodies if b["status"].get("poolName") == "crowd"]
    assert len(warm) == claims, f"only {len(warm)} of {claims} claims hit the pool"
    listed = await kube.checked(
        "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=sandfleet.dev/state=claimed"
    )
    owners = {
        p["metadata"]["name"]: [o["name"] for o in p["metadata"]["ownerReferences"]]
        for p in listed["items"]
    }
    for body in bodies:
        assert owners[body["status"]["podName"]] == [body["metadata"]["name"]]

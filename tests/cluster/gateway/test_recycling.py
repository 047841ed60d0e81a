"""Recycled pool sandboxes on the real cluster: a released sandbox that resets clean goes back
to its pool and the next tenant sees nothing of the previous one; maxUses replaces it; a pod
that cannot prove a clean reset is deleted instead."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandboxLostError
from sandfleet.gateway.claim_types import Claimed
from sandfleet.gateway.claims import Claimer
from tests.cluster.gateway.conftest import MakeClaimer
from tests.cluster.gateway.test_claims import PODS, run, spec, until_warm
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import (
    POOLS,
    OperatorProcess,
    phase_is,
    wait_no_leftovers,
    wait_session,
)

pytestmark = pytest.mark.cluster

SCRATCH = ("/testbed", "/tmp", "/var/tmp", "/dev/shm", "$HOME")
"""Every path a tenant can write in the sandbox image (the working tree and the rest)."""
LEAVE_TRACES = " ; ".join(
    [f"echo secret > {path}/left-by-a.txt" for path in SCRATCH]
    + [
        "echo 'cat /etc/passwd' >> $HOME/.bash_history",
        "(setsid sleep 1000 >/dev/null 2>&1 &)",
        "export EXPORTED_BY_A=1",
        "true",
    ]
)
LOOK_FOR_TRACES = " ; ".join(
    [f"ls {path}/left-by-a.txt 2>/dev/null" for path in SCRATCH]
    + [
        "cat $HOME/.bash_history 2>/dev/null",
        "pgrep -x sleep",
        'echo "env:${TENANT_A-}${EXPORTED_BY_A-}"',
    ]
)


async def create_pool(kube: KubeApi, ns: str, name: str, **spec_fields: Any) -> None:
    body = {
        "apiVersion": "sandfleet.dev/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": name},
        "spec": {"replicas": 1, **spec_fields},
    }
    await kube.checked("POST", POOLS.format(ns=ns), body)


async def pod_of(kube: KubeApi, ns: str, name: str) -> dict[str, Any] | None:
    response = await kube.request("GET", f"{PODS.format(ns=ns)}/{name}")
    if response.status == 404 or response.body["metadata"].get("deletionTimestamp"):
        return None
    return response.body


async def until_pod(
    kube: KubeApi, ns: str, name: str, accept: Any, timeout_s: float = 60
) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout_s
    while not accept(pod := await pod_of(kube, ns, name)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"pod {name}: {pod and pod['metadata'].get('labels')}")
        await asyncio.sleep(0.3)
    return pod


async def until_only(kube: KubeApi, ns: str, pool: str, pod: str, timeout_s: float = 60) -> None:
    """Until `pod` is the pool's only pod (not being deleted)."""
    deadline = time.monotonic() + timeout_s
    while True:
        listed = await kube.checked(
            "GET", f"{PODS.format(ns=ns)}?labelSelector=sandfleet.dev/pool={pool}"
        )
        names = [
            p["metadata"]["name"]
            for p in listed["items"]
            if not p["metadata"].get("deletionTimestamp")
        ]
        if names == [pod]:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"pool {pool}: {names}")
        await asyncio.sleep(0.3)


def idle(pod: dict[str, Any] | None) -> bool:
    return pod is not None and pod["metadata"]["labels"].get("sandfleet.dev/state") == "idle"


async def claim_the_one_pod(
    kube: KubeApi, claimer: Claimer, ns: str, pool: str, **kw: Any
) -> Claimed:
    await until_warm(claimer, ns, pool, 1)
    (claimed,) = await claimer.claim(spec(ns, pool, **kw))
    assert claimed.warm
    await wait_session(kube, ns, claimed.name, phase_is("Ready"), 60)
    return claimed


async def test_a_recycled_sandbox_shows_nothing_of_its_previous_tenant_and_maxuses_replaces_it(
    kube: KubeApi, namespace: str, operator: OperatorProcess, make_claimer: MakeClaimer
) -> None:
    await create_pool(kube, namespace, "reuse", recycle=True, maxUses=2)
    claimer = await make_claimer(namespace)
    first = await claim_the_one_pod(kube, claimer, namespace, "reuse", env={"TENANT_A": "a"})
    await run(first, LEAVE_TRACES)
    assert "left-by-a" in await run(first, LOOK_FOR_TRACES)  # the look finds traces

    await claimer.release(namespace, [first.name])
    recycled = await until_pod(kube, namespace, first.pod, idle)
    # The keeper's replacement (made while the pod was claimed) is the excess now: it goes.
    await until_only(kube, namespace, "reuse", first.pod)
    second = await claim_the_one_pod(kube, claimer, namespace, "reuse")

    assert second.pod == first.pod, "the pool handed out another pod: nothing was recycled"
    assert recycled is not None
    assert recycled["metadata"]["annotations"]["sandfleet.dev/uses"] == "1"
    assert (await run(second, LOOK_FOR_TRACES)).split() == ["env:"]
    old_token = RuntimeClient(first.address, first.token, rpc_timeout_s=10)
    with pytest.raises(SandboxLostError):  # refused: UNAUTHENTICATED
        await old_token.run_command("true")
    await old_token.close()

    await claimer.release(namespace, [second.name])  # its second use: maxUses reached
    await until_pod(kube, namespace, first.pod, lambda pod: pod is None, 30)
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/reuse")
    await wait_no_leftovers(kube, namespace, timeout_s=60)


async def test_a_pod_that_cannot_prove_a_clean_reset_is_deleted_not_recycled(
    kube: KubeApi, namespace: str, operator: OperatorProcess, make_claimer: MakeClaimer
) -> None:
    """Made before the pool recycled: its runtime restores only the working tree, so a
    reset that looks clean proves nothing about /tmp or the home."""
    await create_pool(kube, namespace, "late", recycle=False)
    claimer = await make_claimer(namespace)
    await until_warm(claimer, namespace, "late", 1)
    await kube.checked(
        "PATCH",
        f"{POOLS.format(ns=namespace)}/late",
        {"spec": {"recycle": True}},
        content_type="application/merge-patch+json",
    )
    (claimed,) = await claimer.claim(spec(namespace, "late"))
    await wait_session(kube, namespace, claimed.name, phase_is("Ready"), 60)

    await claimer.release(namespace, [claimed.name])

    await until_pod(kube, namespace, claimed.pod, lambda pod: pod is None, 30)
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/late")
    await wait_no_leftovers(kube, namespace, timeout_s=60)

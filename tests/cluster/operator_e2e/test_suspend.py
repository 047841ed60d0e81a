"""Suspend and resume on the cluster: files, cwd and env survive a round trip through the
snapshot store onto a warm pool pod; a suspended session holds no pod, Secret or
NetworkPolicy; a store that cannot be written leaves the sandbox running."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import pytest

from sandfleet import Sandbox
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import (
    SESSIONS,
    OperatorProcess,
    condition,
    create_session,
    phase_is,
    wait_session,
)
from tests.cluster.operator_e2e.test_pools import create_pool, wait_pool_ready

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


async def set_suspend(kube: KubeApi, ns: str, name: str, suspend: bool) -> None:
    await kube.checked(
        "PATCH",
        f"{SESSIONS.format(ns=ns)}/{name}",
        {"spec": {"suspend": suspend}},
        content_type="application/merge-patch+json",
    )


async def token_of(kube: KubeApi, ns: str, body: dict[str, object]) -> str:
    status = body["status"]
    assert isinstance(status, dict)
    secret = await kube.checked(
        "GET", f"/api/v1/namespaces/{ns}/secrets/{status['tokenSecretName']}"
    )
    return base64.b64decode(secret["data"]["token"]).decode()


async def bash(kube: KubeApi, ns: str, body: dict[str, object], command: str) -> str:
    status = body["status"]
    assert isinstance(status, dict)
    sandbox = await Sandbox.connect(f"{status['podIP']}:50051", await token_of(kube, ns, body))
    try:
        return (await sandbox.bash(command)).stdout
    finally:
        await sandbox.close()


def released_or_failed(body: dict[str, object]) -> bool:
    """Suspended and released (the phase is written before the pod goes), or Failed."""
    status = body.get("status") or {}
    assert isinstance(status, dict)
    phase = status.get("phase")
    return phase == "Failed" or (phase == "Suspended" and "podName" not in status)


def has_suspended_condition(body: dict[str, Any]) -> bool:
    """The operator has answered a suspend request (Suspended=True, or False with a reason)."""
    return any(c["type"] == "Suspended" for c in body["status"].get("conditions", []))


async def held_by(kube: KubeApi, ns: str, name: str) -> list[str]:
    """The session's pod, token Secret and NetworkPolicy that still exist."""
    pods = await kube.checked(
        "GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=sandfleet.dev/session={name}"
    )
    held = [f"pod/{p['metadata']['name']}" for p in pods["items"]
            if not p["metadata"].get("deletionTimestamp")]  # fmt: skip
    for path in (
        f"/api/v1/namespaces/{ns}/secrets/{name}-token",
        f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/{name}-sandbox",
    ):
        if (await kube.request("GET", path)).status != 404:
            held.append(path.rsplit("/", 2)[-2] + "/" + name)
    return held


async def test_a_round_trip_keeps_files_cwd_and_env_and_holds_nothing_while_suspended(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    await create_pool(kube, namespace, "warm", 1)
    await wait_pool_ready(kube, namespace, "warm", 1, 120)
    await create_session(kube, namespace, "napper", {"poolRef": {"name": "warm"}})
    body = await wait_session(kube, namespace, "napper", phase_is("Ready", "Failed"))
    assert body["status"]["phase"] == "Ready", body["status"]
    await bash(
        kube,
        namespace,
        body,
        "mkdir -p /testbed/work && cd /testbed/work && head -c 10000000 /dev/urandom > big"
        " && echo kept > note.txt && export STAGE=2 && (sleep 600 &)",
    )

    started = time.monotonic()
    await set_suspend(kube, namespace, "napper", True)
    body = await wait_session(kube, namespace, "napper", released_or_failed)
    suspend_s = time.monotonic() - started
    assert body["status"]["phase"] == "Suspended", body["status"]
    suspended = condition(body, "Suspended")
    assert suspended["status"] == "True"
    assert "running processes were not kept" in suspended["message"]
    snapshot = body["status"]["snapshot"]
    assert snapshot["sizeBytes"] > 10_000_000
    assert snapshot["processesKept"] is False
    assert "podName" not in body["status"]
    # The pod went back to the pool or away, its Secret and policy too.
    assert await held_by(kube, namespace, "napper") == []
    stored = list(operator.snapshot_dir.glob(f"{namespace}/napper/*.tar"))
    assert len(stored) == 1

    await wait_pool_ready(kube, namespace, "warm", 1, 120)  # refilled: the resume is warm
    started = time.monotonic()
    await set_suspend(kube, namespace, "napper", False)
    body = await wait_session(kube, namespace, "napper", phase_is("Ready", "Failed"))
    resume_s = time.monotonic() - started
    assert body["status"]["phase"] == "Ready", body["status"]
    assert condition(body, "Suspended")["reason"] == "Resumed"
    assert condition(body, "Scheduled")["reason"] == "WarmSandboxClaimed", operator.log_tail(80)
    out = await bash(kube, namespace, body, "pwd; echo $STAGE; cat note.txt; stat -c %s big")
    assert out.splitlines() == ["/testbed/work", "2", "kept", "10000000"]
    assert not stored[0].exists(), "the snapshot stays after a resume"
    print(f"suspend {suspend_s:.2f}s resume {resume_s:.2f}s (10 MB, warm pool, API round trips)")

    await kube.checked("DELETE", f"{SESSIONS.format(ns=namespace)}/napper")
    await kube.wait_for(f"{SESSIONS.format(ns=namespace)}/napper", lambda r: r.status == 404, 30)


async def test_a_store_that_cannot_be_written_leaves_the_sandbox_running_and_a_retry_succeeds(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    # A file where the namespace's folder would go: the store cannot write there.
    in_the_way = operator.snapshot_dir / namespace
    await asyncio.to_thread(in_the_way.parent.mkdir, parents=True, exist_ok=True)
    await asyncio.to_thread(in_the_way.write_text, "in the way")
    await create_session(kube, namespace, "stays", {})
    body = await wait_session(kube, namespace, "stays", phase_is("Ready", "Failed"))
    await set_suspend(kube, namespace, "stays", True)
    body = await wait_session(
        kube,
        namespace,
        "stays",
        has_suspended_condition,
    )
    refused = condition(body, "Suspended")
    assert (refused["status"], refused["reason"]) == ("False", "SnapshotStoreUnavailable")
    assert "keeps running" in refused["message"]
    assert body["status"]["phase"] == "Ready"
    assert (await bash(kube, namespace, body, "echo alive > mark; cat mark")).strip() == "alive"

    # The store works again: asked again, the suspend goes through, and a cold pod (named
    # after the session, like the one deleted) resumes it.
    await asyncio.to_thread(in_the_way.unlink)
    await set_suspend(kube, namespace, "stays", False)
    await set_suspend(kube, namespace, "stays", True)
    await wait_session(kube, namespace, "stays", phase_is("Suspended", "Failed"))
    await set_suspend(kube, namespace, "stays", False)
    body = await wait_session(kube, namespace, "stays", phase_is("Ready", "Failed"))
    assert body["status"]["phase"] == "Ready", body["status"]
    assert (await bash(kube, namespace, body, "cat /testbed/mark")).strip() == "alive"
    await kube.checked("DELETE", f"{SESSIONS.format(ns=namespace)}/stays")


async def test_an_idle_session_is_suspended_and_its_ttl_deletes_it_with_its_snapshot(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    lifecycle = {"idleTimeoutSeconds": 2, "idleAction": "Suspend", "suspendedTTLSeconds": 4}
    await create_session(kube, namespace, "dozer", {"lifecycle": lifecycle})
    body = await wait_session(kube, namespace, "dozer", phase_is("Suspended", "Failed", "Expired"))
    assert body["status"]["phase"] == "Suspended", body["status"]
    assert condition(body, "Suspended")["message"].startswith("idle (no tool call for 2s")
    stored = operator.snapshot_dir / namespace / "dozer" / f"{body['metadata']['uid']}.tar"
    assert await asyncio.to_thread(stored.exists)
    await kube.wait_for(f"{SESSIONS.format(ns=namespace)}/dozer", lambda r: r.status == 404, 60)
    assert not await asyncio.to_thread(stored.exists), "the snapshot outlived its session"


async def test_a_corrupt_snapshot_fails_the_resume_and_is_kept(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    await create_session(kube, namespace, "spoiled", {})
    body = await wait_session(kube, namespace, "spoiled", phase_is("Ready", "Failed"))
    await bash(kube, namespace, body, "echo precious > /testbed/data")
    await set_suspend(kube, namespace, "spoiled", True)
    body = await wait_session(kube, namespace, "spoiled", phase_is("Suspended", "Failed"))
    stored = operator.snapshot_dir / namespace / "spoiled" / f"{body['metadata']['uid']}.tar"
    data = bytearray(await asyncio.to_thread(stored.read_bytes))
    data[-1] ^= 0xFF  # same size, another checksum: found only at the end of the read
    await asyncio.to_thread(stored.write_bytes, bytes(data))

    await set_suspend(kube, namespace, "spoiled", False)
    body = await wait_session(kube, namespace, "spoiled", phase_is("Failed", "Ready"))
    assert body["status"]["phase"] == "Failed"
    completed = condition(body, "Completed")
    assert completed["reason"] == "SnapshotCorrupt", completed
    assert "sha256" in completed["message"] or "checksum" in completed["message"]
    assert await asyncio.to_thread(stored.exists), "a corrupt snapshot is kept for inspection"
    await kube.checked("DELETE", f"{SESSIONS.format(ns=namespace)}/spoiled")
    await kube.wait_for(f"{SESSIONS.format(ns=namespace)}/spoiled", lambda r: r.status == 404, 30)
    assert not await asyncio.to_thread(stored.exists)

"""The gateway's Suspend over gRPC, through the SDK's GatewayClient: authorization (`patch
sandboxsessions`), the answer once the session is Suspended with its pod given back, and the
operator's refusals as SuspendError / SnapshotTooLargeError. The test plays the operator on
the stand-in API server (tests/support/gateway_api.py); the real one answers in
tests/cluster/gateway/test_sdk_suspend.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from sandfleet.clients.gateway.client import GatewayClient
from sandfleet.errors import GatewayAuthError, GatewayError, SnapshotTooLargeError, SuspendError
from tests.integration.gateway.test_service import TRAINER, Harness, harness
from tests.support.gateway_api import JsonObject, session_object

pytestmark = pytest.mark.integration

SHA = "cd" * 32
SESSIONS = "/apis/sandfleet.dev/v1alpha1/namespaces/team-a/sandboxsessions"
Operator = Callable[[JsonObject], None]


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    async with harness() as started:
        started.api.allow(TRAINER, "patch", "team-a")
        body = session_object("team-a", "s1", pod="pod-1", pod_ip="10.0.0.1")
        body["spec"] = {}
        body["metadata"]["generation"] = 1
        started.api.put_session(body)
        yield started


def suspended(session: JsonObject) -> None:
    """The operator's steps 3 and 4 at once: Suspended, the snapshot, the pod gone."""
    session["status"] = {
        "phase": "Suspended",
        "snapshot": {"sizeBytes": 4096, "sha256": SHA, "suspendedTime": "2026-11-28T08:00:00Z"},
        "conditions": [
            {"type": "Suspended", "status": "True", "reason": "Suspended",
             "message": "spec.suspend: snapshot of 4096 bytes stored; running processes were "
             "not kept", "observedGeneration": 1},
        ],
    }  # fmt: skip


def too_large(session: JsonObject) -> None:
    session["status"]["conditions"] = [
        {"type": "Suspended", "status": "False", "reason": "SnapshotTooLarge",
         "message": "the snapshot would exceed the limit of 1 GiB; biggest: /testbed/big",
         "observedGeneration": session["metadata"]["generation"]},
    ]  # fmt: skip


async def answer_suspends(h: Harness, operator: Operator) -> None:
    """Answer the next spec.suspend true as `operator` says, once the gateway watches for the
    answer (the stand-in sends a watch only what happens after it began)."""
    seen, watches = len(h.api.session_patches), h.api.count("WATCH", SESSIONS)
    for _ in range(500):  # the test's operator polls, like the real one
        asked = {"spec": {"suspend": True}} in [p for _, p in h.api.session_patches[seen:]]
        if asked and h.api.count("WATCH", SESSIONS) > watches:
            break
        await asyncio.sleep(0.02)
    session = h.api.sessions[("team-a", "s1")]
    operator(session)
    session["metadata"]["resourceVersion"] += "0"  # a new version: a watcher reads it
    h.api.put_session(session, "MODIFIED")


async def suspend(h: Harness, token: str = "trainer-token") -> Any:
    async with GatewayClient(h.server.address, token) as client:
        return await client.suspend("team-a", "s1", timeout_s=10)


async def test_suspend_answers_the_snapshot_once_the_pod_is_given_back(h: Harness) -> None:
    operator = asyncio.create_task(answer_suspends(h, suspended))
    snapshot = await suspend(h)
    await operator
    assert (snapshot.namespace, snapshot.name, snapshot.size_bytes) == ("team-a", "s1", 4096)
    assert (snapshot.sha256, snapshot.suspended_at) == (SHA, 1_795_852_800.0)
    assert not snapshot.processes_kept and "not kept" in snapshot.message
    # Suspended already: the same record at once, nothing patched.
    patches = len(h.api.session_patches)
    assert await suspend(h) == snapshot
    assert len(h.api.session_patches) == patches


async def test_a_refusal_is_a_suspend_error_and_asking_again_tries_again(h: Harness) -> None:
    operator = asyncio.create_task(answer_suspends(h, too_large))
    with pytest.raises(SnapshotTooLargeError, match="runs on: the snapshot would exceed"):
        await suspend(h)
    await operator
    # Asked again: the operator only retries on a new generation, so the gateway makes one.
    operator = asyncio.create_task(answer_suspends(h, suspended))
    assert (await suspend(h)).size_bytes == 4096
    await operator
    specs = [p["spec"]["suspend"] for _, p in h.api.session_patches]
    assert specs == [True, False, True]


async def test_suspend_needs_patch_rights_in_the_namespace(h: Harness) -> None:
    h.api.accept("reader-token", "system:serviceaccount:team-a:reader")
    h.api.allow("system:serviceaccount:team-a:reader", "create", "team-a")
    with pytest.raises(GatewayAuthError, match="may not patch sandboxsessions in namespace"):
        await suspend(h, "reader-token")
    assert h.api.session_patches == []


async def test_what_cannot_be_suspended_says_why(h: Harness) -> None:
    h.api.sessions[("team-a", "s1")]["spec"] = {"agent": {"model": "m"}}
    with pytest.raises(SuspendError, match="managed session"):
        await suspend(h)
    h.api.sessions.pop(("team-a", "s1"))
    with pytest.raises(GatewayError, match="no SandboxSession team-a/s1") as missing:
        await suspend(h)
    assert missing.value.code == "NOT_FOUND" and h.api.session_patches == []

"""What a cluster suspend keeps beyond the working tree (HOME, /tmp, /var/tmp, every bash
session), the size limit, and an operator killed in the middle of a suspend or a resume."""

from __future__ import annotations

import asyncio
import tarfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from sandfleet import Sandbox
from tests.cluster.harness.kube_api import JsonObject, KubeApi
from tests.cluster.harness.operator_harness import (
    SESSIONS,
    OperatorProcess,
    condition,
    create_session,
    phase_is,
    wait_session,
)
from tests.cluster.operator_e2e.test_suspend import (
    bash,
    has_suspended_condition,
    held_by,
    released_or_failed,
    set_suspend,
    token_of,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

KILL_POLL_S = 0.005


async def connect(kube: KubeApi, ns: str, body: JsonObject) -> Sandbox:
    status = body["status"]
    assert isinstance(status, dict)
    return await Sandbox.connect(f"{status['podIP']}:50051", await token_of(kube, ns, body))


def snapshot_names(path: Path) -> list[str]:
    with tarfile.open(path) as archive:
        return archive.getnames()


async def delete(kube: KubeApi, ns: str, name: str) -> None:
    await kube.checked("DELETE", f"{SESSIONS.format(ns=ns)}/{name}")
    await kube.wait_for(f"{SESSIONS.format(ns=ns)}/{name}", lambda r: r.status == 404, 30)


async def test_home_tmp_and_every_bash_session_survive_a_round_trip(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    await create_session(kube, namespace, "homely", {})
    body = await wait_session(kube, namespace, "homely", phase_is("Ready", "Failed"))
    assert body["status"]["phase"] == "Ready", body["status"]
    sandbox = await connect(kube, namespace, body)
    try:
        await sandbox.bash(
            "echo home > ~/home-note && mkdir -p /tmp/scratch && echo tmp > /tmp/scratch/t"
            " && echo vartmp > /var/tmp/vt && export TOP=1"
        )
        await sandbox.bash(
            "mkdir -p /testbed/b && cd /testbed/b && export BUILD=3", session="build"
        )
    finally:
        await sandbox.close()

    await set_suspend(kube, namespace, "homely", True)
    body = await wait_session(kube, namespace, "homely", released_or_failed)
    assert body["status"]["phase"] == "Suspended", body["status"]
    stored = operator.snapshot_dir / namespace / "homely" / f"{body['metadata']['uid']}.tar"
    names = await asyncio.to_thread(snapshot_names, stored)
    assert {"/home/sandbox/home-note", "/tmp/scratch/t", "/var/tmp/vt", "b"} <= set(names)
    assert not [n for n in names if n.startswith("/tmp/sandfleet-bash-")], "the runtime's own"

    await set_suspend(kube, namespace, "homely", False)
    body = await wait_session(kube, namespace, "homely", phase_is("Ready", "Failed"))
    assert body["status"]["phase"] == "Ready", body["status"]
    sandbox = await connect(kube, namespace, body)
    try:
        top = await sandbox.bash("pwd; echo $TOP; cat ~/home-note /tmp/scratch/t /var/tmp/vt")
        build = await sandbox.bash("pwd; echo $BUILD", session="build")
    finally:
        await sandbox.close()
    assert top.stdout.splitlines() == ["/testbed", "1", "home", "tmp", "vartmp"]
    assert build.stdout.splitlines() == ["/testbed/b", "3"]
    await delete(kube, namespace, "homely")


async def test_a_snapshot_over_the_limit_is_refused_and_the_sandbox_runs_on(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    with operator.configured(SANDFLEET_OPERATOR_SNAPSHOT_LIMIT_BYTES="1000000"):
        await create_session(kube, namespace, "hefty", {})
        body = await wait_session(kube, namespace, "hefty", phase_is("Ready", "Failed"))
        await bash(kube, namespace, body, "head -c 2000000 /dev/urandom > /tmp/hefty.bin")
        await set_suspend(kube, namespace, "hefty", True)
        body = await wait_session(
            kube,
            namespace,
            "hefty",
            has_suspended_condition,
        )
        refused = condition(body, "Suspended")
        assert (refused["status"], refused["reason"]) == ("False", "SnapshotTooLarge"), refused
        assert "1000000 bytes" in refused["message"]
        assert "/tmp/hefty.bin (2000000 bytes)" in refused["message"]
        assert "keeps running" in refused["message"]
        assert body["status"]["phase"] == "Ready"
        out = await bash(kube, namespace, body, "stat -c %s /tmp/hefty.bin")
        assert out.strip() == "2000000"
        assert not list(operator.snapshot_dir.glob(f"{namespace}/hefty/*")), "nothing stored"
        # Not asked any more: the operator restarted with the default limit leaves it be.
        await set_suspend(kube, namespace, "hefty", False)
    await delete(kube, namespace, "hefty")


async def kill_when(
    operator: OperatorProcess, ready: Callable[[], Awaitable[bool]], timeout_s: float
) -> None:
    """SIGKILL the operator as soon as `ready()`, polled a few milliseconds apart."""
    async with asyncio.timeout(timeout_s):
        while not await ready():  # noqa: ASYNC110 (what is polled is another process's)
            await asyncio.sleep(KILL_POLL_S)
    operator.kill()


async def test_an_operator_killed_mid_suspend_and_mid_resume_ends_with_the_files_kept(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    await create_session(kube, namespace, "sturdy", {})
    body = await wait_session(kube, namespace, "sturdy", phase_is("Ready", "Failed"))
    uid = body["metadata"]["uid"]
    await bash(kube, namespace, body, "cd /testbed && echo kept > note && echo t > /tmp/t")
    record = operator.snapshot_dir / namespace / "sturdy" / f"{uid}.json"

    # Killed once the snapshot is stored and verified (its record is written last), before
    # or while the pod is released: after the restart the session ends Suspended, released.
    await set_suspend(kube, namespace, "sturdy", True)

    async def stored() -> bool:
        return await asyncio.to_thread(record.exists)

    try:
        await kill_when(operator, stored, 60)
    finally:
        operator.start()
    body = await wait_session(kube, namespace, "sturdy", released_or_failed)
    assert body["status"]["phase"] == "Suspended", body["status"]
    assert await held_by(kube, namespace, "sturdy") == []
    assert sorted(p.name for p in record.parent.iterdir()) == [f"{uid}.json", f"{uid}.tar"]

    # Killed once the resume has placed a pod (before the restore or during it): the
    # restarted operator lets that pod go and resumes again from the snapshot it still has.
    await set_suspend(kube, namespace, "sturdy", False)
    path = f"{SESSIONS.format(ns=namespace)}/sturdy"

    async def resuming() -> bool:
        status = (await kube.checked("GET", path)).get("status") or {}
        return bool(status.get("podName")) and bool(status.get("snapshot"))

    try:
        await kill_when(operator, resuming, 60)
    finally:
        operator.start()
    body = await wait_session(kube, namespace, "sturdy", phase_is("Ready", "Failed"))
    assert body["status"]["phase"] == "Ready", body["status"]
    out = await bash(kube, namespace, body, "cat /testbed/note /tmp/t")
    assert out.splitlines() == ["kept", "t"]
    assert not record.parent.exists() or not list(record.parent.iterdir()), "snapshot left"
    pods = await kube.checked(
        "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=sandfleet.dev/session=sturdy"
    )
    alive = [p["metadata"]["name"] for p in pods["items"]
             if not p["metadata"].get("deletionTimestamp")]  # fmt: skip
    assert alive == [body["status"]["podName"]], alive
    await delete(kube, namespace, "sturdy")

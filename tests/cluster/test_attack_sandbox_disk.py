"""Issue 26, item 9, as the attack on the real node: a tenant fills the disk from inside its
sandbox, by upload and by a shell. A sandbox pod built as the operator builds it carries the
platform's upload cap (the runtime in the pod refuses a larger upload with the message and
keeps nothing) and its ephemeral-storage limit: the kubelet evicts the pod that writes past
it (its Event says so), and the operator reads the ended pod as a lost sandbox.
"""

from __future__ import annotations

import secrets
import time

import pytest

from sandfleet.api import Reason
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import ToolError
from sandfleet.fleet.naming import token_secret_name
from sandfleet.fleet.resources import (
    ObjectRef,
    PlatformDefaults,
    resolve_pod_template,
    session_pod,
    session_token_secret,
)
from sandfleet.operator.pod_watch import pod_problem
from tests.cluster.harness.cluster_access import ClusterUnderTest
from tests.cluster.harness.kube_api import JsonObject, KubeApi
from tests.cluster.harness.sandbox_pods import RUNTIME_PORT, wait_ready

pytestmark = pytest.mark.cluster

_MIB = 1024 * 1024
UPLOAD_CAP = 2 * _MIB
DISK_LIMIT = "16Mi"


async def _ended(kube: KubeApi, path: str, timeout_s: float) -> JsonObject:
    """The pod once it has ended; the kubelet checks ephemeral storage every ~10 s."""

    def ended(body: JsonObject) -> bool:
        return (body.get("status") or {}).get("phase") in ("Failed", "Succeeded")

    try:
        response = await kube.wait_for(path, lambda r: r.status == 200 and ended(r.body), timeout_s)
    except TimeoutError:
        last = await kube.checked("GET", path)
        raise AssertionError(f"not evicted: {last.get('status')}") from None
    return response.body


async def _eviction_event(kube: KubeApi, namespace: str, pod: str) -> JsonObject:
    path = f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name%3D{pod}"

    def evicted(body: JsonObject) -> list[JsonObject]:
        return [e for e in body.get("items", []) if e.get("reason") == "Evicted"]

    response = await kube.wait_for(path, lambda r: r.status == 200 and bool(evicted(r.body)), 30)
    (event,) = evicted(response.body)
    return event


async def test_a_sandbox_that_fills_its_disk_is_evicted_and_reported_lost(
    kube: KubeApi, namespace: str, runtime_image: str, cluster_under_test: ClusterUnderTest
) -> None:
    if not cluster_under_test.local:
        pytest.skip("pod IPs of an external cluster are not reachable from the test process")
    defaults = PlatformDefaults(
        image=runtime_image,
        image_pull_policy=cluster_under_test.image_pull_policy,
        dns_policy="Default",  # the test node has no cluster DNS
        operator_namespace="sandfleet-system",
        operator_pod_labels={"app.kubernetes.io/name": "sandfleet-operator"},
        ephemeral_storage_request="8Mi",
        ephemeral_storage_limit=DISK_LIMIT,
        max_upload_bytes=UPLOAD_CAP,
    )
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "session-1"}}
    created = await kube.checked("POST", f"/api/v1/namespaces/{namespace}/configmaps", owner)
    session = ObjectRef(namespace, "session-1", created["metadata"]["uid"], "ConfigMap", "v1")
    token = secrets.token_urlsafe(32)
    await kube.checked(
        "POST", f"/api/v1/namespaces/{namespace}/secrets", session_token_secret(session, token)
    )
    resolved = resolve_pod_template(None, defaults)
    pod = session_pod(session, resolved, token_secret_name(session.name), defaults)
    await kube.checked("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    (ready,) = await wait_ready(kube, namespace, "sandfleet.dev/session=session-1", 1, 120)
    limits = ready["spec"]["containers"][0]["resources"]["limits"]
    assert limits["ephemeral-storage"] == DISK_LIMIT  # as stored by the API server

    client = RuntimeClient(f"{ready['status']['podIP']}:{RUNTIME_PORT}", token)
    try:
        with pytest.raises(ToolError) as refused:
            await client.upload(b"\0" * (3 * UPLOAD_CAP), "/tmp/upload.bin")
        listing = await client.run_command("ls -a /tmp")
        # Past the limit by far, then the shell waits: only the kubelet ends this.
        started = time.monotonic()
        await client.run_command(
            "head -c 64M /dev/urandom > /tmp/fill; sync; echo written", timeout_s=60
        )
    finally:
        await client.close()
    path = f"/api/v1/namespaces/{namespace}/pods/session-1"
    ended = await _ended(kube, path, 120)
    evicted_after = time.monotonic() - started
    event = await _eviction_event(kube, namespace, "session-1")

    assert refused.value.code == "RESOURCE_EXHAUSTED"
    assert f"exceeds the limit of {UPLOAD_CAP} bytes (2 MiB)" in str(refused.value)
    # No upload left, complete or partial (the shell's own scratch directory aside).
    assert not [n for n in listing.stdout.split() if "upload.bin" in n], listing.stdout
    # The kubelet ended the pod for its disk use ...
    assert "ephemeral local storage" in event["message"], event
    assert DISK_LIMIT in event["message"], event
    # ... and the operator reads the ended pod as a lost sandbox: the session ends Failed
    # (SandboxLost). This kubelet (v1.37) leaves the pod Succeeded without reason "Evicted"
    # when the runtime exits 0 on SIGTERM, so the kubelet's reason is only in the Event;
    # where the pod carries it, pod_problem passes it on (tests/unit/operator/test_pod_watch.py).
    problem = pod_problem(ended)
    assert problem is not None and problem.final, ended["status"]
    assert problem.reason == Reason.SANDBOX_LOST
    assert problem.message.startswith("pod session-1 ended: ")
    status = ended["status"]
    if status.get("reason") == "Evicted":
        assert problem.message == f"pod session-1 ended: Evicted: {status['message'].strip()}"
    print(f"evicted {evicted_after:.1f} s after the write; {problem.message}")

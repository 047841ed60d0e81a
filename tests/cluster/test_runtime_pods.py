"""Sandbox pods from the locally built image on the real scheduler, kubelet and containerd."""

from __future__ import annotations

import secrets

import grpc
import pytest

from sandfleet_proto.runtime.v1 import bash_service_pb2, bash_service_pb2_grpc
from tests.cluster.harness.cluster_access import ClusterUnderTest
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.sandbox_pods import RUNTIME_PORT, runtime_pod, wait_ready

pytestmark = pytest.mark.cluster


def pod_ip_reachable(cluster_under_test: ClusterUnderTest) -> None:
    if not cluster_under_test.local:
        pytest.skip("pod IPs of an external cluster are not reachable from the test process")


async def test_a_sandbox_pod_is_scheduled_started_and_answers_execute_bash_over_grpc(
    kube: KubeApi, namespace: str, runtime_image: str, cluster_under_test: ClusterUnderTest
) -> None:
    pod_ip_reachable(cluster_under_test)
    token = secrets.token_urlsafe(24)
    manifest = runtime_pod("sandbox-0", runtime_image, token, cluster_under_test.image_pull_policy)
    await kube.checked("POST", f"/api/v1/namespaces/{namespace}/pods", manifest)

    (pod,) = await wait_ready(kube, namespace, "app=sandfleet-sandbox", 1, timeout_s=90)

    assert pod["spec"]["nodeName"]  # bound by the scheduler, not by the manifest
    # The scheduler and the kubelet record their parts as events (written asynchronously).
    await kube.wait_for(
        f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name=sandbox-0",
        lambda r: {"Scheduled", "Started"} <= {e["reason"] for e in r.body.get("items", [])},
        timeout_s=15,
    )
    async with grpc.aio.insecure_channel(f"{pod['status']['podIP']}:{RUNTIME_PORT}") as channel:
        bash = bash_service_pb2_grpc.BashServiceStub(channel)
        request = bash_service_pb2.RunCommandRequest(
            session="s", command="echo $((6 * 7)); id -u; pwd", timeout_seconds=30
        )
        answer = await bash.RunCommand(
            request, metadata=[("authorization", f"Bearer {token}")], timeout=60
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await bash.RunCommand(request, metadata=[("authorization", "Bearer wrong")], timeout=60)

    # The API server reaches the loopback-only kubelet (by the node's Hostname) for logs.
    log = await kube.request("GET", f"/api/v1/namespaces/{namespace}/pods/sandbox-0/log")
    assert log.status == 200, log.body

    assert (answer.stdout, answer.exit_code) == ("42\n1000\n/testbed\n", 0)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_deleting_the_owner_deletes_the_owned_pod_through_the_garbage_collector(
    kube: KubeApi, namespace: str, runtime_image: str, cluster_under_test: ClusterUnderTest
) -> None:
    owner_body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}}
    owner = await kube.checked("POST", f"/api/v1/namespaces/{namespace}/configmaps", owner_body)
    owner["apiVersion"], owner["kind"] = "v1", "ConfigMap"
    manifest = runtime_pod(
        "owned", runtime_image, "t", cluster_under_test.image_pull_policy, owner=owner
    )
    pods = f"/api/v1/namespaces/{namespace}/pods"
    await kube.checked("POST", pods, manifest)

    await kube.checked("DELETE", f"/api/v1/namespaces/{namespace}/configmaps/owner")

    await kube.wait_for(f"{pods}/owned", lambda r: r.status == 404, timeout_s=60)

"""What a pod can reach on the test node: the API server through the `kubernetes` Service,
other pods through ClusterIP Services, and only what NetworkPolicies admit."""

from __future__ import annotations

import asyncio
import secrets
import socket
import time

import grpc
import pytest

from sandfleet_proto.runtime.v1 import bash_service_pb2, bash_service_pb2_grpc
from tests.cluster.harness.cluster_access import ClusterUnderTest
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.probe_pods import operator_image, probe_pod, result_of, run_probe
from tests.cluster.harness.sandbox_pods import RUNTIME_PORT, runtime_pod, wait_ready

pytestmark = pytest.mark.cluster

# The project's own client, configured the in-cluster way (no kubeconfig in the pod).
_LIST_OWN_PODS = """
import asyncio, json, os
from sandfleet.kube import ForbiddenError, KubeClient, KubeConfig, resource_path

async def main():
    config = KubeConfig.load()
    async with KubeClient(config) as kube:
        pods = await kube.list(resource_path("v1", "pods", config.namespace))
        try:
            await kube.list(resource_path("v1", "pods", "kube-system"))
            elsewhere = "allowed"
        except ForbiddenError:
            elsewhere = "forbidden"
    print("RESULT " + json.dumps({
        "service_host": os.environ["KUBERNETES_SERVICE_HOST"],
        "server": config.server,
        "namespace": config.namespace,
        "pods": sorted(pod["metadata"]["name"] for pod in pods),
        "elsewhere": elsewhere,
    }))

asyncio.run(main())
"""

# RunCommand on the runtime behind a Service, retried until the Service routes (kube-proxy
# programs its rules a moment after the EndpointSlice appears).
_RUN_THROUGH_SERVICE = """
import json, time, grpc
from sandfleet_proto.runtime.v1 import bash_service_pb2, bash_service_pb2_grpc
deadline, attempts = time.monotonic() + 60, 0
while True:
    attempts += 1
    request = bash_service_pb2.RunCommandRequest(session="s", command="hostname")
    try:
        with grpc.insecure_channel("{address}") as channel:
            answer = bash_service_pb2_grpc.BashServiceStub(channel).RunCommand(
                request, metadata=[("authorization", "Bearer {token}")], timeout=10)
        print("RESULT " + json.dumps({{"stdout": answer.stdout, "attempts": attempts}}))
        break
    except grpc.RpcError as error:
        if time.monotonic() > deadline:
            print("RESULT " + json.dumps({{"error": str(error), "attempts": attempts}}))
            break
        time.sleep(0.5)
"""

# A TCP connect to the target, repeated until the wanted outcome or the deadline: the policy
# engine admits a new client (or starts dropping) a moment after the pod or policy appears.
_CONNECT_UNTIL = """
import json, socket, time
want_connected = {want_connected}
deadline, attempts, outcome = time.monotonic() + 60, 0, None
while time.monotonic() < deadline:
    attempts += 1
    try:
        socket.create_connection(("{ip}", {port}), timeout=2).close()
        outcome = "connected"
    except OSError as error:
        outcome = type(error).__name__
    if (outcome == "connected") == want_connected:
        break
    time.sleep(0.5)
print("RESULT " + json.dumps({{"outcome": outcome, "attempts": attempts}}))
"""


def _local_only(cluster_under_test: ClusterUnderTest) -> None:
    if not cluster_under_test.local:
        pytest.skip("the test node's own Service routing and policy engine are under test here")


async def test_a_pod_lists_its_namespace_through_the_kubernetes_service_with_its_token(
    kube: KubeApi, namespace: str, cluster_under_test: ClusterUnderTest
) -> None:
    base = f"/api/v1/namespaces/{namespace}"
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    await kube.checked("POST", f"{base}/serviceaccounts", {"metadata": {"name": "lister"}})
    role = {
        "metadata": {"name": "pod-lister"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
    }
    await kube.checked("POST", f"{rbac}/roles", role)
    binding = {
        "metadata": {"name": "pod-lister"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-lister"},
        "subjects": [{"kind": "ServiceAccount", "name": "lister", "namespace": namespace}],
    }
    await kube.checked("POST", f"{rbac}/rolebindings", binding)
    manifest = probe_pod(
        "in-cluster-client",
        operator_image(cluster_under_test),
        _LIST_OWN_PODS,
        cluster_under_test.image_pull_policy,
        service_account="lister",
    )

    probe = await run_probe(kube, namespace, manifest)

    assert probe.phase == "Succeeded", probe.log
    result = result_of(probe)
    assert result["server"] == f"https://{result['service_host']}:443"
    assert result["namespace"] == namespace
    assert "in-cluster-client" in result["pods"]
    assert result["elsewhere"] == "forbidden"  # the token's own RBAC, not a wide-open API


async def test_a_cluster_ip_service_routes_to_a_sandbox_pod_from_a_pod_and_from_the_node(
    kube: KubeApi, namespace: str, runtime_image: str, cluster_under_test: ClusterUnderTest
) -> None:
    _local_only(cluster_under_test)
    token = secrets.token_urlsafe(24)
    sandbox = runtime_pod(
        "sandbox-0",
        runtime_image,
        token,
        cluster_under_test.image_pull_policy,
        labels={"service": "runtime"},
    )
    await kube.checked("POST", f"/api/v1/namespaces/{namespace}/pods", sandbox)
    service = {
        "metadata": {"name": "runtime"},
        "spec": {
            "type": "ClusterIP",
            "selector": {"service": "runtime"},
            "ports": [{"name": "grpc", "port": 7000, "targetPort": RUNTIME_PORT}],
        },
    }
    created = await kube.checked("POST", f"/api/v1/namespaces/{namespace}/services", service)
    address = f"{created['spec']['clusterIP']}:7000"
    await wait_ready(kube, namespace, "service=runtime", 1, timeout_s=90)
    script = _RUN_THROUGH_SERVICE.format(address=address, token=token)
    client = probe_pod(
        "client", operator_image(cluster_under_test), script, cluster_under_test.image_pull_policy
    )

    from_pod = result_of(await run_probe(kube, namespace, client))
    from_node = await _run_command_via(address, token, deadline_s=60)

    assert from_pod.get("stdout") == "sandbox-0\n", from_pod
    assert from_node == "sandbox-0\n"


async def _run_command_via(address: str, token: str, deadline_s: float) -> str:
    """`hostname` on the runtime at address (a Service), retried until it routes."""
    deadline = time.monotonic() + deadline_s
    request = bash_service_pb2.RunCommandRequest(
        session="s", command="hostname", timeout_seconds=10
    )
    while True:
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                answer = await bash_service_pb2_grpc.BashServiceStub(channel).RunCommand(
                    request, metadata=[("authorization", f"Bearer {token}")], timeout=10
                )
            return str(answer.stdout)
        except grpc.aio.AioRpcError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def test_a_network_policy_admits_only_the_selected_clients_of_a_sandbox(
    kube: KubeApi, namespace: str, runtime_image: str, cluster_under_test: ClusterUnderTest
) -> None:
    _local_only(cluster_under_test)
    base = f"/api/v1/namespaces/{namespace}"
    pull = cluster_under_test.image_pull_policy
    sandbox = runtime_pod("guarded", runtime_image, "t", pull, labels={"np": "guarded"})
    await kube.checked("POST", f"{base}/pods", sandbox)
    (pod,) = await wait_ready(kube, namespace, "np=guarded", 1, timeout_s=90)
    policy = {
        "metadata": {"name": "guarded"},
        "spec": {
            "podSelector": {"matchLabels": {"np": "guarded"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": {"role": "operator"}}}],
                    "ports": [{"protocol": "TCP", "port": RUNTIME_PORT}],
                }
            ],
        },
    }
    await kube.checked(
        "POST", f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies", policy
    )
    ip = pod["status"]["podIP"]
    image = operator_image(cluster_under_test)

    def client(name: str, want_connected: bool, labels: dict[str, str]) -> dict[str, object]:
        script = _CONNECT_UNTIL.format(want_connected=want_connected, ip=ip, port=RUNTIME_PORT)
        return probe_pod(name, image, script, pull, labels=labels)

    admitted, refused = await asyncio.gather(
        run_probe(kube, namespace, client("operator-like", True, {"role": "operator"})),
        run_probe(kube, namespace, client("other-tenant", False, {})),
    )
    # Traffic from the node itself stays admitted (kubelet probes, an operator on the host).
    with socket.create_connection((ip, RUNTIME_PORT), timeout=5):
        pass

    assert result_of(admitted)["outcome"] == "connected"
    # Dropped (timeout) or rejected: either way no connection, while the admitted one got in.
    assert result_of(refused)["outcome"] in {"TimeoutError", "ConnectionRefusedError"}

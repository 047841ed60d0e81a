"""Scale mode: thousands of pods on kwok's fake nodes, through the real control plane."""

from __future__ import annotations

import time

import pytest

from tests.cluster.harness.cluster_access import ClusterUnderTest, unavailable
from tests.cluster.harness.kube_api import JsonObject, KubeApi, condition_is_true
from tests.cluster.harness.layout import KWOK_NODE_ANNOTATION, Layout
from tests.cluster.harness.measurements import record

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

FAKE_NODES = 3
SCALE_PODS = 2000


def fake_node(name: str) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": name},
        },
        # Real workloads must never land here: only pods that tolerate kwok do.
        "spec": {
            "taints": [{"key": KWOK_NODE_ANNOTATION, "value": "fake", "effect": "NoSchedule"}]
        },
    }


def replica_set(replicas: int) -> JsonObject:
    labels = {"app": "kwok-scale"}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "scale"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"type": "kwok"},
                    "tolerations": [{"key": KWOK_NODE_ANNOTATION, "operator": "Exists"}],
                    "automountServiceAccountToken": False,
                    "containers": [{"name": "sandbox", "image": "sandfleet.local/never-pulled:1"}],
                },
            },
        },
    }


async def scale_diagnosis(kube: KubeApi, namespace: str, nodes: list[str]) -> str:
    """Why the pods are not all ready: counts by node and readiness, and the fake nodes' state."""
    pods = await kube.checked(
        "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=app=kwok-scale"
    )
    counts: dict[tuple[str, bool], int] = {}
    for pod in pods["items"]:
        place = (pod["spec"].get("nodeName") or "(unscheduled)", condition_is_true(pod, "Ready"))
        counts[place] = counts.get(place, 0) + 1
    node_states = []
    for name in nodes:
        node = (await kube.request("GET", f"/api/v1/nodes/{name}")).body
        taints = [t["key"] for t in (node.get("spec") or {}).get("taints") or []]
        node_states.append(f"{name}: ready={condition_is_true(node, 'Ready')} taints={taints}")
    by_place = ", ".join(
        f"{node} ready={ready}: {n}" for (node, ready), n in sorted(counts.items())
    )
    return f"not all {SCALE_PODS} pods became ready; pods: {by_place}; nodes: {node_states}"


def schedulable(response_body: JsonObject) -> bool:
    taints = {t["key"] for t in (response_body.get("spec") or {}).get("taints") or []}
    return condition_is_true(response_body, "Ready") and taints == {KWOK_NODE_ANNOTATION}


@pytest.mark.timeout(1200)
async def test_two_thousand_pods_become_ready_on_kwok_fake_nodes(
    kube: KubeApi, namespace: str, cluster_under_test: ClusterUnderTest
) -> None:
    if cluster_under_test.local and not Layout.default().kwok_binary.exists():
        unavailable(
            "kwok is not built: bash tests/cluster/setup.sh (without SANDFLEET_CLUSTER_KWOK=0)"
        )
    if not cluster_under_test.local:
        pytest.skip("kwok runs with the local cluster only")
    names = [f"kwok-node-{i}" for i in range(FAKE_NODES)]
    try:
        for name in names:
            await kube.checked("POST", "/api/v1/nodes", fake_node(name))
        for name in names:
            await kube.wait_for(
                f"/api/v1/nodes/{name}", lambda r: schedulable(r.body), timeout_s=120
            )
        started = time.monotonic()
        rs_path = f"/apis/apps/v1/namespaces/{namespace}/replicasets"
        await kube.checked("POST", rs_path, replica_set(SCALE_PODS))

        try:
            await kube.wait_for(
                f"{rs_path}/scale",
                lambda r: (r.body.get("status") or {}).get("readyReplicas") == SCALE_PODS,
                timeout_s=900,
                interval_s=2,
            )
        except TimeoutError as timeout:
            raise AssertionError(await scale_diagnosis(kube, namespace, names)) from timeout
        seconds = time.monotonic() - started
        record(
            "kwok-scale",
            {
                "pods": SCALE_PODS,
                "fake_nodes": FAKE_NODES,
                "seconds_to_all_ready": round(seconds, 1),
            },
        )
        pods = await kube.checked(
            "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=app=kwok-scale"
        )
        assert {p["spec"]["nodeName"] for p in pods["items"]} == set(names)
        # kwok heartbeats each fake node through its Lease, as a kubelet does; without it
        # the node lifecycle controller marks the nodes unreachable and their pods NotReady.
        for name in names:
            lease = await kube.checked(
                "GET", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
            )
            assert lease["spec"]["leaseDurationSeconds"] == 40
            assert lease["spec"]["renewTime"]

        await kube.checked("DELETE", f"{rs_path}/scale")
        await kube.wait_for(
            f"/api/v1/namespaces/{namespace}/pods?labelSelector=app=kwok-scale&limit=1",
            lambda r: not r.body.get("items"),
            timeout_s=600,
            interval_s=2,
        )
    finally:
        for name in names:
            await kube.request("DELETE", f"/api/v1/nodes/{name}")

"""The chart's bin-packing scheduler profile, run by the cluster's own kube-scheduler with
exactly the permissions the chart grants it: pods asking for it fill one node before another,
where the default scheduler spreads the same pods."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.cluster.harness.chart_install import Kubectl, kubectl_binary
from tests.cluster.harness.cluster_access import ClusterUnderTest, unavailable
from tests.cluster.harness.helm_cli import CHART_DIR, Helm, helm_binary_path, missing_helm_reason
from tests.cluster.harness.kube_api import JsonObject, KubeApi
from tests.cluster.harness.layout import KWOK_NODE_ANNOTATION, Layout
from tests.cluster.harness.operator_harness import service_account_kubeconfig
from tests.cluster.test_kwok_scale import fake_node, schedulable

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SCHEDULER_NAME = "sandfleet-binpack"
PODS = 6


@dataclasses.dataclass(frozen=True)
class RunningScheduler:
    log_path: Path


@pytest.fixture
def binpack_scheduler(
    cluster_under_test: ClusterUnderTest,
    kube: KubeApi,
    namespace: str,
    tmp_path: Path,
) -> Iterator[RunningScheduler]:
    """The chart's scheduler RBAC applied for real, and the cluster's kube-scheduler binary
    running the chart's configuration as the chart's ServiceAccount (outside the cluster, as
    the test node has no kube-scheduler image)."""
    layout = Layout.default()
    if not cluster_under_test.local:
        pytest.skip("runs the local cluster's kube-scheduler binary next to it")
    if not layout.kwok_binary.exists():
        unavailable("kwok is not built: bash tests/cluster/setup.sh (with kwok)")
    reason = missing_helm_reason()
    if reason is not None:
        unavailable(reason)
    binary = kubectl_binary(layout)
    assert binary is not None
    kubectl = Kubectl(binary, cluster_under_test.kubeconfig)
    helm = Helm(helm_binary_path(), tmp_path / "helm")
    args = ["template", "packed", str(CHART_DIR), "--namespace", namespace,
            "--set", "binpackScheduler.enabled=true"]  # fmt: skip
    rbac = helm.run(*args, "--show-only", "templates/scheduler/rbac.yaml")
    config_map = yaml.safe_load(
        helm.run(*args, "--show-only", "templates/scheduler/configmap.yaml")
    )
    asyncio.run(kubectl.run("apply", "-f", "-", stdin=rbac))
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    account = "packed-sandfleet-binpack-scheduler"
    kubeconfig = tmp_path / "scheduler.kubeconfig"
    service_account_kubeconfig(kube, cluster_under_test.kubeconfig, namespace, account, kubeconfig)
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    config_path = tmp_path / "scheduler.yaml"
    config_path.write_text(yaml.safe_dump(config))
    log_path = tmp_path / "scheduler.log"
    command = [str(layout.binary("kube-scheduler")), f"--config={config_path}", "--secure-port=0"]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield RunningScheduler(log_path)
    finally:
        process.terminate()
        process.wait(30)
        asyncio.run(kubectl.run("delete", "--ignore-not-found", "-f", "-", stdin=rbac, check=False))


def _pod(name: str, nodes_label: str, scheduler: str | None) -> JsonObject:
    spec: JsonObject = {
        "nodeSelector": {"sandfleet-test/binpack": nodes_label},
        "tolerations": [{"key": KWOK_NODE_ANNOTATION, "operator": "Exists"}],
        "automountServiceAccountToken": False,
        "containers": [
            {
                "name": "sandbox",
                "image": "sandfleet.local/never-pulled:1",
                # A tenth of a fake node (1000 CPUs, 1 TiB): a clear score difference per pod.
                "resources": {"requests": {"cpu": "100", "memory": "100Gi"}},
            }
        ],
    }
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


async def _placements(kube: KubeApi, namespace: str, prefix: str) -> collections.Counter[str]:
    pods = await kube.checked("GET", f"/api/v1/namespaces/{namespace}/pods")
    return collections.Counter(
        p["spec"].get("nodeName", "")
        for p in pods["items"]
        if p["metadata"]["name"].startswith(prefix)
    )


async def _place(
    kube: KubeApi, namespace: str, prefix: str, label: str, scheduler: str | None
) -> collections.Counter[str]:
    """Create the pods one at a time (each placement sees the previous ones) and return how
    many landed on each node."""
    for index in range(PODS):
        name = f"{prefix}-{index}"
        await kube.checked(
            "POST", f"/api/v1/namespaces/{namespace}/pods", _pod(name, label, scheduler)
        )
        await kube.wait_for(
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            lambda r: bool((r.body.get("spec") or {}).get("nodeName")),
            60,
        )
    return await _placements(kube, namespace, prefix)


async def test_the_binpack_profile_fills_one_node_where_the_default_scheduler_spreads(
    kube: KubeApi, namespace: str, binpack_scheduler: RunningScheduler
) -> None:
    # Two fresh fake nodes per scheduler, so that neither placement sees the other's pods.
    packed_label, spread_label = secrets.token_hex(4), secrets.token_hex(4)
    nodes = {
        f"binpack-{label}-{i}": label for label in (packed_label, spread_label) for i in (0, 1)
    }
    try:
        for name, label in nodes.items():
            node = fake_node(name)
            node["metadata"]["labels"]["sandfleet-test/binpack"] = label
            await kube.checked("POST", "/api/v1/nodes", node)
        for name in nodes:
            await kube.wait_for(f"/api/v1/nodes/{name}", lambda r: schedulable(r.body), 120)
        packed = await _place(kube, namespace, "packed", packed_label, SCHEDULER_NAME)
        spread = await _place(kube, namespace, "spread", spread_label, None)
    finally:
        for name in nodes:
            await kube.request("DELETE", f"/api/v1/nodes/{name}")
    log_tail = binpack_scheduler.log_path.read_bytes()[-3000:].decode(errors="replace")
    assert sorted(packed.values()) == [PODS], (packed, log_tail)
    assert len(spread) == 2, spread
    events = await kube.checked("GET", f"/api/v1/namespaces/{namespace}/events")
    reporters = {
        event.get("reportingComponent")
        for event in events["items"]
        if event["reason"] == "Scheduled" and event["involvedObject"]["name"].startswith("packed")
    }
    assert reporters == {SCHEDULER_NAME}

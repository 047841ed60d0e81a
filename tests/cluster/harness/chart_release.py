"""An installed release of the chart in the test cluster: what the install tests share."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.cluster.harness.chart_install import SANDBOX_SELECTOR, Kubectl
from tests.cluster.harness.cluster_access import ClusterUnderTest
from tests.cluster.harness.helm_cli import Helm, HelmError
from tests.cluster.harness.kube_api import JsonObject, KubeApi
from tests.cluster.harness.operator_harness import phase_is, wait_session

RELEASE = "sandfleet"
OPERATOR = "sandfleet-operator"
GATEWAY = "sandfleet-gateway"
"""The gateway's Deployment, Service and pod label (app.kubernetes.io/name) in the release."""
SESSIONS = "/apis/sandfleet.dev/v1alpha1/namespaces/{ns}/sandboxsessions"
POOLS = "/apis/sandfleet.dev/v1alpha1/namespaces/{ns}/sandboxpools"
SESSION_WAIT_S = 240.0
"""Generous: a namespace-scoped operator's kopf spends ~55 s at start retrying the cluster-wide
namespace and CRD listings its Role forbids, and two shared cores start pods slowly."""


@dataclasses.dataclass
class Installation:
    """The release under test: its namespace, the two tenants it serves, its values."""

    namespace: str
    tenant_a: str
    tenant_b: str
    values: dict[str, Any]
    notes: str
    operator_image: str
    installed: bool = True


def install_values(installation: Installation, **timing: float) -> dict[str, Any]:
    values: dict[str, Any] = json.loads(json.dumps(installation.values))
    values["operator"]["timing"].update(timing)
    return values


def uninstall_whatever_it_takes(helm: Helm, kube: KubeApi, installation: Installation) -> None:
    """Teardown after a failed test: uninstall, and if the hook cannot finish, drop the
    finalizers of what the operator never released so the namespaces can go."""
    try:
        helm.run("uninstall", RELEASE, "--namespace", installation.namespace,
                 "--wait", "--timeout", "3m", timeout_s=240)  # fmt: skip
        return
    except (HelmError, subprocess.TimeoutExpired):
        pass
    for ns in (installation.tenant_a, installation.tenant_b):
        for collection in (SESSIONS.format(ns=ns), POOLS.format(ns=ns)):
            for item in kube.checked_sync("GET", collection)["items"]:
                kube.request_sync(
                    "PATCH",
                    f"{collection}/{item['metadata']['name']}",
                    {"metadata": {"finalizers": None}},
                    content_type="application/merge-patch+json",
                )
    with contextlib.suppress(HelmError, subprocess.TimeoutExpired):
        helm.run("uninstall", RELEASE, "--namespace", installation.namespace, "--no-hooks")


async def operator_pods(kube: KubeApi, namespace: str) -> list[JsonObject]:
    selector = "app.kubernetes.io/name=sandfleet-operator"
    pods = await kube.checked(
        "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}"
    )
    return [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]


async def gateway_pods(kube: KubeApi, namespace: str) -> list[JsonObject]:
    selector = f"app.kubernetes.io/name={GATEWAY}"
    pods = await kube.checked(
        "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}"
    )
    return [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]


async def gateway_node_port(kube: KubeApi, namespace: str) -> int:
    """The node port of the gateway's gRPC port (the test values make its Service a
    NodePort): the host reaches the gateway at <node address>:<this>."""
    service = await kube.checked("GET", f"/api/v1/namespaces/{namespace}/services/{GATEWAY}")
    port: int = next(p["nodePort"] for p in service["spec"]["ports"] if p["name"] == "grpc")
    return port


async def sandbox_pods(kube: KubeApi, namespace: str) -> list[JsonObject]:
    pods = await kube.checked(
        "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={SANDBOX_SELECTOR}"
    )
    items: list[JsonObject] = pods["items"]
    return items


async def trajectory_cli(
    installation: Installation, cluster: ClusterUnderTest, name: str, token: str
) -> tuple[int, str, str]:
    """`sandfleet trajectory` the way a client-certificate user runs it: through the API
    server's service proxy to the operator's Service, with `token` (`kubectl create token`,
    a tenant's) for the operator, which checks it. (exit code, stdout, stderr)"""
    cli = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("sandfleet")), "trajectory", name,
        "-n", installation.tenant_a, "--kubeconfig", str(cluster.kubeconfig),
        "--operator-namespace", installation.namespace, "--token", token,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        stdout, stderr = await asyncio.wait_for(cli.communicate(), 60)
    except BaseException:  # not left running (with its API server connections) on a timeout
        cli.kill()
        await cli.wait()
        raise
    return cli.returncode or 0, stdout.decode(), stderr.decode()


async def fetch_trajectory(
    installation: Installation, cluster: ClusterUnderTest, name: str, token: str
) -> str:
    """The session's trajectory through trajectory_cli."""
    returncode, stdout, stderr = await trajectory_cli(installation, cluster, name, token)
    assert returncode == 0, stderr
    return stdout


async def raw_session(kube: KubeApi, namespace: str, name: str) -> JsonObject:
    body = {"apiVersion": "sandfleet.dev/v1alpha1", "kind": "SandboxSession",
            "metadata": {"name": name}, "spec": {"templateRef": {"name": "default"}}}  # fmt: skip
    await kube.checked("POST", SESSIONS.format(ns=namespace), body)
    return await wait_session(kube, namespace, name, phase_is("Ready", "Failed"), SESSION_WAIT_S)


async def exec_python(kubectl: Kubectl, namespace: str, pod: str, code: str) -> str:
    result = await kubectl.run("exec", "-n", namespace, pod, "-c", "runtime", "--",
                               "python3", "-c", code, timeout_s=60)  # fmt: skip
    return result.stdout.strip()

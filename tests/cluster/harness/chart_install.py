"""Installing the chart into the test cluster: kubectl, the values that fit the local cluster,
and the cluster-side preconditions (an operator image, pods that reach the API server)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import yaml

from tests.cluster.harness.kube_api import JsonObject, KubeApi
from tests.cluster.harness.layout import BRIDGE_ADDRESS, Layout

BRIDGE_HOST = BRIDGE_ADDRESS.split("/")[0]
"""The host's address on the pods' bridge: a server bound there is reachable from pods."""
SANDBOX_SELECTOR = (
    "app.kubernetes.io/managed-by=sandfleet-operator,app.kubernetes.io/component=sandbox"
)
OPERATOR_UID = 65532
"""The operator image's user (operator/Dockerfile), and the chart's default runAsUser."""


@dataclasses.dataclass(frozen=True, slots=True)
class Completed:
    returncode: int
    stdout: str
    stderr: str


class Kubectl:
    """The cluster's kubectl, as the admin of the kubeconfig (or impersonating with --as)."""

    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    async def run(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout_s: float = 120.0
    ) -> Completed:
        process = await asyncio.create_subprocess_exec(
            str(self.binary),
            "--kubeconfig",
            str(self.kubeconfig),
            *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(timeout_s):
                out, err = await process.communicate(stdin.encode() if stdin else None)
        except BaseException:  # a timeout, or the caller cancelled: no process left behind
            process.kill()
            await process.wait()
            raise
        result = Completed(process.returncode or 0, out.decode(), err.decode())
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {result.returncode}:\n{err.decode()}"
            )
        return result

    async def can_i(self, verb: str, resource: str, namespace: str, user: str) -> bool:
        """`kubectl auth can-i` as `user` (exit 0: yes, 1: no)."""
        result = await self.run(
            "auth", "can-i", verb, resource, "--namespace", namespace, "--as", user, check=False
        )
        if result.returncode not in (0, 1):
            raise AssertionError(f"kubectl auth can-i failed: {result.stderr}")
        return result.returncode == 0


def kubectl_binary(layout: Layout) -> Path | None:
    """The test cluster's own kubectl, else one on PATH."""
    local = layout.binary("kubectl")
    if os.access(local, os.X_OK):
        return local
    found = shutil.which("kubectl")
    return Path(found) if found else None


def split_image(ref: str) -> tuple[str, str]:
    """("sandfleet.local/operator", "abc123") from "sandfleet.local/operator:abc123"."""
    repository, _, tag = ref.rpartition(":")
    if not repository or "/" in tag:
        raise ValueError(f"image reference without a tag: {ref}")
    return repository, tag


def values_for_test_cluster(
    *,
    operator_image: str,
    runtime_image: str,
    tenants: list[dict[str, Any]],
    trajectory_claim: str,
    api_service_ip: str,
    api_server_port: int = 6443,
) -> dict[str, Any]:
    """Chart values for the local cluster: images imported into containerd (never pulled), the
    host's resolver for sandboxes and a hosts entry for the operator in place of the cluster
    DNS the test node lacks (kopf logs in at kubernetes.default.svc), fast control loops.

    The gateway runs from the operator image with two replicas (claims racing across replicas
    are part of what its tests prove) on a NodePort, so the host reaches it at the node's
    address; its NetworkPolicy admits egress to the API server's real port
    (`api_server_port`, see api_server_port()), as the operator's does, which also admits the
    model servers tests start on the host's bridge address."""
    operator_repository, operator_tag = split_image(operator_image)
    runtime_repository, runtime_tag = split_image(runtime_image)
    return {
        "operator": {
            "image": {
                "repository": operator_repository,
                "tag": operator_tag,
                "pullPolicy": "Never",
            },
            "watchNamespaces": [t["namespace"] for t in tenants],
            "hostAliases": [{"ip": api_service_ip, "hostnames": ["kubernetes.default.svc"]}],
            "logLevel": "DEBUG",
            # The API server's real port; the test's model servers listen on the host's
            # bridge address, on ports of their own.
            "networkPolicy": {
                "apiServerPorts": sorted({443, api_server_port}),
                "modelEgress": [{"to": [{"ipBlock": {"cidr": f"{BRIDGE_HOST}/32"}}]}],
            },
            "timing": {
                "statusIntervalSeconds": 1,
                "idleCheckIntervalSeconds": 1,
                "orphanSweepIntervalSeconds": 5,
            },
        },
        "sandboxes": {
            "image": {"repository": runtime_repository, "tag": runtime_tag},
            "imagePullPolicy": "Never",
            "dnsPolicy": "Default",
        },
        "template": {"resources": {"requests": {"cpu": "10m", "memory": "64Mi"}}},
        # The tests' scripted model listens on the host's bridge address (any port).
        "model": {"allowedEndpoints": [f"http://{BRIDGE_HOST}:*"]},
        "tenants": tenants,
        "pool": {"create": True, "replicas": 1},
        "trajectoryStore": {"type": "existingClaim", "existingClaim": trajectory_claim},
        # The test cluster has no volume provisioner: suspended sessions' files in the pod.
        "snapshots": {"volume": {"type": "emptyDir"}},
        "uninstallHook": {"timeoutSeconds": 120},
        "gateway": {
            "replicas": 2,
            "logLevel": "DEBUG",
            "service": {"type": "NodePort"},
            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
            "networkPolicy": {"apiServerPorts": sorted({443, api_server_port})},
        },
    }


async def api_server_port(kube: KubeApi) -> int:
    """The port pods reach the API server on after the `kubernetes` Service's translation:
    its endpoints' port (NetworkPolicies see that one, not the Service's 443)."""
    endpoints = await kube.checked("GET", "/api/v1/namespaces/default/endpoints/kubernetes")
    port: int = endpoints["subsets"][0]["ports"][0]["port"]
    return port


async def create_namespace(kube: KubeApi, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    await kube.checked("POST", "/api/v1/namespaces", body)
    await kube.wait_for(
        f"/api/v1/namespaces/{name}/serviceaccounts/default", lambda r: r.status == 200, 30
    )


def prepare_store_directory(directory: Path) -> None:
    """A host directory the operator's user may write (a hostPath volume keeps ownership)."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chown(directory, OPERATOR_UID, OPERATOR_UID)


async def create_trajectory_claim(kube: KubeApi, namespace: str, name: str, directory: Path) -> str:
    """A hostPath PersistentVolume bound to a claim `name` in `namespace`; returns the PV's
    name (cluster-scoped: delete it after). See prepare_store_directory."""
    volume = f"{namespace}-{name}"
    await kube.checked(
        "POST",
        "/api/v1/persistentvolumes",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": str(directory), "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": name},
            },
        },
    )
    await kube.checked(
        "POST",
        f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    return volume


async def api_server_reachable_from_pods(
    kube: KubeApi, namespace: str, image: str, pull_policy: str
) -> str | None:
    """None when a pod connects to the API server's Service address; else why not.

    The operator runs in-cluster from the chart, so it needs what the test cluster may not
    have yet (a kube-proxy routing the `kubernetes` Service to the API server).
    """
    name = f"apiserver-probe-{secrets.token_hex(3)}"
    probe = (
        "import os, socket; socket.create_connection("
        "(os.environ['KUBERNETES_SERVICE_HOST'], int(os.environ['KUBERNETES_SERVICE_PORT'])), 5)"
    )
    pod: JsonObject = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "dnsPolicy": "Default",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "imagePullPolicy": pull_policy,
                    "command": ["python3", "-c", probe],
                }
            ],
        },
    }
    path = f"/api/v1/namespaces/{namespace}/pods"
    await kube.checked("POST", path, pod)
    try:
        response = await kube.wait_for(
            f"{path}/{name}",
            lambda r: (r.body.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
            90,
        )
    finally:
        await kube.request("DELETE", f"{path}/{name}")
    if response.body["status"]["phase"] == "Succeeded":
        return None
    return (
        "pods cannot reach the API server through the `kubernetes` Service (no kube-proxy on "
        "the test node yet?): the chart's operator runs in-cluster"
    )


def parse_documents(text: str) -> list[JsonObject]:
    return [doc for doc in yaml.safe_load_all(text) if doc]

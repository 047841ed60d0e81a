"""Clients of the chart-installed gateway: a pod in a tenant namespace running the SDK (from the
operator image, which holds the whole sandfleet package) as the tenant's ServiceAccount."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tests.cluster.harness.chart_install import Kubectl
from tests.cluster.harness.kube_api import JsonObject, KubeApi

PYTHON = "/opt/sandfleet/bin/python"
CLIENT_CONTAINER = "client"
TENANT_RULES = [
    # The chart's sandfleet-session-editor Role (charts/sandfleet/templates/rbac): no Secrets,
    # no pods/portforward, no pod writes.
    {
        "apiGroups": ["sandfleet.dev"],
        "resources": ["sandboxsessions"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["sandfleet.dev"],
        "resources": ["sandboxsessions/status", "sandboxtemplates", "sandboxpools"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": [""], "resources": ["pods", "pods/log", "events"], "verbs": ["get", "list"]},
]


async def start_client_pod(
    kube: KubeApi, namespace: str, name: str, image: str, account: str
) -> JsonObject:
    """A pod that only sleeps, as `account` with its token mounted (the SDK finds it)."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": account,
            "automountServiceAccountToken": True,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": CLIENT_CONTAINER,
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": [PYTHON, "-c", "import time; time.sleep(3600)"],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }
    await kube.checked("POST", f"/api/v1/namespaces/{namespace}/pods", body)
    deadline = time.monotonic() + 120
    while True:
        pod = await kube.checked("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        if (pod.get("status") or {}).get("phase") == "Running":
            return pod
        if time.monotonic() > deadline:
            raise TimeoutError(f"client pod {namespace}/{name} not running: {pod.get('status')}")
        await asyncio.sleep(0.5)


async def run_in_client(
    kubectl: Kubectl, namespace: str, pod: str, code: str, timeout_s: float = 120
) -> Any:
    """Run `code` in the client pod; it prints one JSON document, returned decoded."""
    result = await kubectl.run(
        "exec", "-n", namespace, pod, "-c", CLIENT_CONTAINER, "--", PYTHON, "-c", code,
        check=False, timeout_s=timeout_s,
    )  # fmt: skip
    assert result.returncode == 0, f"client failed ({result.returncode}): {result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def tenant_claim_script(namespace: str, gateway: str, pool: str) -> str:
    """Claim through the gateway (token: the pod's ServiceAccount), run, transfer, stream, then
    try the claimed sandbox's runtime port directly (its NetworkPolicy must refuse this pod)."""
    return f"""
import json, os, secrets, socket, tempfile, time
from pathlib import Path
from sandfleet import SyncSandbox
out = {{}}
with SyncSandbox.on_cluster({namespace!r}, pool={pool!r}, gateway={gateway!r}) as sb:
    r = sb.bash("echo from-tenant-pod; hostname -i")
    out["stdout"] = r.stdout
    payload = secrets.token_bytes(1024 * 1024 + 3)
    sb.upload(payload, "/testbed/data.bin")
    local = Path(tempfile.mkdtemp()) / "data.bin"
    sb.download("/testbed/data.bin", local)
    out["roundtrip"] = local.read_bytes() == payload
    out["session"] = sb.sandbox.name
    ip = r.stdout.split()[1]
    deadline = time.monotonic() + 15
    while True:
        try:
            socket.create_connection((ip, 50051), 2).close()
            verdict = "connected"
        except OSError as error:
            verdict = "blocked " + type(error).__name__
            break
        if time.monotonic() > deadline:
            break
        time.sleep(1)
    out["direct"] = verdict
print(json.dumps(out))
"""


async def service_address(kube: KubeApi, namespace: str, name: str, port_name: str) -> str:
    service = await kube.checked("GET", f"/api/v1/namespaces/{namespace}/services/{name}")
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == port_name)
    return f"{service['spec']['clusterIP']}:{port}"


async def tenant_token(kube: KubeApi, namespace: str, *, bound_secret: str | None = None) -> str:
    """A token of ServiceAccount "tenant" in `namespace`, which holds only the tenant Role
    there (made on first use). `bound_secret`: the token is bound to that Secret and stops
    being valid when it is deleted (how a revoked or expired token looks to TokenReview)."""
    base = f"/api/v1/namespaces/{namespace}"
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tenant"}}
    if (await kube.request("GET", f"{base}/serviceaccounts/tenant")).status == 404:
        await kube.checked("POST", f"{base}/serviceaccounts", account)
        role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "tenant"}, "rules": TENANT_RULES}  # fmt: skip
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "tenant"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}],
        }
        await kube.checked("POST", f"{rbac}/roles", role)
        await kube.checked("POST", f"{rbac}/rolebindings", binding)
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if bound_secret is not None:
        secret = await kube.checked(
            "POST",
            f"{base}/secrets",
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": bound_secret}},
        )
        spec["boundObjectRef"] = {
            "apiVersion": "v1", "kind": "Secret",
            "name": bound_secret, "uid": secret["metadata"]["uid"],
        }  # fmt: skip
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    answer = await kube.checked("POST", f"{base}/serviceaccounts/tenant/token", request)
    token: str = answer["status"]["token"]
    return token

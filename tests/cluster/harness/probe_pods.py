"""One-shot probe pods for the cluster tests: run a Python snippet in an image, read its output.

A probe pod runs to completion (restartPolicy Never) as a non-root user with nothing but the
snippet; the test reads the phase and the log. The operator image is the usual choice: it
has Python, grpcio and the project's own Kubernetes client, and no shell is needed. A snippet
reports by printing one `RESULT <json>` line (see result_of).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from typing import Any

from tests.cluster.harness.cluster_access import ClusterUnderTest, unavailable
from tests.cluster.harness.kube_api import JsonObject, KubeApi
from tests.cluster.harness.layout import Layout

RESULT_PREFIX = "RESULT "


@dataclasses.dataclass(frozen=True, slots=True)
class ProbeResult:
    phase: str
    log: str
    pod: JsonObject


def probe_pod(
    name: str,
    image: str,
    script: str,
    pull_policy: str,
    *,
    labels: dict[str, str] | None = None,
    service_account: str | None = None,
    python: str = "python3",
    run_as_user: int | None = None,
) -> JsonObject:
    """`python -c script` in image, as the image's own (non-root) user unless run_as_user;
    a service-account token only when service_account is set."""
    security: dict[str, Any] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    if run_as_user is not None:
        security |= {"runAsUser": run_as_user, "runAsGroup": run_as_user}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": service_account is not None,
        "enableServiceLinks": False,
        "dnsPolicy": "Default",
        "terminationGracePeriodSeconds": 1,
        "securityContext": security,
        "containers": [
            {
                "name": "probe",
                "image": image,
                "imagePullPolicy": pull_policy,
                "command": [python, "-c", script],
                "resources": {
                    "requests": {"cpu": "5m", "memory": "32Mi"},
                    "limits": {"memory": "256Mi"},
                },
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    }
    if service_account is not None:
        spec["serviceAccountName"] = service_account
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "sandfleet-probe", **(labels or {})}},
        "spec": spec,
    }


async def run_probe(
    kube: KubeApi, namespace: str, manifest: JsonObject, timeout_s: float = 90.0
) -> ProbeResult:
    """Create the probe pod, wait until it Succeeded or Failed, and return its log."""
    pods = f"/api/v1/namespaces/{namespace}/pods"
    name = manifest["metadata"]["name"]
    await kube.checked("POST", pods, manifest)
    deadline = time.monotonic() + timeout_s
    while True:
        pod = await kube.checked("GET", f"{pods}/{name}")
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if phase in ("Succeeded", "Failed"):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"probe {name} still {phase} after {timeout_s}s: {pod['status']}")
        await asyncio.sleep(0.5)
    # The log is plain text; the test client hands non-JSON bodies over as {"message": text}.
    log = await kube.request("GET", f"{pods}/{name}/log")
    text = str(log.body.get("message", json.dumps(log.body)))
    return ProbeResult(phase=phase, log=text, pod=pod)


def result_of(probe: ProbeResult) -> Any:
    """The JSON a probe printed after RESULT_PREFIX; AssertionError with the log if none."""
    for line in probe.log.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    raise AssertionError(f"probe printed no result ({probe.phase}); log:\n{probe.log}")


def operator_image(cluster: ClusterUnderTest) -> str:
    """The control-plane image the cluster's nodes can start: the locally built one, or
    SANDFLEET_TEST_OPERATOR_IMAGE for an external cluster."""
    if cluster.local:
        return Layout.default().read_images()["operator"].ref
    image = os.environ.get("SANDFLEET_TEST_OPERATOR_IMAGE")
    if not image:
        unavailable("SANDFLEET_TEST_OPERATOR_IMAGE names no operator image for that cluster")
    return image

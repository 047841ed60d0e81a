"""Sandbox pods for the cluster tests: the manifest, and waiting until the agent serves."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.cluster.harness.kube_api import JsonObject, KubeApi, condition_is_true

RUNTIME_PORT = 50051


def runtime_pod(
    name: str,
    image: str,
    token: str,
    pull_policy: str,
    *,
    owner: JsonObject | None = None,
    labels: dict[str, str] | None = None,
) -> JsonObject:
    """A pod running the runtime agent, shaped like the operator's: small, no API credentials."""
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {"app": "sandfleet-sandbox", **(labels or {})},
    }
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            # A sandbox runs untrusted model commands: it gets no Kubernetes credentials.
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            # No cluster DNS on the test node (nor a need for it): the host's resolver.
            "dnsPolicy": "Default",
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "runtime",
                    "image": image,
                    "imagePullPolicy": pull_policy,
                    "env": [{"name": "SANDFLEET_RUNTIME_TOKEN", "value": token}],
                    "ports": [{"name": "grpc", "containerPort": RUNTIME_PORT}],
                    "readinessProbe": {
                        "grpc": {"port": RUNTIME_PORT},
                        "periodSeconds": 2,
                        "failureThreshold": 30,
                    },
                    "resources": {
                        "requests": {"cpu": "5m", "memory": "32Mi"},
                        "limits": {"memory": "256Mi"},
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "runAsNonRoot": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def is_ready(pod: JsonObject) -> bool:
    return condition_is_true(pod, "Ready")


def failure_of(pod: JsonObject) -> str | None:
    """Why a pod will never become ready (crash loop, bad image), or None while it still may."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = status.get("state", {}).get("waiting", {})
        if waiting.get("reason") in {"CrashLoopBackOff", "ErrImageNeverPull", "InvalidImageName"}:
            return f"{pod['metadata']['name']}: {waiting['reason']}: {waiting.get('message', '')}"
        if status.get("restartCount", 0) > 0:
            terminated = status.get("lastState", {}).get("terminated", {})
            return f"{pod['metadata']['name']} restarted: {terminated}"
    if (pod.get("status") or {}).get("phase") == "Failed":
        return f"{pod['metadata']['name']} failed: {pod['status']}"
    return None


async def wait_ready(
    kube: KubeApi, namespace: str, selector: str, count: int, timeout_s: float
) -> list[JsonObject]:
    """Poll the pod list until `count` pods match and all are Ready; fail fast on a crash."""
    path = f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}"
    deadline = time.monotonic() + timeout_s
    while True:
        pods: list[JsonObject] = (await kube.checked("GET", path))["items"]
        failures = [f for f in map(failure_of, pods) if f]
        if failures:
            raise AssertionError("sandbox pods cannot start: " + "; ".join(failures[:3]))
        if len(pods) == count and all(map(is_ready, pods)):
            return pods
        if time.monotonic() > deadline:
            ready = sum(map(is_ready, pods))
            raise TimeoutError(f"{ready}/{count} sandbox pods ready after {timeout_s}s")
        await asyncio.sleep(0.5)
